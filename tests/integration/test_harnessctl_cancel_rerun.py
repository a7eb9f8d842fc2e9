"""`harnessctl cancel` and `harnessctl rerun` against the real API server (the CRDs of this tree; no
operator is needed: what they write is the run's spec and a new run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .operator_env import apply_crds

HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")


def harnessctl(*args: str, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARNESSCTL, *args, "--kubeconfig", kubeconfig], capture_output=True, text=True)


def test_cancel_sets_spec_cancel_and_rerun_copies_the_spec(
    kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path, namespace: str
) -> None:
    apply_crds(cluster_bin_dir, kubeconfig_path)
    custom = client.CustomObjectsApi(kube)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessRun",
        "metadata": {"name": "review", "labels": {"team": "a"}, "annotations": {"ticket": "T-1"}},
        "spec": {"provider": "claude", "prompt": "Review.", "limits": {"timeoutSeconds": 60}},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", body)

    done = harnessctl("cancel", "review", "-n", namespace, kubeconfig=kubeconfig_path)
    assert done.returncode == 0 and "review cancel requested" in done.stdout, done.stderr
    run = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", "review")
    assert run["spec"]["cancel"] is True

    done = harnessctl("rerun", "review", "-n", namespace, kubeconfig=kubeconfig_path)
    assert done.returncode == 0, done.stderr
    name = done.stdout.split("/", 1)[1].split()[0]
    assert name.startswith("review-") and name != "review"
    again = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", name)
    assert again["spec"]["prompt"] == "Review." and again["spec"]["limits"] == {"timeoutSeconds": 60}
    assert not again["spec"].get("cancel")  # a new run, not a cancelled one
    assert (
        again["metadata"]["labels"] == {"team": "a"} and again["metadata"]["annotations"]["ticket"] == "T-1"
    )

    for command in ("cancel", "rerun"):
        missing = harnessctl(command, "nope", "-n", namespace, kubeconfig=kubeconfig_path)
        assert (missing.returncode, missing.stderr) == (
            3,
            'Error from server (NotFound): harnessruns.agentharness.dev "nope" not found\n',
        )


def test_cancel_of_a_pipeline_sets_its_spec_cancel(
    kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path, namespace: str
) -> None:
    apply_crds(cluster_bin_dir, kubeconfig_path)
    custom = client.CustomObjectsApi(kube)
    step = {"name": "review", "run": {"spec": {"provider": "claude", "prompt": "Review."}}}
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessPipeline",
        "metadata": {"name": "nightly"},
        "spec": {"serviceAccountName": "runner", "steps": [step]},
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "harnesspipelines", body)
    done = harnessctl("cancel", "hpipe/nightly", "-n", namespace, kubeconfig=kubeconfig_path)
    assert (done.returncode, done.stdout) == (
        0,
        "harnesspipeline.agentharness.dev/nightly cancel requested\n",
    )
    pipeline = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "harnesspipelines", "nightly")
    assert pipeline["spec"]["cancel"] is True
    missing = harnessctl("cancel", "pipeline/nope", "-n", namespace, kubeconfig=kubeconfig_path)
    assert (missing.returncode, missing.stderr) == (
        3,
        'Error from server (NotFound): harnesspipelines.agentharness.dev "nope" not found\n',
    )
    wrong = harnessctl("cancel", "job/x", "-n", namespace, kubeconfig=kubeconfig_path)
    assert wrong.returncode == 2 and "'job/x': give RUN, run/RUN or pipeline/PIPELINE" in wrong.stderr
