"""classify(exception): retry with a bounded delay, stop with a reason users can read, or re-raise."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from harness_operator.api.reasons import Reason

Failure = Literal["api", "forbidden", "log", "meter"]


@dataclass(frozen=True)
class RetryPolicy:
    """How one kind of failure is tried again: `retries` times before it is final (None: for as long as
    it takes), each after compute_backoff's delay, at most `max_delay_seconds`."""

    retries: int | None
    max_delay_seconds: float = 60.0


# Every retry policy of the operator, in one table.
RETRY: Final[Mapping[Failure, RetryPolicy]] = {
    # Conflicts, 429, 5xx, transport errors: a run is never left unreconciled.
    "api": RetryPolicy(None),
    # A kube-apiserver that just started answers 403 to every client until its RBAC cache fills (seen
    # twice, 60 ms apart, by the fault tests): a 403 is retried this many times (1 + 2 + 4 s) before it
    # stops a run.
    "forbidden": RetryPolicy(3),
    # A finished attempt's log may lag its container's recorded end: read again this many times.
    "log": RetryPolicy(4),
    # A meter the model gateway does not serve (backing off to about two minutes in all), before the
    # attempt counts what its sandbox reported.
    "meter": RetryPolicy(7),
}


def retries_of(failure: Failure) -> int:
    """The bounded number of retries of `failure` (a policy without end has none to count)."""
    retries = RETRY[failure].retries
    assert retries is not None, f"{failure} is retried without end"
    return retries


@dataclass(frozen=True)
class Temporary:
    """Worth retrying after `delay` seconds."""

    delay: float
    message: str


@dataclass(frozen=True)
class Permanent:
    """Retrying cannot help: the run gets a condition with this reason."""

    reason: str
    message: str


class LogNotComplete(Exception):
    """A finished attempt's output frame is not (yet) in its log: worth reading again."""


def _retry_after(exc: ApiException) -> float | None:
    value = (exc.headers or {}).get("Retry-After") if exc.headers else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class MeterUnavailable(Exception):
    """The model gateway did not answer for an attempt's meter: retried, as the run cannot end without it."""


def compute_backoff(attempt: int) -> float:
    """Seconds before retry number `attempt + 1`: 1 s doubling, at most the API policy's maximum."""
    return min(RETRY["api"].max_delay_seconds, 2.0 ** min(attempt, 6))


def classify(exc: BaseException, attempt: int = 0) -> Temporary | Permanent:
    """Conflicts, 429, 5xx and transport errors are temporary; invalid objects are permanent, and so
    are denials from the forbidden policy's last retry (`attempt` counts the retries so far)."""
    backoff = compute_backoff(attempt)
    if isinstance(exc, ApiException):
        status = exc.status or 0
        if status == 429:
            return Temporary(
                min(RETRY["api"].max_delay_seconds, _retry_after(exc) or backoff), "API server throttled us"
            )
        if status == 409 or status >= 500:
            return Temporary(backoff, f"API server answered {status} {exc.reason}")
        if status == 403 and attempt < retries_of("forbidden"):
            return Temporary(backoff, f"API server answered 403 {exc.reason} (retry {attempt + 1})")
        if status == 403:
            return Permanent(
                Reason.Forbidden, f"the operator is not allowed to do this: {exc.reason}; check its RBAC"
            )
        if status in (400, 422):
            return Permanent(Reason.InvalidObject, f"the API server refused an object: {_body_message(exc)}")
        return Temporary(backoff, f"API server answered {status} {exc.reason}")
    if isinstance(exc, HTTPError | ConnectionError | TimeoutError):
        return Temporary(backoff, f"cannot reach the API server: {exc}")
    if isinstance(exc, LogNotComplete | MeterUnavailable):
        return Temporary(backoff, str(exc))
    raise exc


def _body_message(exc: ApiException) -> str:
    try:
        return str(json.loads(exc.body or "{}").get("message") or exc.reason)
    except ValueError:
        return str(exc.reason)
