"""Wait, before the agent starts, until the destinations its environment names accept a connection
(parsing: pure; the wait: socket I/O).

A new pod's network is programmed after it starts (the enforcer's rules, the node's routes): a CLI whose
first connection is dropped then may wait minutes on its own connect and retry timeouts before it says
anything. So the runner connects first to where the agent will: the proxy it is given (HTTPS_PROXY), else
each base URL of its plan's environment (`*_BASE_URL`, `*_API_BASE`: a run's own endpoint) and each of the
plan's model destinations (the model gateway's, which Codex, OpenCode and Pi read from options or files),
retrying briefly, and fails the attempt naming the destination when one never answers.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from harness_operator.runner.confinement import connects

READY_SECONDS = 30.0  # as long as the wait for the policy: the enforcer's and the routes' programming
RETRY_SECONDS = 0.2
PROXY_ENVS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
NO_PROXY_ENVS = ("NO_PROXY", "no_proxy")
BASE_URL_SUFFIXES = ("_BASE_URL", "_API_BASE")
MODEL_DESTINATION = "model destination"  # what names a destination of the plan's model_destinations


@dataclass(frozen=True)
class Destination:
    host: str
    port: int
    named_by: str  # the variable or plan field that names it (its value may hold a credential: never shown)

    def __str__(self) -> str:
        return f"{self.host}:{self.port} ({self.named_by})"


@dataclass(frozen=True)
class Reached:
    """What the wait found: the destinations that never answered (none: ready), after how long."""

    unreachable: tuple[Destination, ...]
    seconds: float
    tries: int


def find_destinations(env: Mapping[str, str], model_destinations: Sequence[str] = ()) -> list[Destination]:
    """Where the agent's first connections go, from its environment and its plan's model destinations: the
    proxy when one is set (and the URLs NO_PROXY sends around it), else every base URL and destination."""
    proxy = next((parse(env[n], n) for n in PROXY_ENVS if env.get(n)), None)
    bypass = [e.strip() for n in NO_PROXY_ENVS for e in env.get(n, "").split(",") if e.strip()]
    found = [proxy] if proxy else []
    named = [(env[n], n) for n in sorted(env) if n.endswith(BASE_URL_SUFFIXES)]
    for url, name in named + [(url, MODEL_DESTINATION) for url in model_destinations]:
        target = parse(url, name)
        if target is not None and (proxy is None or is_bypassed(target.host, bypass)):
            found.append(target)
    unique: dict[tuple[str, int], Destination] = {}
    for destination in found:
        unique.setdefault((destination.host, destination.port), destination)
    return list(unique.values())


def parse(url: str, name: str) -> Destination | None:
    """The host and port of an http(s) URL, or None for anything else."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return Destination(parts.hostname, port or (443 if parts.scheme == "https" else 80), name)


def is_bypassed(host: str, entries: Sequence[str]) -> bool:
    """Whether NO_PROXY's entries (names, domain suffixes, addresses, CIDRs, `*`) send `host` direct."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in entries:
        if entry == "*":
            return True
        if address is not None:
            try:
                if address in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        suffix = entry.lstrip(".").lower()
        if host.lower() == suffix or host.lower().endswith("." + suffix):
            return True
    return False


def await_destinations(
    destinations: Sequence[Destination],
    seconds: float = READY_SECONDS,
    *,
    connect: Callable[[str, int], bool] = connects,
    clock: Callable[[], float] = time.monotonic,
    cancel: threading.Event | None = None,
) -> Reached:
    """Connect to each destination until all have answered once, `seconds` pass or the attempt is
    cancelled."""
    cancel = cancel or threading.Event()
    start, tries = clock(), 0
    waiting = list(destinations)
    while True:
        tries += 1
        waiting = [d for d in waiting if not connect(d.host, d.port)]
        if not waiting or clock() - start >= seconds or cancel.wait(RETRY_SECONDS):
            return Reached(tuple(waiting), clock() - start, tries)


def describe_reached(destinations: Sequence[Destination], found: Reached) -> str:
    """The runner's log line, and the attempt's message when a destination never answered."""
    if not found.unreachable:
        names = ", ".join(str(d) for d in destinations)
        return f"harness: network ready: {names} answered after {found.seconds:.2f} s ({found.tries} tries)"
    names = ", ".join(str(d) for d in found.unreachable)
    return (
        f"harness: the sandbox could not connect to {names} for {found.seconds:.0f} s, so the agent was not "
        "started: the pod's network is not ready (its network policy or routes not programmed) or the "
        "destination is down or not allowed by the run's egress"
    )
