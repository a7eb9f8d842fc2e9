"""Output parsers on fixtures: real Claude Code captures, hand-made shapes for the other CLIs."""

import json
from pathlib import Path

import pytest

from harness_operator.contract.usage import Tokens
from harness_operator.runner.parsers import (
    PARSERS,
    Failure,
    Report,
    build_parser,
    classify_error,
    parse_text,
)
from harness_operator.runner.parsers.codex import CodexJsonlParser

REAL = Path(__file__).parents[2] / "fixtures" / "cli"
HAND = Path(__file__).parents[2] / "fixtures" / "parsers"


def parse(folder: Path, fmt: str, case: str) -> Report:
    return parse_text(fmt, (folder / f"{case}.stdout").read_text(encoding="utf-8"))


# --- claude-stream-json: real captures of Claude Code 2.1.332 against the Anthropic stub ------------


def test_claude_success_reads_the_result_line():
    report = parse(REAL / "claude", "claude-stream-json", "success")
    assert report.text == "Hello from the Anthropic stub."
    assert report.session_id == "6415bd40-bfa3-46a3-be9a-3e5fecefecfb"
    assert report.model == "claude-opus-5-5"
    assert report.tokens == Tokens(input=1234, output=56, cache_read=100, cache_write=10)
    assert report.turns == 1
    assert report.cost_usd == pytest.approx(0.006126)
    assert report.failure is None
    assert report.finished
    assert report.cli_version == "2.1.332"


def test_claude_max_turns_is_a_typed_failure():
    report = parse(REAL / "claude", "claude-stream-json", "max_turns")
    assert report.failure == Failure.max_turns
    assert report.message == "Reached maximum number of turns (1)"
    assert report.turns == 2


def test_claude_401_says_success_but_is_an_auth_failure():
    report = parse(REAL / "claude", "claude-stream-json", "unauthorized")
    assert report.failure == Failure.auth_failed
    assert report.text == "Invalid API key · Fix external API key"


def test_claude_api_timeout_is_a_provider_error():
    report = parse(REAL / "claude", "claude-stream-json", "api_timeout")
    assert report.failure == Failure.provider_error
    assert report.message is not None and report.message.startswith("Request timed out")


def test_claude_assistant_usage_snapshots_are_not_summed():
    # The success capture's assistant line carries usage too; only the result line's figures count.
    text = (REAL / "claude" / "success.stdout").read_text(encoding="utf-8")
    doubled = text + text.splitlines()[1] + "\n"  # one more assistant snapshot after the result
    report = parse_text("claude-stream-json", doubled)
    assert report.tokens.input == 1234


def test_claude_streaming_knows_the_session_before_the_result():
    parser = build_parser("claude-stream-json")
    lines = (REAL / "claude" / "success.stdout").read_text(encoding="utf-8").splitlines()
    parser.feed(lines[0])
    snapshot = parser.report()
    assert snapshot.session_id == "6415bd40-bfa3-46a3-be9a-3e5fecefecfb"
    assert not snapshot.finished


def test_claude_json_schema_ends_on_its_accepted_structured_output_call():
    report = parse(REAL / "claude", "claude-stream-json", "json_schema")
    assert report.failure is None and report.finished
    assert report.text == '{"verdict":"approve"}'


def test_claude_names_a_tool_its_policy_removed_that_the_model_called():
    report = parse(REAL / "claude", "claude-stream-json", "tool_removed")
    assert report.denied_tools == ("Bash",)
    assert report.failure is None and report.finished


def test_claude_names_a_tool_call_it_refused_in_dont_ask_mode():
    report = parse(REAL / "claude", "claude-stream-json", "tool_refused")
    assert report.denied_tools == ("Bash",)
    assert parse(REAL / "claude", "claude-stream-json", "success").denied_tools == ()


def test_claude_max_tokens_is_truncated():
    report = parse(HAND / "claude-stream-json", "claude-stream-json", "max_tokens")
    assert report.failure == Failure.truncated


def test_qwen_stream_json_has_no_cost():
    report = parse(HAND / "claude-stream-json", "claude-stream-json", "qwen_success")
    assert report.text == "Done."
    assert report.model == "qwen3-coder-plus"
    assert report.cost_usd is None
    assert report.tokens.input == 1500
    assert report.tokens.cache_write is None


