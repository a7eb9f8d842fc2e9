"""Long-lived processes the tests start, each stopped with its whole process group whatever happens: a start
that fails, a fixture's teardown, Ctrl-C or SIGTERM to pytest, pytest itself killed. Not pure: it forks,
signals and reads /proc (Linux only)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

# Every started process carries the pid of the process that started it: a later session finds what an
# earlier one left behind (its starter gone), and names it.
OWNER_ENV = "HARNESS_TEST_OWNER"

_started: dict[int, subprocess.Popen[Any]] = {}


def start(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, **popen: Any
) -> subprocess.Popen[Any]:
    """`argv` in a new session (its own process group), killed by the kernel if the thread that started it
    dies (setpriv's PR_SET_PDEATHSIG: pytest SIGKILLed leaves no orphan), and stopped at exit if still
    running. `env` (default: this process's) gains OWNER_ENV; `popen` are Popen's other arguments."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise RuntimeError(
            "setpriv (util-linux) is needed to start test processes: apt-get install util-linux"
        )
    proc = subprocess.Popen(
        [setpriv, "--pdeathsig", "KILL", "--", *argv],
        env={**(os.environ if env is None else env), OWNER_ENV: str(os.getpid())},
        start_new_session=True,
        **popen,
    )
    _started[proc.pid] = proc
    return proc


def stop(proc: subprocess.Popen[Any], grace: float = 20.0) -> None:
    """SIGTERM to the process's group, SIGKILL to what of it is left after `grace` seconds (children the
    leader did not take with it too)."""
    _signal_group(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    kill(proc)


def kill(proc: subprocess.Popen[Any]) -> None:
    """SIGKILL to the process's group at once (no cleanup, as when a node dies), and reap it."""
    _signal_group(proc, signal.SIGKILL)
    proc.wait()
    _started.pop(proc.pid, None)


@contextlib.contextmanager
def running(argv: Sequence[str], *, grace: float = 20.0, **kwargs: Any) -> Iterator[subprocess.Popen[Any]]:
    """`start(argv, **kwargs)`, stopped when the block ends however it ends."""
    proc = start(argv, **kwargs)
    try:
        yield proc
    finally:
        stop(proc, grace)


def stop_all() -> None:
    """Stop every process started here and not stopped yet (at exit: what a teardown missed)."""
    for proc in list(_started.values()):
        stop(proc, grace=5.0)


def group_members(pgid: int) -> list[int]:
    """The pids of the live (not zombie) processes in process group `pgid`."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ")"
            state, _ppid, pgrp = stat.read_text().rsplit(")", 1)[1].split()[:3]
            if int(pgrp) == pgid and state != "Z":
                members.append(int(stat.parent.name))
    return members


def leftovers(match: str) -> list[str]:
    """Processes started here by a process that is gone (a session killed before this helper could stop
    them) whose command line holds the words `match`: each as "pid: command line"."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError, ValueError):
            variables = dict(e.partition("=")[::2] for e in environ.read_text().split("\0"))
            owner = variables.get(OWNER_ENV)
            if owner is None or Path(f"/proc/{int(owner)}").exists():
                continue
            cmdline = (environ.parent / "cmdline").read_text().replace("\0", " ").strip()
            if f" {match} " in f" {cmdline} ":
                found.append(f"{environ.parent.name}: {cmdline}")
    return found


def _signal_group(proc: subprocess.Popen[Any], sig: signal.Signals) -> None:
    # The group outlives its leader while a child of it runs: signalled even when the leader has exited.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    """SIGTERM (CI's timeout) or SIGHUP as Ctrl-C: pytest then tears its fixtures down, stopping what they
    started, where the default action would end it at once and leave them running."""
    raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")


def wait_gone(pids: Sequence[int], timeout: float = 10.0) -> list[int]:
    """Wait up to `timeout` seconds for `pids` to end; those still alive (not zombies)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in pids if _alive(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# On import (a conftest imports this at collection): SIGTERM and SIGHUP interrupt where nothing else handles
# them, also before the first start (a fixture's half-done setup is undone too), and what is left is
# stopped at exit.
atexit.register(stop_all)
for _sig in (signal.SIGTERM, signal.SIGHUP):
    if signal.getsignal(_sig) == signal.SIG_DFL:
        with contextlib.suppress(ValueError):  # imported outside the main thread: the default stays
            signal.signal(_sig, _interrupt)
