"""Wait, before the agent starts, until the attempt's network policy is enforced (socket I/O).

The enforcer programs a pod's rules after the pod has started, so the runner probes an address the
policy denies (the plan's `confinement`: the API server) until a connection there fails. The
workspace's clone (an init container, before the runner) waits the same way first:

    python3 -I -m harness_operator.runner.confinement   # the probe as JSON in HARNESS_CONFINEMENT
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness_operator.contract.plan import CONFINEMENT_ENV, EXIT_NOT_CONFINED, ConfinementProbe

PROBE_TIMEOUT_SECONDS = 1.0
PROBE_INTERVAL_SECONDS = 0.05


@dataclass(frozen=True)
class Confinement:
    """What the wait found: refused (confined) or not by the deadline, after how long and how many tries."""

    confined: bool
    seconds: float
    tries: int


def connects(host: str, port: int, timeout: float = PROBE_TIMEOUT_SECONDS) -> bool:
    """One TCP connection attempt; refused, unreachable and timed out all count as not connecting."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def await_confinement(
    probe: ConfinementProbe,
    *,
    connect: Callable[[str, int], bool] = connects,
    clock: Callable[[], float] = time.monotonic,
    cancel: threading.Event | None = None,
) -> Confinement:
    """Probe until a connection fails, the plan's timeout passes or the attempt is cancelled."""
    cancel = cancel or threading.Event()
    start = clock()
    tries = 0
    while True:
        tries += 1
        if not connect(probe.host, probe.port):
            return Confinement(True, clock() - start, tries)
        if clock() - start >= probe.timeout_seconds or cancel.wait(PROBE_INTERVAL_SECONDS):
            return Confinement(False, clock() - start, tries)


def describe_confinement(probe: ConfinementProbe, found: Confinement) -> str:
    """The runner's log line for the wait (the address is the cluster's API server, no secret)."""
    where = f"{probe.host}:{probe.port}"
    if found.confined:
        seconds, tries = f"{found.seconds:.2f}", found.tries
        return f"harness: network policy enforced: {where} refused after {seconds} s ({tries} tries)"
    return (
        f"harness: the network policy was not enforced after {found.seconds:.0f} s: the sandbox still "
        f"connects to {where} (the API server), which its policy denies. The cluster's CNI does not enforce "
        "NetworkPolicy: install an enforcer, or set the chart's networkPolicy.awaitEnforcement to warn "
        "(start agents unconfined) or off"
    )


def main() -> int:
    """The init container's wait: 0 once confined (or not required), else EXIT_NOT_CONFINED."""
    probe = ConfinementProbe.model_validate_json(os.environ[CONFINEMENT_ENV])
    found = await_confinement(probe)
    print(describe_confinement(probe, found), file=sys.stderr, flush=True)
    return EXIT_NOT_CONFINED if not found.confined and probe.required else 0


if __name__ == "__main__":
    sys.exit(main())
