"""Retries: the attempt numbers each provider owns, which attempt follows a failure, and the backoff."""

from datetime import UTC, datetime

import pytest

from harness_operator.api.v1alpha1 import HarnessRunSpec, RetryPolicy
from harness_operator.core.resolve.retry import (
    TRANSIENT_REASONS,
    backoff_seconds,
    build_positions,
    compute_next_index,
    compute_retry_due,
    retry_line,
    retry_number,
    retry_waiting_message,
)


def spec(**extra: object) -> HarnessRunSpec:
    return HarnessRunSpec.model_validate({"provider": "claude", "prompt": "p", **extra})


def test_each_provider_owns_one_number_per_try_in_chain_order() -> None:
    assert build_positions(spec()) == [1]
    assert build_positions(spec(fallback=[{"provider": "codex"}])) == [1, 2]
    chained = spec(fallback=[{"provider": "codex"}], retry={"limit": 2})
    assert build_positions(chained) == [1, 1, 1, 2, 2, 2]


POSITIONS = [1, 1, 1, 2, 2, 2]


@pytest.mark.parametrize("reason", sorted(TRANSIENT_REASONS))
def test_a_transient_failure_retries_the_same_provider_while_it_has_numbers(reason: str) -> None:
    assert compute_next_index(POSITIONS, 1, reason, True) == 2
    assert compute_next_index(POSITIONS, 2, reason, True) == 3
    assert compute_next_index(POSITIONS, 3, reason, True) == 4  # out of retries: the fallback
    assert compute_next_index(POSITIONS, 6, reason, True) is None  # nothing left


@pytest.mark.parametrize("reason", ["ProviderFailed", "AuthFailed", "MaxTurns", "ProviderError", None])
def test_any_other_failure_goes_to_the_next_providers_first_number(reason: str | None) -> None:
    assert compute_next_index(POSITIONS, 1, reason, True) == 4
    assert compute_next_index(POSITIONS, 5, reason, True) is None


@pytest.mark.parametrize("reason", ["Timeout", "Cancelled", "CostLimitExceeded", "NetworkNotConfined"])
def test_a_limit_or_a_cancel_is_neither_retried_nor_followed(reason: str) -> None:
    assert reason not in TRANSIENT_REASONS
    assert compute_next_index(POSITIONS, 1, reason, False) is None


def test_the_transient_reasons_are_a_closed_documented_set() -> None:
    assert {"RateLimited", "ProviderUnavailable", "JobLost", "PodFailed", "Preempted"} == TRANSIENT_REASONS


def test_retry_numbers_count_the_providers_earlier_tries() -> None:
    assert [retry_number(POSITIONS, i) for i in range(1, 7)] == [0, 1, 2, 0, 1, 2]
    assert retry_number(POSITIONS, 7) == 0


def test_the_backoff_doubles_and_is_capped() -> None:
    policy = RetryPolicy(limit=5, backoff_seconds=10, max_backoff_seconds=60)
    assert [backoff_seconds(policy, n) for n in range(1, 6)] == [10, 20, 40, 60, 60]
    assert backoff_seconds(None, 1) == 0 and backoff_seconds(policy, 0) == 0
    ended = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert compute_retry_due(policy, 2, ended) == datetime(2026, 12, 1, 8, 0, 20, tzinfo=UTC)


def test_the_lines_name_the_failure_the_retry_and_its_due_time() -> None:
    line = retry_line(1, 6, "claude", "RateLimited", 1, 2, 2)
    assert line == "attempt 1/6 with claude failed (RateLimited); retry 1/2 with claude as attempt 2/6"
    due = datetime(2026, 12, 1, 8, 0, 10, tzinfo=UTC)
    assert retry_waiting_message(line, due) == f"{line} at 2026-12-01T08:00:10Z"


def test_the_policy_is_bounded_and_defaults_its_backoff() -> None:
    policy = RetryPolicy.model_validate({"limit": 1})
    assert (policy.backoff_seconds, policy.max_backoff_seconds) == (10, 300)
    for bad in ({"limit": 0}, {"limit": 6}, {"limit": 1, "backoffSeconds": -1}):
        with pytest.raises(ValueError):
            RetryPolicy.model_validate(bad)
