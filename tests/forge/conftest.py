"""The forge tier: tests against a real Gitea (tests/cluster/gitea) on the test cluster's node address.

Runs with HARNESS_FORGE=1 (`make forge-test`), which starts Gitea here, building it from the Go module proxy
on first use; without it, only when a Gitea started earlier answers. Gitea binds the node's bridge address,
so the cluster must be up (tests/cluster/up). Every test makes its own users, tokens and repositories, so
a Gitea that keeps running between sessions serves them all.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.lib.gitea import SCRIPT, Gitea, GiteaError, User

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.forge)


def _running_url() -> str | None:
    """The URL of a Gitea tests/cluster/gitea started earlier, if it answers."""
    done = subprocess.run([str(SCRIPT), "url"], capture_output=True, text=True, check=False)
    url = done.stdout.strip()
    if done.returncode != 0 or not url:
        return None
    try:
        with urllib.request.urlopen(f"{url}/api/v1/version", timeout=5):
            return url
    except OSError:
        return None


@pytest.fixture(scope="session")
def gitea() -> Gitea:
    """The admin's client of the running Gitea (started, and on first use built, with HARNESS_FORGE=1)."""
    if os.environ.get("HARNESS_FORGE") != "1" and _running_url() is None:
        pytest.skip(
            "no Gitea is running: set HARNESS_FORGE=1 (make forge-test) to build it from the Go module "
            "proxy on first use and start it, or run tests/cluster/gitea start (the cluster must be up)"
        )
    try:
        return Gitea.from_cluster()
    except (RuntimeError, GiteaError) as exc:
        pytest.fail(f"Gitea did not start: {exc}")


@pytest.fixture
def owner(gitea: Gitea) -> User:
    """A new user of this test's own (its repositories cannot collide with another test's or session's)."""
    return gitea.create_user(f"owner-{secrets.token_hex(4)}")
