"""Fixtures for integration tests against the real single-node test cluster.

The cluster (tests/cluster: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, containerd and a real kubelet, built from pinned Go modules)
is brought up once per session by ``tests/cluster/up``, unless ``KUBECONFIG``
names a cluster that answers, which is then reused. ``up`` is idempotent and
fast when the cluster already runs; it never tears the cluster down, so
``tests/cluster/down`` is CI's job.

Every test collected under tests/integration gets the ``integration`` marker,
so ``pytest -m "not integration"`` runs without a cluster.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .operator_env import (
    OperatorProcess,
    definition_body,
    install_chart_rbac_and_catalog,
    refuse_foreign_releases,
    service_account_kubeconfig,
)

HERE = Path(__file__).resolve().parent
CLUSTER_DIR = HERE.parent / "cluster"
ROOT = HERE.parents[1]
UP_TIMEOUT_SECONDS = 3600  # a cold `up` compiles Kubernetes

T = TypeVar("T")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)


def wait_until(
    predicate: Callable[[], T | None],
    *,
    timeout: float,
    what: str,
    interval: float = 0.25,
    diagnose: Callable[[], str] | None = None,
) -> T:
    """Poll ``predicate`` until it returns something truthy (returned) or fail after ``timeout`` seconds.
    ``diagnose`` (optional) returns extra text for the failure message."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            result = predicate()
            if result:
                return result
        except ApiException as exc:  # transient while things settle (e.g. 404 before creation)
            last_error = exc
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error})" if last_error else ""
            if diagnose is not None:
                detail += "\n" + diagnose()
            pytest.fail(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)


def _reachable(kubeconfig: str) -> bool:
    try:
        api = config.new_client_from_config(config_file=kubeconfig)
    except Exception:
        return False
    try:
        client.VersionApi(api).get_code(_request_timeout=5)
        return True
    except Exception:
        return False
    finally:
        api.close()


