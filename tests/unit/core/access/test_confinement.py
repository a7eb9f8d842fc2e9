"""Waiting for the network policy before the agent starts: which attempts wait and on what address (pure),
and the runner's wait against real loopback sockets."""

import os
import socket
import subprocess
import sys
import threading
from typing import Any

import pytest
from tests.unit.core.access.test_egress import CIDR_ONLY, DEFINITION, GATEWAY, PLAIN, make_run, target

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec
from harness_operator.contract.plan import CONFINEMENT_ENV, EXIT_NOT_CONFINED, ConfinementProbe
from harness_operator.core.access.confinement import find_api_server_address
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.job import build_job
from harness_operator.core.resolve.resolution import AttemptTarget
from harness_operator.runner.confinement import await_confinement, connects, describe_confinement

PRIVATE_API = "10.96.0.1:443"
PUBLIC_API = "34.1.2.3:443"
OPEN_ALL_10 = HarnessDefinitionSpec.model_validate({"binary": "x", "egress": [{"cidr": "10.0.0.0/8"}]})
OPEN_6443 = HarnessDefinitionSpec.model_validate(
    {"binary": "x", "egress": [{"cidr": "10.0.0.0/8", "ports": [6443]}]}
)


def config(base: OperatorConfig = PLAIN, **fields: Any) -> OperatorConfig:
    return OperatorConfig(**{**base.__dict__, "api_server_address": PRIVATE_API, **fields})


CASES = [
    # (sandbox, definition, config, expected probe as (host, port, timeout, required) or None)
    ({}, DEFINITION, config(), ("10.96.0.1", 443, 30, True)),
    ({"networkPolicy": "none"}, DEFINITION, config(), ("10.96.0.1", 443, 30, True)),
    ({"networkPolicy": "allowlist", "egress": []}, DEFINITION, config(), ("10.96.0.1", 443, 30, True)),
    ({"networkPolicy": "unrestricted"}, DEFINITION, config(), None),
    ({}, DEFINITION, config(await_network_policy="off"), None),
    ({}, DEFINITION, config(api_server_address=""), None),  # nothing known to probe
    ({}, DEFINITION, config(await_network_policy="warn"), ("10.96.0.1", 443, 30, False)),
    ({}, DEFINITION, config(await_network_policy_seconds=5), ("10.96.0.1", 443, 5, True)),
    # A rule that opens the API server's address and port: no refusal would ever come.
    ({}, OPEN_ALL_10, config(), None),
    ({}, OPEN_6443, config(), ("10.96.0.1", 443, 30, True)),  # opened, but not on 443
    ({}, OPEN_6443, config(api_server_address="10.88.0.1:6443"), None),
    ({}, CIDR_ONLY, config(), ("10.96.0.1", 443, 30, True)),  # 10.20.0.0/16 leaves 10.96.0.1 out
    # A host rule without gateway or Cilium opens 443 to every public address: a public API server too.
    ({}, DEFINITION, config(api_server_address=PUBLIC_API), None),
    ({}, DEFINITION, config(GATEWAY, api_server_address=PUBLIC_API), ("34.1.2.3", 443, 30, True)),
    ({}, DEFINITION, config(api_server_address="[fd00::1]:443"), ("fd00::1", 443, 30, True)),
    # A name: the policy sees addresses only; a rule on its port might open it, one on no port cannot.
    ({}, OPEN_ALL_10, config(api_server_address="api.cluster.example:443"), None),
    (
        {},
        CIDR_ONLY,
        config(api_server_address="api.cluster.example:443"),
        ("api.cluster.example", 443, 30, True),
    ),
]


@pytest.mark.parametrize(("sandbox", "definition", "cfg", "expected"), CASES)
def test_which_attempts_wait_and_on_what(
    sandbox: dict[str, Any], definition: HarnessDefinitionSpec, cfg: OperatorConfig, expected: Any
) -> None:
    probe = decide_attempt(make_run(sandbox), AttemptTarget(1, "p", definition, 1), cfg).confinement
    found = None if probe is None else (probe.host, probe.port, probe.timeout_seconds, probe.required)
    assert found == expected