def test_claude_without_a_result_line_is_not_finished():
    report = parse_text("claude-stream-json", '{"type":"system","subtype":"init","session_id":"s"}\n')
    assert not report.finished
    assert report.failure is None  # the executor decides: exit 0 without a result fails honestly


# --- codex-jsonl ---------------------------------------------------------------------------------------


def test_codex_last_agent_message_and_split_cached_tokens():
    report = parse(HAND / "codex-jsonl", "codex-jsonl", "success")
    assert report.text == "The tests pass now."
    assert report.session_id == "0199a213-81c0-7800-8aa1-bbab2a035a53"
    assert report.tokens == Tokens(input=315, output=122, cache_read=24448)
    assert report.cost_usd is None
    assert report.failure is None


def test_codex_error_items_are_warnings():
    parser = CodexJsonlParser()
    for line in (HAND / "codex-jsonl" / "success.stdout").read_text().splitlines():
        parser.feed(line)
    assert parser.warnings == ["model reasoning summary unavailable"]
    assert parser.finish("").failure is None


def test_codex_resumed_thread_subtracts_the_previous_total():
    parser = CodexJsonlParser(baseline=Tokens(input=315, output=122, cache_read=24448))
    for line in (HAND / "codex-jsonl" / "resumed.stdout").read_text().splitlines():
        parser.feed(line)
    assert parser.finish("").tokens == Tokens(input=5000 - 315, output=200 - 122, cache_read=25000 - 24448)


def test_codex_turn_failed_is_classified():
    report = parse(HAND / "codex-jsonl", "codex-jsonl", "turn_failed")
    assert report.failure == Failure.auth_failed
    assert report.message is not None and "401" in report.message


# --- gemini-json ---------------------------------------------------------------------------------------


def test_gemini_success():
    report = parse(HAND / "gemini-json", "gemini-json", "success")
    assert report.text == "Fixed the test."
    assert report.session_id == "c25acda3-b4c5-4a6f-8b7e-1f2a3b4c5d6e"
    assert report.model == "gemini-2.5-pro"
    assert report.tokens == Tokens(input=1000, output=300, cache_read=200)
    assert report.turns == 2
    assert report.cost_usd is None
    assert report.failure is None


def test_gemini_status_error_is_classified():
    report = parse(HAND / "gemini-json", "gemini-json", "error")
    assert report.failure == Failure.rate_limited
    assert report.message is not None and "Quota exceeded" in report.message


@pytest.mark.parametrize(
    ("status", "message", "expected"),
    [
        (529, "Overloaded", Failure.provider_unavailable),
        (503, None, Failure.provider_unavailable),
        (500, "Internal server error", Failure.provider_unavailable),
        (None, 'API Error: 529 {"type":"overloaded_error"}', Failure.provider_unavailable),
        (None, "503 Service Unavailable", Failure.provider_unavailable),
        (429, None, Failure.rate_limited),
        (401, "overloaded", Failure.auth_failed),
        (400, "invalid_request_error", Failure.provider_error),
        (None, "model not found", Failure.provider_error),
    ],
)
def test_an_overloaded_or_unavailable_vendor_is_told_apart(
    status: int | None, message: str | None, expected: Failure
) -> None:
    assert classify_error(status, message) == expected


# --- opencode-jsonl, pi-jsonl, copilot-json, aider-text, text -------------------------------------------


def test_opencode_sums_steps():
    report = parse(HAND / "opencode-jsonl", "opencode-jsonl", "success")
    assert report.text == "All done."
    assert report.session_id == "ses_494719016ffe85dkDMj0FPRbHK"
    assert report.tokens == Tokens(input=2200, output=170, cache_read=1400, cache_write=100)
    assert report.cost_usd == pytest.approx(0.02)
    assert report.turns == 2


def test_opencode_error_event():
    report = parse(HAND / "opencode-jsonl", "opencode-jsonl", "error")
    assert report.failure == Failure.rate_limited


def test_pi_sums_assistant_messages():
    report = parse(HAND / "pi-jsonl", "pi-jsonl", "success")
    assert report.text == "Fixed it."
    assert report.session_id == "9b1f0c2e-session"
    assert report.tokens == Tokens(input=900, output=60, cache_read=800, cache_write=800)
    assert report.cost_usd == pytest.approx(0.00684)
    assert report.failure is None


