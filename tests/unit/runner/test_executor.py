"""The executor with real processes (tests/fakes/agent.py): env, argv0, stdin, workdir, binary
resolution, exit codes, honest success, timeout, cancel, cost and turn stops, redaction, truncation.
Every test runs twice: the agent as the runner's child (harnessctl run), and the agent started by the
real launcher process through the channel's FIFOs (the pod)."""

import io
import json
import os
import sys
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from tests.unit.runner.launcher_process import LAUNCHERS, spawn, spawn_both_ways  # noqa: F401 (the fixture runs each test twice)

from harness_operator.contract.events import decode_events
from harness_operator.contract.plan import (
    OUTPUT_SCHEMA_HOME_FILE,
    REPROMPT_TEXT,
    AttemptPlan,
    home_path_arg,
)
from harness_operator.contract.usage import Tokens
from harness_operator.runner.attempt import Reporter, drop_session_totals
from harness_operator.runner.executor import ALLOWED_ENV, AttemptResult, execute
from harness_operator.runner.parsers import Report

AGENT = str(Path(__file__).parents[2] / "fakes" / "agent.py")
PYTHON = sys.executable
BASE_ENV = {"PATH": os.environ["PATH"], "HOME": "/tmp", "LANG": "C.UTF-8", "RUNNER_OWN_SECRET": "do-not-leak"}


def plan(mode: str, fmt: str = "claude-stream-json", **fields: Any) -> AttemptPlan:
    env = [{"name": "FAKE_MODE", "value": mode}, *fields.pop("env", [])]
    # The interpreter itself is the binary (a shebang would drop argv[0] and may add a shim's env).
    args = [AGENT, *fields.pop("args", [])]
    base = {"attempt": 1, "total_attempts": 1, "provider": "fake", "binary": PYTHON, "output_format": fmt}
    base["args"] = args
    return AttemptPlan.model_validate({**base, "env": env, **fields})


def run(p: AttemptPlan, credentials: dict[str, str] | None = None, **kw: Any) -> tuple[AttemptResult, str]:
    err = io.BytesIO()
    result = execute(
        p, credentials or {}, base_env=kw.pop("base_env", BASE_ENV), stderr=err, spawn=spawn, **kw
    )
    return result, err.getvalue().decode()


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def all_gone(pids: list[int]) -> bool:
    """True once none of the pids is alive (SIGKILL lands asynchronously; bounded wait)."""
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def wait_for(path: Path) -> list[int]:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return [int(x) for x in path.read_text().split()]
        time.sleep(0.02)
    raise AssertionError(f"{path} never written")


def test_success_output_usage_and_argv():
    result, err = run(plan("ok", args=["hello"]))
    assert result.succeeded and result.exit_code == 0
    assert result.output == b"answer from agent.py: hello"
    assert result.usage.cost_source == "reported" and result.usage.cost_usd == pytest.approx(0.01)
    assert result.report.session_id == "fake-1" and result.report.model == "fake-model"
    assert "mode ok" in err  # stderr streamed through


def test_environment_is_only_the_allowlist_and_declared_values(tmp_path):
    p = plan(
        "echo-env",
        "text",
        env=[{"name": "PLAIN", "value": "v"}],
        credential_envs=["TOKEN"],
        working_dir=str(tmp_path),
    )
    result, _ = run(p, {"TOKEN": "tok-123456"})
    env = json.loads(result.output.decode().splitlines()[0])
    assert env["PLAIN"] == "v" and env["TOKEN"] == "[REDACTED]"
    assert "RUNNER_OWN_SECRET" not in env
    allowed = set(ALLOWED_ENV) | {"PLAIN", "TOKEN", "FAKE_MODE", "LC_CTYPE"}  # LC_CTYPE: Python's PEP 538
    assert set(env) <= allowed


def test_missing_required_credential_is_a_setup_error():
    result, err = run(plan("ok", credential_envs=["TOKEN"]))
    assert (result.exit_code, result.reason) == (1, "CredentialsMissing")
    assert "credential TOKEN is not set" in err


