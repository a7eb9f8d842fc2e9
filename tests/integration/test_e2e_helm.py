"""A user's journey: `helm install` the chart with the locally built operator image, then `kubectl apply`
a run; the operator runs in the cluster as the chart deploys it (in-cluster config, its own RBAC)."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import wait_until
from .operator_env import (
    RELEASE,
    RELEASE_NAMESPACE,
    ROOT,
    definition_body,
    helm_install,
    helm_uninstall,
    run_body,
)

RELEASE_NS = RELEASE_NAMESPACE


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    tags = subprocess.run(
        [str(ROOT / "sandbox-image" / "build"), "--test", "--operator"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {t.split(":")[0].rsplit("/", 1)[1]: t for t in tags}


@pytest.fixture(scope="module")
def release(
    kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path, built: dict[str, str]
) -> Iterator[str]:
    watched = f"e2e-helm-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(kube)
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=watched, labels={"pod-security.kubernetes.io/enforce": "restricted"}
            )
        )
    )
    repository, tag = built["harness-operator"].split(":")
    started = time.monotonic()
    helm_install(
        cluster_bin_dir,
        kubeconfig_path,
        "replicaCount=1",
        f"image.repository={repository}",
        f"image.tag={tag}",
        f"sandboxImage={built['sandbox']}",
        f"watchNamespaces={{{watched}}}",
        "sandboxDefaults.cpuRequest=50m",
        "sandboxDefaults.memoryRequest=64Mi",
    )
    print(f"\nmeasured: helm install --wait {time.monotonic() - started:.1f}s")
    yield watched
    helm_uninstall(cluster_bin_dir, kubeconfig_path)
    core.delete_namespace(watched)


def test_helm_installed_operator_runs_a_run(
    kube: client.ApiClient, release: str, built: dict[str, str]
) -> None:
    custom = client.CustomObjectsApi(kube)
    apps = client.AppsV1Api(kube)
    deployment = apps.read_namespaced_deployment(RELEASE, RELEASE_NS)
    assert deployment.status.ready_replicas == 1
    builtins = custom.list_cluster_custom_object(GROUP, VERSION, "clusterharnessdefinitions")["items"]
    assert len(builtins) == 15
    custom.create_namespaced_custom_object(
        GROUP, VERSION, release, "harnessdefinitions", definition_body("fake", built["sandbox-test"], "ok")
    )
    custom.create_namespaced_custom_object(
        GROUP, VERSION, release, "harnessruns", run_body("journey", {"provider": "fake", "prompt": "hello"})
    )

    def finished() -> dict | None:
        status = custom.get_namespaced_custom_object(GROUP, VERSION, release, "harnessruns", "journey").get(
            "status"
        )
        return status if status and status.get("phase") in ("Succeeded", "Failed") else None

    status = wait_until(finished, timeout=120, what="the run to finish under the helm-installed operator")
    assert status["phase"] == "Succeeded", status
    assert status["output"]["excerpt"] == "answer from fake-agent: hello"
    assert status["usage"]["costSource"] == "reported"
