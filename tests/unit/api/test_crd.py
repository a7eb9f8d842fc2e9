"""Generated CRDs: committed files match the models, and each has the shape kubectl users rely on."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness_operator.api.crd import build_crds, render_crd_yaml

ROOT = Path(__file__).resolve().parents[3]
CRDS = build_crds()


@pytest.mark.parametrize("name", sorted(CRDS))
def test_committed_crd_matches_the_models(name: str) -> None:
    committed = (ROOT / "crds" / name).read_text(encoding="utf-8")
    assert committed == render_crd_yaml(CRDS[name]), f"crds/{name} drifted: run `make generate`"


def test_no_stray_files_in_crds() -> None:
    assert sorted(p.name for p in (ROOT / "crds").glob("*.yaml")) == sorted(CRDS)


def walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for key, child in node.get("properties", {}).items():
        out += walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        out += walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += walk(node["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("name", sorted(CRDS))
def test_schema_is_structural(name: str) -> None:
    schema = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        assert not {"$ref", "anyOf", "allOf", "title", "$defs"} & set(node), path
        typed = (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path} has no type"


@pytest.mark.parametrize("name", sorted(CRDS))
def test_every_spec_field_is_described(name: str) -> None:
    schema = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema["properties"]["spec"], ".spec"):
        if path.endswith(("[]", "{}")):
            continue
        assert node.get("description"), f"{path} has no description (kubectl explain shows nothing)"


def test_names_short_names_and_category() -> None:
    names = {c["spec"]["names"]["kind"]: c["spec"]["names"] for c in CRDS.values()}
    assert names["HarnessRun"]["shortNames"] == ["hrun"]
    assert names["HarnessDefinition"]["shortNames"] == ["hdef"]
    assert names["ClusterHarnessDefinition"]["shortNames"] == ["chdef"]
    assert names["HarnessBudget"]["shortNames"] == ["hbudget"]
    assert names["HarnessSchedule"]["shortNames"] == ["hsched"]
    assert names["HarnessTrigger"]["shortNames"] == ["htrigger"]
    assert names["HarnessPipeline"]["shortNames"] == ["hpipe"]
    assert all(n["categories"] == ["harness"] for n in names.values())
    scopes = {c["spec"]["names"]["kind"]: c["spec"]["scope"] for c in CRDS.values()}
    assert scopes == {
        "HarnessRun": "Namespaced",
        "HarnessDefinition": "Namespaced",
        "ClusterHarnessDefinition": "Cluster",
        "HarnessBudget": "Namespaced",
        "HarnessSchedule": "Namespaced",
        "HarnessTrigger": "Namespaced",
        "HarnessPipeline": "Namespaced",
    }


def test_schedule_has_status_subresource_and_cronjob_like_columns() -> None:
    version = CRDS["agentharness.dev_harnessschedules.yaml"]["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Schedule", "Timezone", "Suspend", "Ready", "Last Schedule", "Next", "Age"]
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Active", "Policy"]


def test_trigger_has_status_subresource_and_columns() -> None:
    version = CRDS["agentharness.dev_harnesstriggers.yaml"]["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Forge", "Repositories", "Last Delivery", "Age"]
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Last Run", "Policy"]


def test_run_has_status_subresource_and_printer_columns() -> None:
    version = CRDS["agentharness.dev_harnessruns.yaml"]["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Provider", "Ran", "Phase", "Reason", "Cost", "Age"]
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority") == 1]
    assert wide == [
        "Exit",
        "Turns",
        "Tokens",
        "Charged",
        "Duration",
        "Tool",
        "Files",
        "Branch",
        "PR",
        "Checks",
        "Approval",
        "Approver",
    ]
    # Cost moves while the run is in flight: it reads the progress, which ends as the run's total.
    cost = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Cost")
    assert cost["jsonPath"] == ".status.progress.costUSD"
    # What its budgets charged it: its reservation when its cost stayed unknown (Cost then empty).
    charged = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Charged")
    assert charged["jsonPath"] == ".status.budget.charge.amountUSD"


def test_cel_rules_are_in_the_crd() -> None:
    text = yaml.safe_dump(CRDS["agentharness.dev_harnessruns.yaml"])
    assert "with.binary is not supported" in text
    assert "spec is immutable after creation except spec.cancel" in text
    assert "oldSelf" in text


def test_status_schema_carries_no_defaults() -> None:
    schema = CRDS["agentharness.dev_harnessruns.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema["properties"]["status"], ".status"):
        assert "default" not in node, path


def rules_under(node: dict[str, Any]) -> list[str]:
    return [v["rule"] for _, n in walk(node) for v in n.get("x-kubernetes-validations", [])]


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("agentharness.dev_harnesspipelines.yaml", ["spec"]),
        ("agentharness.dev_harnessschedules.yaml", ["spec", "pipelineTemplate", "spec"]),
    ],
)
def test_a_pipeline_steps_run_template_keeps_only_the_rules_that_scan_nothing(
    name: str, path: list[str]
) -> None:
    """32 steps' worth of a run's scans (NUL characters, $(inputs.NAME) counts, unique names) exceed the API
    server's CEL cost budget, which refused the CRD: the run's CRD checks them when the step's run is
    created. Its other rules stay, and the run's own CRD keeps every rule."""
    node = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for key in path:
        node = node["properties"][key]
    template = node["properties"]["steps"]["items"]["properties"]["run"]
    kept = rules_under(template)
    assert "has(self.prompt) || has(self.promptFrom)" in kept
    assert "!has(self.publish) || has(self.git)" in kept
    assert not [r for r in kept if any(c in r for c in ("contains(", "split(", ".all(", ".exists("))], kept
    run = CRDS["agentharness.dev_harnessruns.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "!self.contains('\\u0000')" in rules_under(run["properties"]["spec"])
    # The pipeline's own rules over its steps are not a template's: they stay.
    assert "step names must be unique" in yaml.safe_dump(
        node["properties"]["steps"]["x-kubernetes-validations"]
    )


@pytest.mark.parametrize("name", sorted(CRDS))
def test_no_generator_marker_reaches_a_crd(name: str) -> None:
    assert "x-harness-" not in yaml.safe_dump(CRDS[name])


def test_the_pipelines_steps_column_reads_one_value() -> None:
    """The API server prints a column's first JSONPath result only: `.status.steps[*].phase` showed the
    first step's phase alone."""
    columns = CRDS["agentharness.dev_harnesspipelines.yaml"]["spec"]["versions"][0][
        "additionalPrinterColumns"
    ]
    assert [c["name"] for c in columns] == ["Phase", "Reason", "Cost", "Age", "Steps"]
    assert columns[-1]["jsonPath"] == ".status.stepPhases" and columns[-1]["priority"] == 1
    assert not [c for c in columns if "[*]" in c["jsonPath"]], columns
