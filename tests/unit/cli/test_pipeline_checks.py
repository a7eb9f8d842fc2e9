"""`harnessctl validate` of HarnessPipelines and of schedules' pipelineTemplates: the graph's problems, and
each run a step would create checked as a HarnessRun, at the step's field (validate_documents)."""

from typing import Any

import yaml

from harness_operator.api.v1alpha1 import ClusterHarnessDefinition
from harness_operator.cli.manifests import parse_documents
from harness_operator.cli.validation import ERROR, WARNING, Finding, validate_documents

BUILTIN = ClusterHarnessDefinition.model_validate(
    {
        "metadata": {"name": "vendor"},
        "spec": {
            "binary": "vendor",
            "knownOptions": ["model"],
            "credentials": [{"env": "VENDOR_KEY", "secretKeyRef": {"name": "vendor-key", "key": "k"}}],
            "capabilities": {"usageReporting": True, "costReporting": True},
        },
    }
)
OTHER = {
    "apiVersion": "agentharness.dev/v1alpha1",
    "kind": "HarnessDefinition",
    "metadata": {"name": "other", "namespace": "ns"},
    "spec": {"binary": "other", "knownOptions": ["model"]},
}
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "vendor-key", "namespace": "ns"}}


def step(name: str, prompt: str, after: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    run = {"spec": {"provider": "vendor", "prompt": prompt, "workspace": {"workingDir": "/w"}}}
    return {"name": name, "run": run, **({"after": after} if after else {}), **extra}


def pipeline(*steps: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessPipeline",
        "metadata": {"name": "review", "namespace": "ns"},
        "spec": {"serviceAccountName": "runner", "steps": list(steps)},
    }


FAN_IN = (
    step("draft", "Draft it as $(matrix.provider) would", matrix={"providers": ["vendor", "other"]}),
    step("judge", "Pick the best:\n$(steps.draft.output)", after=["draft"]),
)


def check(*docs: dict[str, Any]) -> list[Finding]:
    return validate_documents(parse_documents(yaml.safe_dump_all(docs), "f.yaml"), [BUILTIN])


def lines(findings: list[Finding], severity: str = ERROR) -> list[str]:
    return [f"{f.kind}/{f.name}: {f.field}: {f.message}" for f in findings if f.severity == severity]


def test_a_fan_in_pipeline_is_clean_and_its_references_are_no_literal_variables() -> None:
    assert check(pipeline(*FAN_IN), OTHER, SECRET) == []


def test_the_graphs_problems_are_errors_at_their_fields() -> None:
    found = check(
        pipeline(
            step("a", "go"),
            step("b", "use $(steps.a.output) and $(steps.a.outptu) and $(matrix.who)"),
        ),
        SECRET,
    )
    assert lines(found) == [
        "HarnessPipeline/review: spec.steps[1].run.spec.prompt: '$(steps.a.outptu)' is not a reference; "
        "write $(steps.STEP.output), $(steps.STEP.output.FIELD) or $(matrix.NAME)",
        "HarnessPipeline/review: spec.steps[1].run.spec.prompt: $(matrix.who) names no axis of this step's "
        "matrix; its axes: none (the step has no matrix)",
        "HarnessPipeline/review: spec.steps[1].run.spec: $(steps.a.output) reads step a, which this step "
        "does not run after; add 'a' to spec.steps[1].after",
    ]  # each said once: the run check's "would reach the agent as it is" is left to these


def test_a_steps_run_is_checked_as_a_harnessrun_at_the_steps_fields() -> None:
    bad = step("judge", "Judge $(steps.draft.output) with $(params.style)", after=["draft"])
    bad["run"]["spec"] |= {"provider": "nope", "fallback": [{"provider": "vendor", "with": {"modle": "x"}}]}
    found = check(pipeline(FAN_IN[0], bad), OTHER, SECRET)
    assert lines(found) == [
        'HarnessPipeline/review: spec.steps[1].run.spec.provider: unknown provider "nope"; known here: '
        "other, vendor",
        "HarnessPipeline/review: spec.steps[1].run.spec.prompt: $(params.style) would reach the agent as it "
        "is: only $(inputs.NAME) is replaced, for the names spec.inputs declares (steps-draft-0, "
        "steps-draft-1); declare it, `inputs: [{name: style, value: ...}]`, and write `$(inputs.style)`",
        'HarnessPipeline/review: spec.steps[1].run.spec.fallback[0].with.modle: provider "vendor" has no '
        "option --modle, so the CLI would refuse it and the attempt fail; did you mean `model`? Rename it",
    ]


def test_the_matrixs_providers_and_models_must_be_known_and_findings_come_once() -> None:
    fanned = step("draft", "go", matrix={"providers": ["vendor", "nope"], "models": ["m1", "m2"]})
    found = check(pipeline(fanned), SECRET)
    assert lines(found) == [
        'HarnessPipeline/review: spec.steps[0].matrix.providers[1]: unknown provider "nope"; known here: '
        "vendor"
    ]  # once, though two runs (one per model) would have it
    unset = step("draft", "go", matrix={"providers": ["vendor"]})
    del unset["run"]["spec"]["workspace"]
    assert lines(check(pipeline(unset), SECRET), WARNING) == [
        "HarnessPipeline/review: spec.steps[0].run.spec.workspace.workingDir: not set; the agent runs in the "
        "sandbox's default directory"
    ]


def test_a_runs_output_a_step_reads_is_not_a_run_missing_from_the_files() -> None:
    """The step's input of the earlier step's run names a run no file holds: the pipeline creates it."""
    path = step("judge", "Score: $(steps.draft.output.score)", after=["draft"])
    draft = step("draft", "go")
    draft["run"]["spec"]["outputSchema"] = {"type": "object", "properties": {"score": {"type": "number"}}}
    assert check(pipeline(draft, path), SECRET) == []


def test_a_schedules_pipeline_template_is_checked_the_same_way() -> None:
    bad = step("judge", "Judge $(steps.draft.output)")
    bad["run"]["spec"]["provider"] = "nope"
    schedule = {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessSchedule",
        "metadata": {"name": "nightly", "namespace": "ns"},
        "spec": {
            "schedule": "0 2 * * *",
            "pipelineTemplate": {
                "spec": {"serviceAccountName": "runner", "steps": [step("draft", "go"), bad]}
            },
        },
    }
    assert lines(check(schedule, SECRET)) == [
        "HarnessSchedule/nightly: spec.pipelineTemplate.spec.steps[1].run.spec: $(steps.draft.output) reads "
        "step draft, which this step does not run after; add 'draft' to "
        "spec.pipelineTemplate.spec.steps[1].after",
        "HarnessSchedule/nightly: spec.pipelineTemplate.spec.steps[1].run.spec.provider: unknown provider "
        '"nope"; known here: vendor',
    ]


def test_a_triggers_pipeline_template_is_checked_and_its_event_parameters_too() -> None:
    trigger = {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessTrigger",
        "metadata": {"name": "fixer", "namespace": "ns"},
        "spec": {
            "forge": {
                "type": "gitea",
                "url": "http://gitea.test:3000",
                "webhookSecretRef": {"name": "hook", "key": "secret"},
            },
            "repositories": ["acme/payments"],
            "serviceAccountName": "runner",
            "events": [{"type": "IssueLabeled", "label": "agent"}],
            "authors": {"users": ["alice"]},
            "pipelineTemplate": {
                "spec": {
                    "serviceAccountName": "runner",
                    "steps": [
                        step("draft", "Fix #$(event.number), $(event.titel)"),
                        step("judge", "$(steps.draft.output)"),
                    ],
                }
            },
        },
    }
    assert lines(check(trigger, SECRET)) == [
        "HarnessTrigger/fixer: spec.pipelineTemplate.spec.steps[0].run.spec.prompt: $(event.titel) is no event "
        "parameter, so every run would carry it as written; the parameters are $(event.repository), "
        "$(event.number), $(event.title), $(event.body), $(event.comment), $(event.author), "
        "$(event.headBranch), $(event.check), $(event.url)",
    ]
    steps = trigger["spec"]["pipelineTemplate"]["spec"]["steps"]
    steps[0]["run"]["spec"]["prompt"] = "Fix #$(event.number), $(event.title)"
    assert lines(check(trigger, SECRET)) == [
        "HarnessTrigger/fixer: spec.pipelineTemplate.spec.steps[1].run.spec: $(steps.draft.output) reads step "
        "draft, which this step does not run after; add 'draft' to spec.pipelineTemplate.spec.steps[1].after",
    ]


def test_what_the_api_server_refuses_gets_no_step_checks_on_top() -> None:
    broken = pipeline(step("a", "go"))
    del broken["spec"]["serviceAccountName"]
    broken["spec"]["steps"][0]["run"]["spec"]["provider"] = "nope"
    assert [f.field for f in check(broken, SECRET)] == ["spec.serviceAccountName"]


def test_a_workspace_from_an_earlier_step_is_checked_at_workspacefrom() -> None:
    """The run it makes starts from the earlier step's run (a run of the pipeline, not missing from the
    files); without git in the step's workspace the API server would refuse that run."""
    polish = step("polish", "Polish", after=["draft"], workspaceFrom={"step": "draft"})
    assert lines(check(pipeline(step("draft", "go"), polish), SECRET)) == [
        "HarnessPipeline/review: spec.steps[1].workspaceFrom: from needs git: the repository the earlier run "
        "changed"
    ]
    polish["run"]["spec"]["workspace"]["git"] = {"url": "https://example.com/repo.git"}
    assert lines(check(pipeline(step("draft", "go"), polish), SECRET), WARNING) == []
    assert lines(check(pipeline(step("draft", "go"), polish), SECRET)) == []
