"""Retries: the attempt numbers each provider owns, which attempt follows a failure, and the backoff."""

from datetime import UTC, datetime

import pytest
import yaml

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRunSpec, RetryOn, RetryPolicy
from harness_operator.contract.result import NO_FALLBACK_REASONS
from harness_operator.core.resolve.retry import (
    TRANSIENT_REASONS,
    backoff_seconds,
    build_positions,
    compute_next_index,
    compute_retry_due,
    is_retried,
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
TRANSIENT = RetryPolicy(limit=2)
ANY = RetryPolicy(limit=2, retry_on=RetryOn.any)
# Every reason an attempt's result can carry, with the exit code it comes with: the runner's stop (124),
# a CLI's own failure (its exit code), the cluster's or the runner's (1). MaxTurns is the agent's failure.
ATTEMPT_FAILURES = {
    **{reason: 1 for reason in TRANSIENT_REASONS},
    Reason.ProviderFailed: 3,
    Reason.ProviderError: 1,
    Reason.AuthFailed: 1,
    Reason.MaxTurns: 1,
    Reason.PermissionDenied: 1,
    Reason.Truncated: 1,
    Reason.BinaryNotFound: 1,
    Reason.CredentialsMissing: 1,
    Reason.SetupFailed: 1,
    Reason.OOMKilled: 137,
    Reason.ResultContradicted: 1,
    Reason.ResultUnreadable: 1,
    Reason.Timeout: 124,
    Reason.Cancelled: 124,
    Reason.CostLimitExceeded: 124,
    Reason.NetworkNotConfined: 1,
    Reason.QueueUnavailable: 1,
}
RUN_ENDING = {
    Reason.Timeout,
    Reason.Cancelled,
    Reason.CostLimitExceeded,
    Reason.NetworkNotConfined,
    Reason.QueueUnavailable,
}


@pytest.mark.parametrize("policy", [TRANSIENT, ANY], ids=["Transient", "Any"])
@pytest.mark.parametrize("reason", sorted(TRANSIENT_REASONS))
def test_a_transient_failure_retries_the_same_provider_while_it_has_numbers(
    reason: str, policy: RetryPolicy
) -> None:
    assert compute_next_index(POSITIONS, 1, policy, reason, 1) == 2
    assert compute_next_index(POSITIONS, 2, policy, reason, 1) == 3
    assert compute_next_index(POSITIONS, 3, policy, reason, 1) == 4  # out of retries: the fallback
    assert compute_next_index(POSITIONS, 6, policy, reason, 1) is None  # nothing left


@pytest.mark.parametrize(
    "reason", [*sorted(set(ATTEMPT_FAILURES) - TRANSIENT_REASONS - RUN_ENDING, key=str), None]
)
def test_another_failure_goes_to_the_fallback_on_transient_and_is_retried_on_any(reason: str | None) -> None:
    code = ATTEMPT_FAILURES[reason] if reason else 2  # None: a plain non-zero exit
    assert compute_next_index(POSITIONS, 1, TRANSIENT, reason, code) == 4
    assert compute_next_index(POSITIONS, 5, TRANSIENT, reason, code) is None
    assert compute_next_index(POSITIONS, 1, ANY, reason, code) == 2
    assert compute_next_index(POSITIONS, 3, ANY, reason, code) == 4  # out of retries: the fallback
    assert compute_next_index(POSITIONS, 5, ANY, reason, code) == 6


@pytest.mark.parametrize("policy", [None, TRANSIENT, ANY], ids=["none", "Transient", "Any"])
@pytest.mark.parametrize("reason", sorted(RUN_ENDING))
def test_a_limit_a_cancel_or_the_cluster_ends_the_run_whatever_the_policy(
    reason: str, policy: RetryPolicy | None
) -> None:
    assert not is_retried(policy, reason, ATTEMPT_FAILURES[reason])
    assert compute_next_index(POSITIONS, 1, policy, reason, ATTEMPT_FAILURES[reason]) is None


def test_any_excludes_exactly_what_ends_the_run_for_a_fallback_too_and_says_so() -> None:
    assert RUN_ENDING == NO_FALLBACK_REASONS
    described = RetryPolicy.model_fields["retry_on"].description or ""
    assert all(reason in described for reason in RUN_ENDING | TRANSIENT_REASONS)


def test_exit_codes_narrow_either_policy_to_the_codes_listed() -> None:
    any_of = RetryPolicy(limit=2, retry_on=RetryOn.any, exit_codes=[3, 137])
    assert compute_next_index(POSITIONS, 1, any_of, Reason.ProviderFailed, 3) == 2
    assert compute_next_index(POSITIONS, 1, any_of, Reason.OOMKilled, 137) == 2
    assert compute_next_index(POSITIONS, 1, any_of, Reason.ProviderFailed, 2) == 4  # not listed: fallback
    assert compute_next_index(POSITIONS, 1, any_of, Reason.Timeout, 124) is None  # listed or not
    transient_of = RetryPolicy(limit=2, exit_codes=[1])
    assert compute_next_index(POSITIONS, 1, transient_of, Reason.RateLimited, 1) == 2
    assert compute_next_index(POSITIONS, 1, transient_of, Reason.ProviderFailed, 1) == 4  # not transient


def test_without_a_policy_nothing_is_retried() -> None:
    assert not is_retried(None, Reason.RateLimited, 1)
    assert compute_next_index([1, 2], 1, None, Reason.RateLimited, 1) == 2  # the fallback


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
    assert (policy.retry_on, policy.exit_codes) == ("Transient", None)
    # As a manifest is written: YAML 1.1 would read a key named `on` as true.
    written = yaml.safe_load("{limit: 1, retryOn: Any, exitCodes: [1, 3]}")
    assert RetryPolicy.model_validate(written).to_api() == {
        "limit": 1,
        "retryOn": "Any",
        "exitCodes": [1, 3],
    }
    bad_policies = (
        {"limit": 0},
        {"limit": 6},
        {"limit": 1, "backoffSeconds": -1},
        {"limit": 1, "retryOn": "Always"},
        {"limit": 1, "exitCodes": []},
        {"limit": 1, "exitCodes": [0]},
        {"limit": 1, "exitCodes": [256]},
    )
    for bad in bad_policies:
        with pytest.raises(ValueError):
            RetryPolicy.model_validate(bad)
