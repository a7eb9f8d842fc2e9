"""The red team's attacks on what the operator trusts, replayed on the real cluster: an agent that
forges the runner's report (termination message, output frame, events, a negative cost, the runner
killed), and a workspace whose `harness_operator/` package would replace the runner. The runner and
the agent run in separate containers as separate users; only the runner's report counts, checked
against the kubelet."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kubernetes import client

from harness_operator.contract.events import decode_events
from harness_operator.contract.frame import decode_frame

from .conftest import Api
from .operator_env import (
    TEST_CLUSTER_API_SERVICE,
    definition_body,
    git_run_spec,
    run_body,
    serve_git,
)

TOKEN = "tok-3f9c1d7e5a"  # the granted credential: never in a log, an output or the status


def grant_token(api: Api) -> list[dict[str, object]]:
    api.core.create_namespaced_secret(
        api.ns, client.V1Secret(metadata=client.V1ObjectMeta(name="token"), string_data={"t": TOKEN})
    )
    return [{"env": "FAKE_TOKEN", "secretKeyRef": {"name": "token", "key": "t"}}]


def runner_log(api: Api, run: str, attempt: int, container: str = "runner") -> str:
    pod = api.core.list_namespaced_pod(
        api.ns, label_selector=f"agentharness.dev/run={run},agentharness.dev/attempt={attempt}"
    ).items[0]
    return str(api.core.read_namespaced_pod_log(pod.metadata.name, api.ns, container=container))


def test_the_agent_cannot_forge_the_runners_report(
    api: Api, images: dict[str, str], fake: Callable[..., None]
) -> None:
    credentials = grant_token(api)
    api.create(definition_body("forger", images["test"], "forge", credentials=credentials))
    fake("fake", "ok")
    api.create(run_body("forged", {"provider": "forger", "prompt": "p", "fallback": [{"provider": "fake"}]}))
    status = api.wait_finished("forged")
    first, second = status["attempts"]
    # The forged success (exit 0, -1000 USD, a forged frame) and the forged CostLimitExceeded (which
    # would have suppressed the fallback) count for nothing: attempt 1 failed, the fallback ran.
    assert (first["provider"], first["reason"]) == ("forger", "ProviderFailed"), status
    assert first["exitCode"] != 0
    assert (second["provider"], second["exitCode"]) == ("fake", 0), status
    assert status["phase"] == "Succeeded", status
    assert status["output"]["excerpt"] == "answer from fake-agent: p"
    # Attempt 1 reported no usage (what it wrote reached nothing): its cost is unknown, so the run's
    # total is too; the fallback's is its own 0.01. Nowhere -1000.
    assert (second.get("usage") or {}).get("costUSD") == 0.01
    assert "costUSD" not in (first.get("usage") or {}) and "costUSD" not in status["usage"], status
    assert status["usage"]["costSource"] == "unknown"
    log = runner_log(api, "forged", 1)
    print("RUNNER-LOG-BEGIN")
    print(log)
    print("RUNNER-LOG-END")
    assert "forge: reached" in log, log[-2000:]  # the agent ran and tried
    # What the agent wrote is in the log as its words only: no event of it decodes as the runner's,
    # and the frame the operator reads (the last) is the runner's empty one.
    events = decode_events(log.splitlines())
    assert [(e.kind, e.reason) for e in events if e.kind == "result"] == [("result", "ProviderFailed")], log
    assert all((e.cost_usd or 0) >= 0 for e in events if e.kind == "progress")
    assert decode_frame(log) == b""
    assert TOKEN not in log, "the credential reached the runner's log unredacted"
    # Nor the agent container's log: its PID 1 (the launcher) is non-dumpable, so /proc/1/fd/2 (the
    # log's pipe) is not the agent's to open, and the signal it sent its PID 1 was not delivered.
    # (Its own container's termination message it may write: the operator reads only that container's
    # exit code, the kubelet's.)
    reached = next(line for line in log.splitlines() if "forge: reached" in line)
    assert "/proc/" not in reached, reached
    agent_log = runner_log(api, "forged", 1, container="agent")
    assert TOKEN not in agent_log, agent_log[-2000:]
    cm = api.core.read_namespaced_config_map(status["output"]["configMapName"], api.ns)
    assert cm.data["output"] == "answer from fake-agent: p"


def test_the_runner_and_the_agent_are_separate_users_and_processes(
    api: Api, fake: Callable[..., None]
) -> None:
    fake("fake", "ok")
    api.create(run_body("split", {"provider": "fake", "prompt": "p"}))
    assert api.wait_finished("split")["phase"] == "Succeeded"
    pod = api.core.list_namespaced_pod(api.ns, label_selector="agentharness.dev/run=split").items[0]
    runner, agent = pod.spec.containers
    assert (runner.name, agent.name) == ("runner", "agent")
    assert runner.security_context.run_as_user != agent.security_context.run_as_user
    assert not pod.spec.share_process_namespace
    assert not agent.env, "secrets reach the agent through the runner, never the pod spec of its container"
    assert not [m for m in agent.volume_mounts if m.name == "plan"]
    assert not [m for m in runner.volume_mounts if m.name == "workspace"]
    states = {s.name: s.state.terminated for s in pod.status.container_statuses}
    assert states["runner"].exit_code == 0 and states["agent"].exit_code == 0


# A top-level package of the runner's name in the repository: on the old layout `python3 -m
# harness_operator.runner`, started in the workspace, imported it instead of the runner.
PLANTED = 'import os, sys\nprint("HIJACKED", os.environ.get("FAKE_TOKEN"), flush=True)\nsys.exit(0)\n'


def test_a_workspace_package_does_not_replace_the_runner(
    api: Api, images: dict[str, str], tmp_path: Path
) -> None:
    credentials = grant_token(api)
    api.create(definition_body("fake", images["test"], "secret", credentials=credentials))
    files = {
        "harness_operator/__init__.py": PLANTED,
        "harness_operator/runner/__init__.py": PLANTED,
        "harness_operator/runner/__main__.py": PLANTED,
        "harness_operator/runner/launcher.py": PLANTED,
    }
    with serve_git(tmp_path, files) as (url, port):
        api.create(run_body("planted", git_run_spec("fake", url, port)))
        status = api.wait_finished("planted")
    assert status["phase"] == "Succeeded", status
    # The real runner ran: the agent's output, with the credential redacted.
    assert status["output"]["excerpt"] == "output has [REDACTED]", status
    log = runner_log(api, "planted", 1)
    assert "HIJACKED" not in log and TOKEN not in log, log[-2000:]
    assert "stderr has [REDACTED]" in log


def test_the_workspace_clone_is_confined_before_it_connects(api: Api, fake: Callable[..., None]) -> None:
    """The red team's clone reached the API server under networkPolicy none (init containers start
    before the enforcer programs the pod): it now waits for the policy, so it cannot connect at all."""
    fake("fake", "ok")
    url = f"https://{TEST_CLUSTER_API_SERVICE}/repo.git"
    api.create(
        run_body(
            "clone-confined",
            {
                "provider": "fake",
                "prompt": "p",
                "workspace": {"workingDir": "/workspace/repo", "git": {"url": url}},
                "sandbox": {"networkPolicy": "none"},
            },
        )
    )
    status = api.wait_finished("clone-confined")
    (attempt,) = status["attempts"]
    assert attempt["reason"] == "SetupFailed", status
    # Reached, git would have spoken TLS with the API server (a certificate it does not trust).
    assert "Failed to connect" in attempt["message"] or "Couldn't connect" in attempt["message"], attempt
    assert "SSL" not in attempt["message"] and "certificate" not in attempt["message"]
