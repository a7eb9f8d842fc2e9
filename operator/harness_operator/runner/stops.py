"""Binary resolution, setup errors, stopping a process group and keeping a process's memory from its own
user: the executor's OS helpers (I/O)."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time

from harness_operator.api.reasons import Reason, ReasonedError

GROUP_EXIT_SECONDS = 1.0
PR_SET_DUMPABLE = 4


class SetupError(ReasonedError):
    """The attempt cannot start; exit 1 before any process exists."""


def resolve_binary(binary: str, path: str, workdir: str) -> str:
    """Dagu's rule: a name with '/' is checked directly (relative to the working directory), any
    other name is looked up in the run's PATH."""
    if "/" in binary:
        candidate = binary if os.path.isabs(binary) else os.path.join(workdir, binary)
        try:
            mode = os.stat(candidate).st_mode
        except OSError as exc:
            raise SetupError(
                Reason.BinaryNotFound,
                f'harness: failed to resolve binary "{binary}": {exc.strerror}: {candidate}',
            ) from exc
        if os.path.isdir(candidate) or not (mode & 0o111) or not os.access(candidate, os.X_OK):
            raise SetupError(
                Reason.BinaryNotFound,
                f'harness: failed to resolve binary "{binary}": {candidate} is not an executable file',
            )
        return candidate
    for folder in path.split(os.pathsep):
        candidate = os.path.join(folder or ".", binary)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise SetupError(
        Reason.BinaryNotFound,
        f'harness: "{binary}" CLI not found in PATH; install it first: '
        f'exec: "{binary}": executable file not found in $PATH',
    )


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop_process_group(proc: subprocess.Popen[bytes], grace_seconds: float) -> None:
    """SIGTERM the agent's process group, SIGKILL it after the grace period (0: SIGKILL now)."""
    pgid = proc.pid  # start_new_session: the agent leads its own group
    if grace_seconds > 0 and signal_group(pgid, signal.SIGTERM):
        deadline = time.monotonic() + grace_seconds
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)
    proc.wait()
    # SIGKILL is delivered asynchronously: give the rest of the group a moment to be gone (bounded,
    # since zombies re-parented to a non-reaping PID 1 would still answer).
    deadline = time.monotonic() + GROUP_EXIT_SECONDS
    while time.monotonic() < deadline and signal_group(pgid, signal.SIGKILL):
        time.sleep(0.02)


def make_undumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0): /proc/<pid>/mem, environ, ptrace and /proc/<pid>/fd of this process are
    the kernel's to give, and it gives them to no process of the same unprivileged user."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE) failed")
