"""controller/forge_reports.py reading a pull request's checks into status.changes.checks, against the forges'
APIs served on loopback by tests/stubs/forge_threads.py (GitHub and GitLab can only be stubs here; the
same walk runs against the real Gitea in tests/forge/test_checks_gitea.py). A CI's statuses are set through
the forge's own API, as a CI sets them; the receiver's mark is the annotation it writes
(receiver/checks.py, tested in tests/unit/receiver/test_checks.py)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from tests.stubs.forge_threads import ForgeThreadsStub
from tests.unit.controller.test_forge_reports import (
    NAME,
    NS,
    SHA,
    TOKEN,
    ForgeSide,
    finish,
    setup,
    stub_side,
    triggered_run,
)

from harness_operator.core.forge.checks import ANNOTATION_CHECKS_CHANGED, ANNOTATION_CHECKS_READ

NUDGE = f"{SHA}@0123456789ab"


@pytest.fixture
def stub() -> Iterator[ForgeThreadsStub]:
    with ForgeThreadsStub(token=TOKEN) as served:
        yield served


def ci_sets_status(side: ForgeSide, sha: str, state: str, context: str) -> None:
    """A CI's commit status on `sha`, through the forge's API (GitLab's states are its own words)."""
    if side.forge == "gitlab":
        url = f"{side.url}/api/v4/projects/{quote(side.repository, safe='')}/statuses/{sha}"
        body = {"state": {"failure": "failed"}.get(state, state), "name": context}
        headers = {"PRIVATE-TOKEN": side.token}
    else:
        api = side.url + ("/api/v1" if side.forge == "gitea" else "/api/v3")
        url = f"{api}/repos/{side.repository}/statuses/{sha}"
        body = {"state": state, "context": context}
        headers = {"Authorization": f"{'token' if side.forge == 'gitea' else 'Bearer'} {side.token}"}
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {**headers, "Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 201


def checks_of(run: dict[str, Any]) -> dict[str, Any] | None:
    return ((run.get("status") or {}).get("changes") or {}).get("checks")


@pytest.mark.parametrize("forge", ["github", "gitea", "gitlab"])
def test_the_checks_are_read_when_the_run_ends_and_again_when_the_receiver_marks_it(
    stub: ForgeThreadsStub,
    forge: str,
) -> None:
    side = stub_side(stub, forge)
    api, reporter = setup(side)
    api.runs[NAME] = triggered_run(side)
    assert reporter.report(NS, NAME) is None
    finish(api.runs[NAME], side)

    # The run's end: reported, and its commit's checks read once. The harness's own status (success, just
    # set) is not one of them: no CI has said anything yet.
    assert reporter.report(NS, NAME) is None
    assert [s.get("context") or s.get("name") for s in side.statuses(SHA)] == ["harness/fixer"]
    checks = checks_of(api.runs[NAME])
    assert checks is not None and checks["readTime"]
    assert {k: v for k, v in checks.items() if k != "readTime"} == {
        "state": "none",
        "sha": SHA,
        "total": 0,
        "passed": 0,
        "failed": 0,
        "pending": 0,
    }
    assert api.runs[NAME]["metadata"]["annotations"][ANNOTATION_CHECKS_READ] == SHA

    # A CI reports; nothing is read until a delivery marks the run (no polling).
    ci_sets_status(side, SHA, "pending", "ci/tests")
    ci_sets_status(side, SHA, "success", "ci/lint")
    calls = len(stub.requests)
    assert reporter.store.apply("HarnessRun", "MODIFIED", api.runs[NAME]).due is False
    assert reporter.report(NS, NAME) is None
    assert len(stub.requests) == calls and checks_of(api.runs[NAME])["state"] == "none"  # type: ignore[index]

    api.runs[NAME]["metadata"]["annotations"][ANNOTATION_CHECKS_CHANGED] = NUDGE
    assert reporter.store.apply("HarnessRun", "MODIFIED", api.runs[NAME]).due is True
    assert reporter.report(NS, NAME) is None
    checks = checks_of(api.runs[NAME])
    assert checks is not None
    assert (checks["state"], checks["total"], checks["passed"], checks["pending"]) == ("pending", 2, 1, 1)
    assert api.runs[NAME]["metadata"]["annotations"][ANNOTATION_CHECKS_READ] == NUDGE
    assert reporter.store.apply("HarnessRun", "MODIFIED", api.runs[NAME]).due is False

    # The tests fail: the next delivery's mark has the failure read. The comment is not written again.
    comments = side.comments(7)
    ci_sets_status(side, SHA, "failure", "ci/tests")
    if forge == "github":  # GitHub's check runs count too
        stub.add_check_run(side.repository, SHA, "build", "completed", "success")
    api.runs[NAME]["metadata"]["annotations"][ANNOTATION_CHECKS_CHANGED] = f"{SHA}@ba9876543210"
    assert reporter.report(NS, NAME) is None
    checks = checks_of(api.runs[NAME])
    assert checks is not None
    total = 3 if forge == "github" else 2
    assert (checks["state"], checks["total"], checks["failed"], checks["pending"]) == ("failure", total, 1, 0)
    assert side.comments(7) == comments
    assert api.events == []


def test_a_mark_for_a_commit_the_run_did_not_push_reads_nothing_new(stub: ForgeThreadsStub) -> None:
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    api.runs[NAME] = triggered_run(side)
    finish(api.runs[NAME], side)
    assert reporter.report(NS, NAME) is None
    calls = len(stub.requests)
    api.runs[NAME]["metadata"]["annotations"][ANNOTATION_CHECKS_CHANGED] = f"{'c' * 40}@0123456789ab"
    assert reporter.report(NS, NAME) is None
    assert len(stub.requests) == calls


def test_a_trigger_without_a_token_reads_nothing_and_is_not_asked_again(stub: ForgeThreadsStub) -> None:
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    del api.triggers["fixer"]["spec"]["forge"]["tokenSecretRef"]
    api.runs[NAME] = triggered_run(side)
    finish(api.runs[NAME], side)
    assert reporter.report(NS, NAME) is None
    assert stub.requests == [] and checks_of(api.runs[NAME]) is None
    assert api.runs[NAME]["metadata"]["annotations"][ANNOTATION_CHECKS_READ] == SHA
    assert reporter.store.apply("HarnessRun", "MODIFIED", api.runs[NAME]).due is False


def test_a_read_the_forge_refuses_is_retried_then_given_up_with_an_event() -> None:
    with ForgeThreadsStub(token="another-token") as refusing:
        side = stub_side(refusing, "gitea")
        api, reporter = setup(side, delays=(0.0,))
        api.runs[NAME] = triggered_run(side, **{"agentharness.dev/forge-reported": "finished+pr"})
        finish(api.runs[NAME], side)  # reported already: only its checks are due
        assert reporter.report(NS, NAME) == 0.0
        assert reporter.report(NS, NAME) is None
        assert checks_of(api.runs[NAME]) is None
        [(type_, reason, first), (_, _, last)] = api.events
        assert (type_, reason) == ("Warning", "ForgeReportFailed")
        assert f"/repos/acme/app/commits/{SHA}/status: HTTP 401" in first
        assert (
            "the reporting token (spec.forge.tokenSecretRef) must be allowed to read the repository" in first
        )
        assert f"finished+pr checks {SHA}" in last and "tried 2 times" in last
        assert TOKEN not in first + last
        assert reporter.report(NS, NAME) is None  # given up: not asked again until something changes
        assert len(api.events) == 2


def test_a_run_kept_after_its_trigger_was_deleted_reads_nothing_and_posts_nothing(
    stub: ForgeThreadsStub,
) -> None:
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    del api.triggers["fixer"]
    api.runs[NAME] = triggered_run(side, **{"agentharness.dev/forge-reported": "finished+pr"})
    finish(api.runs[NAME], side)  # reported before the trigger went: only its checks' read is due
    assert reporter.report(NS, NAME) is None
    assert stub.requests == [] and api.events == [] and checks_of(api.runs[NAME]) is None
    assert reporter.store.apply("HarnessRun", "MODIFIED", api.runs[NAME]).due is False
    # A stage not reported yet is still given up with an Event saying why.
    api.runs[NAME]["metadata"]["annotations"]["agentharness.dev/forge-reported"] = "working"
    assert reporter.report(NS, NAME) is None
    assert "HarnessTrigger team-a/fixer does not exist" in api.events[0][2]