@pytest.mark.parametrize("value", ['to"ken', "to\\ken", "to\nken", "to\x01ken"])
def test_a_credential_the_cli_pastes_into_json_is_refused_with_a_quote_backslash_or_control(value):
    result, err = run(plan("ok", credential_envs=["TOKEN"], raw_json_envs=["TOKEN"]), {"TOKEN": value})
    assert (result.exit_code, result.reason) == (1, "SetupFailed")
    assert "credential TOKEN holds a quote, a backslash or a control character" in err
    assert value not in err


def test_a_plain_credential_the_cli_pastes_into_json_reaches_the_agent():
    result, _ = run(plan("ok", credential_envs=["TOKEN"], raw_json_envs=["TOKEN"]), {"TOKEN": "tok-1/+=é"})
    assert result.succeeded, result.message


def test_argv0_is_the_configured_name_found_in_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "fake-cli").symlink_to(PYTHON)
    env = {**BASE_ENV, "PATH": f"{bin_dir}:{BASE_ENV['PATH']}"}
    result, _ = run(plan("echo-env", "text", binary="fake-cli", working_dir=str(tmp_path)), base_env=env)
    assert json.loads(result.output.decode().splitlines()[1])["argv0"] == "fake-cli"


def test_path_comes_from_the_runs_environment(tmp_path):
    bin_dir = tmp_path / "tools"
    bin_dir.mkdir()
    (bin_dir / "only-here").symlink_to(PYTHON)
    path = f"{bin_dir}:{os.path.dirname(sys.executable)}:/usr/bin:/bin"
    result, _ = run(plan("ok", binary="only-here", env=[{"name": "PATH", "value": path}]))
    assert result.succeeded


def test_relative_binary_resolves_against_the_working_directory(tmp_path):
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "agent").symlink_to(PYTHON)
    result, _ = run(plan("ok", binary="./bin/agent", working_dir=str(tmp_path)))
    assert result.succeeded


def test_binary_not_in_path_fails_before_starting():
    result, err = run(plan("ok", binary="no-such-agent-cli"))
    assert (result.exit_code, result.reason, result.agent_exit_code) == (1, "BinaryNotFound", None)
    assert err.startswith('harness: "no-such-agent-cli" CLI not found in PATH; install it first: ')


def test_binary_path_that_does_not_exist(tmp_path):
    result, err = run(plan("ok", binary="./missing/agent", working_dir=str(tmp_path)))
    assert (result.exit_code, result.reason) == (1, "BinaryNotFound")
    assert err.startswith('harness: failed to resolve binary "./missing/agent": ')


def test_binary_that_is_not_executable(tmp_path):
    (tmp_path / "agent").write_text("#!/bin/sh\n")
    result, err = run(plan("ok", binary=str(tmp_path / "agent")))
    assert result.reason == "BinaryNotFound" and "failed to resolve binary" in err


def test_working_directory_is_created(tmp_path):
    workdir = tmp_path / "a" / "b"
    result, _ = run(plan("echo-env", "text", working_dir=str(workdir)))
    assert workdir.is_dir()
    assert json.loads(result.output.decode().splitlines()[1])["cwd"] == str(workdir)


def test_home_files_are_written_before_the_agent_starts_and_only_under_its_home(tmp_path):
    home = tmp_path / "home"
    files = {".pi/agent/models.json": '{"baseUrl": "http://gw/anthropic"}'}
    result, _ = run(plan("ok", home_files=files), base_env={**BASE_ENV, "HOME": str(home)})
    written = home / ".pi" / "agent" / "models.json"
    assert result.succeeded and written.read_text() == files[".pi/agent/models.json"]
    assert oct(written.stat().st_mode & 0o777) == "0o600"  # the agent's own
    escaped, err = run(plan("ok", home_files={"../outside": "x"}), base_env={**BASE_ENV, "HOME": str(home)})
    assert (escaped.exit_code, escaped.reason) == (1, "SetupFailed") and "is not under" in err
    assert not (tmp_path / "outside").exists()


def test_working_directory_that_cannot_be_created(tmp_path):
    (tmp_path / "file").write_text("")
    result, err = run(plan("ok", working_dir=str(tmp_path / "file" / "sub")))
    assert (result.exit_code, result.reason) == (1, "SetupFailed")
    assert err.startswith("harness: failed to create working directory: ")


