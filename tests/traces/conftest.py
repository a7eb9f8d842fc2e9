"""The traces tier: tests against a real Jaeger (tests/cluster/jaeger) on the test cluster's node address.

Runs with HARNESS_TRACES=1 (`make trace-test`), which starts Jaeger here, building it from the Go module proxy
on first use; without it, only when a Jaeger started earlier answers. Jaeger binds the node's bridge address,
so the cluster must be up (tests/cluster/up). Every test exports traces of its own random ids, so a Jaeger
that keeps running between sessions serves them all.
"""

from __future__ import annotations

import os
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.lib.jaeger import Jaeger, script_output

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.traces)


def _is_running() -> bool:
    """Whether a Jaeger tests/cluster/jaeger started earlier answers on its query API."""
    try:
        with urllib.request.urlopen(f"{script_output('query-url')}/api/services", timeout=5):
            return True
    except (OSError, subprocess.CalledProcessError):
        return False


@pytest.fixture(scope="session")
def jaeger() -> Jaeger:
    """The running Jaeger's OTLP and query URLs (started, and on first use built, with HARNESS_TRACES=1)."""
    if os.environ.get("HARNESS_TRACES") != "1" and not _is_running():
        pytest.skip(
            "no Jaeger is running: set HARNESS_TRACES=1 (make trace-test) to build it from the Go module "
            "proxy on first use and start it, or run tests/cluster/jaeger start (the cluster must be up)"
        )
    try:
        return Jaeger.from_cluster()
    except RuntimeError as exc:
        pytest.fail(f"Jaeger did not start: {exc}")
