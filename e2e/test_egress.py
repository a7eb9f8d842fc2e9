"""Host egress by name with the chart as a user installs it: the operator in its pod sends a run whose
egress names a host through the egress gateway (named by its Service's DNS name, resolved by cluster
DNS), and Claude Code in its catalog image reaches the stub by that name, through the gateway only.

`node.harness.test` is a name the test cluster's CoreDNS answers with the node's address
(tests/cluster/dns); the sandbox's policy opens DNS and the gateway, not the node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kubernetes import client

from .conftest import Runs
from .test_agents import ROUTES, agent_run

STUB_NAME = "node.harness.test"


def test_claude_reaches_its_stub_by_name_through_the_gateway(
    runs: Runs, stub: Callable[..., Any], kube: client.ApiClient
) -> None:
    server = stub("anthropic")
    route = ROUTES["claude"](f"http://{STUB_NAME}:{server.port}")
    body = agent_run(runs, "claude", route, server.port)
    body["sandbox"] = {"networkPolicy": "allowlist", "egress": [{"host": STUB_NAME, "ports": [server.port]}]}
    runs.create("by-name", body)
    status = runs.wait_finished("by-name")
    assert status["phase"] == "Succeeded", runs.describe("by-name")
    assert server.model_calls() and "Hello from the" in status["output"]["excerpt"]
    pod = client.CoreV1Api(kube).read_namespaced_pod(status["attempts"][0]["podName"], runs.ns)
    env = {e.name: e for e in pod.spec.containers[0].env}
    assert env["HTTP_PROXY"].value_from.secret_key_ref.key == "proxy-url-1"
    policy = client.NetworkingV1Api(kube).read_namespaced_network_policy("by-name-a1", runs.ns).to_dict()
    assert "10.88.0.1" not in json.dumps(policy, default=str), "the node itself must not be opened"
    log = client.CoreV1Api(kube).read_namespaced_pod_log(pod.metadata.name, runs.ns, container="runner")
    assert "network policy enforced" in log, log[-2000:]
