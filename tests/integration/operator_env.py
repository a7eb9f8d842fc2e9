"""Helpers to run the real operator against the test cluster under the chart's own RBAC."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from ..lib import processes

ROOT = Path(__file__).resolve().parents[2]
RELEASE = "harness-operator"
RELEASE_NAMESPACE = "harness-system"
SERVICE_ACCOUNT = "harness-operator"


def free_port() -> int:
    """A port free on every address (the operator binds 0.0.0.0)."""
    with socket.socket() as sock:
        sock.bind(("0.0.0.0", 0))
        return int(sock.getsockname()[1])


def foreign_releases(bin_dir: Path, kubeconfig: str) -> list[str]:
    """The releases of the chart that are not this suite's own (release harness-operator in
    harness-system, installed with crds.enabled=false), each as a line saying what it would do to the
    suite and the command that removes it."""
    helm = (str(bin_dir / "helm"), "--kubeconfig", kubeconfig)
    listed = subprocess.run(
        [*helm, "list", "--all-namespaces", "--all", "--output", "json"], capture_output=True, text=True
    )
    if listed.returncode:
        raise RuntimeError(f"helm list failed: {listed.stderr}")
    found = []
    for release in json.loads(listed.stdout or "[]"):
        name, namespace, chart = release["name"], release["namespace"], release["chart"]
        if not chart.startswith("harness-operator-"):
            continue
        remove = f"remove it first: helm uninstall {name} -n {namespace}"
        if (name, namespace) != (RELEASE, RELEASE_NAMESPACE):
            found.append(
                f'release "{name}" in "{namespace}" ({chart}): its operator reconciles every namespace '
                f"beside the one the tests start; {remove}"
            )
            continue
        values = subprocess.run(
            [*helm, "get", "values", name, "--namespace", namespace, "--output", "json"],
            capture_output=True,
            text=True,
            check=True,
        )
        if (json.loads(values.stdout or "{}") or {}).get("crds", {}).get("enabled") is not False:
            found.append(
                f'release "{name}" in "{namespace}" ({chart}) installs the CRDs, as e2e and a user\'s '
                "install do: replacing them from this tree drops their keep policy, and the suite's "
                "upgrade of the release (crds.enabled=false, replicaCount=0) then deletes them, with every "
                f"run, definition and budget, and no operator becomes ready; {remove}"
            )
    return found


def refuse_foreign_releases(bin_dir: Path, kubeconfig: str) -> None:
    """Raise, naming them, when releases of the chart other than the suite's own are installed: before
    the suite touches the CRDs or the release, not after an operator that cannot become ready."""
    found = foreign_releases(bin_dir, kubeconfig)
    if found:
        raise RuntimeError(
            "the cluster holds a release of the chart the tests would break:\n" + "\n".join(found)
        )


def helm_install(bin_dir: Path, kubeconfig: str, *settings: str) -> None:
    """`helm upgrade --install` the chart as release harness-operator, without its CRDs (the tests
    replace them from this tree themselves, `apply_crds`); helm's own error on failure."""
    refuse_foreign_releases(bin_dir, kubeconfig)
    result = subprocess.run(
        [
            str(bin_dir / "helm"),
            "--kubeconfig",
            kubeconfig,
            "upgrade",
            "--install",
            RELEASE,
            str(ROOT / "charts" / "harness-operator"),
            "--namespace",
            RELEASE_NAMESPACE,
            "--create-namespace",
            "--wait",
            "--timeout",
            "180s",
            *(arg for s in ("crds.enabled=false", *settings) for arg in ("--set", s)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"helm install failed: {result.stderr}")


def helm_uninstall(bin_dir: Path, kubeconfig: str) -> None:
    """`helm uninstall` the release, if installed (the CRDs stay, as helm leaves them)."""
    subprocess.run(
        [
            str(bin_dir / "helm"),
            "--kubeconfig",
            kubeconfig,
            "uninstall",
            RELEASE,
            "--namespace",
            RELEASE_NAMESPACE,
            "--wait",
        ],
        capture_output=True,
        check=False,
    )


def apply_crds(bin_dir: Path, kubeconfig: str) -> None:
    """This tree's CRDs, each replaced whole (created when missing): a server-side apply by another field
    manager would keep fields (defaults) the old schema had, so a cluster that outlives a change to the
    API would otherwise keep them. Refused while another release of the chart is installed: a replace
    drops the keep policy its CRDs carry."""
    refuse_foreign_releases(bin_dir, kubeconfig)
    kubectl = (str(bin_dir / "kubectl"), "--kubeconfig", kubeconfig)
    for crd in sorted((ROOT / "crds").glob("*.yaml")):
        replaced = subprocess.run([*kubectl, "replace", "-f", str(crd)], capture_output=True, text=True)
        if replaced.returncode and "NotFound" in replaced.stderr:
            subprocess.run([*kubectl, "create", "-f", str(crd)], capture_output=True, check=True)
        elif replaced.returncode:
            raise RuntimeError(f"kubectl replace {crd.name}: {replaced.stderr}")


def install_chart_rbac_and_catalog(bin_dir: Path, kubeconfig: str) -> None:
    """The chart as `helm install` lays it down, with the operator's Deployment scaled to 0: the operator
    runs here as a process, under the ServiceAccount and RBAC the chart made. The CRDs are applied from
    this tree first: status fields the cluster's CRD does not know are pruned."""
    apply_crds(bin_dir, kubeconfig)
    helm_install(bin_dir, kubeconfig, "replicaCount=0")


def service_account_kubeconfig(
    admin: client.ApiClient, admin_kubeconfig: str, path: Path, service_account: str = SERVICE_ACCOUNT
) -> str:
    """A kubeconfig that authenticates as a ServiceAccount of the release namespace (the chart's by
    default), with a token from the TokenRequest API."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=7200)
    )
    issued = client.CoreV1Api(admin).create_namespaced_service_account_token(
        service_account, RELEASE_NAMESPACE, request
    )
    assert issued.status is not None, "the TokenRequest API returned no token"
    token = issued.status.token
    cfg = yaml.safe_load(Path(admin_kubeconfig).read_text())
    cluster = cfg["clusters"][0]
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "operator", "user": {"token": token}}],
                "contexts": [
                    {"name": "operator", "context": {"cluster": cluster["name"], "user": "operator"}}
                ],
                "current-context": "operator",
            }
        )
    )
    path.chmod(0o600)
    return str(path)


TEST_CLUSTER_API_SERVICE = "10.96.0.1:443"


def listens_on(pid: int, port: int) -> bool:
    """A TCP socket of process `pid` (any of its threads) listens on `port`: the inodes of its file
    descriptors against the kernel's table of listening sockets."""
    listening = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            for line in fh.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    listening.add(fields[9])
    owned = set()
    with contextlib.suppress(OSError):  # the process is gone
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    owned.add(target[8:-1])
    return bool(listening & owned)


@dataclass
class OperatorProcess:
    """The operator as a real process (`python -m harness_operator`), restartable."""

    kubeconfig: str
    env: dict[str, str]
    log_path: Path
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Start the operator and wait up to `timeout` seconds until it is healthy; a start that fails
        stops what it started before it raises. A port taken between its choice and the operator's bind
        (the operator then exits, and another process may answer on that port) is not the operator's
        fault: it starts again on fresh ports, twice at most."""
        left = processes.leftovers("-m harness_operator")
        if left:
            raise RuntimeError(
                "an operator an earlier test session started still runs (its session was killed), and "
                "reconciles beside the one this test starts; stop it (`kill -- -PID`):\n" + "\n".join(left)
            )
        for attempt in range(3):
            try:
                started = self._start_once(timeout)
            except BaseException:  # a timeout, its own error, Ctrl-C: nothing of it stays behind
                self.kill()
                raise
            if started:
                return
            if attempt < 2:
                self.health_port, self.metrics_port = free_port(), free_port()
        raise RuntimeError(f"operator could not bind its ports three times; log: {self.log_path}")

    def _start_once(self, timeout: float) -> bool:
        env = {
            **os.environ,
            # The admin kubeconfig names 127.0.0.1, which pods cannot reach: the `kubernetes` Service.
            "HARNESS_API_SERVER_ADDRESS": TEST_CLUSTER_API_SERVICE,
            **self.env,
            "KUBECONFIG": self.kubeconfig,
            "HARNESS_HEALTH_PORT": str(self.health_port),
            "HARNESS_METRICS_PORT": str(self.metrics_port),
        }
        with self.log_path.open("ab") as log:
            self.proc = processes.start(
                [sys.executable, "-m", "harness_operator", "--log-level", "INFO"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return self._port_was_taken()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz", timeout=1) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError(f"operator not healthy within {timeout:g}s; log: {self.log_path}")
        if listens_on(self.proc.pid, self.health_port):
            return True
        # What answered was not ours: the operator's own bind failed, and it ends.
        self.proc.wait(timeout=60)
        return self._port_was_taken()

    def _port_was_taken(self) -> bool:
        """False when the operator exited because a port was taken (start again); else its error."""
        if "address already in use" in self.log_path.read_text(errors="replace"):
            return False
        assert self.proc is not None
        raise RuntimeError(f"operator exited {self.proc.returncode}; log: {self.log_path}")

    def kill(self) -> None:
        """SIGKILL to its process group: no cleanup at all, as when a node dies under it."""
        if self.proc:
            processes.kill(self.proc)

    def stop(self) -> None:
        """SIGTERM (the operator hands its work over), SIGKILL after 20 s; its group too."""
        if self.proc:
            processes.stop(self.proc)

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())


def run_body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessRun",
        "metadata": {"name": name},
        "spec": spec,
    }


def definition_body(name: str, image: str, mode: str, **spec: Any) -> dict[str, Any]:
    """A provider backed by the fake agent CLI in the test sandbox image."""
    body = {
        "binary": "fake-agent",
        "promptMode": "arg",
        "image": image,
        "env": [{"name": "FAKE_MODE", "value": mode}],
        "output": {"format": "claude-stream-json"},
        "capabilities": {"usageReporting": True, "costReporting": True},
    }
    body.update(spec)
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessDefinition",
        "metadata": {"name": name},
        "spec": body,
    }


# The node's bridge address: a test host of our own, reachable from pods.
NODE_ADDRESS = "10.88.0.1"


@contextlib.contextmanager
def serve_git(tmp_path: Path, files: dict[str, str]) -> Iterator[tuple[str, int]]:
    """A repository of `files` in one commit on branch main, served by `git daemon` on the node's
    bridge; yields its git:// URL and the port (for the run's egress rule)."""
    work, repo = tmp_path / "work", tmp_path / "repo.git"
    subprocess.run(["git", "init", "-q", "-b", "main", str(work)], check=True)
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    git = ["git", "-C", str(work), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(repo)], check=True)
    port = free_port()
    argv = [
        "git",
        "daemon",
        "--export-all",
        f"--base-path={tmp_path}",
        f"--listen={NODE_ADDRESS}",
        f"--port={port}",
        "--reuseaddr",
        str(tmp_path),
    ]
    with processes.running(argv):
        yield f"git://{NODE_ADDRESS}:{port}/repo.git", port


def git_run_spec(provider: str, url: str, port: int) -> dict[str, Any]:
    """A run of `provider` on a clone of `url` in /workspace/repo, its egress opened to the git server."""
    return {
        "provider": provider,
        "prompt": "p",
        "workspace": {"workingDir": "/workspace/repo", "git": {"url": url, "ref": "main"}},
        "sandbox": {
            "networkPolicy": "allowlist",
            "egress": [{"cidr": f"{NODE_ADDRESS}/32", "ports": [port]}],
        },
    }
