"""Every sandbox network mode, proven with real connections through the cluster's NetworkPolicy enforcer.

The operator's own builder makes each mode's NetworkPolicy; a sandbox pod carries the labels a run's
attempt pod carries. From inside it, a probe connects to TCP listeners this test opens on the node
address and on a second local address standing for "elsewhere", and asks cluster DNS (CoreDNS behind the
kube-dns Service) for a name. A pod without any policy then tries to reach the sandbox (ingress).
Enforcement is kube-router's firewall (tests/cluster/netpol); DNS is CoreDNS (tests/cluster/dns).
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client
from kubernetes.stream import stream

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import attempt_labels
from harness_operator.core.pod.network_policy import build_network_policy
from harness_operator.core.resolve.resolution import AttemptTarget

from .conftest import Api, describe_namespace, wait_until
from .operator_env import definition_body, run_body

NODE_IP = "10.88.0.1"
API_SERVICE_IP = "10.96.0.1"  # the `kubernetes` Service: the API server, which no sandbox rule here allows
ELSEWHERE_IP = "10.87.0.1"  # tests/cluster/lib/common.sh: a local address, neither the node nor a pod
DNS_SERVICE_IP = "10.96.0.10"
ENFORCER_HEALTH = "http://127.0.0.1:20244/healthz"  # kube-router, started by tests/cluster/up
SANDBOX_PORT = 8080  # each probe pod listens here, for the ingress checks
PROVIDER = "probe"

# Runs inside the pods (the sandbox image's python3). argv[1]: JSON list of [name, kind, target...].
# Prints {name: result}: "open", an address for DNS answers, or "blocked: <error>".
PROBE = r"""
import json, socket, struct, sys, time

def tcp(host, port):
    with socket.create_connection((host, int(port)), timeout=3):
        return "open"

def dns(server, name, proto):
    q = struct.pack(">HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    if proto == "udp":
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(3)
            s.connect((server, 53))
            s.send(q)
            r = s.recv(4096)
    else:
        with socket.create_connection((server, 53), timeout=3) as s:
            s.sendall(struct.pack(">H", len(q)) + q)
            r = s.recv(4096)[2:]
    if r[3] & 0xF:
        return "rcode %d" % (r[3] & 0xF)
    return socket.inet_ntoa(r[-4:])  # one A record, last in the answer

def wait(host, port, seconds):
    # Until a connection the policy denies fails: the enforcer may program a new pod's rules after it starts.
    start, tries = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        tries += 1
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
        except OSError:
            return "confined after %d tries, %.2fs" % (tries, time.monotonic() - start)
        time.sleep(0.05)
    return "open for %ds" % seconds

def resolver(name):
    servers = [l.split()[1] for l in open("/etc/resolv.conf") if l.startswith("nameserver")]
    if servers != [sys.argv[2]]:
        return "resolv.conf names %s" % servers  # never query a resolver off the cluster
    return socket.getaddrinfo(name, None, socket.AF_INET)[0][4][0]

out = {}
for name, kind, *args in json.loads(sys.argv[1]):
    try:
        out[name] = {"tcp": tcp, "dns": dns, "wait": wait, "resolver": resolver}[kind](*args)
    except OSError as exc:
        out[name] = "blocked: %s" % exc
print(json.dumps(out))
"""

LISTEN = (
    "import socket\n"
    f"s = socket.socket(); s.bind(('0.0.0.0', {SANDBOX_PORT})); s.listen(64)\n"
    "while True: s.accept()[0].close()\n"
)


@dataclass(frozen=True)
class Listeners:
    """TCP listeners on this machine: `port` on the node and elsewhere, `other_port` on the node only."""

    port: int
    other_port: int


@pytest.fixture(scope="module")
def enforcer() -> None:
    """The enforcer must run: without it every policy is stored and none is enforced."""
    try:
        urllib.request.urlopen(ENFORCER_HEALTH, timeout=5).close()
    except OSError as exc:
        pytest.fail(
            f"kube-router (the NetworkPolicy enforcer) does not answer {ENFORCER_HEALTH}: {exc}; "
            "start the cluster with this tree's tests/cluster/up"
        )


@pytest.fixture(scope="module")
def listeners() -> Iterator[Listeners]:
    """Listening sockets (the kernel completes handshakes from the backlog; nothing is read)."""
    socks = []

    def listen(ip: str, port: int) -> int:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((ip, port))
        s.listen(128)
        socks.append(s)
        return int(s.getsockname()[1])

    try:
        port = listen(NODE_IP, 0)
        listen(ELSEWHERE_IP, port)
        yield Listeners(port=port, other_port=listen(NODE_IP, 0))
    finally:
        for s in socks:
            s.close()


def _definition(port: int) -> HarnessDefinitionSpec:
    """A definition whose provider egress is the node's address on `port` only."""
    return HarnessDefinitionSpec.model_validate(
        {"binary": "probe", "image": "unused", "egress": [{"cidr": f"{NODE_IP}/32", "ports": [port]}]}
    )


def _policy(namespace: str, run_name: str, mode: str, port: int) -> dict[str, Any]:
    """The operator's NetworkPolicy for attempt 1 of a run in `mode`; allowlist names elsewhere:`port`."""
    sandbox: dict[str, Any] = {"networkPolicy": mode}
    if mode == "allowlist":
        sandbox["egress"] = [{"cidr": f"{ELSEWHERE_IP}/32", "ports": [port]}]
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": run_name, "namespace": namespace, "uid": "0", "labels": {}},
            "spec": {"provider": PROVIDER, "prompt": "probe", "sandbox": sandbox},
        }
    )
    policy = build_network_policy(
        run,
        decide_attempt(run, AttemptTarget(1, PROVIDER, _definition(port), 1), OperatorConfig()),
        OperatorConfig(),
    )
    # No HarnessRun object exists here: the garbage collector would delete a policy owned by a missing one.
    del policy["metadata"]["ownerReferences"]
    return policy


