"""The ACP executor against a scripted agent on the SDK's agent side (tests/fakes/acp_agent.py): output
from assistant text only, usage, stop reasons, permissions, cancel, timeout, cost stop, disconnects,
malformed messages, redaction; and the pure permission and stop-reason rules. Each test runs with the
agent as the runner's child and started by a real launcher through its channel (the pod)."""

import base64
import dataclasses
import io
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.unit.runner.launcher_process import spawn, spawn_both_ways  # noqa: F401 (the fixture runs each test twice)
from tests.unit.runner.test_executor import all_gone, wait_for

from harness_operator.api.v1alpha1 import ToolPolicy
from harness_operator.contract.events import Event, decode_events
from harness_operator.contract.plan import AttemptPlan
from harness_operator.runner.acp_rules import (
    OfferedOption,
    PermissionChoice,
    choose_permission,
    is_tool_allowed,
    stop_outcome,
)
from harness_operator.runner.attempt import AttemptResult
from harness_operator.runner.executor import execute
from harness_operator.runner.launch import Launch

AGENT = str(Path(__file__).parents[2] / "fakes" / "acp_agent.py")
BASE_ENV = {"PATH": os.environ["PATH"], "HOME": "/tmp", "LANG": "C.UTF-8"}


def acp_plan(mode: str, prompt: str = "hi there", **fields: Any) -> AttemptPlan:
    env = [{"name": "ACP_MODE", "value": mode}, *fields.pop("env", [])]
    acp = {"prompt": prompt, **fields.pop("acp", {})}
    base = {"attempt": 1, "total_attempts": 2, "provider": "scripted", "binary": sys.executable}
    return AttemptPlan.model_validate(
        {**base, "args": [AGENT, *fields.pop("args", [])], "env": env, "acp": acp, **fields}
    )


class CancelOnLine(io.BytesIO):
    """A stderr sink that sets `cancel` once the agent says it is in its turn."""

    def __init__(self, cancel: threading.Event) -> None:
        super().__init__()
        self.cancel = cancel

    def write(self, data: Any) -> int:
        if b"acp_agent: in the turn" in bytes(data):
            self.cancel.set()
        return super().write(data)


def run(p: AttemptPlan, credentials: dict[str, str] | None = None, **kw: Any) -> tuple[AttemptResult, str]:
    err = kw.pop("stderr", None) or io.BytesIO()
    base_env, spawn_with = kw.pop("base_env", BASE_ENV), kw.pop("spawn_with", spawn)
    result = execute(p, credentials or {}, base_env=base_env, stderr=err, spawn=spawn_with, **kw)
    return result, err.getvalue().decode()


@pytest.mark.parametrize(
    ("policy", "kinds", "expected"),
    [
        (
            "deny",
            ["allow_once", "allow_always", "reject_once", "reject_always"],
            PermissionChoice("reject_once", False),
        ),
        ("deny", ["allow_once", "reject_always"], PermissionChoice("reject_always", False)),
        ("deny", ["allow_once", "allow_always"], PermissionChoice(None, False)),
        ("allow", ["allow_always", "allow_once", "reject_once"], PermissionChoice("allow_once", True)),
        ("allow", ["allow_always", "reject_always"], PermissionChoice("reject_always", False)),
        ("allow", ["allow_always"], PermissionChoice(None, False)),
    ],
)
def test_permission_choice(policy: str, kinds: list[str], expected: PermissionChoice) -> None:
    assert choose_permission(policy, [OfferedOption(k, k) for k in kinds]) == expected


@pytest.mark.parametrize(
    ("tools", "kind", "title", "allowed"),
    [
        ({}, "execute", "Run git status", True),
        ({"shell": False}, "execute", "Run git status", False),
        ({"shell": False}, "read", "Read README.md", True),
        ({"edits": False}, "edit", "Edit main.py", False),
        ({"edits": False}, "delete", "Delete main.py", False),
        ({"edits": False}, "move", "Move main.py", False),
        ({"network": False}, "fetch", "Fetch https://example.invalid", False),
        ({"edits": True, "shell": True, "network": True}, "fetch", "Fetch", True),
        ({"deny": ["Run git status"]}, "execute", "Run git status", False),
        ({"deny": ["execute"]}, "execute", "Run ls", False),
        ({"allow": ["read"]}, "read", "Read a", True),
        ({"allow": ["read"]}, "execute", "Run ls", False),
        ({"allow": ["Run ls"]}, "execute", "Run ls", True),
        ({"allow": ["Run ls"], "shell": False}, "execute", "Run ls", False),  # a false switch wins
        ({"allow": []}, None, "anything", False),
        ({"allow": ["other"]}, None, "anything", False),
        ({}, None, "anything", True),
        ({"shell": False}, None, "anything", False),  # no known kind: it could be a command
        ({"network": False}, "other", "mcp tool", False),
        ({"shell": False}, "read", "Read a", True),
    ],
)
def test_a_tool_policy_answers_acp_permission_requests(
    tools: dict[str, Any], kind: str | None, title: str, allowed: bool
) -> None:
    assert is_tool_allowed(ToolPolicy.model_validate(tools), kind, title) is allowed


