"""controller/forge_reports.py: the reporting step against a forge's API served on loopback.

The forge here is tests/stubs/forge_threads.py, which keeps what it is sent and serves it back through the
forges' own GET routes: the tests read the forge (`ForgeSide`), not a log of calls. GitHub and GitLab can
only be stubs here (no real server of theirs runs on this machine); the same walk runs against the real
Gitea of tests/cluster/gitea in tests/forge/test_reports_gitea.py, with a ForgeSide over tests/lib/gitea.py.
The API server is a fake that keeps runs, triggers and Secrets and applies metadata patches as a merge
patch would."""

from __future__ import annotations

import copy
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from tests.stubs.forge_threads import ForgeThreadsStub

from harness_operator.controller import metrics
from harness_operator.controller.forge_client import ForgeClient
from harness_operator.controller.forge_reports import ForgeReporter
from harness_operator.core.forge.report import ANNOTATION_REPORTED
from harness_operator.core.forge.triggering import ANNOTATION_COMMENT_ID, LABEL_PULL_REQUEST

TOKEN = "gta_report_0123456789abcdef"
NS, NAME = "team-a", "fixer-7-0123456789"
SHA, HEAD = "a" * 40, "b" * 40


class ApiServer:
    """What the reporting step reads and writes in the API server: runs (metadata merge-patched, only while
    the uid matches), triggers, Secrets, and the Events posted."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self.triggers: dict[str, dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], str] = {}
        self.events: list[tuple[str, str, str]] = []
        self.patches = 0
        self.unavailable = 0  # how many reads answer 503 first

    def fetch_run(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.unavailable:
            self.unavailable -= 1
            raise ApiException(status=503, reason="Service Unavailable")
        found = self.runs.get(name)
        return copy.deepcopy(found) if found is not None else None

    def fetch_trigger(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.triggers.get(name)

    def fetch_secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return self.secrets.get((name, key))

    def patch_run_metadata(self, namespace: str, name: str, uid: str, patch: dict[str, Any]) -> bool:
        run = self.runs.get(name)
        if run is None or run["metadata"]["uid"] != uid:
            return False
        self.patches += 1
        for field in ("labels", "annotations"):
            run["metadata"].setdefault(field, {}).update(patch["metadata"].get(field) or {})
        return True

    def create_event(
        self, run: dict[str, Any], type_: str, reason: str, message: str, name: str | None = None
    ) -> None:
        self.events.append((type_, reason, message))

    def patch_run_status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """A merge patch of status.changes' fields (the only status the reporting step writes)."""
        changes = self.runs[name].setdefault("status", {}).setdefault("changes", {})
        changes.update(status["changes"])


@dataclass
class ForgeSide:
    """A forge as a test sees it: where it is, the reporting token, and what a thread and a commit hold."""

    forge: str
    url: str
    token: str
    repository: str
    comments: Callable[[int], list[dict[str, Any]]]
    statuses: Callable[[str], list[dict[str, Any]]]


@pytest.fixture
def stub() -> Iterator[ForgeThreadsStub]:
    with ForgeThreadsStub(token=TOKEN) as served:
        yield served


def stub_side(stub: ForgeThreadsStub, forge: str) -> ForgeSide:
    return ForgeSide(
        forge,
        stub.base_url,
        TOKEN,
        "acme/app",
        lambda number: stub.comments(forge, "acme/app", number),
        lambda sha: stub.statuses(forge, "acme/app", sha),
    )


def state_of(status: dict[str, Any]) -> str:
    return str(status.get("state") or status.get("status"))


def context_of(status: dict[str, Any]) -> str:
    return str(status.get("context") or status.get("name"))


def trigger(side: ForgeSide, **report: bool) -> dict[str, Any]:
    """HarnessTrigger fixer as stored (its reporting fields matter here)."""
    forge = {
        "type": side.forge,
        "url": side.url,
        "webhookSecretRef": {"name": "hook", "key": "secret"},
        "tokenSecretRef": {"name": "report-token", "key": "token"},
    }
    spec = {
        "forge": forge,
        "repositories": [side.repository],
        "serviceAccountName": "agent-trigger",
        "events": [{"type": "IssueLabeled", "label": "agent"}],
        "authors": {"users": ["alice"]},
        "report": report,
        "runTemplate": {"spec": {"provider": "claude", "prompt": "Fix #$(event.number)"}},
    }
    return {"metadata": {"name": "fixer", "namespace": NS}, "spec": spec}


