"""The chart against the real API server, without installing it: `helm template | kubectl apply
--dry-run=server` accepts every object (the operator pod passes the restricted Pod Security profile), and
the first run that NOTES.txt prints works as printed."""

from __future__ import annotations

import base64
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness_operator.api.crd import build_crds
from harness_operator.api.v1alpha1 import GROUP, VERSION, HarnessRun
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.pod.run_data import build_output_config_map

from .test_crd_admission import apply_crds

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "harness-operator"
# Every optional value but the ServiceMonitor, whose CRD (the Prometheus Operator's) this cluster lacks.
KNOBS = (
    "imagePullSecrets[0].name=registry",
    "sandboxImagePullSecrets[0].name=registry",
    "podAnnotations.team=agents",
    "podLabels.cost-center=ai",
    "priorityClassName=system-cluster-critical",
)


@pytest.fixture(scope="module")
def crds(kube: client.ApiClient) -> Iterator[None]:
    apply_crds(kube)  # the catalog's ClusterHarnessDefinitions need their CRD to be known
    yield


def tools_env(cluster_bin_dir: Path, kubeconfig_path: str, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{cluster_bin_dir}:{os.environ['PATH']}",
        "KUBECONFIG": kubeconfig_path,
        **extra,
    }


@pytest.mark.parametrize("settings", [(), KNOBS], ids=["defaults", "every-knob"])
def test_rendered_chart_is_accepted_by_the_api_server(
    crds: None,
    kube: client.ApiClient,
    namespace: str,
    cluster_bin_dir: Path,
    kubeconfig_path: str,
    settings: tuple[str, ...],
) -> None:
    client.CoreV1Api(kube).patch_namespace(
        namespace, {"metadata": {"labels": {"pod-security.kubernetes.io/warn": "restricted"}}}
    )
    sets = " ".join(f"--set {s}" for s in settings)
    result = subprocess.run(
        [
            "bash",
            "-o",
            "pipefail",
            "-c",
            f"helm template dry-run-check {CHART} --namespace {namespace} --include-crds {sets}"
            " | kubectl apply --dry-run=server -f -",
        ],
        env=tools_env(cluster_bin_dir, kubeconfig_path),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "deployment.apps/dry-run-check-harness-operator created (server dry run)" in result.stdout
    assert "clusterharnessdefinition.agentharness.dev/claude" in result.stdout
    assert "PodSecurity" not in result.stderr, result.stderr
    assert not client.AppsV1Api(kube).list_namespaced_deployment(namespace).items, "dry run created nothing"


def status_schema() -> dict[str, Any]:
    crd = build_crds()[f"{GROUP}_harnessruns.yaml"]
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


def test_notes_first_run_works_as_printed(
    crds: None, kube: client.ApiClient, namespace: str, cluster_bin_dir: Path, kubeconfig_path: str
) -> None:
    env = tools_env(cluster_bin_dir, kubeconfig_path, ANTHROPIC_API_KEY="sk-test-not-a-real-key")
    installed = subprocess.run(
        [
            # the release other tests install: the catalog's cluster-wide objects belong to it
            *(
                "helm",
                "upgrade",
                "--install",
                "harness-operator",
                str(CHART),
                "--namespace",
                "harness-system",
            ),
            *("--dry-run=client", "--set", f"watchNamespaces={{{namespace}}}"),
            *("--set", "crds.enabled=false"),  # the `crds` fixture applied them, as operator_env does
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert installed.returncode == 0, installed.stderr
    notes = installed.stdout.split("NOTES:\n", 1)[1]
    assert f"watches {namespace}." in notes

    claude = next(d for d in load_builtin_catalog() if d.metadata["name"] == "claude")
    grant = claude.spec.credentials[0].secret_key_ref
    assert grant is not None
    assert f"create secret generic {grant.name} --from-file={grant.key}=/dev/stdin" in notes
    first_run = re.search(r"^printf .*?^EOF$", notes, re.MULTILINE | re.DOTALL)
    assert first_run, notes
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", first_run.group(0)], env=env, capture_output=True, text=True
    )
    assert ran.returncode == 0, ran.stderr

    secret = client.CoreV1Api(kube).read_namespaced_secret(grant.name, namespace)
    assert base64.b64decode(secret.data[grant.key]).decode() == "sk-test-not-a-real-key"
    run = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessruns", "hello"
    )
    assert run["spec"]["provider"] == "claude"

    # The status fields and the ConfigMap key the notes read are the ones the operator writes.
    for path in re.findall(r"\{\.status\.([A-Za-z.]+)\}", notes):
        node = status_schema()
        for part in path.split("."):
            assert part in node["properties"], f"NOTES reads .status.{path}, which the CRD does not have"
            node = node["properties"][part]
    assert "-o jsonpath='{.data.output}'" in notes
    assert list(build_output_config_map(HarnessRun.model_validate(run), "x")["data"]) == ["output"]
