"""Fixtures of the e2e suite: the chart installed with its defaults on the cluster named by KUBECONFIG,
vendor-API stubs the sandbox pods can reach, and a user's view of runs (kubectl-like helpers).

The suite runs against any cluster whose nodes have the images `make images` built (the local test
cluster in CI; a kind cluster through e2e/kind/run.sh). E2E_STUB_HOST is the address pods reach this
process at (default: the local test cluster's node address).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from tests.lib import processes
from tests.stubs.run_cli import stub_class

from harness_operator.api.v1alpha1 import GROUP, VERSION

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "harness-operator"
RELEASE, RELEASE_NAMESPACE = "harness-operator", "harness-system"
STUB_HOST = os.environ.get("E2E_STUB_HOST", "10.88.0.1")
T = TypeVar("T")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.e2e)


def wait_until(predicate: Callable[[], T | None], timeout: float, what: str) -> T:
    """Poll `predicate` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


def readme_blocks(section: str, lang: str) -> list[str]:
    """The fenced `lang` blocks of the README's section whose heading is `section` (`### 4. A pull
    request`), in order: its own text, up to the next heading of any level."""
    blocks: list[str] = []
    inside, fence, block = False, None, []
    for line in (ROOT / "README.md").read_text().splitlines():
        if fence is not None:
            if line.strip() == "```":
                if fence == lang:
                    blocks.append("\n".join(block) + "\n")
                fence, block = None, []
            else:
                block.append(line)
        elif line.startswith("```") and inside:
            fence = line[3:].strip()
        elif line.startswith("#"):
            if inside:
                break
            inside = line == section
    assert inside, f"the README has no section {section!r}"
    assert blocks, f"the README's section {section!r} has no {lang} block"
    return blocks


def readme_commands(block: str) -> list[str]:
    """The commands of an sh block, continuation lines joined."""
    return [c.strip() for c in block.replace("\\\n", " ").splitlines() if c.strip()]


def tool(name: str) -> str:
    """kubectl or helm: from PATH, else the local test cluster's build."""
    found = shutil.which(name)
    if found:
        return found
    cache = Path(os.environ.get("HARNESS_CLUSTER_CACHE", "/var/cache/harness-operator/cluster"))
    candidate = cache / "bin" / name
    if candidate.exists():
        return str(candidate)
    raise RuntimeError(f"{name} is not on PATH")


def sh(*argv: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command as a user would type it; its output in the failure message."""
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return sh(tool("helm"), "--kubeconfig", os.environ["KUBECONFIG"], *args, check=check)


def kubectl(*args: str, check: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return sh(tool("kubectl"), "--kubeconfig", os.environ["KUBECONFIG"], *args, check=check, stdin=stdin)


def install_chart(*extra: str) -> None:
    """`helm upgrade --install` of the chart with its defaults (plus `extra` helm arguments), CRDs
    included; without --reset-values an upgrade given no values would keep the previous release's.
    `--take-ownership` adopts the CRDs the integration tests replaced from this tree (as a user adopts
    CRDs applied with kubectl)."""
    helm(
        "upgrade", "--install", RELEASE, str(CHART), "--namespace", RELEASE_NAMESPACE, "--create-namespace",
        "--reset-values", "--take-ownership", "--wait", "--timeout", "180s", *extra,
    )  # fmt: skip


@pytest.fixture(scope="session")
def kube() -> Iterator[client.ApiClient]:
    if not os.environ.get("KUBECONFIG"):
        pytest.fail("the e2e suite runs against the cluster named by KUBECONFIG; none is set")
    api = config.new_client_from_config(config_file=os.environ["KUBECONFIG"])
    yield api
    api.close()


@pytest.fixture(scope="session")
def release(kube: client.ApiClient) -> Iterator[str]:
    """The chart as a user installs it after `make images`: no --set at all. Uninstalled at the end, so
    no operator is left running in a cluster other suites share."""
    started = time.monotonic()
    install_chart()
    print(f"\nmeasured: helm install --wait {time.monotonic() - started:.1f}s")
    yield RELEASE
    helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait", check=False)


@pytest.fixture
def namespace(kube: client.ApiClient, release: str) -> Iterator[str]:
    """A fresh namespace under the restricted Pod Security profile, deleted afterwards."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(kube)
    core.create_namespace(
        client.V1Namespace(
            metadata=client.V1ObjectMeta(
                name=name, labels={"pod-security.kubernetes.io/enforce": "restricted"}
            )
        )
    )
    yield name
    core.delete_namespace(name)


@pytest.fixture
def git_repo(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], tuple[str, int]]]:
    """Factory: git_repo(files) -> (git:// URL, port) of a repository holding `files`, served by
    `git daemon` where pods reach it (a workspace the run's git init container clones)."""
    daemons: list[subprocess.Popen[bytes]] = []

    def make(files: dict[str, str]) -> tuple[str, int]:
        work, name = tmp_path / f"work{len(daemons)}", f"repo{len(daemons)}.git"
        for path, text in files.items():
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_text(text)
        git = ["git", "-C", str(work), "-c", "user.name=e2e", "-c", "user.email=e2e@example.invalid"]
        sh("git", "init", "-q", "-b", "main", str(work))
        sh(*git, "add", "-A")
        sh(*git, "commit", "-q", "-m", "agent configuration")
        sh("git", "clone", "-q", "--bare", str(work), str(tmp_path / name))
        with socket.socket() as sock:
            sock.bind((STUB_HOST, 0))
            port = int(sock.getsockname()[1])
        daemons.append(
            processes.start(
                [
                    "git",
                    "daemon",
                    "--export-all",
                    f"--base-path={tmp_path}",
                    f"--listen={STUB_HOST}",
                    f"--port={port}",
                    "--reuseaddr",
                    str(tmp_path),
                ]
            )
        )
        return f"git://{STUB_HOST}:{port}/{name}", port

    try:
        yield make
    finally:
        for daemon in daemons:
            processes.stop(daemon)