def triggered_run(
    side: ForgeSide, number: int = 7, kind: str = "issue", **annotations: str
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": NAME,
            "namespace": NS,
            "uid": "uid-1",
            "creationTimestamp": "2020-01-01T00:00:00Z",
            "labels": {"agentharness.dev/trigger": "fixer", "agentharness.dev/forge-thread": str(number)},
            "annotations": {
                "agentharness.dev/forge-repository": side.repository,
                "agentharness.dev/forge-thread-kind": kind,
                "agentharness.dev/author": f"system:serviceaccount:{NS}:agent-trigger",  # the receiver's
                **annotations,
            },
        },
        "status": {"conditions": [{"type": "Succeeded", "status": "Unknown", "reason": "Running"}]},
    }


def finish(run: dict[str, Any], side: ForgeSide, number: int = 12, commit: str = SHA) -> None:
    """The run succeeded and opened pull request `number` with `commit` as its head."""
    run["status"] = {
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}],
        "changes": {
            "commit": commit,
            "branch": "harness/fix",
            "pullRequestURL": f"{side.url}/{side.repository}/pulls/{number}",
        },
        "usage": {"inputTokens": 900, "outputTokens": 100, "costUSD": 0.0421, "costSource": "metered"},
        "output": {"excerpt": "Renamed the function.\n@everyone done\n"},
    }


def setup(side: ForgeSide, delays: tuple[float, ...] = (0.0,)) -> tuple[ApiServer, ForgeReporter]:
    api = ApiServer()
    api.triggers["fixer"] = trigger(side)
    api.secrets[("report-token", "token")] = (
        side.token + "\n"
    )  # as `kubectl create secret --from-file` keeps it
    reporter = ForgeReporter(api, ForgeClient(timeout=2), delays)  # type: ignore[arg-type]
    reporter._leading.set()  # the tests drive report() themselves; test_watch_events leads for real
    return api, reporter


def counted(result: str) -> float:
    return metrics.FORGE_REPORTS.labels(result=result)._value.get()


@pytest.mark.parametrize("forge", ["github", "gitea", "gitlab"])
def test_a_run_is_reported_while_it_works_and_when_it_ends(stub: ForgeThreadsStub, forge: str) -> None:
    side = stub_side(stub, forge)
    api, reporter = setup(side)
    api.runs[NAME] = triggered_run(side)
    before = counted("reported")

    assert reporter.report(NS, NAME) is None
    [comment] = side.comments(7)
    assert comment["body"].startswith(f"<!-- harness-run {NS}/{NAME} uid-1 -->\n")
    assert "is working on it" in comment["body"]
    annotations = api.runs[NAME]["metadata"]["annotations"]
    assert annotations[ANNOTATION_REPORTED] == "working"
    assert annotations[ANNOTATION_COMMENT_ID] == str(comment["id"])
    assert side.statuses(SHA) == []  # an issue's run has no head to mark before its pull request

    calls = len(stub.requests)
    assert reporter.report(NS, NAME) is None  # nothing new to say: the forge is not called
    assert len(stub.requests) == calls

    finish(api.runs[NAME], side)
    assert reporter.report(NS, NAME) is None
    [edited] = side.comments(7)  # the same comment, edited
    assert edited["id"] == comment["id"]
    assert f"Pull request: {side.url}/acme/app/pulls/12" in edited["body"]
    assert "tokens: 1,000 · cost: $0.0421 (metered)" in edited["body"]
    assert "```text\nRenamed the function.\n@everyone done\n```" in edited["body"]
    [status] = side.statuses(SHA)
    assert (state_of(status), context_of(status)) == ("success", "harness/fixer")
    assert status["description"] == f"HarnessRun {NAME} succeeded, $0.0421"
    meta = api.runs[NAME]["metadata"]
    assert meta["labels"][LABEL_PULL_REQUEST] == "12"
    assert meta["annotations"][ANNOTATION_REPORTED] == "finished+pr"
    assert api.events == [] and counted("reported") == before + 2


def test_an_api_server_that_does_not_answer_is_asked_again(stub: ForgeThreadsStub) -> None:
    side = stub_side(stub, "gitea")
    api, reporter = setup(side, delays=(0.5,))
    api.runs[NAME] = triggered_run(side)
    api.triggers["fixer"]["status"] = {
        "lastDelivery": {"result": "created", "later": "a field of a newer receiver"}
    }
    api.unavailable = 1
    assert reporter.report(NS, NAME) == 0.5
    assert stub.requests == []
    assert reporter.report(NS, NAME) is None
    assert len(side.comments(7)) == 1  # the trigger's status is not read: a newer receiver's fields pass