@pytest.mark.parametrize(
    ("stop", "reason"),
    [
        ("end_turn", None),
        ("max_tokens", "Truncated"),
        ("max_turn_requests", "MaxTurns"),
        ("refusal", "ProviderError"),
        ("cancelled", "ProviderError"),
        ("something_new", "ProviderError"),
    ],
)
def test_only_end_turn_succeeds(stop: str, reason: str | None) -> None:
    outcome = stop_outcome(stop)
    assert (outcome and outcome[0]) == reason


def test_assistant_text_is_the_output_and_usage_is_recorded() -> None:
    result, err = run(acp_plan("ok"))
    assert result.succeeded, err
    assert result.output == b"answer from acp_agent: hi there"  # not the thought, not the tool call
    usage = result.usage
    assert (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        100,
        50,
        20,
        5,
    )
    assert (usage.cost_usd, usage.cost_source) == (0.0123, "reported")
    doc = result.to_doc()
    assert doc["sessionID"].startswith("scripted-") and doc["cliVersion"] == "9.8.7"
    assert doc["exitCode"] == 0 and "reason" not in doc


def test_every_execution_opens_a_fresh_session() -> None:
    first, _ = run(acp_plan("ok"))
    second, _ = run(acp_plan("ok"))
    assert first.report.session_id != second.report.session_id


def test_with_options_reach_the_adapter_as_flags() -> None:
    result, err = run(acp_plan("argv", args=["--model", "m1", "--verbose"]))
    assert result.succeeded, err
    assert result.output == b"--model m1 --verbose"


@pytest.mark.parametrize(
    ("mode", "policy", "picked", "reason"),
    [
        ("permission", "deny", "no-once", "PermissionDenied"),
        ("permission", "allow", "yes-once", None),
        ("permission-always", "allow", "no-always", "PermissionDenied"),
    ],
)
def test_permission_requests_follow_acp_permission(
    mode: str, policy: str, picked: str, reason: str | None
) -> None:
    result, err = run(acp_plan(mode, acp={"permission": policy}))
    assert f"acp_agent: permission outcome: {picked}\n" in err  # what the agent was answered
    assert result.reason == reason
    if reason is None:
        assert result.output == f"permission outcome: {picked}".encode()
    else:
        assert result.exit_code == 1 and result.fallback_allowed
        assert "denied: Write notes.txt" in err


@pytest.mark.parametrize(
    ("tools", "policy", "picked", "denied"),
    [
        (
            {"edits": False},
            "allow",
            "no-once",
            ("Write notes.txt",),
        ),  # the policy, not acpPermission, answers
        ({"allow": ["Write notes.txt"]}, "deny", "yes-once", ()),
        ({"allow": ["edit"], "deny": ["Write notes.txt"]}, "deny", "no-once", ("Write notes.txt",)),
    ],
)
def test_a_tool_policy_answers_instead_of_acp_permission_and_a_refusal_is_reported_not_fatal(
    tools: dict[str, Any], policy: str, picked: str, denied: tuple[str, ...]
) -> None:
    result, err = run(acp_plan("permission", acp={"permission": policy, "tools": tools}))
    assert f"acp_agent: permission outcome: {picked}\n" in err
    assert (result.exit_code, result.reason) == (0, None)
    assert result.output == f"permission outcome: {picked}".encode()
    assert result.report.denied_tools == denied
    assert result.to_doc().get("deniedTools", []) == list(denied)
    if denied:
        assert "denied: Write notes.txt (spec.tools refuses it)" in err


@pytest.mark.parametrize(
    ("mode", "reason"),
    [("refusal", "ProviderError"), ("max_tokens", "Truncated"), ("max_turn_requests", "MaxTurns")],
)
def test_other_stop_reasons_fail_the_attempt(mode: str, reason: str) -> None:
    result, _ = run(acp_plan(mode))
    assert (result.exit_code, result.reason, result.output) == (1, reason, b"")
    assert result.fallback_allowed


