"""harnessctl approve and reject offline: their arguments (a reject says why; a reason fits the policy's
limit), the patch they write, and what they say of a run that is not awaiting approval."""

from __future__ import annotations

from typing import Any

import pytest

from harness_operator.cli.approvals import (
    MAX_REASON,
    build_decision_patch,
    build_not_awaiting,
    is_awaiting_approval,
)
from harness_operator.cli.main import build_parser, main


def parsed(*argv: str) -> Any:
    return build_parser().parse_args(list(argv))


def test_approve_takes_a_run_kubectls_flags_and_an_optional_note() -> None:
    args = parsed("approve", "fix", "-n", "team-a", "--as", "bob", "--reason", "looks right")
    assert (args.run, args.namespace, args.as_user, args.reason, args.cluster) == (
        "fix",
        "team-a",
        "bob",
        "looks right",
        True,
    )
    assert parsed("approve", "fix").reason is None


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["reject", "fix"], "the following arguments are required: --reason"),
        (["reject", "fix", "--reason", "  "], "argument --reason: is empty: say why"),
        (
            ["approve", "fix", "--reason", "x" * (MAX_REASON + 1)],
            f"argument --reason: is {MAX_REASON + 1} characters, more than {MAX_REASON}: say it shorter",
        ),
        (["approve"], "the following arguments are required: RUN"),
    ],
)
def test_bad_arguments_exit_2_naming_the_argument(
    argv: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith(f"error: {error}")


def test_a_reason_at_the_limit_is_taken() -> None:
    assert parsed("reject", "fix", "--reason", "x" * MAX_REASON).reason == "x" * MAX_REASON


def test_the_patch_writes_the_decision_its_user_and_the_reason_given() -> None:
    assert build_decision_patch("Rejected", "bob", "wrong ticket") == {
        "metadata": {
            "annotations": {
                "approval.agentharness.dev/decision": "Rejected",
                "approval.agentharness.dev/user": "bob",
                "approval.agentharness.dev/reason": "wrong ticket",
            }
        }
    }
    assert build_decision_patch("Approved", "bob", None) == {
        "metadata": {
            "annotations": {
                "approval.agentharness.dev/decision": "Approved",
                "approval.agentharness.dev/user": "bob",
            }
        }
    }


def run(conditions: list[dict[str, str]], phase: str | None = None, **annotations: str) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": conditions}
    if phase:
        status["phase"] = phase
    return {"metadata": {"name": "fix", "annotations": annotations}, "status": status}


def test_only_a_run_whose_condition_awaits_approval_is_decided() -> None:
    waiting = {"type": "AwaitingApproval", "status": "True", "reason": "AwaitingApproval"}
    assert is_awaiting_approval(run([waiting]))
    assert not is_awaiting_approval(run([{**waiting, "status": "False", "reason": "Approved"}]))
    assert not is_awaiting_approval(run([{"type": "Succeeded", "status": "Unknown"}]))
    assert not is_awaiting_approval({"metadata": {"name": "fix"}})


def test_a_run_not_awaiting_approval_is_refused_saying_where_it_is() -> None:
    assert build_not_awaiting(run([], "Running")) == (
        "error: harnessrun fix is not awaiting approval (phase: Running); a run that needs approval "
        "(spec.workspace.publish.approval) waits in phase AwaitingApproval once its change is kept"
    )
    decided = run(
        [],
        "Succeeded",
        **{"approval.agentharness.dev/decision": "Approved", "approval.agentharness.dev/user": "bob"},
    )
    assert build_not_awaiting(decided) == (
        "error: harnessrun fix was Approved already (by bob); a decision never changes"
    )