def test_a_pull_requests_run_marks_the_head_the_event_saw(stub: ForgeThreadsStub) -> None:
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    api.runs[NAME] = triggered_run(side, 12, "pull", **{"agentharness.dev/forge-head": HEAD})
    assert reporter.report(NS, NAME) is None
    assert len(side.comments(12)) == 1
    [status] = side.statuses(HEAD)
    assert (state_of(status), context_of(status)) == ("pending", "harness/fixer")


def test_what_the_trigger_does_not_ask_for_is_not_written(stub: ForgeThreadsStub) -> None:
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    api.triggers["fixer"] = trigger(side, comment=False)
    api.runs[NAME] = triggered_run(side)
    finish(api.runs[NAME], side)
    assert reporter.report(NS, NAME) is None
    assert side.comments(7) == [] and len(side.statuses(SHA)) == 1


def test_a_comment_whose_id_was_lost_is_found_not_made_twice(stub: ForgeThreadsStub) -> None:
    """The operator stopped after the forge made the comment, before the run kept its id."""
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    stub.add_comment(
        "gitea", "acme/app", 7, f"<!-- harness-run {NS}/{NAME} uid-1 --> someone else's, with our marker"
    )
    api.runs[NAME] = triggered_run(side)
    assert reporter.report(NS, NAME) is None
    ours = api.runs[NAME]["metadata"]["annotations"][ANNOTATION_COMMENT_ID]
    del api.runs[NAME]["metadata"]["annotations"][ANNOTATION_COMMENT_ID]
    finish(api.runs[NAME], side)
    assert reporter.report(NS, NAME) is None
    comments = side.comments(7)
    assert len(comments) == 2  # theirs, and ours: found again by its marker and its author, edited
    assert comments[1]["id"] == int(ours) and "succeeded" in comments[1]["body"]
    assert "someone else's, with our marker" in comments[0]["body"]  # never taken for the run's


def test_a_token_that_may_not_say_whose_it_is_makes_a_new_comment(stub: ForgeThreadsStub) -> None:
    """Without read:user (Gitea), a marked comment cannot be told the run's from a copy: a new one is made,
    never someone else's edited."""
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    stub.whoami = False
    copy = f"<!-- harness-run {NS}/{NAME} uid-1 --> someone else's"
    stub.add_comment("gitea", "acme/app", 7, copy, author="bot")
    api.runs[NAME] = triggered_run(side)
    assert reporter.report(NS, NAME) is None
    comments = side.comments(7)
    assert [c["body"] == copy for c in comments] == [True, False]
    assert api.runs[NAME]["metadata"]["annotations"][ANNOTATION_COMMENT_ID] == str(comments[1]["id"])


def test_an_unreachable_forge_is_retried_then_given_up_with_events() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # a port nothing listens on
        url = f"http://127.0.0.1:{held.getsockname()[1]}"
        side = ForgeSide("gitea", url, TOKEN, "acme/app", lambda n: [], lambda s: [])
        api, reporter = setup(side, delays=(0.5, 2.0))
        api.runs[NAME] = triggered_run(side)
        retried, failed = counted("retried"), counted("failed")
        assert [reporter.report(NS, NAME) for _ in range(3)] == [0.5, 2.0, None]
    assert [(t, r) for t, r, _ in api.events] == [("Warning", "ForgeReportFailed")] * 2
    first, last = api.events[0][2], api.events[1][2]
    assert first.startswith(f"GET {url}/api/v1/repos/acme/app/issues/7/comments: ") and first.endswith(
        "trying again"
    )
    assert (
        last.startswith("the run's stage working is not reported on the forge: ")
        and "(tried 3 times)" in last
    )
    assert all(TOKEN not in message for _, _, message in api.events)
    assert (counted("retried"), counted("failed")) == (retried + 2, failed + 1)
    assert reporter.report(NS, NAME) is None and len(api.events) == 2  # the stage is given up
    assert ANNOTATION_REPORTED not in api.runs[NAME]["metadata"]["annotations"]


