"""harnessctl approve and reject: a run's decision written into its annotations as the calling user, for
the admission policy <release>-approvals to judge and the operator to act on (I/O; the builders pure)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from harness_operator.api.v1alpha1 import GROUP
from harness_operator.cli.cluster import EXIT_FAILED, add_cluster_arguments, connect, not_found
from harness_operator.core.objects.naming import (
    ANNOTATION_APPROVER,
    ANNOTATION_DECISION,
    ANNOTATION_DECISION_REASON,
)

APPROVED = "Approved"
REJECTED = "Rejected"
AWAITING_APPROVAL = "AwaitingApproval"
MAX_REASON = 1024  # the policy's limit on approval.agentharness.dev/reason


def reason_text(text: str) -> str:
    """--reason: some words, at most MAX_REASON characters (argparse's type)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: say why")
    if len(text) > MAX_REASON:
        raise argparse.ArgumentTypeError(f"is {len(text)} characters, more than {MAX_REASON}: say it shorter")
    return text


def is_awaiting_approval(run: Mapping[str, Any]) -> bool:
    """Whether the run waits for a decision: its condition AwaitingApproval is True."""
    conditions = (run.get("status") or {}).get("conditions") or []
    return any(c.get("type") == AWAITING_APPROVAL and c.get("status") == "True" for c in conditions)


def build_not_awaiting(run: Mapping[str, Any]) -> str:
    """Why a decision cannot be taken on `run` now, and what its state is."""
    name = run["metadata"]["name"]
    decision = (run["metadata"].get("annotations") or {}).get(ANNOTATION_DECISION)
    if decision:
        who = (run["metadata"].get("annotations") or {}).get(ANNOTATION_APPROVER, "")
        return f"error: harnessrun {name} was {decision} already (by {who}); a decision never changes"
    phase = (run.get("status") or {}).get("phase") or "not started"
    return (
        f"error: harnessrun {name} is not awaiting approval (phase: {phase}); a run that needs approval "
        f"(spec.workspace.publish.approval) waits in phase {AWAITING_APPROVAL} once its change is kept"
    )


def build_decision_patch(decision: str, user: str, reason: str | None) -> dict[str, Any]:
    """The merge patch of the run's annotations that records `decision` by `user`."""
    annotations = {ANNOTATION_DECISION: decision, ANNOTATION_APPROVER: user}
    if reason:
        annotations[ANNOTATION_DECISION_REASON] = reason
    return {"metadata": {"annotations": annotations}}


def decide(args: argparse.Namespace, decision: str) -> int:
    """Write `decision` on the run as the caller; the API server judges who may (Forbidden: exit 3)."""
    kube, namespace = connect(args)
    run = kube.fetch_run(namespace, args.run)
    if run is None:
        raise not_found(args.run)
    if not is_awaiting_approval(run):
        print(build_not_awaiting(run), file=sys.stderr)
        return EXIT_FAILED
    user = kube.fetch_username()
    patch = build_decision_patch(decision, user, args.reason)
    if not kube.patch_run_metadata(namespace, args.run, str(run["metadata"]["uid"]), patch):
        raise not_found(args.run)
    print(f"harnessrun.{GROUP}/{args.run} {decision.lower()}")
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    return decide(args, APPROVED)


def cmd_reject(args: argparse.Namespace) -> int:
    return decide(args, REJECTED)


def add_approval_commands(sub: Any) -> None:
    """The approve and reject subcommands."""
    approve = sub.add_parser(
        "approve",
        help="approve a run awaiting approval: its kept change is published (needs the verb approve)",
    )
    add_cluster_arguments(approve)
    approve.add_argument("--reason", type=reason_text, help="a note kept with the approval")
    approve.set_defaults(func=cmd_approve, cluster=True)
    reject = sub.add_parser(
        "reject",
        help="reject a run awaiting approval: it ends, nothing is published (needs the verb approve)",
    )
    add_cluster_arguments(reject)
    reject.add_argument("--reason", type=reason_text, required=True, help="why (shown in the run's status)")
    reject.set_defaults(func=cmd_reject, cluster=True)
