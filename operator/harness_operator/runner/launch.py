"""Starting the agent's process: what to start (`Launch`), how (`start_agent`), and the process the
executors drive, local (`LocalAgent`, `harnessctl run` and tests) or in the agent's container
(`channel.LaunchedAgent`, the pod) (I/O)."""

from __future__ import annotations

import base64
import errno
import os
import subprocess
import tarfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Protocol

from harness_operator.api.reasons import Reason
from harness_operator.runner.session import SessionTooLarge, pack_session, unpack_session
from harness_operator.runner.stops import SetupError, resolve_binary, stop_process_group


@dataclass(frozen=True)
class Launch:
    """One agent process: argv (argv[0] as the plan says), the binary to resolve, its whole
    environment, its working directory, whether its stdin is a pipe (else /dev/null), its home files,
    and whether the launcher is to wait for another launch after it."""

    argv: list[str]
    binary: str
    env: dict[str, str]
    cwd: str
    stdin: bool
    home_files: dict[str, str] = field(default_factory=dict)
    more: bool = False  # another launch (a re-prompt) or a release may follow this one
    session_paths: list[str] = field(default_factory=list)  # packed after the agent's exit
    session: str | None = None  # base64 of a session archive, unpacked into the home before the start
    # An ACP adapter: the runner stops it once the turn has ended (claude's and codex's keep running on a
    # closed stdin), so its session is packed after a stop too; the runner keeps it after end_turn only.
    stopped_when_done: bool = False

    def to_doc(self) -> dict[str, Any]:
        return {
            "argv": self.argv,
            "binary": self.binary,
            "env": self.env,
            "cwd": self.cwd,
            "stdin": self.stdin,
            "homeFiles": self.home_files,
            "more": self.more,
            "sessionPaths": self.session_paths,
            "session": self.session,
            "stoppedWhenDone": self.stopped_when_done,
        }

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> Launch:
        return cls(
            [str(a) for a in doc["argv"]],
            str(doc["binary"]),
            {str(k): str(v) for k, v in doc["env"].items()},
            str(doc["cwd"]),
            bool(doc["stdin"]),
            {str(k): str(v) for k, v in (doc.get("homeFiles") or {}).items()},
            bool(doc.get("more")),
            [str(p) for p in doc.get("sessionPaths") or []],
            str(doc["session"]) if doc.get("session") else None,
            bool(doc.get("stoppedWhenDone")),
        )


def write_home_files(launch: Launch) -> None:
    """The launch's files under the agent's HOME, created with their folders, readable by the agent only;
    a path that leaves the home is refused (SetupFailed)."""
    home = agent_home(launch)
    for relative, text in sorted(launch.home_files.items()):
        path = os.path.realpath(os.path.join(home, relative))
        if os.path.commonpath([home, path]) != home or path == home:
            raise SetupError(Reason.SetupFailed, f"harness: home file {relative!r} is not under {home}")
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            raise SetupError(
                Reason.SetupFailed, f"harness: failed to write home file {relative}: {exc}"
            ) from exc


def agent_home(launch: Launch) -> str:
    return os.path.realpath(launch.env.get("HOME") or os.path.expanduser("~"))


def restore_session(launch: Launch) -> None:
    """The earlier session's files in the home (SetupFailed when the archive holds what it may not)."""
    if launch.session is None:
        return
    try:
        unpack_session(agent_home(launch), base64.b64decode(launch.session), launch.session_paths)
    except (ValueError, OSError, SessionTooLarge, tarfile.TarError) as exc:
        raise SetupError(Reason.SetupFailed, f"harness: cannot restore the earlier session: {exc}") from exc


def take_session(launch: Launch) -> tuple[bytes | None, str | None]:
    """The session files the agent left (packed), or why none are kept."""
    if not launch.session_paths:
        return None, None
    try:
        return pack_session(agent_home(launch), launch.session_paths), None
    except (SessionTooLarge, OSError) as exc:
        return None, str(exc)


def start_agent(launch: Launch, stdin: Any, stdout: Any, stderr: Any) -> subprocess.Popen[bytes]:
    """Create the working directory and the home files, resolve the binary (Dagu's rule) and start the
    agent as the leader of its own process group; SetupError with a typed reason when any of it fails."""
    try:
        os.makedirs(launch.cwd, exist_ok=True)
    except OSError as exc:
        raise SetupError(Reason.SetupFailed, f"harness: failed to create working directory: {exc}") from exc
    write_home_files(launch)
    restore_session(launch)
    executable = resolve_binary(launch.binary, launch.env.get("PATH", os.defpath), launch.cwd)
    try:
        return subprocess.Popen(
            launch.argv,
            executable=executable,
            cwd=launch.cwd,
            env=launch.env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
    except ValueError as exc:  # a NUL byte in an argument or environment value: no exec can carry it
        raise SetupError(Reason.SetupFailed, f'harness: cannot start "{launch.binary}": {exc}') from exc
    except OSError as exc:
        if exc.errno == errno.E2BIG:
            raise SetupError(
                Reason.SetupFailed,
                f'harness: cannot start "{launch.binary}": {exc.strerror}: an argument or the whole command '
                "line is over the kernel's limit; pass long text on stdin (promptMode: stdin)",
            ) from exc
        raise SetupError(
            Reason.BinaryNotFound, f'harness: failed to resolve binary "{launch.binary}": {exc}'
        ) from exc


class AgentProcess(Protocol):
    """The agent's process as an executor drives it: its stdio, whether it ended, how to stop it.
    `left_running` is True when a stop could not end it (the operator then deletes the pod)."""

    stdin: IO[bytes] | None
    stdout: IO[bytes]
    stderr: IO[bytes]
    left_running: bool

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def stop(self, grace_seconds: float) -> None: ...

    def session(self) -> tuple[bytes | None, str | None]:
        """After the exit: the session files the agent left (packed), or why none are kept."""
        ...


Spawn = Callable[[Launch], AgentProcess]


class LocalAgent:
    """The agent as a child process of this one (harnessctl run, tests)."""

    left_running = False

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        pipe = subprocess.PIPE
        self.proc = start_agent(launch, pipe if launch.stdin else subprocess.DEVNULL, pipe, pipe)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.stdin = self.proc.stdin
        self.stdout = self.proc.stdout
        self.stderr = self.proc.stderr

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self) -> int:
        return self.proc.wait()

    def stop(self, grace_seconds: float) -> None:
        """SIGTERM the agent's group, SIGKILL after the grace (0: now); what it left goes too."""
        stop_process_group(self.proc, grace_seconds)

    def session(self) -> tuple[bytes | None, str | None]:
        return take_session(self.launch)