def test_a_refused_token_is_reported_in_the_forges_words(stub: ForgeThreadsStub) -> None:
    side = stub_side(stub, "github")
    api, reporter = setup(side, delays=())
    api.secrets[("report-token", "token")] = "another-token"
    api.runs[NAME] = triggered_run(side)
    assert reporter.report(NS, NAME) is None
    [(_, _, message)] = api.events
    assert (
        "GET /api/v3/repos/acme/app/issues/7/comments: HTTP 401: Bad credentials (tried 1 times)" in message
    )
    assert "another-token" not in message


def test_a_missing_token_secret_is_an_event_that_says_what_to_create(stub: ForgeThreadsStub) -> None:
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    api.secrets.clear()
    api.runs[NAME] = triggered_run(side)
    assert reporter.report(NS, NAME) is None
    [(kind, reason, message)] = api.events
    assert (kind, reason) == ("Warning", "ForgeReportFailed")
    assert (
        "Secret team-a/report-token has no key 'token' (spec.forge.tokenSecretRef of HarnessTrigger fixer)"
        in (message)
    )
    assert stub.requests == []


@pytest.mark.parametrize(
    ("annotations", "why"),
    [
        (
            {"agentharness.dev/author": "system:serviceaccount:team-a:intruder"},
            "its author system:serviceaccount:team-a:intruder is not the trigger's ServiceAccount or its "
            "pipelines'",
        ),
        (
            {"agentharness.dev/forge-repository": "victim/repo"},
            "its repository victim/repo is not one of the trigger's spec.repositories",
        ),
    ],
)
def test_a_run_only_labelled_as_the_triggers_gets_nothing_written_with_its_token(
    stub: ForgeThreadsStub, annotations: dict[str, str], why: str
) -> None:
    """The trigger's labels are anyone's to set: a run someone else made, or one that names another
    repository, must not borrow the trigger's token to write on the forge."""
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    api.runs[NAME] = triggered_run(side, **annotations)
    assert reporter.report(NS, NAME) is None
    assert stub.requests == []
    [(kind, reason, message)] = api.events
    assert (kind, reason) == ("Warning", "ForgeReportFailed")
    assert f"HarnessTrigger fixer reports only its own runs: {why}" in message
    assert ANNOTATION_REPORTED not in api.runs[NAME]["metadata"]["annotations"]


def test_a_trigger_without_a_token_reports_nothing(stub: ForgeThreadsStub) -> None:
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    del api.triggers["fixer"]["spec"]["forge"]["tokenSecretRef"]
    api.runs[NAME] = triggered_run(side)
    assert reporter.report(NS, NAME) is None
    assert stub.requests == [] and api.events == []
    assert api.runs[NAME]["metadata"]["annotations"][ANNOTATION_REPORTED] == "working"


def test_a_redirect_is_not_followed_with_the_token() -> None:
    with ForgeThreadsStub(token=TOKEN) as elsewhere, ForgeThreadsStub(mode="redirect") as forge:
        forge.redirect_to = elsewhere.base_url
        side = stub_side(forge, "gitea")
        api, reporter = setup(side, delays=())
        api.runs[NAME] = triggered_run(side)
        assert reporter.report(NS, NAME) is None
        assert elsewhere.requests == []
        assert "HTTP 302" in api.events[0][2]


def test_watch_events_report_due_runs_once_this_replica_leads(stub: ForgeThreadsStub) -> None:
    side = stub_side(stub, "gitea")
    api, reporter = setup(side)
    reporter._leading.clear()
    api.runs[NAME] = triggered_run(side)
    reporter.store.replace("HarnessRun", None, [api.fetch_run(NS, NAME) or {}])  # the first list: a standby
    assert reporter.store.due() == [(NS, NAME)]
    reporter.changed(reporter.store.apply("HarnessRun", "MODIFIED", api.fetch_run(NS, NAME) or {}))
    time.sleep(0.2)
    assert stub.requests == []  # a standby reports nothing

    reporter.lead()
    wait_for(lambda: api.runs[NAME]["metadata"]["annotations"].get(ANNOTATION_REPORTED) == "working")
    change = reporter.store.apply("HarnessRun", "MODIFIED", api.fetch_run(NS, NAME) or {})
    assert not change.due  # its own patch's event says nothing new

    finish(api.runs[NAME], side)
    reporter.changed(reporter.store.apply("HarnessRun", "MODIFIED", api.fetch_run(NS, NAME) or {}))
    wait_for(lambda: len(side.statuses(SHA)) == 1)
    assert len(side.comments(7)) == 1
    reporter.stop()


def wait_for(predicate: Callable[[], bool], seconds: float = 10) -> None:
    done = threading.Event()
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "not reached in time"
        done.wait(0.02)
