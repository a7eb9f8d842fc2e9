"""The model gateway's in-flight limits (per attempt, per namespace, below the upstream pool), the 429 each
vendor's CLI reads as a rate limit, and which upstream errors mean the request never reached the vendor."""

import json
import socket

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey

from harness_operator.modelgateway.fairness import InFlight, Limits, Slot, check_limits, is_unsent
from harness_operator.modelgateway.vendors import VENDORS


def test_an_attempt_past_its_limit_is_refused_naming_the_setting_and_others_go_on() -> None:
    flight = InFlight(Limits(per_attempt=2, per_namespace=3, upstream_connections=10))
    held = [flight.enter("team-a", "uid-1", "1") for _ in range(2)]
    assert all(isinstance(slot, Slot) for slot in held)
    refused = flight.enter("team-a", "uid-1", "1")
    assert isinstance(refused, str)
    assert "2 requests in flight" in refused and "modelGateway.maxInFlightPerAttempt" in refused
    # Another attempt of the same run, and of another namespace, still go.
    assert isinstance(flight.enter("team-a", "uid-1", "2"), Slot)
    assert isinstance(flight.enter("team-b", "uid-9", "1"), Slot)


def test_a_namespace_past_its_limit_is_refused_across_its_attempts_and_runs() -> None:
    flight = InFlight(Limits(per_attempt=2, per_namespace=3, upstream_connections=10))
    slots = [flight.enter("team-a", f"uid-{n}", "1") for n in range(3)]
    refused = flight.enter("team-a", "uid-new", "1")
    assert isinstance(refused, str)
    assert "namespace team-a" in refused and "modelGateway.maxInFlightPerNamespace" in refused
    assert isinstance(flight.enter("team-b", "uid-b", "1"), Slot)
    # A request that ends gives its place back, to its attempt and its namespace.
    first = slots[0]
    assert isinstance(first, Slot)
    flight.leave(first)
    assert isinstance(flight.enter("team-a", "uid-new", "1"), Slot)


def test_leaving_every_slot_leaves_nothing_counted() -> None:
    flight = InFlight(Limits(per_attempt=8, per_namespace=32, upstream_connections=100))
    slots = [flight.enter("team-a", f"uid-{n % 5}", str(n % 2)) for n in range(30)]
    for slot in slots:
        assert isinstance(slot, Slot)
        flight.leave(slot)
    assert not flight.attempts and not flight.namespaces  # no key left behind per attempt ever seen


def test_busy_namespaces_each_take_a_share_that_leaves_room_for_the_next() -> None:
    """Sixteen namespaces flooding a pool of 100: each takes at most the pool divided among the busy ones
    and one more, so a seventeenth still finds connections, where with a per-namespace limit alone the
    first three would hold all of them."""
    flight = InFlight(Limits(per_attempt=8, per_namespace=32, upstream_connections=100))
    held = {}
    for n in range(16):
        slots = [flight.enter(f"flood-{n}", f"uid-{n}-{a}", "1") for a in range(4) for _ in range(8)]
        held[n] = sum(isinstance(s, Slot) for s in slots)
    assert held[0] == 32 and held[1] == 32 and held[2] == 25 and held[3] == 11  # 100 // (busy + 1)
    assert flight.total == 100
    refused = flight.enter("normal", "uid-normal", "1")
    assert isinstance(refused, str) and "all 100 connections of this replica" in refused
    assert "modelGateway.upstreamConnections" in refused


def test_the_default_pool_lets_sixteen_namespaces_flood_and_another_still_go() -> None:
    flight = InFlight(Limits())
    for n in range(16):
        for a in range(15):
            assert isinstance(flight.enter(f"flood-{n}", f"uid-{n}-{a}", "1"), Slot)
    normal = [flight.enter("normal", "uid-normal", str(a)) for a in range(2) for _ in range(8)]
    assert all(isinstance(s, Slot) for s in normal)  # its 16 in flight, as if alone
    assert flight.share("another") == 512 // 19


def test_a_namespace_over_its_share_is_refused_naming_the_share() -> None:
    flight = InFlight(Limits(per_attempt=8, per_namespace=32, upstream_connections=12))
    for n in range(3):
        flight.enter(f"ns-{n}", f"uid-{n}", "1")  # three busy namespaces: a share of 12 // 4 = 3 each
    for _ in range(2):
        assert isinstance(flight.enter("ns-0", "uid-0", "1"), Slot)
    refused = flight.enter("ns-0", "uid-0", "1")
    assert isinstance(refused, str)
    assert "3 namespaces share this replica's connections" in refused and "its share of 3" in refused


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        (Limits(per_attempt=0), "at least 1"),
        (Limits(per_attempt=40, per_namespace=32), "per attempt (40) <= per namespace (32)"),
        (Limits(per_namespace=100, upstream_connections=100), "raise modelGateway.upstreamConnections"),
        (Limits(per_namespace=150, upstream_connections=100), "lower modelGateway.maxInFlightPerNamespace"),
    ],
)
def test_limits_that_let_one_tenant_hold_the_pool_are_refused(limits: Limits, fragment: str) -> None:
    why = check_limits(limits)
    assert why is not None and fragment in why


def test_the_defaults_hold_and_keep_a_namespace_below_the_pool() -> None:
    limits = Limits()
    assert check_limits(limits) is None
    assert limits.per_attempt < limits.per_namespace < limits.upstream_connections


@pytest.mark.parametrize(
    ("vendor", "path", "value"),
    [
        ("anthropic", ("error", "type"), "rate_limit_error"),
        ("openai", ("error", "code"), "rate_limit_exceeded"),
        ("gemini", ("error", "status"), "RESOURCE_EXHAUSTED"),
    ],
)
def test_a_limit_is_a_429_in_the_vendors_rate_limit_shape(
    vendor: str, path: tuple[str, str], value: str
) -> None:
    status, body = VENDORS[vendor].error(429, "limit", "rate_limit")
    document = json.loads(body)
    assert status == 429 and document[path[0]][path[1]] == value
    # Never OpenAI's insufficient_quota: that is a cap, which its CLI does not retry.
    assert "insufficient_quota" not in body.decode()


def _key() -> ConnectionKey:
    return ConnectionKey("api.example", 443, True, None, None, None, None)


@pytest.mark.parametrize(
    ("error", "unsent"),
    [
        (aiohttp.ClientConnectorError(_key(), ConnectionRefusedError(111, "refused")), True),
        (aiohttp.ClientConnectorDNSError(_key(), socket.gaierror(-2, "Name or service not known")), True),
        (
            aiohttp.ConnectionTimeoutError("Connection timeout to host"),
            True,
        ),  # no free connection in the pool
        (aiohttp.SocketTimeoutError("Timeout on reading data from socket"), False),  # sent, answer slow
        (aiohttp.ServerDisconnectedError(), False),  # may have been sent: the vendor may bill it
        (aiohttp.ClientPayloadError("cut"), False),
        (TimeoutError(), False),
    ],
)
def test_only_errors_before_the_request_was_sent_mean_it_never_reached_the_vendor(
    error: BaseException, unsent: bool
) -> None:
    assert is_unsent(error) is unsent