def test_stdin_piped_exactly():
    result, _ = run(plan("echo-stdin", "text", stdin="line 1\nline 2"))
    assert json.loads(result.output) == {"stdin": "line 1\nline 2"}


def test_stdin_closed_when_not_given():
    result, _ = run(plan("echo-stdin", "text", limits={"timeoutSeconds": 20}))
    assert result.succeeded and json.loads(result.output) == {"stdin": ""}


def test_agents_own_exit_code_and_stdout_tail_on_stderr():
    result, err = run(plan("fail"))
    assert (result.exit_code, result.reason) == (3, "ProviderFailed")
    assert result.output == b"" and result.fallback_allowed
    assert "recent stdout (tail):\nsome stdout before failing" in err


def test_exit_0_with_an_error_outcome_is_not_success():
    result, err = run(plan("auth-error-exit-0"))
    assert (result.exit_code, result.reason, result.agent_exit_code) == (1, "AuthFailed", 0)
    assert result.fallback_allowed and result.output == b""
    assert "exited 0 but reported a failure (AuthFailed)" in err


def test_exit_0_without_a_result_line_is_not_success():
    result, _ = run(plan("echo-stdin"))  # prints JSON, but no claude result line
    assert (result.exit_code, result.reason) == (1, "ProviderError")


def test_timeout_stops_the_whole_group(tmp_path):
    pidfile = tmp_path / "pids"
    p = plan(
        "hang",
        env=[{"name": "FAKE_PIDFILE", "value": str(pidfile)}],
        limits={"timeoutSeconds": 3, "gracePeriodSeconds": 1},
    )
    result, err = run(p)
    assert (result.exit_code, result.reason) == (124, "Timeout")
    assert not result.fallback_allowed
    assert "timed out after 3s" in err
    assert all_gone(wait_for(pidfile))


def test_sigterm_ignored_means_sigkill_after_the_grace(tmp_path):
    pidfile = tmp_path / "pids"
    p = plan(
        "ignore-term",
        env=[{"name": "FAKE_PIDFILE", "value": str(pidfile)}],
        limits={"timeoutSeconds": 3, "gracePeriodSeconds": 1},
    )
    result, _ = run(p)
    assert (result.exit_code, result.reason) == (124, "Timeout")
    assert all_gone(wait_for(pidfile))


def test_cancel_stops_the_agent(tmp_path):
    pidfile = tmp_path / "pids"
    cancel = threading.Event()
    threading.Thread(target=lambda: (wait_for(pidfile), cancel.set()), daemon=True).start()
    p = plan("hang", env=[{"name": "FAKE_PIDFILE", "value": str(pidfile)}], limits={"gracePeriodSeconds": 2})
    result, err = run(p, cancel=cancel)
    assert (result.exit_code, result.reason) == (124, "Cancelled")
    assert "cancelled; stopping the agent" in err
    assert not result.fallback_allowed
    assert all_gone(wait_for(pidfile))


# Turns 0.3 s apart: the agent is stopped at the turn that crosses the limit, not one later, on a busy
# machine too (the unit tier runs beside the cluster's tests).
SLOW = [{"name": "FAKE_TURN_SECONDS", "value": "0.3"}]


def test_cost_limit_stops_the_agent_from_streaming_usage():
    p = plan("cost", "codex-jsonl", pricing={"gpt": {"input": 1.0}}, limits={"maxCostUSD": 2.5}, env=SLOW)
    result, err = run(p)
    assert (result.exit_code, result.reason) == (124, "CostLimitExceeded")
    assert not result.fallback_allowed
    assert result.usage.cost_source == "computed" and result.usage.cost_usd == pytest.approx(3.0)
    assert "crossed maxCostUSD 2.5" in err


