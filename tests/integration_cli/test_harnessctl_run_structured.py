"""Structured output with real CLIs against their vendors' stubs, through `harnessctl run`: Claude Code
and Codex are given the schema by their own options (the vendor's request carries it; Claude re-prompts
its model itself), Pi's mismatching answer is fixed by one re-prompt that continues its session, and a
non-JSON answer fails the run with OutputInvalid."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.fixtures.cli import capture as fx
from tests.integration_cli.harnessctl import harnessctl_run, require_cli
from tests.stubs.anthropic import STRUCTURED_TOOL, AnthropicStub
from tests.stubs.openai import OpenAIStub

pytestmark = pytest.mark.cli

SCHEMA = {
    "type": "object",
    "properties": {"verdict": {"enum": ["approve", "reject"]}},
    "required": ["verdict"],
    "additionalProperties": False,
}
MAYBE, APPROVE = '{"verdict": "maybe"}', '{"verdict": "approve"}'
# The schema as the vendor's request carries it (the operator passes it with sorted keys).
SENT = json.loads(json.dumps(SCHEMA, sort_keys=True))


def manifest(provider: str, workdir: Path, extra: str = "", env: dict[str, str] | None = None) -> str:
    lines = "".join(f"    - {{name: {k}, value: '{v}'}}\n" for k, v in (env or {}).items())
    return (
        "apiVersion: agentharness.dev/v1alpha1\nkind: HarnessRun\n"
        f"metadata: {{name: verdict, namespace: default}}\nspec:\n  provider: {provider}\n"
        "  prompt: Give a verdict.\n"
        f"  outputSchema: {json.dumps(SCHEMA)}\n"
        f"  workspace: {{workingDir: {workdir}}}\n"
        "  limits: {timeoutSeconds: 120}\n"
        f"{extra}" + (f"  env:\n{lines}" if lines else "")
    )


def pi_run(tmp_path: Path, stub: AnthropicStub, extra: str) -> tuple[object, dict]:
    home = tmp_path / "home"
    fx.pi_home(str(home), stub)
    text = manifest(
        "pi", tmp_path / "work", extra + "  with: {provider: anthropic, model: claude-sonnet-4-5}\n"
    )
    return harnessctl_run(text, require_cli("pi", "pi"), home, dict(fx.PI_ENV))


def test_pi_mismatch_is_fixed_by_one_reprompt_that_continues_its_session(tmp_path: Path) -> None:
    with AnthropicStub(mode="ok", answers=[MAYBE, APPROVE]) as stub:
        result, status = pi_run(tmp_path, stub, "  outputReprompts: 1\n")
        calls = stub.model_calls()
    assert result.returncode == 0, result.stderr
    assert status["phase"] == "Succeeded", status
    assert json.loads(result.stdout) == {"verdict": "approve"}
    assert (
        "at $.verdict: not one of the values the schema allows (enum); re-prompt 1/1 with pi" in result.stderr
    )
    assert len(calls) == 2
    # The re-prompt continued the session: the model saw its first answer, then the correction.
    messages = calls[1].body["messages"]
    said = [json.dumps(m["content"]) for m in messages]
    assert "Give a verdict." in said[0] and "maybe" in said[1] and "was refused" in said[2], said
    assert status["usage"]["inputTokens"] == 2 * 1234  # both invocations, one attempt
    assert len(status["attempts"]) == 1


def test_a_non_json_answer_fails_the_run_with_output_invalid(tmp_path: Path) -> None:
    with AnthropicStub(mode="ok", answers=["I approve."]) as stub:
        result, status = pi_run(tmp_path, stub, "")
        assert len(stub.model_calls()) == 1  # no re-prompt without outputReprompts
    assert result.returncode == 1, result.stderr
    assert (status["phase"], status["reason"]) == ("Failed", "OutputInvalid")
    assert status["message"].startswith("spec.outputSchema: the output is not one JSON value (")


def test_claude_takes_the_schema_itself_and_reprompts_its_model(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in fx.CLAUDE_ENV.items() if k != "ANTHROPIC_API_KEY"}
    with AnthropicStub(mode="ok", answers=[MAYBE, APPROVE]) as stub:
        env["ANTHROPIC_BASE_URL"] = stub.base_url
        text = manifest("claude", tmp_path / "work", env={**env, "CLAUDE_CODE_MAX_RETRIES": "0"})
        result, status = harnessctl_run(
            text, require_cli("claude", "claude"), home, {"ANTHROPIC_API_KEY": "sk-test-structured"}
        )
        calls = stub.model_calls()
    assert result.returncode == 0, result.stderr
    assert status["phase"] == "Succeeded", status
    assert json.loads(result.stdout) == {"verdict": "approve"}
    offered = [t for t in calls[0].body["tools"] if t["name"] == STRUCTURED_TOOL]
    assert offered and offered[0]["input_schema"]["properties"] == SENT["properties"]
    refusal = json.dumps(calls[1].body["messages"][-1])
    assert "Output does not match required schema" in refusal  # the CLI's own re-prompt


def test_codex_sends_the_schema_file_as_the_responses_api_format(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with OpenAIStub(mode="ok") as stub:
        stub.text = APPROVE
        provider = [a.replace("{base_url}", stub.base_url) for a in fx.CODEX_PROVIDER[1::2]]
        extra = f"  with: {{config: {json.dumps(provider)}}}\n"
        text = manifest("codex", tmp_path / "work", extra)
        result, status = harnessctl_run(text, require_cli("codex", "codex"), home, dict(fx.CODEX_ENV))
        calls = stub.model_calls()
    assert result.returncode == 0, result.stderr
    assert status["phase"] == "Succeeded", status
    assert json.loads(result.stdout) == {"verdict": "approve"}
    fmt = calls[0].body["text"]["format"]
    assert (fmt["type"], fmt["strict"]) == ("json_schema", True)
    assert fmt["schema"]["properties"] == SENT["properties"]
    assert (home / ".harness" / "output-schema.json").is_file()
