"""The runner's wait for the agent's first destinations, with real sockets: a destination that starts
accepting late is waited for, one that never does ends the wait with its name after the bound (never a
hang), and the destinations are the ones the agent's environment sends it to."""

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress

from harness_operator.runner.network import (
    Destination,
    await_destinations,
    describe_reached,
    find_destinations,
)


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


@contextmanager
def listening_after(port: int, delay: float) -> Iterator[None]:
    """A listener on `port` from `delay` seconds on: a network that becomes ready while the pod starts."""
    stop = threading.Event()

    def serve() -> None:
        if stop.wait(delay):
            return
        with socket.create_server(("127.0.0.1", port)) as server:
            server.settimeout(0.1)
            while not stop.is_set():
                with suppress(TimeoutError):
                    server.accept()[0].close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def test_a_destination_that_answers_late_is_waited_for() -> None:
    port = free_port()
    target = Destination("127.0.0.1", port, "ANTHROPIC_BASE_URL")
    with listening_after(port, 1.0):
        found = await_destinations([target], seconds=20)
    assert found.unreachable == () and 0.9 <= found.seconds < 10 and found.tries > 1
    assert f"network ready: 127.0.0.1:{port} (ANTHROPIC_BASE_URL) answered" in describe_reached(
        [target], found
    )


def test_a_destination_that_never_answers_ends_the_wait_with_its_name() -> None:
    ready, never = free_port(), free_port()
    targets = [
        Destination("127.0.0.1", ready, "HTTPS_PROXY"),
        Destination("127.0.0.1", never, "OPENAI_BASE_URL"),
    ]
    start = time.monotonic()
    with listening_after(ready, 0.0):
        found = await_destinations(targets, seconds=1.5)
    assert 1.5 <= time.monotonic() - start < 10
    assert [d.port for d in found.unreachable] == [never]
    line = describe_reached(targets, found)
    assert f"could not connect to 127.0.0.1:{never} (OPENAI_BASE_URL)" in line and "HTTPS_PROXY" not in line


def test_a_cancelled_attempt_stops_waiting() -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    start = time.monotonic()
    found = await_destinations(
        [Destination("127.0.0.1", free_port(), "X_BASE_URL")], seconds=60, cancel=cancel
    )
    assert found.unreachable and time.monotonic() - start < 5


def test_the_destinations_are_the_proxy_or_the_base_urls() -> None:
    routed = {
        "ANTHROPIC_BASE_URL": "http://harness-operator-model.harness-system.svc:8080/anthropic",
        "OPENAI_API_BASE": "https://api.example.com/v1",
        "GIT_URL": "https://github.com/o/r",  # not where the agent's model calls go
        "ANTHROPIC_API_KEY": "token",
    }
    assert find_destinations(routed) == [
        Destination("harness-operator-model.harness-system.svc", 8080, "ANTHROPIC_BASE_URL"),
        Destination("api.example.com", 443, "OPENAI_API_BASE"),
    ]
    proxied = {
        **routed,
        "HTTPS_PROXY": "http://run-a:secret-credential@egress.harness-system.svc:3128",
        "NO_PROXY": "127.0.0.1,localhost,10.0.0.0/8,.svc",
        "LOCAL_BASE_URL": "http://10.1.2.3:9000",
    }
    found = find_destinations(proxied)
    assert found == [
        Destination("egress.harness-system.svc", 3128, "HTTPS_PROXY"),  # its credential is not kept
        Destination("harness-operator-model.harness-system.svc", 8080, "ANTHROPIC_BASE_URL"),  # NO_PROXY .svc
        Destination("10.1.2.3", 9000, "LOCAL_BASE_URL"),  # NO_PROXY's CIDR
    ]
    assert "secret-credential" not in " ".join(str(d) for d in found)
    assert (
        find_destinations({"X_BASE_URL": "not a url", "Y_BASE_URL": "ftp://h/", "Z_BASE_URL": "http://h:bad"})
        == []
    )
    assert find_destinations({}) == []


def test_the_plans_model_destinations_are_waited_for_as_base_urls_are() -> None:
    """Codex, OpenCode and Pi read the gateway's URL from options or files: the plan names it."""
    gateway = "http://harness-operator-model.harness-system.svc:8080/openai"
    named = Destination("harness-operator-model.harness-system.svc", 8080, "model destination")
    assert find_destinations({"OPENAI_API_KEY": "token"}, [gateway]) == [named]
    # Named by the environment too (Claude Code): once, by its variable.
    both = find_destinations({"ANTHROPIC_BASE_URL": gateway.replace("openai", "anthropic")}, [gateway])
    assert both == [Destination(named.host, 8080, "ANTHROPIC_BASE_URL")]
    # Behind a proxy, only where NO_PROXY sends it around the proxy.
    proxy = {"HTTPS_PROXY": "http://egress.harness-system.svc:3128"}
    assert find_destinations(proxy, [gateway]) == [
        Destination("egress.harness-system.svc", 3128, "HTTPS_PROXY")
    ]
    assert find_destinations({**proxy, "NO_PROXY": ".svc"}, [gateway])[1:] == [named]
    # Its userinfo and query are never kept; what is not an http(s) URL is no destination.
    found = find_destinations({}, ["https://user:s3cret@gw.example/v1?key=s3cret", "ftp://gw.example/"])
    assert found == [Destination("gw.example", 443, "model destination")]
    assert "s3cret" not in str(found[0])
