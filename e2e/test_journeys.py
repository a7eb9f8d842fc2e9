"""A user's journeys with the real Claude Code and Codex CLIs in their catalog images: fallback when a
provider is down, cancel, timeout, a cost stop in flight, a helm upgrade while a run is in flight, and
helm uninstall (which installs the chart again afterwards, for the tests after it)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from typing import Any

from kubernetes import client

from harness_operator import __version__
from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.catalog import load_builtin_catalog
from harness_operator.contract.times import parse_time

from .conftest import RELEASE, RELEASE_NAMESPACE, Runs, helm, install_chart, sh, wait_until
from .test_agents import ROUTES, agent_run

FALLBACK_LINE = "harness: attempt 1/2 with claude failed; trying fallback 2/2 with codex"


def claude_run(runs: Runs, server: Any, **spec: Any) -> dict[str, Any]:
    return agent_run(runs, "claude", ROUTES["claude"](server.base_url), server.port, **spec)


def codex_fallback(runs: Runs, server: Any) -> dict[str, Any]:
    """`fallback` to Codex routed to `server`, and the egress it needs added to the run's."""
    route = ROUTES["codex"](server.base_url)
    agent_run(runs, "codex", route, server.port)  # its Secret
    return {"provider": "codex", "with": route.options}


def with_egress(body: dict[str, Any], *servers: Any) -> dict[str, Any]:
    body["sandbox"]["egress"] = [{"cidr": f"{s.host}/32", "ports": [s.port]} for s in servers]
    return body


def wait_running(runs: Runs, name: str, server: Any) -> None:
    runs.wait_reason(name, "Running", timeout=180)
    wait_until(server.model_calls, 120, "the agent's first model call")


def test_fallback_when_the_first_provider_is_down(runs: Runs, stub: Callable[..., Any]) -> None:
    down, up = stub("anthropic", "overloaded"), stub("openai")
    body = claude_run(runs, down)
    body["env"] += [{"name": "OPENAI_BASE_URL", "value": f"{up.base_url}/v1"}]
    body["fallback"] = [codex_fallback(runs, up)]
    runs.create("fallback", with_egress(body, down, up))
    status = runs.wait_finished("fallback")
    assert status["phase"] == "Succeeded", runs.describe("fallback")
    first, second = status["attempts"]
    assert (first["provider"], second["provider"]) == ("claude", "codex")
    assert first["exitCode"] != 0 and second["exitCode"] == 0
    assert down.model_calls() and up.model_calls()
    assert ("Warning", "FallingBack", FALLBACK_LINE) in runs.events("fallback")
    assert "Hello from the" in runs.output("fallback")


def test_a_provider_overloaded_for_a_moment_is_retried_before_any_fallback(
    runs: Runs, stub: Callable[..., Any]
) -> None:
    """Anthropic's 529 reaches the real Claude Code once (through the model gateway): the attempt ends
    ProviderUnavailable, and after its backoff attempt 2 runs Claude Code again; Codex never runs."""
    busy, spare = stub("anthropic", overloaded_calls=1), stub("openai")
    body = claude_run(runs, busy)
    body["fallback"] = [codex_fallback(runs, spare)]
    body["retry"] = {"limit": 1, "backoffSeconds": 3}
    runs.create("retry", with_egress(body, busy, spare))
    status = runs.wait_finished("retry")
    assert status["phase"] == "Succeeded", runs.describe("retry")
    first, second = status["attempts"]
    assert (first["index"], first["provider"], first["reason"]) == (1, "claude", "ProviderUnavailable")
    assert (second["index"], second["provider"], second["exitCode"]) == (2, "claude", 0)
    waited = parse_time(second["startTime"]) - parse_time(first["completionTime"])
    assert waited.total_seconds() >= 2, (first, second)  # the backoff (times are whole seconds)
    assert len(busy.model_calls()) == 2 and not spare.model_calls()
    line = "attempt 1/4 with claude failed (ProviderUnavailable); retry 1/1 with claude as attempt 2/4"
    assert ("Warning", "Retrying", line) in runs.events("retry")
    assert not [e for e in runs.events("retry") if e[1] == "FallingBack"]
    assert status["usage"]["inputTokens"] > 0 and "Hello from the" in runs.output("retry")


def test_cancel_stops_gracefully_without_fallback(runs: Runs, stub: Callable[..., Any]) -> None:
    hung, spare = stub("anthropic", "hang"), stub("openai")
    body = claude_run(runs, hung, limits={"timeoutSeconds": 600, "gracePeriodSeconds": 10})
    body["fallback"] = [codex_fallback(runs, spare)]
    runs.create("cancel", with_egress(body, hung, spare))
    wait_running(runs, "cancel", hung)
    runs.patch("cancel", {"cancel": True})
    status = runs.wait_finished("cancel", timeout=120)
    assert (status["phase"], status["reason"], status["exitCode"]) == ("Cancelled", "Cancelled", 124)
    # The cancelled attempt's Job is deleted (its pod stopped gracefully); no second one was made.
    assert len(status["attempts"]) == 1 and "cancel-a2" not in runs.jobs("cancel")
    assert not spare.model_calls(), "no fallback after a cancel"
    assert not [e for e in runs.events("cancel") if e[1] == "FallingBack"]


