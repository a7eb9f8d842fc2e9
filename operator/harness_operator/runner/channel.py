"""The channel between the runner's container and the agent's: FIFOs in a folder only the runner's
user can write, on an emptyDir both mount (I/O).

The two containers run as different users and share no process namespace, so the agent can reach
neither the runner's process, its stdout (the pod log the operator reads) nor its termination
message. The runner creates the folder and its FIFOs; the launcher (the agent container's entrypoint)
takes a launch from it, starts the agent with the FIFOs as its stdio, stops it when told, and says
how it ended; a launch marked `more` (a re-prompt may follow) has it take the next one, or a
release. Both sides open the FIFOs in one order, so each blocking open meets the other side's.
What comes back from the agent's container (its output, its exit) is the agent's word and is read as
such; the operator checks the exit against the kubelet's record of that container.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import threading
import time
from typing import IO, Any

from harness_operator.api.reasons import Reason
from harness_operator.api.sizes import SESSION_ARCHIVE_MAX_BYTES
from harness_operator.runner.launch import Launch
from harness_operator.runner.stops import SetupError

LAUNCH, STATUS, STDOUT, STDERR, STDIN, CONTROL = "launch", "status", "stdout", "stderr", "stdin", "control"
# Each FIFO's mode: the runner owns them all; the launcher (another user, in the pod's fsGroup) may
# only read what the runner writes and only write what the runner reads.
MODES = {LAUNCH: 0o640, STATUS: 0o620, STDOUT: 0o620, STDERR: 0o620, STDIN: 0o640, CONTROL: 0o640}
# The FIFOs opened after the launch, in the one order both sides follow (each blocking open meets the
# other side's), with what the runner does to each; the launcher does the other.
AFTER_LAUNCH = ((STATUS, "rb"), (STDOUT, "rb"), (STDERR, "rb"), (STDIN, "wb"), (CONTROL, "wb"))
OTHER_SIDE = {"rb": "wb", "wb": "rb"}
# The launcher's waits for the runner (it starts the agent only once the runner's confinement wait is
# over, which is bounded by the plan) and the runner's for the launcher to take a launch.
RENDEZVOUS_SECONDS = 60.0
# After the agent's exit, how long its container may take to close its ends of the FIFOs.
CLOSE_SECONDS = 5.0
# A stop's grace is the launcher's to keep; this is what the runner adds before it gives up on it.
STOP_SLACK_SECONDS = 3.0
# The exit code the runner reports when the launcher ended without saying how the agent did (it was
# killed): what the kubelet records for its container, 128 + SIGKILL.
EXIT_LAUNCHER_LOST = 137
# The launcher's last word may carry a session archive (base64) besides the exit code.
EXIT_LINE_MAX = 2 * SESSION_ARCHIVE_MAX_BYTES


def create_channel(folder: str) -> None:
    """The runner's folder (0755: nobody else can add, rename or replace a FIFO in it) and its FIFOs,
    all in the group of the folder it is made in: the emptyDir's, the pod's fsGroup, which the
    launcher's user is in and the runner's holds as a supplementary group."""
    group = os.stat(os.path.dirname(os.path.abspath(folder))).st_gid
    os.mkdir(folder, 0o755)
    os.chown(folder, -1, group)
    os.chmod(folder, 0o755)  # mkdir's mode is cut by the umask, and a setgid parent adds its bit
    for name, mode in MODES.items():
        path = os.path.join(folder, name)
        os.mkfifo(path)
        os.chown(path, -1, group)
        os.chmod(path, mode)


def _rendezvous(opens: list[tuple[str, str]], folder: str, seconds: float, what: str) -> list[IO[bytes]]:
    """Open FIFOs in order in a thread (a blocking open waits for the other side), within `seconds`."""
    files: list[IO[bytes]] = []

    def run() -> None:
        for name, mode in opens:
            files.append(open(os.path.join(folder, name), mode, buffering=0))  # noqa: SIM115 (kept)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive() or len(files) != len(opens):
        for fh in files:
            fh.close()
        raise SetupError(Reason.SetupFailed, f"harness: {what} within {seconds:.0f} s")
    return files


def _send(fh: IO[bytes], doc: dict[str, Any]) -> None:
    fh.write(json.dumps(doc, sort_keys=True).encode("utf-8") + b"\n")


# --- the runner's side ----------------------------------------------------------------------------


def send_launch(folder: str, launch: Launch | None, seconds: float = RENDEZVOUS_SECONDS) -> None:
    """Give the launcher a launch, or None: nothing (more) is to run (setup failed, the agent is
    remote, or the last re-prompt is done), and it exits with the last agent's code (0 if none ran)."""
    what = "the agent's container took no launch"
    (fh,) = _rendezvous([(LAUNCH, "wb")], folder, seconds, what)
    with fh:
        _send(fh, {"launch": None if launch is None else launch.to_doc()})