@pytest.mark.parametrize(
    ("env", "host", "address"),
    [
        ({"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}, "", "10.96.0.1:443"),
        ({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, "", "[fd00::1]:443"),
        ({}, "https://10.88.0.1:6443", "10.88.0.1:6443"),
        ({}, "https://api.example", "api.example:443"),
        ({}, "http://[fd00::2]:8080", "[fd00::2]:8080"),
        ({}, "", ""),
    ],
)
def test_the_api_server_address_in_a_pod_and_outside(env: dict[str, str], host: str, address: str) -> None:
    assert find_api_server_address(env, host) == address


@pytest.mark.parametrize("host", ["https://127.0.0.1:6443", "https://localhost:6443", "http://[::1]:8080"])
def test_a_loopback_api_server_is_refused_with_the_fix(host: str) -> None:
    """From a pod, loopback is the pod's own: the probe would be refused at once, confined or not."""
    with pytest.raises(
        ValueError, match=r"loopback address sandbox pods cannot reach.*HARNESS_API_SERVER_ADDRESS"
    ):
        find_api_server_address({}, host)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HARNESS_AWAIT_NETWORK_POLICY": "maybe"}, "HARNESS_AWAIT_NETWORK_POLICY='maybe' is not valid"),
        ({"HARNESS_AWAIT_NETWORK_POLICY_SECONDS": "0"}, "HARNESS_AWAIT_NETWORK_POLICY_SECONDS must be"),
        ({"HARNESS_API_SERVER_ADDRESS": "10.96.0.1"}, "HARNESS_API_SERVER_ADDRESS: '10.96.0.1' is not"),
        ({"HARNESS_API_SERVER_ADDRESS": "h:99999"}, "HARNESS_API_SERVER_ADDRESS"),
    ],
)
def test_config_names_the_bad_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        OperatorConfig.from_env(env)


class Listener:
    """A real listener on loopback that accepts `open_for` connections, then closes (the policy lands)."""

    def __init__(self, open_for: int) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._open_for = open_for
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while self.accepted < self._open_for:
            conn, _ = self.sock.accept()
            conn.close()
            self.accepted += 1
        self.sock.close()


def test_the_wait_ends_at_the_first_refusal() -> None:
    listener = Listener(open_for=3)
    probe = ConfinementProbe(host="127.0.0.1", port=listener.port, timeout_seconds=20)
    found = await_confinement(probe)
    assert found.confined and found.tries == 4 and listener.accepted == 3
    assert "refused after" in describe_confinement(probe, found)


def test_a_port_nobody_listens_on_is_refused_at_once() -> None:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        port = sock.getsockname()[1]
    assert not connects("127.0.0.1", port)
    found = await_confinement(ConfinementProbe(host="127.0.0.1", port=port))
    assert found.confined and found.tries == 1


def test_never_refused_gives_up_at_the_deadline_and_says_how_to_fix_it() -> None:
    listener = Listener(open_for=10_000)
    ticks = iter(range(100))  # a clock one second per read: the wait ends after about two probes
    probe = ConfinementProbe(host="127.0.0.1", port=listener.port, timeout_seconds=2)
    found = await_confinement(probe, clock=lambda: float(next(ticks)))
    assert not found.confined and listener.accepted >= 1
    line = describe_confinement(probe, found)
    assert "does not enforce NetworkPolicy" in line and "networkPolicy.awaitEnforcement" in line


def test_cancel_ends_the_wait() -> None:
    listener = Listener(open_for=10_000)
    cancel = threading.Event()
    cancel.set()
    found = await_confinement(ConfinementProbe(host="127.0.0.1", port=listener.port), cancel=cancel)
    assert not found.confined and found.tries == 1


GIT = {"workspace": {"workingDir": "/workspace/repo", "git": {"url": "https://git.example.internal/a.git"}}}


@pytest.mark.parametrize(
    ("sandbox", "waits"),
    [({}, True), ({"networkPolicy": "none"}, True), ({"networkPolicy": "unrestricted"}, False)],
)
def test_the_workspace_clone_waits_for_the_policy_before_it_runs(
    sandbox: dict[str, Any], waits: bool
) -> None:
    """Init containers start before the enforcer programs the pod (the red team's clone reached the API
    server under networkPolicy none): the clone's first step is the runner's wait, on the same probe."""
    run = make_run(sandbox, **GIT)
    job = build_job(run, decide_attempt(run, target(), config()), config())
    (clone,) = job["spec"]["template"]["spec"]["initContainers"]
    script = clone["command"][2].splitlines()
    env = {e["name"]: e.get("value") for e in clone["env"]}
    assert (script[1] == "python3 -I -m harness_operator.runner.confinement") == waits
    if waits:
        probe = ConfinementProbe.model_validate_json(env[CONFINEMENT_ENV])
        assert probe == decide_attempt(run, AttemptTarget(1, "p", DEFINITION, 1), config()).confinement
    else:
        assert CONFINEMENT_ENV not in env


def run_clone_wait(probe: ConfinementProbe) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, CONFINEMENT_ENV: probe.model_dump_json(by_alias=True)}
    command = [sys.executable, "-I", "-m", "harness_operator.runner.confinement"]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=30, cwd="/")


def test_the_clone_wait_as_a_process_exits_0_once_refused() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        done = run_clone_wait(ConfinementProbe(host="127.0.0.1", port=port, timeout_seconds=5))
    assert done.returncode == 0 and "network policy enforced" in done.stderr


@pytest.mark.parametrize(("required", "code"), [(True, EXIT_NOT_CONFINED), (False, 0)])
def test_the_clone_wait_as_a_process_fails_when_never_refused(required: bool, code: int) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        probe = ConfinementProbe(host="127.0.0.1", port=port, timeout_seconds=1, required=required)
        done = run_clone_wait(probe)
    assert done.returncode == code and "was not enforced" in done.stderr
