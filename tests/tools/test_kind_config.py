"""e2e/kind: the real kind CLI, built from the Go module proxy at the version run.sh pins, parses and
validates e2e/kind/cluster.yaml as run.sh hands it over. kind cannot create a cluster here (its node image
comes from a registry), so a stub `docker` first on PATH stands in for the container runtime: it answers
what kind asks before provisioning and refuses the rest, so kind stops at its first provisioning step
(the docker network), which it reaches only after its own validation of the config passed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from tests.tools.gobuilds import ROOT, RUN_SH, kind_binary, pinned

pytestmark = pytest.mark.gotool

KIND_DIR = ROOT / "e2e" / "kind"
DOCKER_STUB = """#!/bin/sh
# Stands in for docker: answers what kind asks before it provisions, refuses everything else.
printf '%s\\n' "$*" >>"$DOCKER_STUB_LOG"
case "$1" in
-v) echo "Docker version 0.0.0, build stub" ;;
info) echo '{"CgroupVersion":"2","CgroupDriver":"systemd","MemoryLimit":true,"PidsLimit":true,"CPUShares":true,"SecurityOptions":[]}' ;;
ps) ;;      # no kind clusters, no nodes
inspect) ;; # the node image is "present": kind pulls nothing
*) echo "docker stub: no container runtime here" >&2; exit 1 ;;
esac
"""
REFUSE = '#!/bin/sh\necho "$0 stub: run.sh must not get here" >&2\nexit 1\n'


@pytest.fixture(scope="session")
def kind_bin() -> Path:
    """kind at run.sh's KIND_VERSION (tests/tools/gobuilds.py)."""
    return kind_binary()


@pytest.fixture
def stubs(tmp_path: Path, kind_bin: Path) -> dict[str, str]:
    """Environment with the stub docker (and refusing helm) first on PATH, then the built kind."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in {"docker": DOCKER_STUB, "helm": REFUSE}.items():
        (bin_dir / name).write_text(script)
        (bin_dir / name).chmod(0o755)
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith(("KIND_", "KUBECONFIG"))},
        "PATH": f"{bin_dir}:{kind_bin.parent}:{os.environ['PATH']}",
        "DOCKER_STUB_LOG": str(tmp_path / "docker.log"),
        "KIND_KUBECONFIG": str(tmp_path / "kubeconfig"),
    }


def docker_calls(env: dict[str, str]) -> list[str]:
    log = Path(env["DOCKER_STUB_LOG"])
    return log.read_text().splitlines() if log.exists() else []


def kind(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kind", *args], env=env, capture_output=True, text=True, timeout=120)


def test_kind_is_the_pinned_version(stubs: dict[str, str]) -> None:
    assert kind(stubs, "version").stdout.startswith(f"kind {pinned('KIND_VERSION')} ")


def test_run_sh_creates_the_cluster_from_the_config_and_stops_only_at_provisioning(
    stubs: dict[str, str],
) -> None:
    result = subprocess.run([str(RUN_SH)], env=stubs, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert 'Creating cluster "harness-e2e"' in result.stderr, result.stderr
    assert "failed to ensure docker network" in result.stderr, result.stderr
    calls = docker_calls(stubs)
    assert f"inspect --type=image {pinned('node_image')}" in calls
    assert calls[-2].startswith("network "), calls  # then kind lists its nodes to clean up
    assert not any(c.startswith(("run ", "pull ", "create ")) for c in calls), calls


def test_run_sh_node_image_is_the_one_this_kind_release_was_built_for(stubs: dict[str, str]) -> None:
    kind(stubs, "create", "cluster", "--name", "default-image", "--config", str(KIND_DIR / "cluster.yaml"))
    inspected = [c.split()[-1] for c in docker_calls(stubs) if c.startswith("inspect --type=image ")]
    assert len(inspected) == 1, docker_calls(stubs)
    assert inspected[0].split("@")[0] == pinned("node_image"), "bump KIND_NODE_IMAGE's default in run.sh"


CONFIG = yaml.safe_load((KIND_DIR / "cluster.yaml").read_text())
BROKEN = {
    "no-control-plane": (
        {**CONFIG, "nodes": [{"role": "worker"}]},
        "must have at least one control-plane node",
    ),
    "unknown-field": ({**CONFIG, "node": [{"role": "control-plane"}]}, "field node not found in type"),
    "bad-subnet": ({**CONFIG, "networking": {"podSubnet": "10.300.0.0/16"}}, "invalid pod subnet"),
    "old-api-version": (
        {**CONFIG, "apiVersion": "kind.x-k8s.io/v1alpha3"},
        "unknown apiVersion: kind.x-k8s.io/v1alpha3",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_kind_refuses_a_broken_config_before_provisioning(
    case: str, stubs: dict[str, str], tmp_path: Path
) -> None:
    config, message = BROKEN[case]
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    result = kind(stubs, "create", "cluster", "--config", str(path), "--image", pinned("node_image"))
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert not any(c.startswith(("inspect ", "network ")) for c in docker_calls(stubs)), docker_calls(stubs)
