"""What the trigger receiver answers and records per delivery (receiver/deliveries.py): HTTP codes, the
counter's closed set of results, Events (unverified ones once a minute), status.lastDelivery, and that no
answer echoes the body or a secret."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from harness_operator.core.forge.triggering import TriggerDecision
from harness_operator.receiver.deliveries import (
    RESULTS,
    Outcome,
    api_message,
    build_answer,
    build_bad_signature,
    build_decided,
    build_duplicate,
    build_event_name,
    build_ignored,
    build_last_delivery,
    build_not_created,
    build_secret_unreadable,
    build_too_large,
    build_unavailable,
    build_unreadable,
    forge_event_name,
    is_hook_path,
    is_json_document,
    with_checks_marked,
)

NOW = datetime(2026, 12, 7, 5, 30, 12, tzinfo=UTC)
RUN = {"apiVersion": "agentharness.dev/v1alpha1", "kind": "HarnessRun", "metadata": {"name": "fix-12-abc"}}


@pytest.mark.parametrize(
    ("decision", "run", "expected"),
    [
        (
            TriggerDecision("created", "issue 12 labelled agent", RUN),
            "fix-12-abc",
            (202, "Normal", "RunCreated"),
        ),
        (TriggerDecision("duplicate", "run fix-12-abc exists"), None, (200, "Normal", "DeliverySkipped")),
        (TriggerDecision("skipped", "run fix-12-0 still works"), None, (200, "Normal", "DeliverySkipped")),
        (TriggerDecision("ignored", "not a labelled issue"), None, (200, "Normal", "DeliveryIgnored")),
        (TriggerDecision("refused", "mallory may not trigger"), None, (200, "Warning", "DeliveryRefused")),
    ],
)
def test_each_decision_answers_the_forge_and_posts_its_event(
    decision: TriggerDecision, run: str | None, expected: tuple[int, str, str]
) -> None:
    outcome = build_decided(decision, run)
    assert (outcome.status, outcome.event_type, outcome.event_reason) == expected
    assert outcome.result == decision.result and outcome.reason == decision.reason
    assert outcome.run == run and outcome.verified


def test_every_outcome_counts_within_the_closed_set_of_results() -> None:
    outcomes = [
        build_decided(TriggerDecision(r, "why"), None)
        for r in ("created", "duplicate", "skipped", "ignored", "refused")
    ]
    outcomes += [
        build_duplicate("r"),
        build_ignored("why"),
        build_bad_signature("gitea"),
        build_too_large(1024),
        build_unreadable(),
        build_secret_unreadable("team", "hook", "secret", "forbidden"),
        build_not_created("r", 403, "forbidden"),
        build_unavailable("creating the run"),
    ]
    assert {o.result for o in outcomes} == set(RESULTS)


@pytest.mark.parametrize(
    ("forge", "header"),
    [("github", "X-Hub-Signature-256"), ("gitea", "X-Gitea-Signature"), ("gitlab", "X-Gitlab-Token")],
)
def test_a_bad_signature_is_401_names_the_header_and_the_fix_and_is_not_the_forges_delivery(
    forge: str, header: str
) -> None:
    outcome = build_bad_signature(forge)
    assert (outcome.status, outcome.result, outcome.event_reason) == (401, "bad_signature", "BadSignature")
    assert header in outcome.reason and "spec.forge.webhookSecretRef" in outcome.reason
    assert not outcome.verified


def test_unverified_requests_post_one_event_a_minute_per_trigger_verified_ones_one_each() -> None:
    bad = build_bad_signature("github")
    name = build_event_name("fix-issues", bad, NOW)
    assert name == f"fix-issues.badsignature.{int(NOW.timestamp()) // 60}"
    assert build_event_name("fix-issues", bad, NOW.replace(second=59)) == name
    assert build_event_name("fix-issues", bad, NOW.replace(minute=31)) != name
    assert build_event_name("fix-issues", build_too_large(10), NOW) != name
    assert build_event_name("fix-issues", build_duplicate("r"), NOW) is None
    long = build_event_name("a" * 199 + "-b" * 27, bad, NOW)
    assert long is not None and len(long) <= 253 and "-." not in long


def test_the_api_servers_refusal_is_the_events_message() -> None:
    body = json.dumps(
        {
            "kind": "Status",
            "message": 'harnessruns.agentharness.dev is forbidden: User "system:serviceaccount:team:agent" '
            'cannot create resource "harnessruns"',
            "reason": "Forbidden",
            "code": 403,
        }
    )
    outcome = build_not_created("fix-12-abc", 403, api_message(body, "Forbidden"))
    assert (outcome.status, outcome.result, outcome.event_type, outcome.event_reason) == (
        422,
        "error",
        "Warning",
        "RunNotCreated",
    )
    assert 'User "system:serviceaccount:team:agent" cannot create resource "harnessruns"' in outcome.reason
    assert outcome.run == "fix-12-abc"
    assert api_message("<html>bad gateway</html>", "Bad Gateway") == "Bad Gateway"
    assert api_message(None, "Forbidden") == "Forbidden"


def test_an_unreadable_secret_names_it_and_the_grant_that_fixes_it() -> None:
    outcome = build_secret_unreadable("team-a", "forge-webhook", "secret", "forbidden")
    assert outcome.status == 503 and not outcome.verified
    assert "team-a/forge-webhook key secret" in outcome.reason and "`get` on it" in outcome.reason


@pytest.mark.parametrize(
    ("namespace", "name", "ok"),
    [
        ("team-a", "fix-issues", True),
        ("team-a", "fix.issues.v2", True),
        ("Team", "x", False),
        ("team-a", "-x", False),
        ("a" * 64, "x", False),
        ("team-a", "x" * 254, False),
        ("team-a", "..", False),
        ("team-a", "x%2Fy", False),
    ],
)
def test_only_names_a_trigger_can_have_reach_the_api_server(namespace: str, name: str, ok: bool) -> None:
    assert is_hook_path(namespace, name) is ok


def test_the_forges_event_name_is_read_from_its_own_header_case_insensitively() -> None:
    assert forge_event_name("github", {"x-github-event": "issue_comment"}) == "issue_comment"
    assert forge_event_name("gitea", {"X-Gitea-Event": "issues"}) == "issues"
    assert (
        forge_event_name("gitea", {"X-Gitea-Event": "issues", "X-Gitea-Event-Type": "issue_label"})
        == "issue_label"
    )
    assert forge_event_name("gitlab", {"X-Gitlab-Event": "Note Hook"}) == "Note Hook"
    assert forge_event_name("gitea", {"X-GitHub-Event": "issues"}) == "unknown"
    assert len(forge_event_name("github", {"X-GitHub-Event": "x" * 500})) == 64


def test_only_a_json_object_is_a_delivery() -> None:
    assert is_json_document(b'{"action": "opened"}')
    assert not is_json_document(b"payload=%7B%22action%22%3A%22opened%22%7D")
    assert not is_json_document(b"[1, 2]")
    assert not is_json_document(b"\xff\xfe")


def test_the_answer_and_the_status_carry_the_outcome_never_the_body() -> None:
    outcome = Outcome(
        "created", 202, "issue 12 labelled agent: run fix-12-abc", "Normal", "RunCreated", "fix-12-abc"
    )
    assert build_answer(outcome) == {
        "result": "created",
        "reason": "issue 12 labelled agent: run fix-12-abc",
        "run": "fix-12-abc",
    }
    assert build_answer(build_ignored("a push is no trigger event")) == {
        "result": "ignored",
        "reason": "a push is no trigger event",
    }
    assert build_last_delivery(outcome, "issues", NOW) == {
        "time": "2026-12-07T05:30:12Z",
        "event": "issues",
        "result": "created",
        "reason": "issue 12 labelled agent: run fix-12-abc",
        "run": "fix-12-abc",
    }


def test_the_runs_whose_checks_were_marked_are_named_a_few_at_most() -> None:
    ignored = build_ignored("a commit status that did not fail is not a trigger event")
    assert with_checks_marked(ignored, []) is ignored
    assert (
        with_checks_marked(ignored, ["a"]).reason
        == f"{ignored.reason}; the checks of run a will be read again"
    )
    many = with_checks_marked(ignored, ["a", "b", "c", "d", "e"])
    assert many.reason.endswith("the checks of run a, b, c and 2 more will be read again")
    assert (many.result, many.status, many.event_reason) == ("ignored", 200, "DeliveryIgnored")
