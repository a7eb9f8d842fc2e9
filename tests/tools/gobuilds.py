"""The Go helpers the tools tests run, built from the Go module proxy and cached per source and Go version:
kind at the version e2e/kind/run.sh pins, tests/tools/kstatus, helm-docs (the chart README's values
table) and gitleaks (the publisher's secret scanner, sandbox-image/gitleaks). `python -m
tests.tools.gobuilds` builds all four ahead of the tests (tests/run-all.sh does, in the background while
the images download); `python -m tests.tools.gobuilds helm-docs` builds one and prints its path."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_SH = ROOT / "e2e" / "kind" / "run.sh"
KSTATUS_SOURCE = Path(__file__).resolve().parent / "kstatus"
KIND_CACHE = Path(os.environ.get("HARNESS_KIND_CACHE", "/var/cache/harness-operator/kind"))
KSTATUS_CACHE = Path(os.environ.get("HARNESS_KSTATUS_CACHE", "/var/cache/harness-operator/kstatus"))
HELM_DOCS_CACHE = Path(os.environ.get("HARNESS_HELM_DOCS_CACHE", "/var/cache/harness-operator/helm-docs"))
HELM_DOCS_VERSION = "v1.14.2"


def pinned(variable: str) -> str:
    """A default that run.sh pins: `NAME=value` or `name="${ENV:-value}"`."""
    text = RUN_SH.read_text()
    found = re.search(rf'^{variable}=(?:"\$\{{\w+:-)?([^"}}\s]+)', text, re.MULTILINE)
    assert found, f"run.sh pins no {variable}"
    return found.group(1)


def _go() -> tuple[str, str]:
    go = shutil.which("go")
    assert go, "go is needed to build the tools tests' helpers (tests/cluster needs it too)"
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout
    return go, version.strip()


def _build(binary: Path, command: list[str], cwd: Path | None = None) -> Path:
    """Run a `go install`/`go build` writing into a temporary directory beside `binary`, then move it in."""
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=binary.parent) as out:
        env = {**os.environ, "GOBIN": out, "CGO_ENABLED": "0"}
        subprocess.run(
            [part.replace("{out}", out) for part in command],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=1800,
        )
        os.replace(Path(out) / binary.name, binary)
    return binary


def kind_binary() -> Path:
    """`go install sigs.k8s.io/kind@<run.sh's KIND_VERSION>`."""
    go, go_version = _go()
    version = pinned("KIND_VERSION")
    return _build(
        KIND_CACHE / f"{version}-{go_version}" / "kind", [go, "install", f"sigs.k8s.io/kind@{version}"]
    )


def kstatus_binary() -> Path:
    """`go build` of tests/tools/kstatus."""
    go, go_version = _go()
    key = hashlib.sha256(
        b"".join((KSTATUS_SOURCE / f).read_bytes() for f in ("go.mod", "go.sum", "main.go"))
        + go_version.encode()
    ).hexdigest()[:16]
    return _build(
        KSTATUS_CACHE / key / "kstatus",
        [go, "build", "-mod=readonly", "-o", "{out}/kstatus", "."],
        cwd=KSTATUS_SOURCE,
    )


def helm_docs_binary() -> Path:
    """`go install github.com/norwoodj/helm-docs/cmd/helm-docs@HELM_DOCS_VERSION`."""
    go, go_version = _go()
    return _build(
        HELM_DOCS_CACHE / f"{HELM_DOCS_VERSION}-{go_version}" / "helm-docs",
        [go, "install", f"github.com/norwoodj/helm-docs/cmd/helm-docs@{HELM_DOCS_VERSION}"],
    )


def gitleaks_binary() -> Path:
    """The publisher's secret scanner as the images hold it: sandbox-image/gitleaks builds it (its pin)."""
    _go()
    built = subprocess.run(
        [str(ROOT / "sandbox-image" / "gitleaks")], capture_output=True, text=True, check=True, timeout=1800
    )
    return Path(built.stdout.strip())


BUILDS = {
    "kind": kind_binary,
    "kstatus": kstatus_binary,
    "helm-docs": helm_docs_binary,
    "gitleaks": gitleaks_binary,
}

if __name__ == "__main__":
    for name in sys.argv[1:] or BUILDS:
        print(BUILDS[name]())