def _pod(name: str, image: str, labels: dict[str, str]) -> dict[str, Any]:
    """A restricted pod that listens on SANDBOX_PORT, running the sandbox image's python3."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "command": ["python3", "-c", LISTEN],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


def _start_pod(kube: client.ApiClient, namespace: str, body: dict[str, Any]) -> str:
    """Create the pod; return its IP once its listener answers (from the node, which may always connect)."""
    core = client.CoreV1Api(kube)
    core.create_namespaced_pod(namespace, body)
    name = body["metadata"]["name"]

    def listening() -> str | None:
        ip = core.read_namespaced_pod(name, namespace).status.pod_ip
        if not ip:
            return None
        try:
            socket.create_connection((ip, SANDBOX_PORT), timeout=1).close()
        except OSError:
            return None
        return str(ip)

    return wait_until(
        listening,
        timeout=90,
        what=f"pod {name} listening",
        diagnose=lambda: describe_namespace(kube, namespace),
    )


def _enforced(namespace: str, pod: str, policy: str) -> bool:
    """kube-router has a firewall chain for `pod` that runs its traffic through `policy`."""
    rules = subprocess.run(
        ["iptables-save", "-t", "filter"], capture_output=True, text=True, check=True
    ).stdout
    chains: dict[str, str] = {}
    for line in rules.splitlines():
        if line.startswith("-A KUBE-POD-FW-"):
            chain = line.split()[1]
            chains[chain] = chains.get(chain, "") + line + "\n"
    return any(
        f'"run through nw policy {policy}"' in text and f'POD name:{pod} namespace: {namespace}"' in text
        for text in chains.values()
    )


def _probe(kube: client.ApiClient, namespace: str, pod: str, checks: list[list[Any]]) -> dict[str, str]:
    out = stream(
        client.CoreV1Api(kube).connect_get_namespaced_pod_exec,
        pod,
        namespace,
        command=["python3", "-c", PROBE, json.dumps(checks), DNS_SERVICE_IP],
        stderr=True,
        stdin=False,
        stdout=True,
        tty=False,
        _preload_content=True,
    )
    try:
        result: dict[str, str] = json.loads(out)
    except ValueError:
        pytest.fail(f"probe in {pod} printed no result: {out!r}")
    return result


OPEN, BLOCKED = "open", "blocked"


def _outcome(result: str) -> str:
    return BLOCKED if result.startswith("blocked:") else result


CHECKS = (
    "node:port",
    "node:other_port",
    "elsewhere:port",
    "peer-pod",
    "api-server",
    "dns-udp",
    "dns-tcp",
    "resolver",
)
EXPECTED = {
    "none": (BLOCKED, BLOCKED, BLOCKED, BLOCKED, BLOCKED, BLOCKED, BLOCKED, BLOCKED),
    "provider": (OPEN, BLOCKED, BLOCKED, BLOCKED, BLOCKED, NODE_IP, NODE_IP, NODE_IP),
    "allowlist": (BLOCKED, BLOCKED, OPEN, BLOCKED, BLOCKED, NODE_IP, NODE_IP, NODE_IP),
    "unrestricted": (OPEN, OPEN, OPEN, OPEN, OPEN, NODE_IP, NODE_IP, NODE_IP),
}


@pytest.mark.parametrize("mode", list(EXPECTED))
def test_sandbox_network_mode_is_enforced(
    kube: client.ApiClient,
    namespace: str,
    images: dict[str, str],
    enforcer: None,
    listeners: Listeners,
    mode: str,
) -> None:
    """Egress exactly as the mode says (provider: the definition's node:port; allowlist: the run's
    elsewhere:port; both plus DNS; the peer pod only when unrestricted, which also shows the peer is
    reachable); ingress from the peer refused in every mode."""
    run_name = f"net-{mode}"
    policy = _policy(namespace, run_name, mode, listeners.port)
    client.NetworkingV1Api(kube).create_namespaced_network_policy(namespace, policy)
    sandbox = "sandbox"
    sandbox_ip = _start_pod(
        kube, namespace, _pod(sandbox, images["test"], attempt_labels(run_name, 1, PROVIDER))
    )
    peer_ip = _start_pod(kube, namespace, _pod("peer", images["test"], {"app": "peer"}))
    wait_until(
        lambda: _enforced(namespace, sandbox, policy["metadata"]["name"]),
        timeout=60,
        what=f"kube-router enforcing {policy['metadata']['name']} on {sandbox}",
    )

    name = "node.harness.test"
    egress = _probe(
        kube,
        namespace,
        sandbox,
        [
            ["node:port", "tcp", NODE_IP, listeners.port],
            ["node:other_port", "tcp", NODE_IP, listeners.other_port],
            ["elsewhere:port", "tcp", ELSEWHERE_IP, listeners.port],
            ["peer-pod", "tcp", peer_ip, SANDBOX_PORT],
            ["api-server", "tcp", API_SERVICE_IP, 443],
            ["dns-udp", "dns", DNS_SERVICE_IP, name, "udp"],
            ["dns-tcp", "dns", DNS_SERVICE_IP, name, "tcp"],
            ["resolver", "resolver", name],
        ],
    )
    got = tuple(_outcome(egress[k]) for k in CHECKS)
    assert got[:-1] == EXPECTED[mode][:-1], f"{mode}: {egress}"
    # The pod's own resolver (the kubelet's clusterDNS) goes the same way as the direct queries.
    assert got[-1] == EXPECTED[mode][-1], f"{mode}: {egress}"

    # Ingress: the sandbox listens (the node connected to it above) but a pod under no policy is refused.
    ingress = _probe(kube, namespace, "peer", [["sandbox", "tcp", sandbox_ip, SANDBOX_PORT]])
    assert _outcome(ingress["sandbox"]) == BLOCKED, ingress


@pytest.mark.parametrize(("mode", "expected"), [("none", (BLOCKED, BLOCKED)), ("provider", (OPEN, BLOCKED))])
def test_run_started_by_the_operator_is_confined(
    api: Api,
    images: dict[str, str],
    enforcer: None,
    listeners: Listeners,
    mode: str,
    expected: tuple[str, str],
) -> None:
    """A whole run: the operator makes the policy and the Job, the agent is the probe. The runner starts it
    only once the policy refuses the API server (the enforcer programs a new pod's rules after the pod
    starts), so the agent's very first connection to the API server is refused; then it probes."""
    checks = [
        ["confined", "wait", API_SERVICE_IP, 443, 30],
        ["node:port", "tcp", NODE_IP, listeners.port],
        ["node:other_port", "tcp", NODE_IP, listeners.other_port],
    ]
    body = definition_body("prober", images["test"], "ok", output={"format": "text"})
    body["spec"].update(
        {
            "binary": "python3",
            "prefixArgs": ["-c", PROBE, json.dumps(checks), DNS_SERVICE_IP],
            "egress": [{"cidr": f"{NODE_IP}/32", "ports": [listeners.port]}],
        }
    )
    api.create(body)
    api.create(run_body("probe", {"provider": "prober", "prompt": "p", "sandbox": {"networkPolicy": mode}}))
    status = api.wait_finished("probe")
    assert status["phase"] == "Succeeded", status
    result = json.loads(status["output"]["excerpt"])
    print(f"{mode}: {result['confined']}")
    assert result["confined"].startswith("confined after 1 tries"), result
    assert (_outcome(result["node:port"]), _outcome(result["node:other_port"])) == expected, result
