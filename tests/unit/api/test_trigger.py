"""HarnessTrigger's API: its CEL rules, judged offline by the generated CRD's schema as the API server
judges them (tests/integration checks both agree), with messages naming the field; defaults."""

from typing import Any

import pytest

from harness_operator.api.crd import crd_schema_for
from harness_operator.api.v1alpha1 import HarnessTrigger
from harness_operator.core.objects.cel import check_rules

SCHEMA = crd_schema_for("HarnessTrigger")


def body(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "forge": {
            "type": "gitea",
            "url": "http://gitea.test:3000",
            "webhookSecretRef": {"name": "hook", "key": "secret"},
            "tokenSecretRef": {"name": "report", "key": "token"},
        },
        "repositories": ["acme/payments"],
        "serviceAccountName": "agent-trigger",
        "events": [{"type": "IssueLabeled", "label": "agent"}, {"type": "Command", "command": "/agent"}],
        "authors": {"users": ["alice"]},
        "runTemplate": {"spec": {"provider": "claude", "prompt": "Fix #$(event.number)"}},
    }
    return {"metadata": {"name": "t", "namespace": "ns"}, "spec": {**base, **spec}}


def violations(doc: dict[str, Any]) -> list[str]:
    return [f"{v.path}: {v.message}" for v in check_rules(SCHEMA, doc)]


def test_a_valid_trigger_passes_and_defaults_to_forbid_and_both_reports() -> None:
    assert violations(body()) == []
    trigger = HarnessTrigger.model_validate(body())
    assert trigger.spec.concurrency_policy == "Forbid"
    assert (trigger.spec.report.comment, trigger.spec.report.commit_status) == (True, True)
    assert trigger.to_api()["spec"]["forge"]["tokenSecretRef"] == {"name": "report", "key": "token"}


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (
            [{"type": "IssueLabeled"}],
            "spec.events[0].label: spec.events[].label is required for type IssueLabeled: the label that "
            "starts a run",
        ),
        (
            [{"type": "Command"}],
            "spec.events[0].command: spec.events[].command is required for type Command, e.g. command: /agent",
        ),
        (
            [{"type": "Command", "command": "agent"}],
            "spec.events[0].command: spec.events[].command: must start with '/' and hold no space, e.g. /agent",
        ),
        (
            [{"type": "Command", "command": "/agent fix"}],
            "spec.events[0].command: spec.events[].command: must start with '/' and hold no space, e.g. /agent",
        ),
        (
            [{"type": "ReviewComment", "label": "agent"}],
            "spec.events[0].label: spec.events[].label belongs to type IssueLabeled only",
        ),
        (
            [{"type": "CheckFailed", "command": "/agent"}],
            "spec.events[0].command: spec.events[].command belongs to type Command only",
        ),
    ],
)
def test_each_event_names_what_it_needs(events: list[dict[str, Any]], message: str) -> None:
    assert violations(body(events=events)) == [message]


def test_associations_are_refused_off_github_naming_the_field_and_the_fix() -> None:
    doc = body(authors={"users": ["alice"], "associations": ["MEMBER"]})
    assert violations(doc) == [
        "spec.authors.associations: spec.authors.associations: only GitHub's deliveries carry an author "
        "association; with gitea or gitlab list the allowed users in spec.authors.users"
    ]
    github = body(authors={"associations": ["MEMBER"]})
    github["spec"]["forge"] = {**github["spec"]["forge"], "type": "github", "url": "https://github.com"}
    assert violations(github) == []


@pytest.mark.parametrize("repository", ["payments", "/acme", "acme/"])
def test_a_repository_is_owner_slash_name(repository: str) -> None:
    assert violations(body(repositories=[repository])) == [
        "spec.repositories[0]: spec.repositories[]: must be owner/name, e.g. acme/payments"
    ]
    assert violations(body(repositories=["group/sub/project"])) == []  # GitLab's nested groups


def test_the_schema_bounds_what_cel_cannot() -> None:
    spec = SCHEMA["properties"]["spec"]
    assert spec["properties"]["events"]["minItems"] == 1
    assert spec["properties"]["repositories"]["minItems"] == 1
    assert set(spec["required"]) >= {
        "forge",
        "repositories",
        "serviceAccountName",
        "events",
        "authors",
    }
    assert spec["properties"]["concurrencyPolicy"]["enum"] == ["Allow", "Forbid", "Replace"]
    assert spec["properties"]["forge"]["properties"]["type"]["enum"] == ["github", "gitea", "gitlab"]
    association = spec["properties"]["authors"]["properties"]["associations"]["items"]
    assert "OWNER" in association["enum"] and "NONE" in association["enum"]
    assert violations(
        body(forge={"type": "gitea", "url": "gitea.test", "webhookSecretRef": {"name": "h", "key": "s"}})
    ) == ["spec.forge.url: must be an http(s) URL"]


PIPELINE = {
    "spec": {
        "serviceAccountName": "agent-trigger",
        "steps": [{"name": "fix", "run": {"spec": {"provider": "claude", "prompt": "Fix #$(event.number)"}}}],
    }
}


def test_a_trigger_makes_runs_pipelines_or_both_and_never_nothing() -> None:
    pipeline_only = body(pipelineTemplate=PIPELINE)
    del pipeline_only["spec"]["runTemplate"]
    assert violations(pipeline_only) == []
    assert violations(body(pipelineTemplate=PIPELINE)) == []  # runTemplate then answers on pull requests
    neither = body()
    del neither["spec"]["runTemplate"]
    assert violations(neither) == [
        "spec: set spec.runTemplate (the run a delivery creates), spec.pipelineTemplate (the pipeline an "
        "issue's delivery creates), or both"
    ]
    trigger = HarnessTrigger.model_validate(pipeline_only)
    assert trigger.spec.run_template is None and trigger.spec.pipeline_template is not None


@pytest.mark.parametrize("kind", ["ReviewComment", "CheckFailed"])
def test_a_pipeline_trigger_answers_on_a_pull_request_only_with_a_run_template(kind: str) -> None:
    doc = body(pipelineTemplate=PIPELINE, events=[{"type": kind}])
    assert violations(doc) == []
    del doc["spec"]["runTemplate"]
    assert violations(doc) == [
        "spec.events: spec.events: ReviewComment and CheckFailed follow up on a pull request with a run, "
        "and spec.pipelineTemplate makes pipelines only: set spec.runTemplate, the run that answers on the "
        "pull request"
    ]
