"""The runner's result document, golden both ways: what the runner writes, and what the operator reads
from it (a newer version or a malformed document is a reason on the attempt, never a crash).

Regenerate the written golden after an intended change with UPDATE_GOLDEN=1 and review the diff.
"""

import json
import os
from pathlib import Path
from typing import Any

import pytest

from harness_operator.api.v1alpha1 import Usage
from harness_operator.contract.result import (
    RESULT_VERSION,
    ResultDocument,
    ResultOutput,
    ResultProblem,
    build_result_doc,
    parse_termination_message,
    render_termination_message,
)
from harness_operator.core.status.observed import FINISHED, observe_attempt

GOLDEN = Path(__file__).parents[1] / "golden" / "result"
WRITTEN = build_result_doc(
    attempt=2,
    provider="codex",
    exit_code=0,
    reason=None,
    message="",
    usage=Usage(input_tokens=1200, output_tokens=80, cost_usd=0.0123, cost_source="reported"),
    model="gpt-x",
    session_id="s-1",
    output=b"Done.\n",
    output_bytes=6,
    truncated=False,
    agent_exit_code=0,
    cli_version="0.171.0",
    start_time="2026-11-29T11:59:00Z",
    completion_time="2026-11-29T12:00:00Z",
)
EXPECTED = ResultDocument(
    version=1,
    attempt=2,
    provider="codex",
    exit_code=0,
    message="",
    agent_exit_code=0,
    usage=Usage(input_tokens=1200, output_tokens=80, cost_usd=0.0123, cost_source="reported"),
    model="gpt-x",
    session_id="s-1",
    output=ResultOutput(
        bytes=6,
        total_bytes=6,
        sha256="16fceed19d3f55f9da618f9b89fe69d717d6015113a0d8312af96ea0eabee312",
        truncated=False,
    ),
    cli_version="0.171.0",
    start_time="2026-11-29T11:59:00Z",
    completion_time="2026-11-29T12:00:00Z",
)


def read_golden(name: str) -> str:
    return (GOLDEN / name).read_text(encoding="utf-8")


def test_what_the_runner_writes_is_the_golden_document() -> None:
    text = json.dumps(WRITTEN.to_doc(), indent=2, sort_keys=True) + "\n"
    path = GOLDEN / "written-v1.json"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert text == read_golden("written-v1.json"), "the result document the runner writes changed"
    assert json.loads(text)["version"] == RESULT_VERSION


def test_the_golden_document_reads_as_its_fields() -> None:
    parsed = parse_termination_message(read_golden("written-v1.json"))
    assert isinstance(parsed, ResultDocument)
    assert parsed == EXPECTED
    assert parsed.succeeded and not parsed.fallback_allowed


def test_the_termination_message_round_trips() -> None:
    assert parse_termination_message(render_termination_message(WRITTEN)) == WRITTEN


@pytest.mark.parametrize(
    ("golden", "expected"),
    [
        (
            "read-essentials-v1.json",
            ResultDocument(
                exit_code=3, reason="ProviderFailed", output=ResultOutput(sha256="ab" * 32, bytes=10)
            ),
        ),
        (
            "read-added-field-v1.json",
            ResultDocument(attempt=1, provider="claude", exit_code=0, message=""),
        ),
    ],
    ids=["only the essentials (a long message)", "a field added within version 1 is ignored"],
)
def test_documents_the_operator_reads(golden: str, expected: ResultDocument) -> None:
    assert parse_termination_message(read_golden(golden)) == expected


@pytest.mark.parametrize(
    ("golden", "message"),
    [
        (
            "read-newer-v2.json",
            "the runner wrote a result document of version 2; this operator reads version 1: use the sandbox image of the operator's version, or upgrade the operator",
        ),
        (
            "read-malformed-exit-code.json",
            "the runner's result document is malformed: exitCode: Input should be a valid integer, unable to parse string as an integer",
        ),
        (
            "read-malformed-usage.json",
            "the runner's result document is malformed: usage.inputTokens: Input should be a valid integer, unable to parse string as an integer",
        ),
    ],
    ids=["a newer version", "exitCode not a number", "usage figures not numbers"],
)
def test_documents_the_operator_cannot_use(golden: str, message: str) -> None:
    assert parse_termination_message(read_golden(golden)) == ResultProblem(message)


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"attempt": 1}'])
def test_a_message_that_is_no_result_document(text: str) -> None:
    assert parse_termination_message(text) is None


def pod_ended_with(message: str, exit_code: int) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "reason": "Completed", "message": message}
    return {
        "metadata": {"name": "r-a1-xyz", "creationTimestamp": "2026-11-29T11:59:00Z"},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "runner", "state": {"terminated": terminated}},
                {"name": "agent", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}},
            ],
        },
    }


JOB = {"metadata": {"name": "r-a1"}, "spec": {}, "status": {"conditions": []}}


@pytest.mark.parametrize(
    ("golden", "container_exit", "exit_code", "words"),
    [
        ("read-newer-v2.json", 0, 1, "version 2"),
        ("read-malformed-exit-code.json", 2, 2, "malformed: exitCode"),
    ],
    ids=["a newer version", "malformed"],
)
def test_an_unusable_document_ends_the_attempt_with_a_reason(
    golden: str, container_exit: int, exit_code: int, words: str
) -> None:
    seen = observe_attempt(1, "claude", JOB, [pod_ended_with(read_golden(golden), container_exit)])
    assert seen.state == FINISHED and seen.result is not None
    assert (seen.result.attempt, seen.result.provider) == (1, "claude")
    assert (seen.result.exit_code, seen.result.reason) == (exit_code, "ResultUnreadable")
    assert words in (seen.result.message or "")
    assert seen.result.fallback_allowed  # like any failed provider: the next one may run


def test_the_essentials_get_the_attempt_and_provider_the_operator_knows() -> None:
    seen = observe_attempt(2, "codex", JOB, [pod_ended_with(read_golden("read-essentials-v1.json"), 3)])
    assert seen.result is not None
    assert (seen.result.attempt, seen.result.provider, seen.result.reason) == (2, "codex", "ProviderFailed")


def test_denied_tools_are_bounded_and_dropped_first_from_a_full_termination_message() -> None:
    names = [f"mcp__server__tool_{i}_" + "x" * 80 for i in range(40)]
    doc = build_result_doc(
        attempt=1,
        provider="claude",
        exit_code=0,
        reason=None,
        message="m" * 3000,
        usage=Usage(),
        model=None,
        session_id="s",
        output=b"",
        output_bytes=0,
        truncated=False,
        denied_tools=names,
    )
    assert doc.denied_tools is not None and len(doc.denied_tools) == 16
    assert all(len(name) == 64 for name in doc.denied_tools)
    message = json.loads(render_termination_message(doc, limit=1024))
    assert "deniedTools" not in message and message["sessionID"] == "s"
    assert (
        build_result_doc(
            attempt=1,
            provider="p",
            exit_code=0,
            reason=None,
            message="",
            usage=Usage(),
            model=None,
            session_id=None,
            output=b"",
            output_bytes=0,
            truncated=False,
        ).denied_tools
        is None
    )