def test_cost_limit_stops_the_agent_on_table_prices():
    """Codex reports no cost: the table prices the operator put in the plan make the limit bite."""
    p = plan(
        "cost",
        "codex-jsonl",
        table_pricing={"gpt-5.4": {"input": 1.0}},
        price_table="genai-prices 0.2.3",
        model_hint="gpt-5.4",
        limits={"maxCostUSD": 2.5},
        env=SLOW,
    )
    result, err = run(p)
    assert (result.exit_code, result.reason) == (124, "CostLimitExceeded")
    assert (result.usage.cost_source, result.usage.price_source) == ("computed", "genai-prices 0.2.3")
    assert result.usage.cost_usd == pytest.approx(3.0)
    assert "(computed) crossed maxCostUSD 2.5" in err


def test_result_names_the_requested_model_and_pinned_version_when_the_cli_names_none():
    p = plan("cost", "codex-jsonl", model_hint="gpt-5.4", cli_version="0.171.0", limits={"maxTurns": 1})
    doc = run(p)[0].to_doc()
    assert (doc["model"], doc["cliVersion"]) == ("gpt-5.4", "0.171.0")


def test_max_turns_stops_the_agent_and_allows_fallback():
    result, _ = run(plan("cost", "codex-jsonl", limits={"maxTurns": 2}))
    assert (result.exit_code, result.reason) == (1, "MaxTurns")
    assert result.fallback_allowed


def test_secret_values_are_redacted_in_output_and_stderr():
    secret = 'tok-"quoted"-\\-value'
    p = plan("secret", env=[], credential_envs=["FAKE_TOKEN"])
    result, err = run(p, {"FAKE_TOKEN": secret})
    assert result.output == b"output has [REDACTED]"
    assert "stderr has [REDACTED]" in err and "quoted" not in err


def test_secret_values_are_redacted_in_the_stdout_tail():
    result, err = run(
        plan("secret-fail", "text", credential_envs=["FAKE_TOKEN"]), {"FAKE_TOKEN": "s3cr3t-xyz"}
    )
    assert result.exit_code == 2
    assert "stdout has [REDACTED]" in err and "s3cr3t-xyz" not in err


def test_max_output_bytes_truncates_and_flags():
    result, _ = run(plan("big", limits={"maxOutputBytes": 5005}))
    assert result.succeeded and result.truncated
    assert result.output_bytes == 5020
    assert len(result.output) <= 5005
    result.output.decode("utf-8")  # cut on a character boundary


def test_encoded_forms_of_a_secret_are_redacted_in_output_and_stderr():
    secret = "ghp_0123456789abcdefXYZ"
    result, err = run(plan("secret-encoded", credential_envs=["FAKE_TOKEN"]), {"FAKE_TOKEN": secret})
    assert result.succeeded
    assert result.output.count(b"[REDACTED]") == 4, result.output
    assert err.count("[REDACTED]") >= 4
    for leak in (secret, secret.encode().hex(), "Z2hwXzAxMjM0NTY3ODlh"):
        assert leak not in err and leak.encode() not in result.output


def test_a_multi_line_secret_is_redacted_across_stderr_lines():
    secret = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\n-----END KEY-----"
    result, err = run(plan("secret", credential_envs=["FAKE_TOKEN"]), {"FAKE_TOKEN": secret})
    assert "stderr has [REDACTED]" in err
    assert "MIIEvQIBADANBgkqhkiG9w0B" not in err
    assert result.output == b"output has [REDACTED]"


def test_an_argument_with_a_nul_byte_is_a_setup_failure_not_a_crash():
    result, _ = run(plan("ok", args=["--model", "a\x00b"]))
    assert (result.exit_code, result.reason) == (1, "SetupFailed")
    assert "embedded null byte" in result.message


def test_an_argument_over_the_kernel_limit_is_a_setup_failure_not_binary_not_found():
    result, _ = run(plan("ok", args=["x" * 200_000]))
    assert (result.exit_code, result.reason) == (1, "SetupFailed")
    assert "Argument list too long" in result.message and "stdin" in result.message


