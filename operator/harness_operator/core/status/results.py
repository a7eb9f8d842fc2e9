"""A finished attempt's result as its pod's containers recorded it: the runner's report checked against
the kubelet's record, or what a lost, stopped or unreadable attempt leaves (pure)."""

from __future__ import annotations

from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.contract.plan import EXIT_NOT_CONFINED
from harness_operator.contract.result import (
    NETWORK_NOT_CONFINED,
    ResultDocument,
    ResultProblem,
    parse_termination_message,
)
from harness_operator.core.objects.naming import CLONE_CONTAINER

CLONE_MESSAGE_CHARS = 500
# A lost attempt ends with a non-zero exit that no limit caused: fallback follows, as after a crash.
EXIT_LOST = 1


def container_state(pod: dict[str, Any] | None, name: str, kind: str = "containerStatuses") -> dict[str, Any]:
    statuses = ((pod or {}).get("status") or {}).get(kind) or []
    found: dict[str, Any] = next((s for s in statuses if s.get("name") == name), {})
    return dict(found.get("state") or {})


def pod_init_containers(pod: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list(((pod or {}).get("spec") or {}).get("initContainers") or [])


def lost_result(index: int, provider: str, what: str) -> ResultDocument:
    """The result of an attempt whose Job or pod went away before it reported."""
    return ResultDocument(
        attempt=index,
        provider=provider,
        exit_code=EXIT_LOST,
        reason=Reason.JobLost,
        message=f"{what} before attempt {index} finished; the attempt is not run again",
    )


def preempted_result(index: int, provider: str, why: str) -> ResultDocument:
    """The result of an attempt Kueue took back after it started (preempted or evicted)."""
    return ResultDocument(
        attempt=index,
        provider=provider,
        exit_code=EXIT_LOST,
        reason=Reason.Preempted,
        message=f"{why}; attempt {index} is not run again",
    )


def credentials_missing_result(index: int, provider: str, why: str) -> ResultDocument:
    """The result of an attempt whose pod cannot start for a Secret its cluster does not hold."""
    return ResultDocument(
        attempt=index, provider=provider, exit_code=1, reason=Reason.CredentialsMissing, message=why
    )


def queue_unavailable_result(index: int, provider: str, why: str) -> ResultDocument:
    """The result of an attempt its Kueue queue cannot run (MultiKueue dispatched it to a worker cluster
    the operator cannot reach)."""
    return ResultDocument(
        attempt=index, provider=provider, exit_code=EXIT_LOST, reason=Reason.QueueUnavailable, message=why
    )


def explain_stop(
    result: ResultDocument, failed: dict[str, Any] | None, cancelled: bool, job: str
) -> ResultDocument:
    """The runner reports Cancelled whenever it is sent SIGTERM; unless spec.cancel asked for it, the
    Job's deadline or someone deleting, evicting or draining the pod stopped it."""
    if result.reason != Reason.Cancelled or cancelled:
        return result
    if failed is not None and failed.get("reason") == "DeadlineExceeded":
        return result.model_copy(
            update={"reason": Reason.Timeout, "message": f"Job {job} passed its activeDeadlineSeconds"}
        )
    lost = lost_result(result.attempt, result.provider, f"the pod of Job {job} was stopped from outside")
    return result.model_copy(update=lost.model_dump(include={"exit_code", "reason", "message"}))


def read_result(
    index: int, provider: str, terminated: dict[str, Any], agent: dict[str, Any] | None
) -> tuple[ResultDocument, bool]:
    """The runner's result from its container's termination message, parsed once, checked against
    the kubelet's record of both containers (`agent`: the agent container's terminated state, if it
    ended); and whether it was the runner's report. Without one, what the container's end says; one
    this operator cannot use is ResultUnreadable, never a crash."""
    parsed = parse_termination_message(terminated.get("message") or "")
    exit_code = terminated.get("exitCode", 1)
    if isinstance(parsed, ResultProblem):
        unreadable = ResultDocument(
            attempt=index,
            provider=provider,
            exit_code=exit_code or 1,
            reason=Reason.ResultUnreadable,
            message=parsed.message,
        )
        return unreadable, False
    if parsed is None:
        reason = Reason.OOMKilled if terminated.get("reason") == Reason.OOMKilled else Reason.ProviderFailed
        ended = ResultDocument(
            attempt=index,
            provider=provider,
            exit_code=exit_code,
            reason=reason,
            message=f"the runner's container ended ({terminated.get('reason')}) without a result",
        )
        return ended, False
    # The essentials-only form of a long message leaves out attempt and provider: ours fill them in.
    unset = {"index": index, "provider": provider}.items()
    result = parsed.model_copy(update={k: v for k, v in unset if k not in parsed.model_fields_set})
    return compute_checked_result(result, exit_code, agent), True


def compute_checked_result(
    result: ResultDocument, runner_exit: int, agent: dict[str, Any] | None
) -> ResultDocument:
    """The runner's report as the kubelet's record allows it: the runner's container's own exit code
    must be the report's, and a success needs the agent's container to have exited as the report says
    the agent did (a forged exit status fools the runner, never the kubelet); otherwise
    ResultContradicted (exit 1, fallback follows). An agent container the kernel killed for memory
    makes a failed attempt OOMKilled."""
    problems = []
    if runner_exit != result.exit_code:
        problems.append(f"the runner's container exited {runner_exit} but its report says {result.exit_code}")
    agent_exit = None if agent is None else agent.get("exitCode")
    # The exit the runner saw (an ACP adapter is killed at the session's end: 137), else 0: a launcher
    # given nothing to run (a remote agent) ends with 0.
    expected = 0 if result.agent_exit_code is None else result.agent_exit_code
    if result.succeeded and agent_exit != expected:
        seen = "had not ended" if agent is None else f"exited {agent_exit} ({agent.get('reason')})"
        problems.append(f"the report says the agent exited {expected}, but its container {seen}")
    if problems:
        message = "; ".join(problems) + ": the attempt is not trusted as a success"
        return result.model_copy(
            update={"exit_code": runner_exit or 1, "reason": Reason.ResultContradicted, "message": message}
        )
    if not result.succeeded and agent is not None and agent.get("reason") == Reason.OOMKilled:
        limit = "the agent's container ran out of memory (sandbox.resources.limits.memory)"
        return result.model_copy(update={"reason": Reason.OOMKilled, "message": limit})
    return result


def compute_clone_failure(index: int, provider: str, terminated: dict[str, Any]) -> ResultDocument:
    """The workspace's clone failed, so the agent never started: its wait for the network policy
    (NetworkNotConfined, no fallback) or git itself (SetupFailed), named by the last line it logged."""
    code = int(terminated.get("exitCode") or 1)
    lines = [line for line in str(terminated.get("message") or "").splitlines() if line.strip()]
    said = lines[-1][:CLONE_MESSAGE_CHARS] if lines else str(terminated.get("reason") or "no message")
    if code == EXIT_NOT_CONFINED:
        return ResultDocument(
            attempt=index, provider=provider, exit_code=1, reason=NETWORK_NOT_CONFINED, message=said
        )
    message = f"the workspace's clone (init container {CLONE_CONTAINER}) exited {code}: {said}"
    return ResultDocument(
        attempt=index, provider=provider, exit_code=1, reason=Reason.SetupFailed, message=message
    )