def _cluster_up() -> str:
    """Run tests/cluster/up and return the kubeconfig path from its last line."""
    proc = subprocess.run(
        [str(CLUSTER_DIR / "up")],
        stdout=subprocess.PIPE,
        text=True,
        timeout=UP_TIMEOUT_SECONDS,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not lines[-1].startswith("KUBECONFIG="):
        pytest.fail(f"tests/cluster/up failed (exit {proc.returncode}); stdout:\n{proc.stdout}")
    return lines[-1].split("=", 1)[1]


@pytest.fixture(scope="session")
def kubeconfig_path(cluster_bin_dir: Path) -> str:
    """Admin kubeconfig of the test cluster (``KUBECONFIG`` if it answers, else ``tests/cluster/up``).
    The session ends at once, saying what to remove, on a cluster holding a release of the chart the suite
    would break (before any test replaces the CRDs that release keeps)."""
    env = os.environ.get("KUBECONFIG")
    path = env if env and ":" not in env and _reachable(env) else _cluster_up()
    if (cluster_bin_dir / "helm").exists():  # absent when KUBECONFIG names another cluster
        try:
            refuse_foreign_releases(cluster_bin_dir, path)
        except RuntimeError as refused:
            pytest.exit(str(refused), returncode=pytest.ExitCode.USAGE_ERROR)
    return path


@pytest.fixture(scope="session")
def kube(kubeconfig_path: str) -> Iterator[client.ApiClient]:
    """Admin ``ApiClient`` (system:masters) for the test cluster."""
    api = config.new_client_from_config(config_file=kubeconfig_path)
    yield api
    api.close()


@pytest.fixture(scope="session")
def cluster_bin_dir() -> Path:
    """Directory with kubectl, helm, ... built by tests/cluster/build-bins (absent if KUBECONFIG named another cluster)."""
    cache = os.environ.get("HARNESS_CLUSTER_CACHE", "/var/cache/harness-operator/cluster")
    return Path(cache) / "bin"


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """The base sandbox and the test image (sandbox + fake agent), built from sandbox-image/Dockerfile and
    loaded on the node: {"sandbox": tag, "test": tag}."""
    out = subprocess.run(
        [str(ROOT / "sandbox-image" / "build"), "--test", "--only", "sandbox,test"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    tags = out.stdout.split()
    return {tag.split(":")[0].rsplit("/", 1)[1].removeprefix("sandbox-"): tag for tag in tags}


@pytest.fixture(scope="session")
def service_account_client(kube: client.ApiClient) -> Iterator[Callable[..., client.ApiClient]]:
    """Factory: ``service_account_client(namespace, name)`` -> ``ApiClient`` authenticated as that
    ServiceAccount, with a short-lived token minted through the TokenRequest API. Use it to check RBAC
    (e.g. the chart's Roles) for real."""
    made: list[client.ApiClient] = []

    def make(namespace: str, name: str, expiration_seconds: int = 3600) -> client.ApiClient:
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
        )
        token = client.CoreV1Api(kube).create_namespaced_service_account_token(name, namespace, request)
        admin = kube.configuration
        cfg = client.Configuration()
        cfg.host = admin.host
        cfg.ssl_ca_cert = admin.ssl_ca_cert
        cfg.verify_ssl = True
        cfg.api_key = {"authorization": token.status.token}
        cfg.api_key_prefix = {"authorization": "Bearer"}
        api = client.ApiClient(cfg)
        made.append(api)
        return api

    yield make
    for api in made:
        api.close()


def _namespace_name(node_name: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", node_name.lower()).strip("-")[:40].strip("-")
    return f"it-{base}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(kube: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace enforcing the ``restricted`` Pod Security Standard, deleted after the test.
    Yields once its ``default`` ServiceAccount exists (pods can be created)."""
    core = client.CoreV1Api(kube)
    name = _namespace_name(request.node.name)
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                    "harness-operator.test/integration": "true",
                },
            )
        )
    )
    try:
        wait_until(
            lambda: core.read_namespaced_service_account("default", name),
            timeout=30,
            what=f"ServiceAccount default in {name}",
        )
        yield name
    finally:
        try:
            core.delete_namespace(name, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise


def describe_namespace(api: client.ApiClient, namespace: str) -> str:
    """Pods (phase, container states) and events of a namespace, for failure messages."""
    core = client.CoreV1Api(api)
    lines = []
    for pod in core.list_namespaced_pod(namespace).items:
        lines.append(f"pod {pod.metadata.name}: phase={pod.status.phase} node={pod.spec.node_name}")
        for cs in pod.status.container_statuses or []:
            lines.append(f"  container {cs.name}: {cs.state}")
    for ev in core.list_namespaced_event(namespace).items:
        lines.append(f"event {ev.involved_object.kind}/{ev.involved_object.name}: {ev.reason}: {ev.message}")
    return "\n".join(lines)


def api_status(exc: ApiException) -> dict[str, Any]:
    """The Status object of a failed API call."""
    import json

    try:
        body = json.loads(exc.body or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


# --- the operator as a process under the chart's RBAC, and what tests do with the cluster ---------------

RUN_TIMEOUT = 120


@pytest.fixture(scope="module")
def operator(
    kube: client.ApiClient,
    kubeconfig_path: str,
    cluster_bin_dir: Path,
    images: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """The operator as a process, under the ServiceAccount and RBAC `helm install` made."""
    with running_operator(
        kube, kubeconfig_path, cluster_bin_dir, tmp_path_factory, operator_settings(images)
    ) as proc:
        yield proc


@contextlib.contextmanager
def running_operator(
    kube: client.ApiClient,
    kubeconfig_path: str,
    cluster_bin_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    env: dict[str, str],
) -> Iterator[OperatorProcess]:
    """The chart's RBAC and catalog installed, and the operator started as a process under its
    ServiceAccount with the settings `env`; stopped after."""
    install_chart_rbac_and_catalog(cluster_bin_dir, kubeconfig_path)
    folder = tmp_path_factory.mktemp("operator")
    sa_config = service_account_kubeconfig(kube, kubeconfig_path, folder / "kubeconfig")
    proc = OperatorProcess(kubeconfig=sa_config, env=env, log_path=folder / "operator.log")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()
        print(f"operator log: {proc.log_path}")


def operator_settings(images: dict[str, str]) -> dict[str, str]:
    """The HARNESS_* settings the tests run the operator with."""
    return {
        "HARNESS_SANDBOX_IMAGE": images["sandbox"],
        "HARNESS_MAX_RUNS_PER_NAMESPACE": "2",
        "HARNESS_DEFAULT_CPU_REQUEST": "50m",
        "HARNESS_DEFAULT_MEMORY_REQUEST": "64Mi",
        "HARNESS_DEFAULT_GRACE_PERIOD_SECONDS": "5",
    }


class Api:
    """What a test does with the cluster, as an admin user would with kubectl."""

    def __init__(self, kube: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(kube)
        self.batch = client.BatchV1Api(kube)
        self.core = client.CoreV1Api(kube)
        self.net = client.NetworkingV1Api(kube)
        self.ns = namespace

    def create(self, body: dict[str, Any]) -> None:
        plural = "harnessruns" if body["kind"] == "HarnessRun" else "harnessdefinitions"
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, plural, body)

    def run(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "harnessruns", name)

    def status(self, name: str) -> dict[str, Any]:
        return self.run(name).get("status") or {}

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next((c for c in self.status(name).get("conditions", []) if c["type"] == type_), {})

    def wait_finished(self, name: str, timeout: float = RUN_TIMEOUT) -> dict[str, Any]:
        wait_until(
            lambda: self.condition(name, "Succeeded").get("status") in ("True", "False"),
            timeout=timeout,
            what=f"run {name} to finish",
        )
        return self.status(name)

    def jobs(self, run: str) -> list[Any]:
        return self.batch.list_namespaced_job(self.ns, label_selector=f"agentharness.dev/run={run}").items

    def events(self, name: str) -> list[str]:
        events = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        return [e.message for e in events]


@pytest.fixture
def api(kube: client.ApiClient, namespace: str, operator: OperatorProcess) -> Api:
    return Api(kube, namespace)


@pytest.fixture
def fake(api: Api, images: dict[str, str]) -> Callable[..., None]:
    """`fake(name, mode, **spec)`: a HarnessDefinition backed by the fake agent in that mode."""

    def make(name: str, mode: str, **spec: Any) -> None:
        api.create(definition_body(name, images["test"], mode, **spec))

    return make