@pytest.fixture
def stub() -> Iterator[Callable[..., Any]]:
    """Factory: stub(vendor, mode, delay, **stub's own keywords) -> a started vendor-API stub listening where
    pods reach it."""
    started: list[Any] = []

    def make(vendor: str, mode: str = "ok", delay: float = 0.0, **extra: Any) -> Any:
        server = stub_class(vendor)(mode=mode, host=STUB_HOST, delay=delay, **extra).start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


class Runs:
    """What a user does with runs in one namespace: apply, read status and Events, wait on conditions."""

    def __init__(self, kube: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(kube)
        self.core = client.CoreV1Api(kube)
        self.batch = client.BatchV1Api(kube)
        self.ns = namespace

    def secret(self, name: str, key: str, value: str) -> None:
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data={key: value})
        self.core.create_namespaced_secret(self.ns, body)

    def create(self, name: str, spec: dict[str, Any]) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "HarnessRun",
            "metadata": {"name": name},
            "spec": spec,
        }
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, "harnessruns", body)

    def patch(self, name: str, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.ns, "harnessruns", name, {"spec": spec}
        )

    def get(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "harnessruns", name))

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        for cond in (self.get(name).get("status") or {}).get("conditions") or []:
            if cond["type"] == type_:
                return dict(cond)
        return None

    def wait_finished(self, name: str, timeout: float = 240) -> dict[str, Any]:
        """The run's status once its Succeeded condition is True or False."""

        def finished() -> dict[str, Any] | None:
            cond = self.condition(name, "Succeeded")
            return self.get(name)["status"] if cond and cond["status"] in ("True", "False") else None

        try:
            return wait_until(finished, timeout, f"HarnessRun {self.ns}/{name} to finish")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.describe(name)}") from None

    def wait_reason(self, name: str, reason: str, timeout: float = 120) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            status = self.get(name).get("status") or {}
            return status if status.get("reason") == reason else None

        return wait_until(reached, timeout, f"HarnessRun {self.ns}/{name} to reach reason {reason}")

    def events(self, name: str) -> list[tuple[str, str, str]]:
        """(type, reason, message) of the run's Events, oldest first."""
        listed = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}")
        items = sorted(listed.items, key=lambda e: (e.first_timestamp or e.event_time or 0, e.metadata.name))
        return [(e.type, e.reason, e.message) for e in items]

    def jobs(self, name: str) -> list[str]:
        selector = f"{GROUP}/run={name}"
        return sorted(
            j.metadata.name for j in self.batch.list_namespaced_job(self.ns, label_selector=selector).items
        )

    def output(self, name: str) -> str:
        status = self.get(name)["status"]
        cm = self.core.read_namespaced_config_map(status["output"]["configMapName"], self.ns)
        return str(cm.data["output"])

    def describe(self, name: str) -> str:
        pods = self.core.list_namespaced_pod(self.ns, label_selector=f"{GROUP}/run={name}").items
        lines = [f"status: {self.get(name).get('status')}", f"events: {self.events(name)}"]
        for pod in pods:
            lines.append(f"pod {pod.metadata.name}: {pod.status.phase} {pod.status.container_statuses}")
            try:
                log = self.core.read_namespaced_pod_log(pod.metadata.name, self.ns, container="runner")
                lines.append(f"log: {log[-3000:]}")
            except ApiException as exc:
                lines.append(f"log unavailable: {exc.reason}")
        return "\n".join(lines)


@pytest.fixture
def runs(kube: client.ApiClient, namespace: str) -> Runs:
    return Runs(kube, namespace)
