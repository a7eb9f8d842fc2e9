"""receiver/checks.py through the receiver's HTTP server on loopback (real aiohttp, real signatures): a
verified delivery saying a commit's checks changed marks the trigger's runs that pushed the commit, and
nothing else does. The API server is test_server's in-memory stand-in, with the merge patch of a run's
annotations (only while its uid matches) the real one applies; the real Gitea's deliveries reach the
receiver in tests/forge/test_checks_gitea.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException
from tests.lib.forge_deliveries import status_changed
from tests.unit.receiver.test_server import NS, TRIGGER, Served, _serve
from tests.unit.receiver.test_server import ApiServer as BaseApiServer

from harness_operator.core.forge.checks import ANNOTATION_CHECKS_CHANGED
from harness_operator.core.forge.events import delivery_key

SHA, OTHER = "c" * 40, "d" * 40


@dataclass
class ApiServer(BaseApiServer):
    patched: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    patch_refused: ApiException | None = None

    def patch_run_annotations(self, namespace: str, name: str, uid: str, annotations: dict[str, str]) -> None:
        self.calls.append(f"patch run {name}")
        if self.patch_refused is not None:
            raise self.patch_refused
        run = self.runs.get(name)
        if run is None or run["metadata"]["uid"] != uid:
            return
        run["metadata"].setdefault("annotations", {}).update(annotations)
        self.patched.append((name, annotations))


def pushed(name: str, commit: str, repository: str = "acme/payments") -> dict[str, Any]:
    """A finished run of the trigger that pushed `commit` and opened a pull request."""
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "labels": {"agentharness.dev/trigger": TRIGGER, "agentharness.dev/pull-request": "12"},
            "annotations": {"agentharness.dev/forge-repository": repository},
        },
        "status": {
            "conditions": [{"type": "Succeeded", "status": "True"}],
            "changes": {"commit": commit, "pullRequestURL": "http://gitea.test:3000/acme/payments/pulls/12"},
        },
    }


def serve(test: Any, api: ApiServer) -> None:
    async def run() -> None:
        async for s in _serve(api):
            await test(s)

    asyncio.run(run())


def with_runs() -> ApiServer:
    api = ApiServer()
    api.runs = {
        "fix-12-aaa": pushed("fix-12-aaa", SHA),
        "fix-12-bbb": pushed("fix-12-bbb", OTHER),  # the pull request's earlier commit
        "elsewhere": pushed("elsewhere", SHA, "acme/other"),
    }
    return api


def test_a_status_of_any_state_marks_the_runs_that_pushed_its_commit_and_says_so() -> None:
    api = with_runs()

    async def test(s: Served) -> None:
        body = status_changed(SHA, "success", "ci/tests")
        status, answer = await s.deliver(body, event="status")
        assert (status, answer["result"]) == (200, "ignored")  # a passing check starts no run
        assert answer["reason"].endswith("; the checks of run fix-12-aaa will be read again")
        nudge = f"{SHA}@{delivery_key(body)[:12]}"
        assert api.patched == [("fix-12-aaa", {ANNOTATION_CHECKS_CHANGED: nudge})]
        assert f"list runs agentharness.dev/trigger={TRIGGER}" in api.calls
        assert api.events[-1][2] == answer["reason"]  # the trigger's Event says it too

        # A failed check marks it too (and, this trigger not following failed checks, starts nothing).
        status, answer = await s.deliver(status_changed(SHA, "failure", "ci/tests"), event="status")
        assert answer["result"] == "ignored" and len(api.patched) == 2
        assert not api.created_as

        # The same delivery again: the run holds its mark, nothing is patched.
        await s.deliver(status_changed(SHA, "failure", "ci/tests"), event="status")
        assert len(api.patched) == 2

    serve(test, api)


def test_the_harness_own_status_a_forged_one_and_other_events_mark_nothing() -> None:
    api = with_runs()

    async def test(s: Served) -> None:
        await s.deliver(status_changed(SHA, "success", "harness/payments-agent"), event="status")
        await s.deliver(status_changed(SHA, "failure", "ci/tests"), event="status", secret=b"guessed")
        other = {"full_name": "acme/other", "html_url": "http://gitea.test:3000/acme/other"}
        await s.deliver(status_changed(SHA, "failure", "ci/tests", other), event="status")
        await s.deliver(status_changed("e" * 40, "failure", "ci/tests"), event="status")
        assert api.patched == []
        assert not [c for c in api.calls if c.startswith("patch")]

    serve(test, api)


def test_a_mark_the_api_server_refuses_is_logged_and_the_delivery_still_answered() -> None:
    api = with_runs()
    api.patch_refused = ApiException(status=403, reason="Forbidden")

    async def test(s: Served) -> None:
        status, answer = await s.deliver(status_changed(SHA, "success", "ci/tests"), event="status")
        assert (status, answer["result"]) == (200, "ignored")
        assert "will be read again" not in answer["reason"]
        assert "patch run fix-12-aaa" in api.calls

    serve(test, api)
