"""The README's quick start, every command of it, as a user types it: the images it needs built and pushed
to a real registry (CNCF distribution on loopback, tests/cluster/registry), the chart installed pointing
at it, so the kubelet pulls the operator's, the gateway's and the sandbox's image itself; then Claude
Code runs once.

The chart is installed with the values file the README's block names, as a user keeps it. Two
substitutions only, in a copy of that file: the registry's address, and the model gateway's Anthropic
`upstream` is the stub's (the one thing a test cannot leave as it is: the real vendor API is not reachable
here; the same value a user sets for a self-hosted or proxy endpoint). The run is the example as it
stands: routed through the gateway, which holds the key.
"""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
from collections.abc import Callable, Iterator
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest
import yaml

from .conftest import RELEASE_NAMESPACE, ROOT, Runs, install_chart, readme_blocks, readme_commands, tool

REGISTRY = os.environ.get("E2E_REGISTRY", "127.0.0.1:5000")
README_REGISTRY = "registry.example.com/harness"
VALUES = "charts/harness-operator/examples/platform-values.yaml"


def quickstart_commands() -> list[str]:
    """The commands of the README's quick-start block, continuation lines joined."""
    return readme_commands(readme_blocks("## Quick start on a real cluster", "sh")[0])


def registry_up() -> bool:
    try:
        with urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture
def user_kubeconfig(namespace: str, tmp_path: Path) -> str:
    """The cluster's kubeconfig with the test namespace as the current context's namespace."""
    config = yaml.safe_load(Path(os.environ["KUBECONFIG"]).read_text())
    current = config["current-context"]
    for context in config["contexts"]:
        if context["name"] == current:
            context["context"]["namespace"] = namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def forget_pulled_images() -> None:
    """The local test cluster's node drops what it pulled from the registry before, as a node that never
    saw these images: with `IfNotPresent` it would otherwise run the copy a previous run pushed under the
    same tag. On other clusters (kind) the node is new anyway."""
    sock = (
        Path(os.environ.get("HARNESS_CLUSTER_STATE", "/var/lib/harness-operator-cluster"))
        / "containerd/containerd.sock"
    )
    if not sock.exists():
        return
    ctr = ["ctr", "--address", str(sock), "--namespace", "k8s.io", "images"]
    listed = subprocess.run([*ctr, "ls", "-q"], capture_output=True, text=True, check=True).stdout.split()
    pulled = [ref for ref in listed if ref.startswith(f"{REGISTRY}/")]
    if pulled:
        subprocess.run([*ctr, "rm", *pulled], capture_output=True, check=True)


@pytest.fixture
def restore_defaults() -> Iterator[None]:
    yield
    install_chart()


def test_readme_quick_start(
    user_kubeconfig: str, runs: Runs, stub: Callable[..., Any], tmp_path: Path, restore_defaults: None
) -> None:
    if not registry_up():
        pytest.skip(f"no registry answers at {REGISTRY} (tests/cluster/registry start)")
    server = stub("anthropic")
    forget_pulled_images()
    values = yaml.safe_load((ROOT / VALUES).read_text())
    assert values["imageRegistry"] == README_REGISTRY, "the values file names the README's registry"
    values["imageRegistry"] = f"{REGISTRY}/harness"
    # The model gateway's Anthropic is the stub (the sandbox reaches only the gateway).
    values["modelGateway"]["vendors"]["anthropic"]["upstream"] = server.base_url
    local_values = tmp_path / "values.yaml"
    local_values.write_text(yaml.safe_dump(values))
    env = {
        **os.environ,
        "KUBECONFIG": user_kubeconfig,
        "ANTHROPIC_API_KEY": "sk-e2e-not-a-real-key",
        "PATH": f"{Path(tool('kubectl')).parent}:{Path(tool('helm')).parent}:{os.environ['PATH']}",
    }
    outputs = []
    for command in quickstart_commands():
        command = command.replace(README_REGISTRY, f"{REGISTRY}/harness").replace(VALUES, str(local_values))
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        outputs.append(done.stdout)
    excerpt, output, cost = outputs[-3:]
    assert "Hello from the" in excerpt and "Hello from the" in output
    assert re.fullmatch(r"0\.\d+ USD, 1234 tokens in\n", cost), cost
    usage = runs.get("hello")["status"]["usage"]
    assert usage["costSource"] == "metered", usage  # the gateway's figure, not the sandbox's
    assert {tuple(r.auth_sha256) for r in server.requests} == {
        (sha256(b"sk-e2e-not-a-real-key").hexdigest(),)
    }
    pod = runs.core.list_namespaced_pod(runs.ns, label_selector="agentharness.dev/run=hello").items[0]
    assert pod.spec.containers[0].image.startswith(f"{REGISTRY}/harness/sandbox-claude:")
    assert pod.status.container_statuses[0].image.startswith(f"{REGISTRY}/harness/"), "pulled by the kubelet"
    serving = [
        status.image
        for chart_pod in runs.core.list_namespaced_pod(RELEASE_NAMESPACE).items
        if chart_pod.metadata.deletion_timestamp is None and chart_pod.status.phase == "Running"
        for status in chart_pod.status.container_statuses or []
    ]
    assert any("/harness-operator:" in image for image in serving), serving
    assert any("/harness-gateway:" in image for image in serving), serving
    assert any("/harness-store:" in image for image in serving), serving
    assert all(image.startswith(f"{REGISTRY}/harness/") for image in serving), serving
