"""The runner's channel to the launcher with real processes: the launcher's exit code is the agent's,
a launcher given nothing ends with 0, one told that more may follow takes the next launch (and the
next agent's stop reaches that agent), a folder nobody else can write, a stop the launcher cannot keep
leaves the agent marked as left running (never a success), and a false exit status written by the
agent fools the runner only (which is why the operator checks the kubelet's record)."""

import io
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from tests.unit.runner.launcher_process import LauncherProcess

from harness_operator.contract.plan import AttemptPlan
from harness_operator.contract.result import render_termination_message
from harness_operator.runner.channel import MODES
from harness_operator.runner.executor import execute
from harness_operator.runner.launch import Launch

AGENT = str(Path(__file__).parents[2] / "fakes" / "agent.py")
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


def python(code: str, more: bool) -> Launch:
    return Launch([sys.executable, "-c", code], sys.executable, BASE_ENV, "/", False, more=more)


def test_a_launch_marked_more_has_the_launcher_take_the_next_until_a_release(tmp_path):
    with LauncherProcess(tmp_path / "run") as launcher:
        assert launcher.spawner(python("raise SystemExit(3)", more=True)).wait() == 3
        second = launcher.spawner(python("import time; time.sleep(60)", more=True))
        second.stop(5)  # the first agent's stop-follower is gone: this stop reaches the second agent
        assert (second.wait(), second.left_running) == (128 + signal.SIGTERM, False)
        assert launcher.proc.poll() is None  # still waiting: the last launch said more may follow
    assert launcher.proc.returncode == 128 + signal.SIGTERM  # released: the last agent's code


def test_a_launch_not_marked_more_is_the_launchers_last(tmp_path):
    with LauncherProcess(tmp_path / "run") as launcher:
        assert launcher.spawner(python("raise SystemExit(4)", more=False)).wait() == 4
        launcher.proc.wait(timeout=10)  # it exits without a release
        assert not launcher.spawner.waiting
    assert launcher.proc.returncode == 4


RUNNER_UID, AGENT_UID = 65531, 65532  # the Job's users; the pod's fsGroup is the agent's group


SOURCE = str(Path(__file__).parents[3] / "operator")
# Another user cannot run this venv's interpreter (under root's home): the system's, on the source tree
# (the channel needs only the standard library).
SYSTEM_PYTHON = "/usr/bin/python3"


def as_user(uid: int, gid: int, groups: list[int], code: str) -> subprocess.CompletedProcess[str]:
    """Python code run as another user, as the kubelet starts a container's process."""

    def become() -> None:
        os.setgroups(groups)
        os.setgid(gid)
        os.setuid(uid)

    code = f"import sys; sys.path.insert(0, {SOURCE!r})\n{code}"
    return subprocess.run(
        [SYSTEM_PYTHON, "-I", "-c", code], preexec_fn=become, capture_output=True, text=True, check=False
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="takes the pod's two users (root only)")
def test_the_runners_fifos_are_for_the_launchers_user_only_what_it_must():
    """As in the pod: the runner (uid 65531, fsGroup 65532 supplementary) makes the channel on an
    emptyDir the kubelet gave the fsGroup (setgid, group 65532); the launcher (uid 65532) may read what
    the runner writes and write what it reads, and may change nothing in the folder."""
    scratch = Path(tempfile.mkdtemp(prefix="channel-", dir="/tmp"))  # pytest's tmp_path is root's alone
    scratch.chmod(0o755)
    emptydir = scratch / "emptydir"
    emptydir.mkdir()
    os.chown(emptydir, 0, AGENT_UID)
    os.chmod(emptydir, 0o2777)
    folder = emptydir / "channel"
    made = as_user(
        RUNNER_UID,
        RUNNER_UID,
        [AGENT_UID],
        f"from harness_operator.runner.channel import create_channel; create_channel({str(folder)!r})",
    )
    assert made.returncode == 0, made.stderr
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755
    for name, mode in MODES.items():
        st = (folder / name).stat()
        assert stat.S_ISFIFO(st.st_mode) and stat.S_IMODE(st.st_mode) == mode, name
        assert (st.st_uid, st.st_gid) == (RUNNER_UID, AGENT_UID), name
    check = f"""
import os
f = {str(folder)!r}
print(sorted(n for n in os.listdir(f) if os.access(os.path.join(f, n), os.R_OK)))
print(sorted(n for n in os.listdir(f) if os.access(os.path.join(f, n), os.W_OK)))
print(os.access(f, os.W_OK))
"""
    seen = as_user(AGENT_UID, AGENT_UID, [AGENT_UID], check)
    shutil.rmtree(scratch)
    assert seen.returncode == 0, seen.stderr
    readable, writable, folder_writable = seen.stdout.splitlines()
    assert readable == str(sorted(["launch", "stdin", "control"]))
    assert writable == str(sorted(["status", "stdout", "stderr"]))
    assert folder_writable == "False"


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
