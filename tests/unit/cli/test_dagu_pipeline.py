"""import-dagu of a DAG of several harness steps: one HarnessPipeline (or a schedule's pipelineTemplate),
outputs as `$(steps.STEP.output…)`, depends as after, continue_on; Dagu's nightly DAG golden."""

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.fakes.dagu import DAGS, FIXTURES, dagu_dependencies, expected, import_fixture, pipeline_runs

from harness_operator.api.v1alpha1 import HarnessPipeline, HarnessSchedule
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.dagu_import import import_dagu
from harness_operator.cli.dagu_pipeline import build_continue_on, build_output_path
from harness_operator.cli.main import main
from harness_operator.cli.manifests import parse_documents
from harness_operator.cli.validation import ERROR, validate_documents
from harness_operator.core.pipeline.graph import build_order, compute_pipeline_problems

SA_NOTE = (
    "the pipeline's runs are created as ServiceAccount harness-pipeline: it must exist in the pipeline's "
    "namespace and the operator must be allowed to impersonate it (README: Pipelines); --service-account "
    "names another"
)


def harness(name: str, prompt: str, **more: Any) -> dict[str, Any]:
    return {"id": name, "type": "harness", "command": prompt, "with": {"provider": "claude"}, **more}


def pipeline_of(dag: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the pipeline's spec, the unsupported notes) of a DAG Dagu accepts."""
    result = import_dagu(dag, "d")
    assert result.errors == []
    (pipeline,) = [m for m in result.manifests if m["kind"] == "HarnessPipeline"]
    assert compute_pipeline_problems(HarnessPipeline.model_validate(pipeline).spec) == []
    return pipeline["spec"], result.unsupported


NIGHTLY_SPEC = {
    "serviceAccountName": "harness-pipeline",
    "steps": [
        {
            "name": "review",
            "run": {
                "spec": {
                    "provider": "claude",
                    "prompt": "Review the commits of the last day on main and list what needs a follow-up.",
                    "with": {"model": "sonnet"},
                    "limits": {"timeoutSeconds": 1800},
                    "retry": {"limit": 2, "retryOn": "Any", "backoffSeconds": 60, "maxBackoffSeconds": 60},
                }
            },
        },
        {
            "name": "summarize",
            "after": ["review"],
            "run": {
                "spec": {
                    "provider": "claude",
                    "prompt": "Summarize the review given on stdin in five bullet points for the team channel.",
                    "stdin": "$(steps.review.output)",
                    "with": {"model": "haiku"},
                    "limits": {"timeoutSeconds": 600},
                }
            },
        },
    ],
}


def test_the_nightly_dag_is_a_schedule_of_one_pipeline_and_nothing_is_left_out() -> None:
    path = FIXTURES / "nightly-review-summary.yaml"
    result = import_dagu(yaml.safe_load(path.read_text()), "nightly-review-summary")
    assert (result.errors, result.unsupported, result.notes) == ([], [], [SA_NOTE])
    assert result.manifests == [
        {
            "apiVersion": "agentharness.dev/v1alpha1",
            "kind": "HarnessSchedule",
            "metadata": {"name": "nightly-review-summary"},
            "spec": {
                "schedule": "0 2 * * 1-5",
                "timeZone": "Europe/Berlin",
                "concurrencyPolicy": "Forbid",
                "pipelineTemplate": {"spec": NIGHTLY_SPEC},
            },
        }
    ]
    schedule = HarnessSchedule.model_validate(result.manifests[0])
    assert schedule.spec.pipeline_template is not None
    assert compute_pipeline_problems(schedule.spec.pipeline_template.spec) == []


def test_without_a_schedule_the_nightly_dag_is_the_pipeline_itself() -> None:
    dag = yaml.safe_load((FIXTURES / "nightly-review-summary.yaml").read_text())
    del dag["schedule"]
    result = import_dagu(dag, "nightly-review-summary", service_account="reviewers")
    (pipeline,) = result.manifests
    assert pipeline == {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessPipeline",
        "metadata": {"name": "nightly-review-summary"},
        "spec": {**NIGHTLY_SPEC, "serviceAccountName": "reviewers"},
    }
    assert result.notes == [SA_NOTE.replace("harness-pipeline", "reviewers")]
    assert compute_pipeline_problems(HarnessPipeline.model_validate(pipeline).spec) == []


@pytest.mark.parametrize("name", [n for n in DAGS if len(expected(n)) > 1])
def test_a_fixture_pipeline_is_valid_and_its_order_is_one_dagu_could_run(name: str) -> None:
    (made,) = [m for m in import_fixture(name) if m["kind"] in ("HarnessPipeline", "HarnessSchedule")]
    spec = made["spec"].get("pipelineTemplate", made)["spec"]
    pipeline = HarnessPipeline.model_validate({**made, "kind": "HarnessPipeline", "spec": spec})
    assert compute_pipeline_problems(pipeline.spec) == []
    order = [f"{made['metadata']['name']}-{step}" for step in build_order(pipeline.spec)]
    assert order == list(expected(name))  # every harness step, once
    for index, run in enumerate(order):
        assert dagu_dependencies(name)[run] <= set(order[:index]), run
    runs = pipeline_runs({**made, "kind": "HarnessPipeline", "spec": spec})
    assert [r["metadata"]["name"] for r in runs] == order


def test_a_graph_dag_keeps_its_depends_and_a_fan_in_reads_both_outputs() -> None:
    dag = {
        "type": "graph",
        "steps": [
            harness("a", "A", output="A_OUT"),
            harness("b", "B", output="B_OUT"),
            harness("join", "Join ${A_OUT} and ${B_OUT}", depends=["a", "b"]),
        ],
    }
    spec, unsupported = pipeline_of(dag)
    assert [(s["name"], s.get("after")) for s in spec["steps"]] == [
        ("a", None),
        ("b", None),
        ("join", ["a", "b"]),
    ]
    assert spec["steps"][2]["run"]["spec"]["prompt"] == "Join $(steps.a.output) and $(steps.b.output)"
    assert unsupported == []


def test_reading_a_step_it_does_not_depend_on_makes_it_wait_and_says_so() -> None:
    dag = {"type": "graph", "steps": [harness("a", "A", output="A_OUT"), harness("b", "Use ${A_OUT}")]}
    spec, unsupported = pipeline_of(dag)
    assert spec["steps"][1]["after"] == ["a"]
    assert unsupported == [
        "reads the output of step a without depending on it; imported to run after it (steps: b)"
    ]


def test_an_output_of_a_later_step_is_not_read() -> None:
    dag = {"steps": [harness("a", "Use ${B_OUT}"), harness("b", "B", output="B_OUT")]}
    spec, unsupported = pipeline_of(dag)
    assert spec["steps"][0]["run"]["spec"]["prompt"] == "Use ${B_OUT}"
    assert "after" not in spec["steps"][0]
    assert unsupported == [
        "prompt: ${B_OUT} names no output, parameter or env entry; kept verbatim (steps: a)"
    ]


SCHEMA = {"type": "object", "properties": {"verdict": {"type": "string"}}, "required": ["verdict"]}


def test_a_field_of_a_structured_output_becomes_a_path_reference() -> None:
    dag = {
        "steps": [
            harness("judge", "Judge", output="VERDICT", output_schema=SCHEMA),
            harness(
                "report", "Verdict ${VERDICT.verdict}, first ${VERDICT.findings[0].file}, all ${VERDICT}"
            ),
        ]
    }
    spec, unsupported = pipeline_of(dag)
    assert spec["steps"][1]["run"]["spec"]["prompt"] == (
        "Verdict $(steps.judge.output.verdict), first $(steps.judge.output.findings.0.file), "
        "all $(steps.judge.output)"
    )
    assert unsupported == []


def test_a_field_of_an_output_without_schema_or_past_a_plain_path_is_kept_and_listed() -> None:
    dag = {
        "steps": [
            harness("judge", "Judge", output="VERDICT"),
            harness("report", "Verdict ${VERDICT.verdict}"),
            harness("typed", "Typed", output="TYPED", output_schema=SCHEMA),
            harness("count", "Count ${TYPED.items | length}"),
        ]
    }
    spec, unsupported = pipeline_of(dag)
    assert spec["steps"][1]["run"]["spec"]["prompt"] == "Verdict ${VERDICT.verdict}"
    assert spec["steps"][3]["run"]["spec"]["prompt"] == "Count ${TYPED.items | length}"
    assert unsupported == [
        "prompt: ${VERDICT.verdict}: a field of step judge's output needs its output_schema; kept verbatim "
        "(steps: report)",
        "prompt: ${TYPED.items | length}: only .field and [index] paths name a field of an output; kept "
        "verbatim (steps: count)",
    ]


@pytest.mark.parametrize(
    ("jq", "path"),
    [(".verdict", "verdict"), (".findings[0].file", "findings.0.file"), (".a.b_c", "a.b_c"), (".a[", None)],
)
def test_build_output_path(jq: str, path: str | None) -> None:
    assert build_output_path(jq) == path


@pytest.mark.parametrize(
    ("value", "continue_on", "notes", "errors"),
    [
        ({"failure": True}, {"failure": True}, [], []),
        ({"failed": True}, {"failure": True}, [], []),
        ("failed", {"failure": True}, [], []),
        (" Failed ", {"failure": True}, [], []),
        ({"failure": False, "skipped": False, "exit_code": [], "mark_success": False}, None, [], []),
        ("skipped", None, ["continue_on.skipped"], []),
        (
            {"failure": True, "skipped": True, "exit_code": [1, "2"], "output": "warn", "mark_success": True},
            {"failure": True},
            [
                "continue_on.skipped",
                "continue_on.exit_code",
                "continue_on.output",
                "continue_on.mark_success",
            ],
            [],
        ),
        ("sometimes", None, [], ["s.continue_on: expected 'skipped' or 'failed', got 'sometimes'"]),
        ({"failure": "yes"}, None, [], ["s.continue_on.failure: expected true or false"]),
        (
            {"exit_code": ["x"]},
            None,
            [],
            ["s.continue_on.exit_code: expected an exit code or a list of them"],
        ),
        ({"output": [1]}, None, [], ["s.continue_on.output: expected a string or a list of strings"]),
        ({"on": True}, None, [], ["s.continue_on.on: unknown key"]),
        ([True], None, [], ["s.continue_on: must be 'skipped', 'failed' or a map"]),
    ],
)
def test_build_continue_on(value: Any, continue_on: Any, notes: list[str], errors: list[str]) -> None:
    said: list[str] = []
    found: list[str] = []
    assert build_continue_on(value, "s.continue_on", found, said.append) == continue_on
    assert [n.split(":")[0] for n in said] == notes
    assert all(n.endswith("a pipeline step continues after a failure only; not imported") for n in said)
    assert found == errors


def test_continue_on_in_a_pipeline_and_in_a_dag_of_one_step() -> None:
    dag = {
        "steps": [harness("a", "A", continue_on={"failure": True, "mark_success": True}), harness("b", "B")]
    }
    spec, unsupported = pipeline_of(dag)
    assert spec["steps"][0]["continueOn"] == {"failure": True}
    assert unsupported == [
        "continue_on.mark_success: a pipeline step continues after a failure only; not imported (steps: a)"
    ]
    one = import_dagu({"steps": dag["steps"][:1]}, "d")
    assert one.unsupported == ["continue_on: no HarnessRun field; not imported (steps: a)"]
    bad = import_dagu({"steps": [harness("a", "A", continue_on="often"), harness("b", "B")]}, "d")
    assert bad.errors == ["steps[0] (a).continue_on: expected 'skipped' or 'failed', got 'often'"]


def test_step_names_fit_a_pipeline_step() -> None:
    long = "x" * 50
    spec, _ = pipeline_of({"steps": [harness(long, "A"), harness(f"{long}!", "B")]})
    assert [s["name"] for s in spec["steps"]] == ["x" * 40, "x" * 38 + "-2"]


def test_a_schedule_without_a_harness_step_is_listed() -> None:
    result = import_dagu({"schedule": "0 2 * * *", "steps": [{"name": "s", "command": "echo"}]}, "d")
    assert result.manifests == []
    assert "schedule: the DAG has no harness step to schedule; not imported" in result.unsupported


def test_import_dagu_prints_the_pipeline_and_the_service_account_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dag = tmp_path / "two.yaml"
    dag.write_text(yaml.safe_dump({"steps": [harness("a", "A"), harness("b", "B")]}))
    assert main(["import-dagu", str(dag), "--service-account", "bots"]) == 0
    out, err = capsys.readouterr()
    (pipeline,) = yaml.safe_load_all(out)
    assert (pipeline["kind"], pipeline["spec"]["serviceAccountName"]) == ("HarnessPipeline", "bots")
    assert err == f"{dag}: note: {SA_NOTE.replace('harness-pipeline', 'bots')}\n"
    with pytest.raises(SystemExit):
        main(["import-dagu", str(dag), "--service-account", "Not_A_Name"])


EXAMPLE = Path(__file__).parents[3] / "examples" / "dagu" / "nightly-review-summary.yaml"


def test_the_example_is_what_the_nightly_dag_imports_into() -> None:
    assert list(yaml.safe_load_all(EXAMPLE.read_text())) == import_fixture("nightly-review-summary.yaml")


@pytest.mark.parametrize("name", DAGS)
def test_imported_manifests_pass_validate(name: str) -> None:
    docs = parse_documents(yaml.safe_dump_all(import_fixture(name)), name)
    errors = [f for f in validate_documents(docs, load_builtin_catalog()) if f.severity == ERROR]
    # the options the pinned CLIs no longer take: test_dagu_import's test of the fixtures' runs
    assert [f.render() for f in errors if "has no option" not in f.message] == []