def test_cancel_sends_session_cancel_and_the_turn_ends() -> None:
    cancel = threading.Event()
    result, err = run(
        acp_plan("hang", limits={"gracePeriodSeconds": 30}), cancel=cancel, stderr=CancelOnLine(cancel)
    )
    assert (result.exit_code, result.reason) == (124, "Cancelled")
    assert not result.fallback_allowed
    assert "did not end within" not in err  # the agent ended its turn on session/cancel


def test_timeout_past_the_grace_kills_the_adapter_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pids"
    p = acp_plan(
        "deaf",
        env=[{"name": "ACP_PIDFILE", "value": str(pidfile)}],
        # long enough for the session to open on a loaded machine: a timeout before it has no turn to cancel
        limits={"timeoutSeconds": 8, "gracePeriodSeconds": 1},
    )
    result, err = run(p)
    assert (result.exit_code, result.reason) == (124, "Timeout")
    assert not result.fallback_allowed
    assert "the turn did not end within 1s; closing" in err
    assert all_gone(wait_for(pidfile))


def test_cost_limit_stops_the_turn() -> None:
    result, _ = run(acp_plan("expensive", limits={"maxCostUSD": 1}))
    assert (result.exit_code, result.reason) == (124, "CostLimitExceeded")
    assert result.usage.cost_usd == 5.0 and not result.fallback_allowed


PRICED = {"pricing": {"m": {"input": 100, "output": 100}}, "modelHint": "m"}  # USD per million tokens


def test_computed_cost_is_checked_against_max_cost_when_the_turn_reports_tokens() -> None:
    """ACP tokens arrive with end_turn; at 100 USD per million, 100 in and 50 out cost 0.015 USD."""
    result, err = run(acp_plan("tokens", limits={"maxCostUSD": 0.01}, **PRICED))
    assert (result.exit_code, result.reason) == (124, "CostLimitExceeded"), err
    assert result.usage.cost_source == "computed" and result.usage.cost_usd is not None
    assert result.usage.cost_usd > 0.01 and not result.fallback_allowed
    assert "crossed maxCostUSD 0.01" in err
    under, _ = run(acp_plan("tokens", limits={"maxCostUSD": 1}, **PRICED))
    assert under.succeeded and under.usage.cost_source == "computed"
    assert under.to_doc()["model"] == "m"  # no model from the agent: the one requested


def test_a_disconnect_mid_turn_fails_and_allows_fallback() -> None:
    result, err = run(acp_plan("disconnect"))
    assert (result.exit_code, result.reason, result.output) == (1, "ProviderFailed", b"")
    assert result.fallback_allowed
    assert "closed the connection before the turn ended" in err


def test_a_line_that_is_not_json_rpc_is_skipped_and_said() -> None:
    result, err = run(acp_plan("malformed"))
    assert result.succeeded and result.output == b"answer from acp_agent: hi there"
    assert err.count("skipped a line from the agent that is not JSON-RPC") == 1
    assert "this is not json" not in err


def test_an_answer_that_is_not_acp_fails() -> None:
    result, err = run(acp_plan("invalid-answer"))
    assert (result.exit_code, result.reason) == (1, "ProviderError")
    assert "notAStopReason" not in err + result.message


def test_secrets_are_redacted_from_output_and_stderr() -> None:
    p = acp_plan("secret", credential_envs=["FAKE_TOKEN"])
    result, err = run(p, {"FAKE_TOKEN": "s3cr3t-value"})
    assert result.succeeded
    assert b"s3cr3t-value" not in result.output and b"the token is" in result.output
    assert "s3cr3t-value" not in err and "stderr has" in err


def test_an_mcp_servers_header_secret_is_its_gates_and_not_the_agents() -> None:
    gated = {
        "name": "docs",
        "gate_args": ["--tool=echo", "--url", "http://127.0.0.1:9/mcp"],
        "env": ["FAKE_TOKEN"],
    }
    p = acp_plan("secret", credential_envs=["FAKE_TOKEN"], acp={"mcp_servers": [gated]})
    result, _ = run(p, {"FAKE_TOKEN": "s3cr3t-value"})
    assert result.succeeded
    assert result.output == b"the token is "  # unset in the agent's environment: not merely redacted
    mine = acp_plan("secret", credential_envs=["FAKE_TOKEN"])
    result, _ = run(mine, {"FAKE_TOKEN": "s3cr3t-value"})
    assert result.output != b"the token is "  # a grant no gate reads stays the agent's (redacted here)


