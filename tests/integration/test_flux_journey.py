"""A real GitOps controller drives runs: Flux's source-controller and kustomize-controller (built from the
Go module proxy by tests/gitops/build-flux, run as processes against the test cluster) pull a repository
served over git's smart HTTP on the node; a Kustomization with `wait: true` becomes Ready only after the run
its commit added succeeded, and fails, naming the run, when a later commit adds a failing run.
Slow on a cold machine (the controllers' build): runs only with HARNESS_FLUX=1 (`make flux-test`)."""

from __future__ import annotations

import os
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness_operator.controller.retention import compute_expiry, is_applied_by_a_tool

from ..lib import processes
from .conftest import Api, wait_until
from .operator_env import definition_body, free_port, run_body

pytestmark = [
    pytest.mark.flux,
    pytest.mark.skipif(os.environ.get("HARNESS_FLUX") != "1", reason="set HARNESS_FLUX=1 (make flux-test)"),
]

ROOT = Path(__file__).resolve().parents[2]
NODE = "10.88.0.1"
FLUX = {"group": "kustomize.toolkit.fluxcd.io", "version": "v1", "plural": "kustomizations"}
HEALTH_CHECK_EXPRS = [  # as docs/gitops.md gives them
    {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessRun",
        "current": "status.conditions.exists(e, e.type == 'Ready' && e.status == 'True')",
        "failed": "status.conditions.exists(e, e.type == 'Stalled' && e.status == 'True')",
    }
]


def is_healthy(proc: subprocess.Popen[bytes], port: int) -> bool:
    assert proc.poll() is None, f"exited {proc.returncode}; see its log"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def flux(
    kubeconfig_path: str, cluster_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """The two controllers as processes with the admin kubeconfig, after their CRDs."""
    built = subprocess.run(
        [str(ROOT / "tests" / "gitops" / "build-flux")], capture_output=True, text=True, check=True
    )
    flux_dir = Path(built.stdout.strip().splitlines()[-1])
    kubectl = [str(cluster_bin_dir / "kubectl"), "--kubeconfig", kubeconfig_path]
    subprocess.run([*kubectl, "apply", "--server-side", "-f", str(flux_dir / "crds")], check=True)
    folder = tmp_path_factory.mktemp("flux")
    storage = free_port()
    (folder / "storage").mkdir()
    env = {**os.environ, "KUBECONFIG": kubeconfig_path, "RUNTIME_NAMESPACE": "default"}
    procs = []
    try:
        for name, extra in {
            "source-controller": [
                f"--storage-path={folder / 'storage'}",
                f"--storage-addr=127.0.0.1:{storage}",
                f"--storage-adv-addr=127.0.0.1:{storage}",
            ],
            "kustomize-controller": [],
        }.items():
            args = [
                f"--metrics-addr=127.0.0.1:{free_port()}",
                f"--health-addr=127.0.0.1:{free_port()}",
                *extra,
            ]
            with (folder / f"{name}.log").open("ab") as log:
                procs.append(
                    processes.start([str(flux_dir / "bin" / name), *args], env=env, stdout=log, stderr=log)
                )
        yield
    finally:
        for proc in procs:
            processes.stop(proc, grace=30)
        print(f"flux logs: {folder}")


class GitHttpBackend(BaseHTTPRequestHandler):
    """`git http-backend` (git's own smart-HTTP server, a CGI program) behind a stdlib HTTP server:
    source-controller speaks http(s) or ssh only, not git://."""

    def __init__(self, *args: Any, root: str, **kwargs: Any) -> None:
        self.root = root
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:
        self.backend()

    def do_POST(self) -> None:
        self.backend()

    def backend(self) -> None:
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        env = {
            **os.environ,
            "GIT_PROJECT_ROOT": self.root,
            "GIT_HTTP_EXPORT_ALL": "1",
            "REQUEST_METHOD": self.command,
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "CONTENT_TYPE": self.headers.get("Content-Type") or "",
            "CONTENT_LENGTH": str(length),
            "HTTP_GIT_PROTOCOL": self.headers.get("Git-Protocol") or "",
        }
        out = subprocess.run(
            ["git", "http-backend"], input=self.rfile.read(length), env=env, capture_output=True, check=False
        ).stdout
        head, _, body = out.partition(b"\r\n\r\n")
        headers = [line.split(":", 1) for line in head.decode().split("\r\n") if ":" in line]
        status = next((v.strip() for k, v in headers if k.lower() == "status"), "200 OK")
        self.send_response(int(status.split()[0]))
        for key, value in headers:
            if key.lower() != "status":
                self.send_header(key, value.strip())
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


@dataclass
class Repo:
    """A working copy whose commits are pushed to a bare repository the server at `url` serves."""

    work: Path
    bare: Path
    url: str

    def commit(self, files: dict[str, Any]) -> str:
        """Write `files` (path -> object, as YAML), commit, push; the new revision."""
        git = ["git", "-C", str(self.work), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
        for path, body in files.items():
            (self.work / path).parent.mkdir(parents=True, exist_ok=True)
            (self.work / path).write_text(yaml.safe_dump(body))
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"add {', '.join(files)}"], check=True)
        subprocess.run([*git, "push", "-q", str(self.bare), "main"], check=True)
        sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        return sha.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[Repo]:
    """A repository served over git's smart HTTP on the node's address."""
    work, bare = tmp_path / "work", tmp_path / "agents.git"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    server = ThreadingHTTPServer((NODE, 0), partial(GitHttpBackend, root=str(tmp_path)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Repo(work, bare, f"http://{NODE}:{server.server_port}/agents.git")
    server.shutdown()


@pytest.fixture
def flux_objects(flux: None, api: Api) -> Iterator[None]:
    """Flux's objects in the test namespace are deleted while the controllers still run to remove
    their finalizers; otherwise the namespace would hang in Terminating."""
    yield
    for group, plural in (
        ("kustomize.toolkit.fluxcd.io", "kustomizations"),
        ("source.toolkit.fluxcd.io", "gitrepositories"),
    ):
        for item in api.custom.list_namespaced_custom_object(group, "v1", api.ns, plural)["items"]:
            api.custom.delete_namespaced_custom_object(group, "v1", api.ns, plural, item["metadata"]["name"])
        wait_until(
            lambda g=group, p=plural: (
                not api.custom.list_namespaced_custom_object(g, "v1", api.ns, p)["items"]
            ),
            timeout=60,
            what=f"{plural} to be deleted",
        )


def kustomization(api: Api, name: str) -> dict[str, Any]:
    return api.custom.get_namespaced_custom_object(
        FLUX["group"], FLUX["version"], api.ns, FLUX["plural"], name
    )


def ready(obj: dict[str, Any]) -> dict[str, Any]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c["type"] == "Ready"), {})


