"""A real launcher process (`python3 -I -m harness_operator.runner.launcher`) beside a runner's
channel, for tests of the executors through it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from harness_operator.runner.channel import Spawner, create_channel
from harness_operator.runner.launch import AgentProcess, Launch, LocalAgent, Spawn


class LauncherProcess:
    """Creates the channel in `folder`, starts the launcher on it; on exit, releases a launcher that
    was given nothing, and waits for it (killing it only if it outlives the wait)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __enter__(self) -> LauncherProcess:
        self.folder.mkdir(parents=True)
        channel = self.folder / "channel"
        create_channel(str(channel))
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "harness_operator.runner.launcher", "--channel", str(channel)],
            cwd="/",
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.spawner = Spawner(str(channel))
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.spawner.release()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stdout is not None
        self.output = self.proc.stdout.read().decode()
        self.proc.stdout.close()


_SPAWN: list[Spawn] = [LocalAgent]
LAUNCHERS: list[LauncherProcess] = []  # the current test's, in order


@pytest.fixture(autouse=True, params=["local", "launcher"])
def spawn_both_ways(request: Any, tmp_path: Path) -> Iterator[None]:
    """Import into a test module to run each of its tests twice: the agent as the runner's child, and
    started by a real launcher process through its channel, a new one for each attempt as in a pod,
    which takes the attempt's re-prompts too (`spawn` below picks the current way)."""
    if request.param == "local":
        yield None
        return
    launchers = LAUNCHERS
    launchers.clear()

    def through_a_launcher(launch: Launch) -> AgentProcess:
        if not (launchers and launchers[-1].spawner.waiting):  # one launcher serves a launch's re-prompts
            launchers.append(LauncherProcess(tmp_path / f"launcher-{len(launchers)}").__enter__())
        return launchers[-1].spawner(launch)

    _SPAWN[0] = through_a_launcher
    try:
        yield None
    finally:
        _SPAWN[0] = LocalAgent
        for launcher in launchers:
            launcher.__exit__(None, None, None)


def spawn(launch: Launch) -> AgentProcess:
    """The current test's way to start the agent (see spawn_both_ways)."""
    return _SPAWN[0](launch)