def test_a_missing_adapter_is_binary_not_found() -> None:
    p = acp_plan("ok").model_copy(update={"binary": "no-such-acp-adapter", "args": []})
    result, err = run(p)
    assert (result.exit_code, result.reason) == (1, "BinaryNotFound")
    assert "no-such-acp-adapter" in err


def test_an_acp_run_emits_the_same_events_as_a_cli_run() -> None:
    seen: list[Event] = []
    result, err = run(acp_plan("ok"), on_event=seen.append, events_to_log=True)
    assert result.succeeded, err
    shown = [
        (e.kind, e.tool or e.text, e.tokens, e.cost_usd, e.last_tool) for e in seen if e.kind != "session"
    ]
    assert shown == [
        ("attempt", None, None, None, None),
        ("tool", "Read file", None, None, None),
        ("progress", None, None, 0.0123, "Read file"),  # the usage_update
        ("text", "answer from acp_agent: hi there", None, None, None),  # at the turn's end, whole
        ("progress", None, 175, 0.0123, "Read file"),  # the prompt's usage
        ("result", None, 175, 0.0123, None),
    ]
    assert [e.session for e in seen if e.kind == "session"] == [result.report.session_id]
    assert decode_events(err.splitlines()) == seen  # the pod log carries the same events


def test_an_acp_attempt_that_cannot_start_still_ends_with_a_result_event() -> None:
    seen: list[Event] = []
    p = acp_plan("ok").model_copy(update={"binary": "no-such-acp-adapter", "args": []})
    run(p, on_event=seen.append)
    assert [(e.kind, e.reason) for e in seen] == [("attempt", None), ("result", "BinaryNotFound")]


def test_a_permission_request_without_its_kind_takes_it_from_the_calls_update() -> None:
    """Claude's adapter names a call's kind only in its tool_call update, not in the request."""
    result, err = run(acp_plan("permission-kindless", acp={"permission": "allow", "tools": {"shell": False}}))
    assert "acp_agent: permission outcome: no-once\n" in err
    assert result.report.denied_tools == ("Run printf",)
    result, err = run(acp_plan("permission-kindless", acp={"permission": "deny", "tools": {"edits": False}}))
    assert "acp_agent: permission outcome: yes-once\n" in err  # an execute call: edits: false allows it


def test_a_continuing_attempt_loads_the_earlier_session_from_its_restored_files(tmp_path: Path) -> None:
    """The first attempt's session files are kept; a later one, in a fresh home given only that archive,
    continues the session with session/load, and the replay of the earlier turn is not its output."""
    fields = {"session_paths": [".acp-agent"]}
    first, err = run(acp_plan("session", "PROMPT-ONE", **fields), base_env=home_env(tmp_path / "home-1"))
    assert first.succeeded, err
    assert first.output == b"answer from acp_agent: PROMPT-ONE; earlier: none"
    session_id = first.report.session_id
    assert session_id and first.session is not None
    restored = base64.b64encode(first.session).decode()

    def with_session(launch: Launch) -> Any:
        return spawn(dataclasses.replace(launch, session=restored))

    later = acp_plan("session", "PROMPT-TWO", acp={"load_session": session_id}, **fields)
    second, err = run(later, base_env=home_env(tmp_path / "home-2"), spawn_with=with_session)
    assert second.succeeded, err
    assert second.output == b"answer from acp_agent: PROMPT-TWO; earlier: PROMPT-ONE"  # no replayed text
    assert second.report.session_id == session_id
    assert second.session is not None and second.session != first.session  # it holds both turns now


def test_a_continuing_attempt_fails_clearly_when_the_agent_cannot_load_a_session(tmp_path: Path) -> None:
    p = acp_plan("ok", acp={"load_session": "s-1"})
    result, _err = run(p, base_env=home_env(tmp_path / "home"))
    assert result.reason == "ProviderFailed" and not result.succeeded
    assert "does not offer session/load" in result.message and "capabilities.sessionResume" in result.message


def test_a_session_the_agent_does_not_have_fails_the_attempt(tmp_path: Path) -> None:
    result, _err = run(acp_plan("session", acp={"load_session": "gone"}), base_env=home_env(tmp_path / "h"))
    assert not result.succeeded and result.reason == "ProviderFailed"
    assert "could not load the earlier session gone: Invalid params" in result.message
    assert "no session gone" in result.message


def home_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True)
    return {**BASE_ENV, "HOME": str(home)}