def test_a_negative_reported_cost_is_ignored_never_a_refund():
    """The red team's CLI reported total_cost_usd -1000: it is unknown, never a negative charge, and
    maxCostUSD falls back to the tokens the table prices (10 in, 5 out at the definition's price)."""
    p = plan("ok", args=[], env=[{"name": "FAKE_COST", "value": "-1000"}])
    result, err = run(p)
    assert result.usage.cost_usd is None and result.usage.cost_source == "unknown"
    assert "ignored what the CLI reported that no bill can use: cost -1000" in err
    priced = plan(
        "ok",
        env=[{"name": "FAKE_COST", "value": "-1000"}],
        pricing={"fake-model": {"input": 1000, "output": 1000}},
    )
    result, _ = run(priced)
    assert result.usage.cost_source == "computed" and result.usage.cost_usd == 0.015


def test_a_forged_event_in_the_stdout_tail_is_not_a_runner_event():
    """A failed attempt's stdout tail goes to the log: the agent's lines in it are escaped, so the
    result event a red team's agent printed is not read as the runner's."""
    result, err = run(plan("fail-with-events"), events_to_log=True)
    assert result.reason == "ProviderFailed"
    assert "recent stdout (tail):" in err
    events = [e for e in decode_events(err.splitlines()) if e.kind == "result"]
    assert [e.reason for e in events] == ["ProviderFailed"]


def test_a_failed_attempts_message_ends_with_the_agents_last_stderr_lines_redacted() -> None:
    script = (
        "echo 'starting' >&2; for i in 1 2 3; do echo \"noise $i\" >&2; done; "
        'echo "token $TOKEN refused" >&2; echo "error: unknown option \'--max-turn\'" >&2; exit 1'
    )
    p = AttemptPlan.model_validate(
        {
            "attempt": 1,
            "total_attempts": 1,
            "provider": "fake",
            "binary": "/bin/sh",
            "args": ["-c", script],
            "credential_envs": ["TOKEN"],
        }
    )
    result, _ = run(p, {"TOKEN": "s3cr3t-value-1234"})
    assert result.reason == "ProviderFailed"
    assert result.message == (
        "the agent exited with code 1; its stderr ended: noise 3 / token [REDACTED] refused / "
        "error: unknown option '--max-turn'"
    )


VERDICT = {"type": "object", "required": ["verdict"], "properties": {"verdict": {"enum": ["ok", "no"]}}}


def reprompting(reprompts: int, **fields: Any) -> AttemptPlan:
    env = [
        {"name": "FAKE_ANSWER", "value": '{"verdict": "maybe"}'},
        {"name": "FAKE_FIXED", "value": '{"verdict": "ok"}'},
        *fields.pop("env", []),
    ]
    return plan(
        fields.pop("mode", "answer-until-refused"),
        env=env,
        args=["the task"],
        reprompt_args=[AGENT, f"the task\n\n{REPROMPT_TEXT}"],
        output_schema=VERDICT,
        output_reprompts=reprompts,
        **fields,
    )


def test_a_mismatching_answer_is_reprompted_with_the_error_and_the_fixed_answer_kept() -> None:
    result, err = run(reprompting(2), events_to_log=True)
    assert result.succeeded and result.output == b'{"verdict": "ok"}'
    line = (
        "harness: spec.outputSchema: the output does not match at $.verdict: not one of the values the schema "
        "allows (enum); re-prompt 1/2 with fake"
    )
    assert line in err and "re-prompt 2/2" not in err
    assert result.usage.input_tokens == 20 and result.usage.cost_usd == pytest.approx(0.02)  # both runs
    results = [e for e in decode_events(err.splitlines()) if e.kind == "result"]
    assert len(results) == 1  # one attempt, however many invocations
    assert len(LAUNCHERS) in (0, 1)  # through a launcher: the attempt's one launcher took the re-prompt


def test_reprompts_are_bounded_and_the_last_answer_stands() -> None:
    result, err = run(reprompting(2, mode="answer"))
    assert result.succeeded and result.output == b'{"verdict": "maybe"}'  # the operator's check fails it
    assert "re-prompt 2/2 with fake" in err and "re-prompt 3/" not in err
    assert result.usage.input_tokens == 30


def test_no_reprompt_once_the_cost_limit_is_spent() -> None:
    result, err = run(
        reprompting(2, env=[{"name": "FAKE_COST", "value": "0.5"}], limits={"max_cost_usd": 0.5})
    )
    assert result.succeeded and "re-prompt" not in err


