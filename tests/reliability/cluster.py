"""The test cluster's processes as the fault tests use them: etcd key counts, and stopping one component
(by the pid `tests/cluster/up` recorded) and bringing the cluster back with `up` itself."""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

STATE = Path(os.environ.get("HARNESS_CLUSTER_STATE", "/var/lib/harness-operator-cluster"))
PKI = STATE / "pki"
ETCD = "https://127.0.0.1:23790"
UP = Path(__file__).resolve().parents[1] / "cluster" / "up"


def etcd_count(prefix: str) -> int:
    """How many keys etcd holds under `prefix` (its v3 JSON gateway, with the API server's client cert)."""
    context = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    context.load_cert_chain(str(PKI / "etcd-client.crt"), str(PKI / "etcd-client.key"))
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    body = json.dumps(
        {
            "key": base64.b64encode(prefix.encode()).decode(),
            "range_end": base64.b64encode(end.encode()).decode(),
            "count_only": True,
        }
    ).encode()
    request = urllib.request.Request(f"{ETCD}/v3/kv/range", data=body, method="POST")
    with urllib.request.urlopen(request, context=context, timeout=10) as resp:
        return int(json.loads(resp.read()).get("count", 0))


def namespace_counts(namespace: str) -> dict[str, int]:
    """etcd keys of one namespace, by the kinds a run and its children are stored as."""
    prefixes = {
        "harnessruns": f"/registry/agentharness.dev/harnessruns/{namespace}/",
        "jobs": f"/registry/jobs/{namespace}/",
        "pods": f"/registry/pods/{namespace}/",
        "secrets": f"/registry/secrets/{namespace}/",
        "configmaps": f"/registry/configmaps/{namespace}/",
        "networkpolicies": f"/registry/networkpolicies/{namespace}/",
    }
    return {kind: etcd_count(prefix) for kind, prefix in prefixes.items()}


def pid_of(component: str) -> int | None:
    """The component's pid as `up` recorded it, if that process is alive and is the component."""
    try:
        pid = int((STATE / "run" / f"{component}.pid").read_text().strip())
        argv0 = (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode()
    except (OSError, ValueError):
        return None
    return pid if argv0.endswith(component) else None


def stop(component: str, sig: signal.Signals = signal.SIGTERM, timeout: float = 30) -> None:
    """Stop one component of the cluster (only the recorded pid is signalled) and wait until it is gone."""
    pid = pid_of(component)
    if pid is None:
        return
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    if Path(f"/proc/{pid}").exists():
        os.kill(pid, signal.SIGKILL)


def bring_up() -> None:
    """`tests/cluster/up`: starts what is not running, the same way it started it, and waits for health."""
    result = subprocess.run([str(UP)], capture_output=True, text=True, timeout=600, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"tests/cluster/up failed: {result.stderr[-2000:]}")