def test_pi_stop_reason_error_fails_although_exit_0():
    assert (HAND / "pi-jsonl" / "error_exit0.exit").read_text().strip() == "0"
    report = parse(HAND / "pi-jsonl", "pi-jsonl", "error_exit0")
    assert report.failure == Failure.auth_failed


def test_copilot_text_and_session():
    report = parse(HAND / "copilot-json", "copilot-json", "success")
    assert report.text == "The bug is fixed."
    assert report.session_id == "copilot-session-42"
    assert not report.tokens.known
    assert report.failure is None


def test_aider_tokens_and_session_cost():
    report = parse(HAND / "aider-text", "aider-text", "success")
    assert report.text is None  # stdout itself is the output
    assert report.tokens == Tokens(input=9200, output=275, cache_read=2300, cache_write=1100)
    assert report.cost_usd == pytest.approx(0.03)


def test_aider_auth_error_fails_although_exit_0():
    report = parse(HAND / "aider-text", "aider-text", "auth_error")
    assert report.failure == Failure.auth_failed


def test_text_usage_is_unknown_not_zero():
    report = parse_text("text", "hello\nworld\n")
    assert report.text is None
    assert report.tokens == Tokens()
    assert report.cost_usd is None
    assert report.finished


def test_every_declared_output_format_has_a_parser():
    from harness_operator.api.v1alpha1 import OutputFormat

    assert {f.value for f in OutputFormat} == set(PARSERS)


def test_non_json_lines_are_ignored_by_json_parsers():
    report = parse_text("codex-jsonl", "warning: something\n{not json\n")
    assert report.text is None
    assert not report.finished


# --- every real capture in tests/fixtures/cli/ (CLIs run against local vendor-API stubs) -----------------

REAL_CASES = [
    # (cli, case, format, text, failure, tokens (input, output, cache read, cache write), cost)
    (
        "claude",
        "success",
        "claude-stream-json",
        "Hello from the Anthropic stub.",
        None,
        (1234, 56, 100, 10),
        0.006126,
    ),
    (
        "qwen",
        "success",
        "claude-stream-json",
        "Hello from the OpenAI stub.",
        None,
        (2468, 112, 200, None),
        None,
    ),
    ("qwen", "unauthorized", "claude-stream-json", "", Failure.auth_failed, (0, 0, 0, None), None),
    ("qwen", "no_auth_type", "claude-stream-json", "", Failure.provider_error, (0, 0, None, None), None),
    ("codex", "success", "codex-jsonl", "Hello from the OpenAI stub.", None, (1134, 56, 100, None), None),
    ("codex", "unauthorized", "codex-jsonl", "", Failure.auth_failed, (None,) * 4, None),
    ("gemini", "success", "gemini-json", "Hello from the Gemini stub.", None, (2268, 112, 200, None), None),
    (
        "gemini",
        "success_model",
        "gemini-json",
        "Hello from the Gemini stub.",
        None,
        (1134, 56, 100, None),
        None,
    ),
    ("gemini", "unauthorized", "gemini-json", "", Failure.auth_failed, (0, 0, 0, None), None),
    (
        "opencode",
        "success",
        "opencode-jsonl",
        "Hello from the Anthropic stub.",
        None,
        (1234, 56, 100, 10),
        0.0046095,
    ),
    ("opencode", "unauthorized", "opencode-jsonl", "", Failure.auth_failed, (None,) * 4, None),
    ("pi", "success", "pi-jsonl", "Hello from the Anthropic stub.", None, (1234, 56, 100, 10), 0.0046095),
    ("pi", "unauthorized", "pi-jsonl", "", Failure.auth_failed, (0, 0, 0, 0), 0.0),
    ("copilot", "success_byok", "copilot-json", "Hello from the OpenAI stub.", None, (None,) * 4, None),
    ("copilot", "unauthorized_byok", "copilot-json", "", Failure.auth_failed, (None,) * 4, None),
    ("aider", "success_no_stream", "aider-text", None, None, (1200, 56, None, None), 0.0035),
    ("aider", "unauthorized", "aider-text", None, Failure.auth_failed, (None,) * 4, None),
]


