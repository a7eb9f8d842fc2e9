"""classify: which API errors are retried, after how long, and which stop a run with a reason."""

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from harness_operator.controller.errors import (
    RETRY,
    LogNotComplete,
    Permanent,
    Temporary,
    classify,
    retries_of,
)

MAX_DELAY_SECONDS = RETRY["api"].max_delay_seconds
FORBIDDEN_RETRIES = retries_of("forbidden")
LOG_RETRIES = retries_of("log")


def api_error(status: int, headers: dict[str, str] | None = None) -> ApiException:
    exc = ApiException(status=status, reason="Reason")
    exc.headers = headers
    exc.body = '{"message": "spec.x: Invalid value"}'
    return exc


@pytest.mark.parametrize(
    ("exc", "attempt", "expected"),
    [
        (api_error(409), 0, Temporary(1.0, "API server answered 409 Reason")),
        (api_error(503), 2, Temporary(4.0, "API server answered 503 Reason")),
        (api_error(500), 30, Temporary(MAX_DELAY_SECONDS, "API server answered 500 Reason")),
        (api_error(429, {"Retry-After": "7"}), 0, Temporary(7.0, "API server throttled us")),
        (api_error(429), 1, Temporary(2.0, "API server throttled us")),
        (api_error(404), 0, Temporary(1.0, "API server answered 404 Reason")),
        # an API server that just started refuses until its RBAC cache fills: retried, then it stops
        (api_error(403), 0, Temporary(1.0, "API server answered 403 Reason (retry 1)")),
        (api_error(403), FORBIDDEN_RETRIES - 1, Temporary(4.0, "API server answered 403 Reason (retry 3)")),
        (
            api_error(403),
            FORBIDDEN_RETRIES,
            Permanent("Forbidden", "the operator is not allowed to do this: Reason; check its RBAC"),
        ),
        (
            api_error(422),
            0,
            Permanent("InvalidObject", "the API server refused an object: spec.x: Invalid value"),
        ),
        (ConnectionError("refused"), 0, Temporary(1.0, "cannot reach the API server: refused")),
        (ProtocolError("reset"), 1, Temporary(2.0, "cannot reach the API server: reset")),
    ],
)
def test_classify(exc: Exception, attempt: int, expected: Temporary | Permanent) -> None:
    assert classify(exc, attempt) == expected


def test_anything_else_is_raised_again() -> None:
    with pytest.raises(KeyError):
        classify(KeyError("bug"))


def test_an_output_not_yet_in_the_log_is_read_again_with_backoff():
    """A finished attempt's log may lag its container's recorded end: temporary, with the usual backoff
    (the reconciler reads it LOG_RETRIES times before the attempt is left without output)."""
    assert classify(LogNotComplete("not in its log yet"), 0) == Temporary(1.0, "not in its log yet")
    assert classify(LogNotComplete("not in its log yet"), 3) == Temporary(8.0, "not in its log yet")
    assert LOG_RETRIES >= 3
