"""The house's layers hold for the whole package (import-linter, over folders): a module is covered by
the folder it lives in, so one placed in the wrong folder breaks them."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = str(Path(sys.executable).parent / "lint-imports")


def lint(cwd: Path, package_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(package_root)}
    return subprocess.run([LINT, "--no-cache"], capture_output=True, text=True, cwd=cwd, env=env, check=False)


def test_import_contracts_hold() -> None:
    result = lint(ROOT, ROOT / "operator")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 5 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "source", "broken"),
    [
        ("core/misplaced.py", "from harness_operator.controller import kube\n", "Layers"),
        ("contract/misplaced.py", "from harness_operator.core import naming\n", "Layers"),
        ("runner/misplaced.py", "from harness_operator.core import naming\n", "The runner skips the core"),
        ("controller/misplaced.py", "from harness_operator.runner import executor\n", "Layers"),
        # The trigger receiver is a program of its own: it never leans on the operator's controller.
        ("receiver/misplaced.py", "from harness_operator.controller import kube\n", "Layers"),
        # Inside the core: what an attempt may reach never builds on its plan, nor a name on the attempt.
        ("core/access/misplaced.py", "from harness_operator.core.plan import planning\n", "The core's rooms"),
        ("core/objects/misplaced.py", "from harness_operator.core import attempt\n", "The core's rooms"),
        # Forge deliveries build runs on top of the rest; nothing beneath reads a delivery.
        ("core/status/misplaced.py", "from harness_operator.core.forge import events\n", "The core's rooms"),
    ],
)
def test_a_misplaced_module_breaks_them(tmp_path: Path, module: str, source: str, broken: str) -> None:
    tree = tmp_path / "operator" / "harness_operator"
    shutil.copytree(
        ROOT / "operator" / "harness_operator", tree, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tree / module).write_text(source)
    result = lint(tmp_path, tmp_path / "operator")
    assert result.returncode != 0, result.stdout
    assert f"{broken}" in result.stdout and "BROKEN" in result.stdout, result.stdout


FOLDERS = ["api", "contract", "controller", "cli", "core"]
FOLDERS += [
    f"core/{room.name}" for room in sorted((ROOT / "operator" / "harness_operator" / "core").iterdir())
]
FOLDERS = [f for f in FOLDERS if (ROOT / "operator" / "harness_operator" / f).is_dir() and "__" not in f]


@pytest.mark.parametrize("folder", FOLDERS)
def test_the_readme_layout_names_every_module_of_the_folder(folder: str) -> None:
    readme = (ROOT / "README.md").read_text()
    layout = readme[readme.index("## Layout") : readme.index("## Development")]
    row = next(
        line for line in layout.splitlines() if line.startswith(f"| `operator/harness_operator/{folder}/`")
    )
    modules = sorted(p.name for p in (ROOT / "operator" / "harness_operator" / folder).glob("*.py"))
    missing = [m for m in modules if not m.startswith("__") and f"`{m}`" not in row]
    assert not missing, f"README's layout row of {folder}/ does not name {missing}"
