"""Retries: a provider's attempt repeated after a failure spec.retry names, before fallback moves on (pure).

Each provider of the chain (spec.provider, then each spec.fallback[]) owns 1 + spec.retry.limit attempt
numbers, in order. An attempt's number, and with it its Job, plan, tokens and grants, is fixed before
the first attempt starts, so a retry is an attempt like any other and none runs twice; retries a run
does not need leave their numbers unused (claude fails for good as attempt 1 of 2 retries: the fallback
is attempt 4).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRunSpec, RetryOn, RetryPolicy
from harness_operator.contract.result import is_fallback_allowed
from harness_operator.contract.times import timestamp

# The closed set of reasons a retry can cure: the vendor was busy or down, the cluster lost the pod, or
# Kueue took it back for another workload.
TRANSIENT_REASONS = frozenset(
    {Reason.RateLimited, Reason.ProviderUnavailable, Reason.JobLost, Reason.PodFailed, Reason.Preempted}
)


def build_positions(spec: HarnessRunSpec) -> list[int]:
    """The provider chain position (1-based) of each attempt number: attempt i runs position
    positions[i - 1]."""
    tries = 1 + (spec.retry.limit if spec.retry else 0)
    return [position for position in range(1, 2 + len(spec.fallback)) for _ in range(tries)]


def is_retried(policy: RetryPolicy | None, reason: str | None, exit_code: int) -> bool:
    """Whether spec.retry retries a failed attempt that ended with `reason` and `exit_code`: on Transient,
    a reason of TRANSIENT_REASONS; on Any (Dagu's retry_policy), every failure a fallback may follow (what
    ends the run for every provider, a timeout, a cancel, a cost cap, ends it for a retry too); either
    only with an exit code among exitCodes, when set."""
    if policy is None or (policy.exit_codes and exit_code not in policy.exit_codes):
        return False
    if policy.retry_on == RetryOn.any:
        return is_fallback_allowed(exit_code, reason)
    return reason in TRANSIENT_REASONS


def compute_next_index(
    positions: Sequence[int], failed: int, policy: RetryPolicy | None, reason: str | None, exit_code: int
) -> int | None:
    """The attempt after attempt `failed` ended with `reason` and `exit_code`: the same provider's next
    number when `policy` retries it and the provider has one, else the next provider's first (when a
    fallback may follow)."""
    position = positions[failed - 1]
    if is_retried(policy, reason, exit_code) and failed < len(positions) and positions[failed] == position:
        return failed + 1
    if not is_fallback_allowed(exit_code, reason):
        return None
    return next((i for i, p in enumerate(positions, start=1) if p == position + 1), None)


def retry_number(positions: Sequence[int], index: int) -> int:
    """Which retry attempt `index` is of its provider: 0 for the provider's first attempt (and for a
    number past the run's last)."""
    if not 1 <= index <= len(positions):
        return 0
    position = positions[index - 1]
    return sum(1 for p in positions[: index - 1] if p == position)


def backoff_seconds(policy: RetryPolicy | None, nth: int) -> int:
    """The wait before a provider's `nth` retry (1-based): doubled each time, at most the maximum."""
    if policy is None or nth < 1:
        return 0
    return int(min(policy.backoff_seconds * 2 ** (nth - 1), policy.max_backoff_seconds))


def compute_retry_due(policy: RetryPolicy | None, nth: int, ended: datetime) -> datetime:
    """When the `nth` retry may start, its predecessor having ended at `ended`."""
    return ended + timedelta(seconds=backoff_seconds(policy, nth))


def retry_line(
    failed: int, total: int, provider: str, reason: str | None, nth: int, limit: int, index: int
) -> str:
    """The Event and status message of a retry: which attempt failed why, which retry follows."""
    return (
        f"attempt {failed}/{total} with {provider} failed ({reason}); "
        f"retry {nth}/{limit} with {provider} as attempt {index}/{total}"
    )


def retry_waiting_message(line: str, due: datetime) -> str:
    """The message while a retry waits out its backoff; the due time, not a countdown, so the status
    does not change until the retry starts."""
    return f"{line} at {timestamp(due)}"
