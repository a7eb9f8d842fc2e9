"""`harnessctl validate --cluster` against the real API server: a run named but not in the files is looked
up in the manifest's namespace (else -n); a missing one fails validate, a present one passes (the CRDs of
this tree; no operator is needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .operator_env import apply_crds

HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")


def validate(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARNESSCTL, "validate", *args], capture_output=True, text=True)


def run_manifest(name: str, namespace: str | None, spec: str) -> str:
    where = f", namespace: {namespace}" if namespace else ""
    return (
        f"apiVersion: {GROUP}/{VERSION}\nkind: HarnessRun\nmetadata: {{name: {name}{where}}}\nspec:\n"
        f"  provider: claude\n{spec}"
    )


IMPLEMENT = "  prompt: Go on.\n  workspace: {workingDir: /w}\n  after: [plan]\n  resumeFrom: {run: plan}\n"
REVIEW = (
    "  promptFrom: {runOutput: {name: plan}}\n"
    "  workspace: {workingDir: /w, git: {url: 'https://github.com/a/b'}, from: {run: ghost}}\n"
)


def test_cluster_lookup_finds_the_run_that_exists_and_fails_on_the_one_that_does_not(
    kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path, namespace: str, tmp_path: Path
) -> None:
    apply_crds(cluster_bin_dir, kubeconfig_path)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessRun",
        "metadata": {"name": "plan"},
        "spec": {"provider": "claude", "prompt": "Plan.", "cancel": True},
    }
    client.CustomObjectsApi(kube).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessruns", body
    )
    manifests = tmp_path / "runs.yaml"
    manifests.write_text(
        run_manifest("implement", namespace, IMPLEMENT) + "---\n" + run_manifest("review", None, REVIEW)
    )
    offline = validate(str(manifests))
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert offline.stdout.count("is not among the given manifests") == 4, offline.stdout

    found = validate("--cluster", "--kubeconfig", kubeconfig_path, "-n", namespace, str(manifests))
    assert found.returncode == 1, found.stdout + found.stderr
    lookups = [line for line in found.stdout.splitlines() if 'HarnessRun "' in line]
    assert lookups == [
        f'{manifests}: HarnessRun/review: spec.workspace.from.run: HarnessRun "ghost" is neither among the '
        f"given manifests nor on the cluster (the namespace -n or the context gives): this run would wait for it forever; "
        "create it, or correct the name"
    ], found.stdout

    elsewhere = validate("--cluster", "--kubeconfig", kubeconfig_path, "-n", "default", str(manifests))
    missing = [line.split(": ")[2] for line in elsewhere.stdout.splitlines() if "neither among" in line]
    assert missing == ["spec.promptFrom.runOutput.name", "spec.workspace.from.run"], elsewhere.stdout