def test_kustomization_waits_for_the_run_and_fails_with_it(
    flux_objects: None, api: Api, images: dict[str, str], repo: Repo
) -> None:
    definition = definition_body("fake", images["test"], "ok")
    failing = definition_body("fake-fails", images["test"], "fail")
    first = repo.commit({"team/definitions/fake.yaml": definition, "team/definitions/fails.yaml": failing})
    source: dict[str, Any] = {"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository"}
    source |= {
        "metadata": {"name": "agents"},
        "spec": {"interval": "5s", "url": repo.url, "ref": {"branch": "main"}},
    }
    api.custom.create_namespaced_custom_object(
        "source.toolkit.fluxcd.io", "v1", api.ns, "gitrepositories", source
    )
    body: dict[str, Any] = {"apiVersion": f"{FLUX['group']}/{FLUX['version']}", "kind": "Kustomization"}
    body |= {
        "metadata": {"name": "team"},
        "spec": {
            "interval": "10s",
            "retryInterval": "5s",
            "path": "./team",
            "prune": False,
            "wait": True,
            "timeout": "2m",
            "targetNamespace": api.ns,
            "sourceRef": {"kind": "GitRepository", "name": "agents"},
            "healthCheckExprs": HEALTH_CHECK_EXPRS,
        },
    }
    api.custom.create_namespaced_custom_object(FLUX["group"], FLUX["version"], api.ns, FLUX["plural"], body)

    def at(revision: str) -> bool:
        status = kustomization(api, "team").get("status") or {}
        applied = str(status.get("lastAppliedRevision", "")).endswith(revision)
        return applied and ready(kustomization(api, "team")).get("status") == "True"

    wait_until(lambda: at(first), timeout=120, what="the Kustomization to apply the definitions")

    second = repo.commit(
        {
            "team/runs/2026-12-01-say-hi.yaml": run_body(
                "2026-12-01-say-hi", {"provider": "fake", "prompt": "hi"}
            )
        }
    )
    seen: list[tuple[str, str]] = []

    def applied_and_ready() -> bool:
        k, run = ready(kustomization(api, "team")), api.condition("2026-12-01-say-hi", "Succeeded")
        seen.append((k.get("status", ""), run.get("status", "")))
        return at(second)

    wait_until(applied_and_ready, timeout=180, what="the Kustomization to be Ready at the run's commit")
    run_done = api.condition("2026-12-01-say-hi", "Succeeded")
    assert run_done["status"] == "True"
    # Flux marks what it applied, so the chart's default TTL spares the run (Flux would apply it again).
    applied = api.run("2026-12-01-say-hi")
    assert is_applied_by_a_tool(applied["metadata"]), applied["metadata"].get("labels")
    assert compute_expiry(applied, 0, datetime.now(UTC)) is None
    assert ready(kustomization(api, "team"))["lastTransitionTime"] >= run_done["lastTransitionTime"]

    repo.commit(
        {
            "team/runs/2026-12-01-doomed.yaml": run_body(
                "2026-12-01-doomed", {"provider": "fake-fails", "prompt": "x"}
            )
        }
    )
    wait_until(
        lambda: (
            ready(kustomization(api, "team")).get("status") == "False"
            and "2026-12-01-doomed" in ready(kustomization(api, "team")).get("message", "")
        ),
        timeout=180,
        what="the Kustomization to fail on the failing run",
    )
    failed = ready(kustomization(api, "team"))
    assert failed["reason"] == "HealthCheckFailed", failed
    assert f"HarnessRun/{api.ns}/2026-12-01-doomed status: 'Failed'" in failed["message"], failed
    stalled = api.condition("2026-12-01-doomed", "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "ProviderFailed"), stalled
    print(f"\nsamples (Kustomization Ready, run Succeeded) while waiting: {seen}")
    assert all(run == "True" for k, run in seen if k == "True"), seen
