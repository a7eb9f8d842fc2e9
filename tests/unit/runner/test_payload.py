"""The sandbox image's payload (the Dockerfile's `payload` stage) holds every module the runner imports
and nothing of the operator or of `harnessctl run`."""

import pkgutil
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

import harness_operator.runner

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "sandbox-image" / "Dockerfile"


def payload_copies() -> list[tuple[list[str], str]]:
    """(sources, destination) of each COPY in the payload stage, continuation lines joined."""
    text = DOCKERFILE.read_text(encoding="utf-8").replace("\\\n", " ")
    stage = text.split("FROM scratch AS payload\n", 1)[1].split("\nFROM ", 1)[0]
    copies = []
    for line in stage.splitlines():
        if line.startswith("COPY "):
            words = shlex.split(line)
            copies.append((words[1:-1], words[-1]))
    return copies


def build_payload(target: Path) -> Path:
    for sources, destination in payload_copies():
        dest = target / destination.lstrip("/")
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                shutil.copytree(path, dest, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                dest.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, dest / path.name)
    return target


def runner_modules() -> list[str]:
    prefix = harness_operator.runner.__name__ + "."
    return [prefix.rstrip(".")] + [
        m.name for m in pkgutil.walk_packages(harness_operator.runner.__path__, prefix)
    ]


def test_payload_imports_every_runner_module_from_its_own_files(tmp_path: Path) -> None:
    payload = build_payload(tmp_path / "lib")
    modules = runner_modules()
    assert "harness_operator.runner.executor" in modules
    script = (
        "import importlib, harness_operator\n"
        f"assert harness_operator.__file__.startswith({str(payload)!r}), harness_operator.__file__\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={"PYTHONPATH": str(payload), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_payload_is_the_runners_import_graph_in_whole_folders(tmp_path: Path) -> None:
    """What the image ships is what the runner can import: every module the runner reaches (the import
    graph, as import-linter reads it) is in the payload, and the payload is those modules' folders."""
    payload = build_payload(tmp_path / "lib") / "harness_operator"
    shipped = {p.relative_to(payload).as_posix() for p in payload.rglob("*.py")}
    graph = grimp.build_graph("harness_operator")
    reached = graph.find_upstream_modules("harness_operator.runner", as_package=True) | set(runner_modules())
    package = {m for m in reached if m.startswith("harness_operator.")}
    folders = {m.split(".")[1] for m in package}
    assert folders == {"api", "contract", "runner"}, folders
    for module in package:
        path = module.removeprefix("harness_operator.").replace(".", "/")
        assert f"{path}.py" in shipped or f"{path}/__init__.py" in shipped, module
    assert {p.split("/")[0] for p in shipped} == {"__init__.py", "api", "contract", "runner"}
