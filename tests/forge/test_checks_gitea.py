"""A pull request's checks in status.changes.checks, against a real Gitea: a CI (a user of its own, with its
own token) sets commit statuses on the head a run pushed, as a CI does through Gitea's API; Gitea delivers
each `status` event to the real receiver (receiver/server.py, served here on loopback), which marks the run;
the real reporting step (controller/forge_reports.py) then reads the commit's statuses from Gitea with the
trigger's token and writes status.changes.checks. The harness's own status (harness/<trigger>, which the
reporting step sets on the same commit) is on Gitea and is not counted. The API server is the unit tests'
in-memory stand-ins, sharing one set of runs (the receiver's marks and the reporter's writes meet there)."""

from __future__ import annotations

import asyncio
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web

from harness_operator.controller.forge_reports import ForgeReporter
from harness_operator.core.forge.checks import ANNOTATION_CHECKS_CHANGED, ANNOTATION_CHECKS_READ
from harness_operator.receiver.server import Receiver, build_apps
from tests.lib.gitea import Gitea, User
from tests.unit.controller.test_forge_reports import NAME, NS, ForgeSide, finish, setup, triggered_run
from tests.unit.controller.test_forge_reports import trigger as trigger_of
from tests.unit.receiver.test_checks import ApiServer as ReceiverApi

SECRET = ("webhook-" + secrets.token_hex(8)).encode()


@dataclass
class ReceiverSide(ReceiverApi):
    """The receiver's API server: the reporter's trigger (named fixer, as its runs' label says)."""

    trigger: dict[str, Any] | None = None

    def fetch_trigger(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(f"get trigger {namespace}/{name}")
        return self.trigger if (namespace, name) == (NS, "fixer") else None


class Served:
    """The real receiver's hooks app on a loopback port, in a thread of its own (Gitea delivers to it)."""

    def __init__(self, api: ReceiverSide) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        hooks, _ = build_apps(Receiver(kube=api))  # type: ignore[arg-type]
        self.runner = web.AppRunner(hooks, access_log=None)
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.runner.setup())
            self.loop.run_until_complete(web.TCPSite(self.runner, "127.0.0.1", self.port).start())
            started.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        assert started.wait(10)
        self.url = f"http://127.0.0.1:{self.port}/hooks/{NS}/fixer"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def loop_parts(
    gitea: Gitea, owner: User
) -> Iterator[tuple[Gitea, ForgeSide, ReceiverSide, ForgeReporter, str]]:
    """owner/widgets with pull request harness/fix-1 (its head the run's commit), a webhook of `status`
    events to the receiver, the reporter with a token of the trigger's, and a finished run of the PR."""
    gitea.create_repo(owner.name, "widgets", {"README.md": "hello\n"})
    repository = f"{owner.name}/widgets"
    me = gitea.as_user(owner.name)
    issue = int(me.create_issue(repository, "Greet the world")["number"])
    head = me.update_file(
        repository, "README.md", "hello, world\n", "main", "Greet", new_branch="harness/fix-1"
    )
    pull = int(me.create_pull_request(repository, "harness/fix-1", "main", "Greet")["number"])
    token = gitea.create_token(owner, ["write:issue", "write:repository"])
    side = ForgeSide(
        "gitea",
        gitea.base_url,
        token,
        repository,
        lambda number: gitea.comments(repository, number),
        lambda sha: gitea.statuses(repository, sha),
    )
    api, reporter = setup(side)
    receiver_api = ReceiverSide(secret=SECRET)
    receiver_api.trigger = {**trigger_of(side), "metadata": {"name": "fixer", "namespace": NS, "uid": "t-1"}}
    receiver_api.runs = api.runs  # one API server: the receiver's marks are the reporter's to read
    served = Served(receiver_api)
    gitea.create_webhook(repository, served.url, SECRET.decode(), ["status"])
    api.runs[NAME] = triggered_run(side, issue)
    api.runs[NAME]["metadata"]["labels"]["agentharness.dev/pull-request"] = str(pull)
    finish(api.runs[NAME], side, pull, head)
    try:
        yield gitea, side, receiver_api, reporter, head
    finally:
        served.close()


def wait_for(what: str, predicate: Callable[[], bool], seconds: float = 30) -> None:
    """Gitea delivers webhooks from a queue: wait for the delivery's effect."""
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {seconds}s"
        time.sleep(0.2)


def test_a_cis_statuses_on_the_runs_head_reach_status_changes_checks(
    loop_parts: tuple[Gitea, ForgeSide, ReceiverSide, ForgeReporter, str],
) -> None:
    gitea, side, api, reporter, head = loop_parts
    run = api.runs[NAME]
    annotations = run["metadata"]["annotations"]

    # The run's end: reported (its own status harness/fixer set on the head), its checks read once.
    assert reporter.report(NS, NAME) is None
    assert [s["context"] for s in gitea.statuses(side.repository, head)] == ["harness/fixer"]
    checks = run["status"]["changes"]["checks"]
    assert (checks["state"], checks["sha"], checks["total"]) == ("none", head, 0)
    assert annotations[ANNOTATION_CHECKS_READ] == head
    # Gitea's own delivery of the harness's status marks nothing (it is not one of the checks).
    time.sleep(2)
    assert ANNOTATION_CHECKS_CHANGED not in annotations

    # A CI with a token of its own (a collaborator's) says the tests run.
    ci = gitea.create_user(f"ci-{secrets.token_hex(4)}")
    gitea.add_collaborator(side.repository, ci.name)
    as_ci = Gitea(gitea.base_url, gitea.create_token(ci, ["write:repository"]))
    as_ci.set_status(side.repository, head, "pending", "ci/tests", "running")
    wait_for("the receiver's mark", lambda: ANNOTATION_CHECKS_CHANGED in annotations)
    mark = annotations[ANNOTATION_CHECKS_CHANGED]
    assert mark.startswith(f"{head}@")
    assert reporter.store.apply("HarnessRun", "MODIFIED", run).due
    assert reporter.report(NS, NAME) is None
    checks = run["status"]["changes"]["checks"]
    assert (checks["state"], checks["total"], checks["pending"]) == ("pending", 1, 1)
    assert annotations[ANNOTATION_CHECKS_READ] == mark

    # Lint passes, the tests fail: each delivery marks the run again; Gitea's latest status per context.
    as_ci.set_status(side.repository, head, "success", "ci/lint", "clean")
    as_ci.set_status(side.repository, head, "failure", "ci/tests", "2 tests failed")
    wait_for(
        "the failure read",
        lambda: (
            reporter.report(NS, NAME) is None and run["status"]["changes"]["checks"]["state"] == "failure"
        ),
    )
    checks = run["status"]["changes"]["checks"]
    assert (checks["total"], checks["passed"], checks["failed"], checks["pending"]) == (2, 1, 1, 0)
    assert checks["sha"] == head
    assert gitea.combined_status(side.repository, head)["state"] == "failure"  # Gitea says the same

    # Fixed: success, with the harness's own status still on Gitea and still not counted.
    as_ci.set_status(side.repository, head, "success", "ci/tests", "all passed")
    wait_for(
        "the success read",
        lambda: (
            reporter.report(NS, NAME) is None and run["status"]["changes"]["checks"]["state"] == "success"
        ),
    )
    assert run["status"]["changes"]["checks"]["total"] == 2
    assert "harness/fixer" in {s["context"] for s in gitea.statuses(side.repository, head)}
    assert api.events[-1][1] == "DeliveryIgnored" and "will be read again" in api.events[-1][2]
    assert not api.created_as  # a status starts no run here (the trigger does not follow failed checks)