class LaunchedAgent:
    """The agent started by the launcher in its own container; its stdio are the channel's FIFOs.

    The launcher's first word says whether the agent started (else a SetupError is raised here); its
    last says with which code it exited. A stop is asked of the launcher; one not kept within its grace
    leaves the agent `left_running`, and the runner reports so (the operator then deletes the pod)."""

    def __init__(self, folder: str, launch: Launch, seconds: float = RENDEZVOUS_SECONDS) -> None:
        send_launch(folder, launch, seconds)
        status, self.stdout, self.stderr, stdin, self.control = _rendezvous(
            list(AFTER_LAUNCH), folder, seconds, "the agent's container opened no channel"
        )
        self.stdin: IO[bytes] | None = stdin
        first = _read_status(status)
        if "setup" not in first and not first.get("started"):
            first = {"setup": {"reason": Reason.SetupFailed, "message": "harness: the launcher ended first"}}
        if "setup" in first:
            for fh in (status, self.stdout, self.stderr, stdin, self.control):
                fh.close()
            setup = first["setup"]
            reason = setup.get("reason")
            known = reason in (Reason.SetupFailed, Reason.BinaryNotFound)
            raise SetupError(Reason(reason) if known else Reason.SetupFailed, str(setup.get("message")))
        if not launch.stdin:
            stdin.close()
            self.stdin = None
        self.left_running = False
        self._code: int | None = None
        self._session: tuple[bytes | None, str | None] = (None, None)
        self._ended = threading.Event()
        self._control_lock = threading.Lock()
        threading.Thread(target=self._read_exit, args=(status,), daemon=True).start()

    def _read_exit(self, status: IO[bytes]) -> None:
        """The launcher's last word; its end of the FIFO closing without one means it was killed."""
        with status:
            doc = _read_status(status, EXIT_LINE_MAX)
        code = doc.get("exit")
        self._session = _session_of(doc)
        self._code = code if isinstance(code, int) and 0 <= code <= 255 else EXIT_LAUNCHER_LOST
        with self._control_lock:  # the launcher's stop-follower ends: a next launch gets its own
            self._ended.set()
            with contextlib.suppress(OSError):
                self.control.close()

    def poll(self) -> int | None:
        return self._code if self._ended.is_set() else None

    def wait(self) -> int:
        """The agent's exit code; after a stop that was not kept, 137 with `left_running` set."""
        if self.left_running:
            return EXIT_LAUNCHER_LOST
        self._ended.wait()
        assert self._code is not None
        return self._code

    def session(self) -> tuple[bytes | None, str | None]:
        return self._session

    def stop(self, grace_seconds: float) -> None:
        """Ask the launcher to SIGTERM the agent's group (SIGKILL after the grace); wait for its exit."""
        with self._control_lock:
            if self._ended.is_set():
                return
            with contextlib.suppress(OSError):
                _send(self.control, {"stop": grace_seconds})
        if not self._ended.wait(grace_seconds + STOP_SLACK_SECONDS):
            self.left_running = True


def _session_of(doc: dict[str, Any]) -> tuple[bytes | None, str | None]:
    """The packed session the launcher's last word carries (the agent's word, checked as an archive by
    whoever unpacks it), or why it carries none."""
    problem = doc.get("sessionProblem")
    text = doc.get("session")
    if not isinstance(text, str):
        return None, str(problem) if problem else None
    try:
        return base64.b64decode(text, validate=True), None
    except ValueError:
        return None, "the launcher's session archive is not base64"


def _read_status(fh: IO[bytes], limit: int = 1 << 16) -> dict[str, Any]:
    """One line from the launcher: a JSON object, else an empty one."""
    line = fh.readline(limit)
    try:
        doc = json.loads(line) if line else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


class Spawner:
    """The pod's way to start an agent: through the launcher in the agent's container. `release`
    frees a launcher that waits for a launch: given nothing to run, or told that more may follow."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.waiting = True  # the launcher waits for a launch: none was sent yet, or the last had `more`

    def __call__(self, launch: Launch) -> LaunchedAgent:
        self.waiting = launch.more
        return LaunchedAgent(self.folder, launch)

    def release(self) -> None:
        if self.waiting:
            self.waiting = False
            with contextlib.suppress(SetupError, OSError):  # a launcher that is gone needs no release
                send_launch(self.folder, None)


# --- the launcher's side --------------------------------------------------------------------------


def await_channel(folder: str, seconds: float, clock: Any = time.monotonic) -> bool:
    """Wait until the runner created its channel (the runner's container starts beside this one)."""
    deadline = clock() + seconds
    while not os.path.exists(os.path.join(folder, LAUNCH)):
        if clock() >= deadline:
            return False
        time.sleep(0.02)
    return True


def take_launch(folder: str) -> Launch | None:
    """Block until the runner sends the launch; None when it sends a release."""
    with open(os.path.join(folder, LAUNCH), "rb") as fh:
        doc = json.loads(fh.read() or b"{}")
    return Launch.from_doc(doc["launch"]) if doc.get("launch") else None


def open_launcher_ends(folder: str) -> tuple[IO[bytes], IO[bytes], IO[bytes], IO[bytes], IO[bytes]]:
    """status, stdout, stderr (written), stdin, control (read), in the runner's order."""
    status, stdout, stderr, stdin, control = (
        open(os.path.join(folder, name), OTHER_SIDE[mode], buffering=0)  # noqa: SIM115 (returned)
        for name, mode in AFTER_LAUNCH
    )
    return status, stdout, stderr, stdin, control


def say_status(fh: IO[bytes], doc: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        _send(fh, doc)