@pytest.mark.parametrize(
    ("cli", "case", "fmt", "text", "failure", "tokens", "cost"),
    REAL_CASES,
    ids=[f"{c[0]}-{c[1]}" for c in REAL_CASES],
)
def test_real_captures(cli, case, fmt, text, failure, tokens, cost):
    report = parse(REAL / cli, fmt, case)
    assert (report.text or None) == (text or None)
    assert report.failure == failure
    assert report.tokens.as_tuple() == tokens
    assert report.cost_usd == (None if cost is None else pytest.approx(cost))
    if text:
        assert report.session_id


def test_real_exit_0_failures_are_caught():
    # pi and aider exit 0 on a 401; the parser's outcome is what makes the attempt fail.
    for cli, case, fmt in (("pi", "unauthorized", "pi-jsonl"), ("aider", "unauthorized", "aider-text")):
        assert (REAL / cli / f"{case}.exit").read_text().strip() == "0"
        assert parse(REAL / cli, fmt, case).failure == Failure.auth_failed


def test_real_gemini_reports_per_model_stats():
    report = parse(REAL / "gemini", "gemini-json", "success")
    assert set(report.by_model) == {"gemini-3.5-flash-lite", "gemini-3.1-pro-preview"}


# Lines as the pinned CLIs print them for a call their tool policy refused (tests/integration_cli/
# test_tool_policy_gemini_pi.py sees the same from the real CLIs).
GEMINI_REFUSED = [
    '{"type":"tool_use","tool_name":"run_shell_command","tool_id":"run_shell_command__1","parameters":{}}',
    '{"type":"tool_result","tool_id":"run_shell_command__1","status":"error","output":"Tool \\"run_shell_command\\" '
    'not found.","error":{"type":"tool_not_registered","message":"Tool \\"run_shell_command\\" not found."}}',
    '{"type":"tool_use","tool_name":"web_fetch","tool_id":"web_fetch__2","parameters":{}}',
    '{"type":"tool_result","tool_id":"web_fetch__2","status":"error","output":"denied","error":'
    '{"type":"policy_violation","message":"Tool execution denied by policy."}}',
    '{"type":"tool_use","tool_name":"read_file","tool_id":"read_file__3","parameters":{}}',
    '{"type":"tool_result","tool_id":"read_file__3","status":"error","error":{"type":"file_not_found"}}',
]


def test_gemini_names_the_tools_its_policy_refused_not_those_that_failed():
    report = parse_text("gemini-json", "\n".join(GEMINI_REFUSED) + "\n")
    assert report.denied_tools == ("run_shell_command", "web_fetch")


def test_pi_names_a_tool_its_allow_list_left_out_not_one_that_failed():
    lines = [
        '{"type":"tool_execution_end","toolCallId":"t1","toolName":"bash","result":{"content":[{"type":'
        '"text","text":"Tool bash not found"}],"details":{}},"isError":true}',
        '{"type":"tool_execution_end","toolCallId":"t2","toolName":"read","result":{"content":[{"type":'
        '"text","text":"ENOENT"}]},"isError":true}',
    ]
    assert parse_text("pi-jsonl", "\n".join(lines) + "\n").denied_tools == ("bash",)


def test_opencode_names_the_tools_its_permission_rules_refused_not_those_that_failed():
    def tool_use(tool: str, state: dict) -> str:
        return json.dumps({"type": "tool_use", "sessionID": "s", "part": {"tool": tool, "state": state}})

    unavailable = "Model tried to call unavailable tool 'docs_echo'. Available tools: read."
    lines = [
        tool_use("invalid", {"status": "completed", "input": {"tool": "docs_echo", "error": unavailable}}),
        tool_use("bash", {"status": "error", "error": "Model tried to call unavailable tool 'invalid'."}),
        tool_use(
            "webfetch",
            {
                "status": "error",
                "error": "The user has specified a rule which prevents you "
                "from using this specific tool call.",
            },
        ),
        tool_use("read", {"status": "error", "error": "ENOENT: no such file"}),
    ]
    report = parse_text("opencode-jsonl", "\n".join(lines) + "\n")
    assert report.denied_tools == ("docs_echo", "bash", "webfetch")
