"""spec.tools on the cluster: the real Claude Code in its catalog image meets a model that asks for a shell
command the run's policy denies; the command does not run and the run says so. A strict policy no
provider of the chain can hold refuses the run before any Job."""

from __future__ import annotations

from tests.stubs.anthropic import AnthropicStub

from .conftest import STUB_HOST, Runs, wait_until
from .test_agents import ROUTES, agent_run

# Run, its output would hold HARNESS-RAN-42; the command's text holds no 42.
COMMAND = "echo HARNESS-RAN-$((6*7))"


def test_a_denied_shell_command_does_not_run_and_the_run_says_so(runs: Runs) -> None:
    model = AnthropicStub(mode="bash", host=STUB_HOST, command=COMMAND, force_bash=True).start()
    try:
        spec = agent_run(runs, "claude", ROUTES["claude"](model.base_url), model.port, tools={"shell": False})
        runs.create("no-shell", spec)
        status = runs.wait_finished("no-shell")
        calls = [c.body for c in model.model_calls()]
    finally:
        model.stop()
    assert status["reason"] == "Succeeded", runs.describe("no-shell")
    assert status["attempts"][0]["deniedTools"] == ["Bash"]
    assert calls and not any("Bash" in {t.get("name") for t in c.get("tools") or []} for c in calls)
    results = [
        block
        for message in calls[-1]["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(results) == 1 and results[0]["is_error"], results
    assert "No such tool available: Bash" in str(results[0]["content"])
    assert not any("HARNESS-RAN-42" in str(c) for c in calls)
    denied = wait_until(
        lambda: [e for e in runs.events("no-shell") if e[1] == "ToolDenied"] or None, 60, "a ToolDenied Event"
    )
    assert denied[0][0] == "Warning" and "asked for Bash" in denied[0][2]


def test_a_strict_policy_a_fallback_cannot_hold_refuses_the_run_before_any_job(runs: Runs) -> None:
    spec = {
        "provider": "claude",
        "prompt": "Say hello.",
        "fallback": [{"provider": "aider"}],
        "tools": {"edits": False},
    }
    runs.create("strict-tools", spec)
    status = runs.wait_reason("strict-tools", "ToolPolicyUnenforceable")
    accepted = runs.condition("strict-tools", "Accepted")
    assert accepted is not None and accepted["status"] == "False"
    assert 'provider "aider" cannot enforce spec.tools.edits: false' in status["message"]
    assert runs.jobs("strict-tools") == []
