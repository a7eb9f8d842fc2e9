"""harnessctl and the kubectl plugin outside a clone, as a user installs them: `make dist` builds the wheel
and the source archive, the wheel installs into a fresh venv with its runtime dependencies only (what
`pipx install` does), and `harnessctl --version`, `kubectl-harness --help` and the demo run from there,
in a folder that is not the clone; `make demo` needs no dev tools either. pip fetches the dependencies
(and `build` its setuptools) from the package index, as a user's pip does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from harness_operator import __version__

pytestmark = pytest.mark.cli

ROOT = Path(__file__).resolve().parents[2]
DEV_TOOLS = {"pytest", "ruff", "mypy", "import-linter", "hypothesis", "build"}


def run(args: list[str | Path], cwd: Path, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    """A command as a user's shell runs it: no PYTHONPATH or venv of the test's, `path` first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "MAKEFLAGS"}}
    if path is not None:
        env["PATH"] = f"{path}:{env['PATH']}"
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def new_venv(where: Path) -> Path:
    run([sys.executable, "-m", "venv", where], cwd=where.parent)
    return where / "bin"


def installed(bin_dir: Path) -> set[str]:
    listed = run([bin_dir / "pip", "list", "--format=json"], cwd=bin_dir).stdout
    return {p["name"].lower() for p in json.loads(listed)}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make dist` with a Python that has `build`, as the dev venv does."""
    base = tmp_path_factory.mktemp("dist")
    builder = new_venv(base / "builder")
    run([builder / "pip", "install", "-q", "build"], cwd=base)
    run(["make", "-s", "dist", f"PY={builder / 'python'}", f"DIST={base / 'dist'}"], cwd=ROOT)
    return base / "dist"


def test_make_dist_builds_a_wheel_and_a_source_archive_with_the_commands_and_the_catalog(dist: Path) -> None:
    wheel, sdist = (
        dist / f"harness_operator-{__version__}-py3-none-any.whl",
        dist / f"harness_operator-{__version__}.tar.gz",
    )
    assert sorted(p.name for p in dist.iterdir()) == sorted([wheel.name, sdist.name])
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        entry_points = whl.read(f"harness_operator-{__version__}.dist-info/entry_points.txt").decode()
    assert "harness_operator/catalog/claude.yaml" in names and "harness_operator/cli/main.py" in names
    assert "harnessctl = harness_operator.cli.main:main" in entry_points
    assert "kubectl-harness = harness_operator.cli.main:main" in entry_points
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    assert {"pyproject.toml", "operator/harness_operator/catalog/claude.yaml"} <= members


def test_the_wheel_installs_without_a_clone_and_harnessctl_the_plugin_and_the_demo_run(
    dist: Path, tmp_path: Path
) -> None:
    user = new_venv(tmp_path / "venv")
    wheel = dist / f"harness_operator-{__version__}-py3-none-any.whl"
    # No bytecode: compiling the Kubernetes client's modules is most of an install's time on a busy machine.
    run([user / "pip", "install", "-q", "--no-compile", wheel], cwd=tmp_path)
    assert "harness-operator" in installed(user)
    assert not installed(user) & DEV_TOOLS, "the runtime dependencies only"
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    assert run(["harnessctl", "--version"], cwd=elsewhere, path=user).stdout == f"harnessctl {__version__}\n"
    plugin = run(["kubectl-harness", "--help"], cwd=elsewhere, path=user).stdout
    assert plugin.startswith("usage: kubectl harness") and "logs" in plugin
    shutil.copy(ROOT / "examples" / "demo" / "demo-run.yaml", elsewhere)
    demo = run(["harnessctl", "run", "demo-run.yaml"], cwd=elsewhere, path=user)
    assert "This is harness-demo-agent, not a real model." in demo.stdout
    assert "hello-demo: Succeeded (Succeeded, exit 0)" in demo.stderr
    where = run(
        [user / "python", "-c", "import harness_operator; print(harness_operator.__file__)"], cwd=elsewhere
    )
    assert where.stdout.startswith(str(tmp_path / "venv")), "the installed package, not the clone's"


def test_make_demo_runs_from_a_venv_without_the_dev_tools(tmp_path: Path) -> None:
    demo_venv = tmp_path / "demo"
    done = run(["make", "-s", "demo", f"DEMO_VENV={demo_venv}"], cwd=ROOT)
    assert "This is harness-demo-agent, not a real model." in done.stdout
    assert "hello-demo: Succeeded (Succeeded, exit 0)" in done.stderr
    packages = installed(demo_venv / "bin")
    assert "harness-operator" in packages and not packages & DEV_TOOLS