def test_timeout_ends_the_run_without_fallback(runs: Runs, stub: Callable[..., Any]) -> None:
    hung, spare = stub("anthropic", "hang"), stub("openai")
    body = claude_run(runs, hung, limits={"timeoutSeconds": 20, "gracePeriodSeconds": 5})
    body["fallback"] = [codex_fallback(runs, spare)]
    runs.create("timeout", with_egress(body, hung, spare))
    status = runs.wait_finished("timeout", timeout=180)
    assert (status["phase"], status["reason"], status["exitCode"]) == ("Failed", "Timeout", 124)
    assert len(status["attempts"]) == 1 and not spare.model_calls()


def test_cost_limit_stops_the_agent_in_flight(runs: Runs, stub: Callable[..., Any]) -> None:
    # tool_use: the first answer asks for a tool, so the agent would go on for a second turn; the
    # first turn's cost (1234 input tokens of a Sonnet model) is far above the limit.
    server = stub("anthropic", "tool_use")
    limits = {"timeoutSeconds": 180, "maxCostUSD": 0.000001}
    runs.create("cost", claude_run(runs, server, limits=limits, retry={"limit": 2, "backoffSeconds": 0}))
    status = runs.wait_finished("cost")
    assert (status["phase"], status["reason"]) == ("Failed", "CostLimitExceeded"), runs.describe("cost")
    assert status["usage"]["costUSD"] > 0.000001
    assert len(status["attempts"]) == 1, status["attempts"]  # a cost stop is never retried


def test_helm_upgrade_while_a_run_is_in_flight_completes_it_once(
    kube: client.ApiClient, runs: Runs, stub: Callable[..., Any]
) -> None:
    hung = stub("anthropic", "hang")
    runs.create("upgrade", claude_run(runs, hung, limits={"timeoutSeconds": 600}))
    wait_running(runs, "upgrade", hung)
    new_tag = f"{__version__}-e2e-upgrade"
    sh(
        "docker",
        "tag",
        f"harness.local/harness-operator:{__version__}",
        f"harness.local/harness-operator:{new_tag}",
    )
    load_image(f"harness.local/harness-operator:{new_tag}")
    install_chart("--set", f"image.tag={new_tag}")
    apps = client.AppsV1Api(kube)
    image = apps.read_namespaced_deployment(RELEASE, RELEASE_NAMESPACE).spec.template.spec.containers[0].image
    assert image.endswith(f":{new_tag}")
    hung.release()
    status = runs.wait_finished("upgrade")
    assert status["phase"] == "Succeeded", runs.describe("upgrade")
    assert len(status["attempts"]) == 1 and runs.jobs("upgrade") == ["upgrade-a1"]
    pods = client.CoreV1Api(kube).list_namespaced_pod(runs.ns, label_selector=f"{GROUP}/run=upgrade").items
    assert len(pods) == 1, "the attempt ran once"
    install_chart()  # back to the defaults for the journeys after this one


def load_image(tag: str) -> None:
    """Put a locally tagged image on the cluster's nodes: E2E_LOAD_IMAGE (e2e/kind/run.sh sets
    `kind load docker-image`), else an import into the local test cluster's containerd."""
    command = os.environ.get("E2E_LOAD_IMAGE")
    if command:
        sh(*shlex.split(command), tag)
        return
    sock = "/var/lib/harness-operator-cluster/containerd/containerd.sock"
    sh("bash", "-c", f"docker save {tag} | ctr --address {sock} --namespace k8s.io images import -")


def test_helm_uninstall_removes_the_operator_and_keeps_crds_and_runs(
    kube: client.ApiClient, runs: Runs, stub: Callable[..., Any]
) -> None:
    server = stub("anthropic")
    runs.create("kept", claude_run(runs, server))
    assert runs.wait_finished("kept")["phase"] == "Succeeded"
    helm("uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait")
    apps, core, rbac = client.AppsV1Api(kube), client.CoreV1Api(kube), client.RbacAuthorizationV1Api(kube)
    selector = f"app.kubernetes.io/instance={RELEASE}"
    assert not apps.list_namespaced_deployment(RELEASE_NAMESPACE, label_selector=selector).items
    assert not core.list_namespaced_service_account(RELEASE_NAMESPACE, label_selector=selector).items
    assert not rbac.list_cluster_role(label_selector=selector).items
    assert not rbac.list_cluster_role_binding(label_selector=selector).items
    admission = client.AdmissionregistrationV1Api(kube)
    assert not admission.list_validating_admission_policy(label_selector=selector).items
    assert not admission.list_validating_admission_policy_binding(label_selector=selector).items
    # The chart's CRDs are kept (crds.keep), so runs survive.
    ext = client.ApiextensionsV1Api(kube)
    crd = ext.read_custom_resource_definition(f"harnessruns.{GROUP}")
    assert crd.metadata.annotations["helm.sh/resource-policy"] == "keep"
    assert runs.get("kept")["status"]["phase"] == "Succeeded"
    # The built-in catalog outlives the release (catalog.keep): other releases' runs may use it.
    custom = client.CustomObjectsApi(kube)
    kept = custom.list_cluster_custom_object(GROUP, VERSION, "clusterharnessdefinitions")["items"]
    assert {d["metadata"]["name"] for d in kept} == {e.metadata["name"] for e in load_builtin_catalog()}
    install_chart()  # the same release name adopts the kept definitions again
    adopted = custom.list_cluster_custom_object(GROUP, VERSION, "clusterharnessdefinitions")["items"]
    assert {d["metadata"]["annotations"]["meta.helm.sh/release-name"] for d in adopted} == {RELEASE}