def test_a_file_schema_argument_becomes_the_home_files_path(tmp_path: Path) -> None:
    p = plan(
        "echo-argv",
        fmt="text",
        args=["--output-schema", home_path_arg(OUTPUT_SCHEMA_HOME_FILE)],
        home_files={OUTPUT_SCHEMA_HOME_FILE: '{"type":"object"}'},
    )
    result, _ = run(p, base_env={**BASE_ENV, "HOME": str(tmp_path)})
    path = tmp_path / OUTPUT_SCHEMA_HOME_FILE
    assert json.loads(result.output)["argv"][-1] == str(path)
    assert path.read_text() == '{"type":"object"}'


def test_the_agents_session_files_are_kept_redacted_after_a_success(tmp_path):
    home = tmp_path / "home"
    sessions = home / ".fake" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "fake-1.jsonl").write_text('{"said": "the token is tok-123456"}\n')
    (home / ".fake" / "auth.json").write_text("not session state")
    home.chmod(0o755)
    for folder in (home / ".fake", sessions):
        folder.chmod(0o755)
    (sessions / "fake-1.jsonl").chmod(0o644)
    p = plan("ok", session_paths=[".fake/sessions"], credential_envs=["TOKEN"])
    result, _ = run(p, {"TOKEN": "tok-123456"}, base_env={**BASE_ENV, "HOME": str(home)})
    assert result.succeeded and result.session is not None
    with tarfile.open(fileobj=io.BytesIO(result.session), mode="r:gz") as tar:
        assert tar.getnames() == [".fake/sessions/fake-1.jsonl"]
        kept = tar.extractfile(".fake/sessions/fake-1.jsonl")
        assert kept is not None and kept.read() == b'{"said": "the token is [REDACTED]"}\n'
    assert result.to_result().session is not None and result.to_result().session.bytes == len(result.session)
    failed, _ = run(plan("fail", session_paths=[".fake/sessions"]), base_env={**BASE_ENV, "HOME": str(home)})
    assert not failed.succeeded and failed.session is None  # only a success's session can be continued


def test_values_taken_from_secrets_are_redacted_from_the_output_and_the_session(tmp_path):
    """A prompt from a Secret (plan.redacted_values) is cut out as a credential is: from the output and
    from the session file, where the CLI keeps it JSON-escaped."""
    prompt = "Brief: the launch code is ZEBRA-4471.\nKeep it."
    home = tmp_path / "home"
    sessions = home / ".fake" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "fake-1.jsonl").write_text(json.dumps({"user": prompt, "n": 1}) + "\n")
    for path in (home, home / ".fake", sessions):
        path.chmod(0o755)
    (sessions / "fake-1.jsonl").chmod(0o644)
    p = plan("ok", args=[prompt], session_paths=[".fake/sessions"], redacted_values=[prompt])
    result, err = run(p, base_env={**BASE_ENV, "HOME": str(home)})
    assert result.succeeded and result.output == b"answer from agent.py: [REDACTED]"
    assert result.session is not None
    with tarfile.open(fileobj=io.BytesIO(result.session), mode="r:gz") as tar:
        kept = tar.extractfile(".fake/sessions/fake-1.jsonl")
        assert kept is not None and kept.read() == b'{"user": "[REDACTED]", "n": 1}\n'
    assert "ZEBRA" not in err


def test_a_continuing_attempt_keeps_none_of_the_sessions_totals():
    report = Report(cost_usd=0.5, tokens=Tokens(input=10, output=5), by_model={"m": Tokens(input=10)})
    sink = io.BytesIO()
    fresh = plan("ok")
    assert drop_session_totals(fresh, report, Reporter(fresh, {}, sink)) == report
    resumed = plan("ok", session_sha256="ab" * 32)
    kept = drop_session_totals(resumed, report, Reporter(resumed, {}, sink))
    assert kept.cost_usd is None and kept.by_model == {} and kept.tokens == Tokens(input=10, output=5)
    totals = plan("ok", session_sha256="ab" * 32, session_usage_cumulative=True)
    assert drop_session_totals(totals, report, Reporter(totals, {}, sink)).tokens == Tokens()
    assert b"the resumed session's totals" in sink.getvalue()
