"""`harnessctl run` as a user runs it, for the tests that drive a real agent CLI through it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def require_cli(executable: str, tools_name: str) -> str | None:
    """The CLI's path; outside CI a missing CLI skips the module (CI installs it, so there it fails)."""
    found = shutil.which(executable)
    if found is None and not os.environ.get("CI"):
        pytest.skip(
            f"`{executable}` is not on PATH (bash tests/cli-tools.sh {tools_name} prints the folder to add)",
            allow_module_level=True,
        )
    return found


def harnessctl_run(
    manifest: str, cli: str | None, home: Path, env: dict[str, str], timeout: float = 300
) -> tuple[subprocess.CompletedProcess[str], dict]:
    """Run `manifest` with only the CLI's folder, Python and the system on PATH, HOME at `home`, plus
    `env`; the process and the status document it wrote."""
    assert cli is not None, "the CLI must be on PATH in CI"
    path = home.parent / "run.yaml"
    path.write_text(manifest)
    status_file = home.parent / "status.yaml"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness_operator.cli.main",
            "run",
            str(path),
            "--status-file",
            str(status_file),
        ],
        capture_output=True,
        text=True,
        env={
            "PATH": f"{Path(cli).parent}:{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(home),
            **env,
        },
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )
    return result, next(yaml.safe_load_all(status_file.read_text()))
