"""harnessctl's cluster commands print API errors as kubectl does, with the documented exit codes, and
no traceback (real subprocess against a local recording server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from tests.unit.controller.recording_api import recording_api

from harness_operator.cli.cluster import EXIT_SERVER, EXIT_UNREACHABLE, EXIT_USAGE


def harnessctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness_operator.cli.main", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def kubeconfig(path: Path, server: str) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "main",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": "main", "context": {"cluster": "c", "user": "u", "namespace": "team-a"}}],
        "users": [{"name": "u", "user": {"token": "t", "as": "viewer"}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_forbidden_is_kubectls_line_and_exit_code(tmp_path: Path) -> None:
    with recording_api() as api:
        api.status, api.body = (
            403,
            {
                "kind": "Status",
                "reason": "Forbidden",
                "code": 403,
                "message": 'harnessruns.agentharness.dev "r" is forbidden: User "viewer" cannot patch resource',
            },
        )
        for command in ("cancel", "rerun", "describe", "logs"):
            done = harnessctl(command, "r", "--kubeconfig", kubeconfig(tmp_path / "config", api.url))
            assert done.returncode == EXIT_SERVER, (command, done.stderr)
            assert done.stderr == (
                'Error from server (Forbidden): harnessruns.agentharness.dev "r" is forbidden: '
                'User "viewer" cannot patch resource\n'
            ), command
        assert all(("Impersonate-User", "viewer") in headers for _, headers in api.requests)

        api.status, api.body = 401, {"kind": "Status", "reason": "Unauthorized", "code": 401}
        done = harnessctl("cancel", "r", "--kubeconfig", str(tmp_path / "config"))
        assert (done.returncode, done.stderr) == (
            EXIT_SERVER,
            "error: You must be logged in to the server (Unauthorized)\n",
        )


def test_a_missing_run_is_notfound_as_kubectl_says_it(tmp_path: Path) -> None:
    with recording_api() as api:  # answers 404
        for command in ("cancel", "rerun", "describe", "logs"):
            done = harnessctl(command, "gone", "--kubeconfig", kubeconfig(tmp_path / "config", api.url))
            assert (done.returncode, done.stderr) == (
                EXIT_SERVER,
                'Error from server (NotFound): harnessruns.agentharness.dev "gone" not found\n',
            ), command


def test_a_missing_pipeline_is_notfound_as_kubectl_says_it(tmp_path: Path) -> None:
    with recording_api() as api:  # answers 404
        done = harnessctl("logs", "pipeline/gone", "--kubeconfig", kubeconfig(tmp_path / "config", api.url))
        assert (done.returncode, done.stderr) == (
            EXIT_SERVER,
            'Error from server (NotFound): harnesspipelines.agentharness.dev "gone" not found\n',
        )
        assert [path for path, _ in api.requests] == [
            "/apis/agentharness.dev/v1alpha1/namespaces/team-a/harnesspipelines/gone"
        ]


def test_no_server_and_bad_kubeconfig(tmp_path: Path) -> None:
    done = harnessctl("cancel", "r", "--kubeconfig", kubeconfig(tmp_path / "config", "http://127.0.0.1:9"))
    assert done.returncode == EXIT_UNREACHABLE and done.stderr.startswith("Unable to connect to the server: ")
    assert "Traceback" not in done.stderr
    done = harnessctl("cancel", "r", "--kubeconfig", str(tmp_path / "config"), "--context", "nope")
    assert (done.returncode, done.stderr) == (EXIT_USAGE, 'error: context "nope" does not exist\n')


def test_help_lists_the_exit_codes() -> None:
    done = harnessctl("--help")
    assert done.returncode == 0 and "exit codes:" in done.stdout and "Unable to connect" in done.stdout
