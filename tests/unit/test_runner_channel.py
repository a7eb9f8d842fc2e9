"""The runner's channel to the launcher with real processes: the launcher's exit code is the agent's,
a launcher given nothing ends with 0, a folder nobody else can write, a stop the launcher cannot keep
leaves the agent marked as left running (never a success), and a false exit status written by the
agent fools the runner only (which is why the operator checks the kubelet's record)."""

import io
import os
import signal
import stat
import sys
import time
from pathlib import Path

from tests.unit.launcher_process import LauncherProcess

from harness_operator.runner.channel import MODES, create_channel
from harness_operator.runner.executor import execute
from harness_operator.runner.plan import AttemptPlan
from harness_operator.runner.result import render_termination_message

AGENT = str(Path(__file__).parents[1] / "fakes" / "agent.py")
BASE_ENV = {"PATH": os.environ["PATH"], "HOME": "/tmp"}


def plan(mode: str, **fields: object) -> AttemptPlan:
    env = [{"name": "FAKE_MODE", "value": mode}, *fields.pop("env", [])]  # type: ignore[misc]
    return AttemptPlan.model_validate(
        {
            "attempt": 1,
            "total_attempts": 1,
            "provider": "fake",
            "binary": sys.executable,
            "args": [AGENT],
            "output_format": "claude-stream-json",
            "env": env,
            **fields,
        }
    )


def test_the_launchers_exit_code_is_the_agents(tmp_path):
    with LauncherProcess(tmp_path / "run") as launcher:
        result = execute(plan("fail"), {}, base_env=BASE_ENV, stderr=io.BytesIO(), spawn=launcher.spawner)
    assert (result.exit_code, result.agent_exit_code, result.reason) == (3, 3, "ProviderFailed")
    assert launcher.proc.returncode == 3


def test_a_launcher_given_nothing_ends_with_0(tmp_path):
    with LauncherProcess(tmp_path / "run") as launcher:
        pass
    assert launcher.proc.returncode == 0


def test_the_folder_and_its_fifos_are_the_runners_alone(tmp_path):
    folder = tmp_path / "channel"
    os.umask(0o022)
    create_channel(str(folder))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    for name, mode in MODES.items():
        st = (folder / name).stat()
        assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == mode
        assert not st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_IROTH


def test_a_stop_the_launcher_cannot_keep_leaves_the_agent_running_and_failed(tmp_path):
    pidfile = tmp_path / "pid"
    p = plan(
        "freeze-parent",
        env=[{"name": "FAKE_PIDFILE", "value": str(pidfile)}],
        limits={"timeoutSeconds": 2, "gracePeriodSeconds": 1},
    )
    err = io.BytesIO()
    with LauncherProcess(tmp_path / "run") as launcher:
        try:
            result = execute(p, {}, base_env=BASE_ENV, stderr=err, spawn=launcher.spawner)
        finally:
            launcher.proc.kill()  # frozen: only SIGKILL ends it
            if pidfile.exists():
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
    assert (result.exit_code, result.reason) == (124, "Timeout")
    assert result.agent_left_running and result.agent_exit_code is None
    assert '"agentLeftRunning":true' in render_termination_message(result.to_result())
    assert b"its pod is to be deleted" in err.getvalue()


def test_a_false_exit_status_fools_the_runner_but_not_the_launchers_own_exit(tmp_path):
    folder = tmp_path / "run" / "channel"
    p = plan("forge-exit", env=[{"name": "FAKE_CHANNEL", "value": str(folder)}])
    with LauncherProcess(tmp_path / "run") as launcher:
        result = execute(p, {}, base_env=BASE_ENV, stderr=io.BytesIO(), spawn=launcher.spawner)
    deadline = time.monotonic() + 10
    while launcher.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert result.exit_code == 0, "the runner takes the agent container's word for its exit"
    assert launcher.proc.returncode == 3, "the container's own exit, which the operator checks, is the truth"
