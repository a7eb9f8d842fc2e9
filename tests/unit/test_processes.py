"""tests/lib/processes.py: what a test starts is gone whatever happens to the test or to pytest (real
processes, checked in /proc)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from tests.integration.operator_env import OperatorProcess
from tests.lib import processes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def silent_api_server(tmp_path: Path) -> Iterator[str]:
    """A kubeconfig naming an API server that takes connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        server = f"https://127.0.0.1:{sock.getsockname()[1]}"
        path = tmp_path / "kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}
                    ],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        yield str(path)


def test_an_operator_that_does_not_become_healthy_is_stopped_before_the_start_raises(
    silent_api_server: str, tmp_path: Path
) -> None:
    operator = OperatorProcess(kubeconfig=silent_api_server, env={}, log_path=tmp_path / "operator.log")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"operator not healthy within 5s; log: .*operator\.log"):
        operator.start(timeout=5)
    assert time.monotonic() - started < 30
    assert operator.proc is not None
    pid = operator.proc.pid
    assert operator.proc.returncode is not None, "reaped"
    assert not Path(f"/proc/{pid}").exists()
    assert processes.group_members(pid) == []


def test_stop_takes_the_whole_group_also_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    pidfile = tmp_path / "child"
    proc = processes.start(["sh", "-c", f"(trap '' TERM; exec sleep 300) & echo $! > {pidfile}; wait"])
    child = int(wait_for_text(pidfile))
    assert set(processes.group_members(proc.pid)) == {proc.pid, child}
    processes.stop(proc, grace=5)
    assert processes.wait_gone([proc.pid, child]) == []
    assert processes.group_members(proc.pid) == []


# A test that starts a shell (its background `sleep` a grandchild of pytest), writes both pids, and waits
# to be interrupted; it never stops the shell itself.
HELD = """
import time
from pathlib import Path

from tests.lib import processes


def test_held():
    child = Path({pidfile!r} + ".child")
    proc = processes.start(["sh", "-c", f"sleep 300 & echo $! > {{child}}; wait"])
    while not child.exists() or not child.read_text().strip():
        time.sleep(0.05)
    Path({pidfile!r}).write_text(f"{{proc.pid}} {{child.read_text().strip()}}")
    time.sleep(300)
"""


def held_session(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """A pytest session running HELD, once its shell and the shell's child run: (session, their pids)."""
    pidfile = tmp_path / "pids"
    test = tmp_path / "held" / "test_held.py"
    test.parent.mkdir()
    test.write_text(textwrap.dedent(HELD.format(pidfile=str(pidfile))))
    # pytest as a terminal runs it: a background job of a non-interactive shell (CI's tier without the
    # cluster) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler for it.
    argv = [str(test), "-q", "-p", "no:cacheprovider", "--rootdir", str(test.parent)]
    session = processes.start(
        [
            sys.executable,
            "-c",
            "import signal, sys, pytest; signal.signal(signal.SIGINT, signal.default_int_handler); "
            f"sys.exit(pytest.main({argv!r}))",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    pids = [int(p) for p in wait_for_text(pidfile).split()]
    for pid in pids:
        assert Path(f"/proc/{pid}").exists()
    return session, pids


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_pytest_stops_what_its_tests_started(tmp_path: Path, sig: signal.Signals) -> None:
    session, pids = held_session(tmp_path)
    try:
        os.kill(session.pid, sig)  # pytest alone, as CI's timeout does; the tree is in its own group
        session.wait(timeout=60)
        assert processes.wait_gone(pids) == [], f"left running after {sig.name}"
    finally:
        processes.stop(session, grace=5)


def test_a_killed_pytest_takes_its_child_along_and_the_next_session_names_what_is_left(
    tmp_path: Path,
) -> None:
    """SIGKILL leaves pytest no say: the kernel kills its direct child (PR_SET_PDEATHSIG); a grandchild
    survives, and `leftovers` names it by its dead starter."""
    session, (shell, grandchild) = held_session(tmp_path)
    try:
        os.kill(session.pid, signal.SIGKILL)
        session.wait(timeout=60)
        assert processes.wait_gone([shell]) == []
        assert any(line.startswith(f"{grandchild}: sleep 300") for line in processes.leftovers("sleep 300"))
    finally:
        processes.stop(session, grace=5)
        os.killpg(shell, signal.SIGKILL)
    assert processes.wait_gone([grandchild]) == []


def wait_for_text(path: Path, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and (text := path.read_text().strip()):
            return text
        time.sleep(0.05)
    raise AssertionError(f"{path} not written within {timeout}s")
