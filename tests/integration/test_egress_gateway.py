"""The egress gateway on the real cluster: the chart's Squid with our helpers, grants written by the
operator. The real Claude Code CLI reaches the Anthropic stub through it by a granted host name (known to
the gateway only, through its hostAliases) and is refused when the name is not granted; one run's
credential opens none of another run's hosts; refusals are logged naming the run and the host, and counted.
"""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from harness_operator.core.pod.egress_grant import build_proxy_token, grant_name
from tests.monitoring import RELEASE, dashboard_queries_by_source
from tests.stubs.anthropic import TEXT, AnthropicStub
from tests.stubs.openai import OpenAIStub

from .conftest import Api, describe_namespace, operator_settings, wait_until
from .operator_env import (
    RELEASE_NAMESPACE,
    OperatorProcess,
    apply_crds,
    definition_body,
    helm_install,
    run_body,
    service_account_kubeconfig,
)
from .prometheus import prometheus

ROOT = Path(__file__).resolve().parents[2]
SCRAPER_LABEL = "harness-operator.test/role"  # the namespaces the gateway fixture lets scrape metrics
NODE = "10.88.0.1"  # pods reach the host here
STUB_NAME = "stub.harness.test"  # only the gateway knows it (hostAliases), not DNS
OTHER_NAME = "other.harness.test"
GATEWAY = "harness-operator-egress"


@pytest.fixture(scope="module")
def gateway_image() -> str:
    out = subprocess.run(
        [str(ROOT / "sandbox-image" / "build"), "--only", "gateway"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return out.stdout.split()[-1]


@pytest.fixture(scope="module")
def gateway_operator(
    kube: client.ApiClient,
    kubeconfig_path: str,
    cluster_bin_dir: Path,
    images: dict[str, str],
    gateway_image: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    """The chart with its gateway (the stub's name in its hostAliases) and the operator as a process
    pointed at it. No cluster DNS here: the operator names the gateway by its Service's address."""
    apply_crds(cluster_bin_dir, kubeconfig_path)
    helm_install(
        cluster_bin_dir,
        kubeconfig_path,
        "replicaCount=0",
        f"egressGateway.hostAliases[0].ip={NODE}",
        f"egressGateway.hostAliases[0].hostnames[0]={STUB_NAME}",
        f"egressGateway.hostAliases[0].hostnames[1]={OTHER_NAME}",
        "metrics.scrapers[0].namespaceSelector.matchLabels.harness-operator\\.test/role=scraper",  # SCRAPER_LABEL
    )
    core = client.CoreV1Api(kube)
    apps = client.AppsV1Api(kube)
    # The image was rebuilt under the same tag: roll the pods onto it, and wait for the new ones.
    image_id = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Id}}", gateway_image],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    template = {"metadata": {"annotations": {"harness-operator.test/image": image_id.replace(":", "-")}}}
    apps.patch_namespaced_deployment(GATEWAY, RELEASE_NAMESPACE, {"spec": {"template": template}})
    wait_until(
        lambda: (
            (d := apps.read_namespaced_deployment(GATEWAY, RELEASE_NAMESPACE)).status.updated_replicas
            == d.spec.replicas
            == d.status.ready_replicas
            == d.status.replicas
            and d.status.observed_generation == d.metadata.generation
        ),
        timeout=120,
        what="the gateway's pods",
    )
    service = core.read_namespaced_service(GATEWAY, RELEASE_NAMESPACE)
    key = core.read_namespaced_secret(f"{GATEWAY}-key", RELEASE_NAMESPACE).data["key"]
    folder = tmp_path_factory.mktemp("operator")
    settings = {
        **operator_settings(images),
        "HARNESS_EGRESS_GATEWAY_SERVICE": service.spec.cluster_ip,
        "HARNESS_EGRESS_GATEWAY_NAMESPACE": RELEASE_NAMESPACE,
        "HARNESS_EGRESS_GATEWAY_KEY": base64.b64decode(key).decode(),
        "HARNESS_EGRESS_GATEWAY_POD_LABELS": "app.kubernetes.io/name=harness-egress-gateway",
    }
    proc = OperatorProcess(
        kubeconfig=service_account_kubeconfig(kube, kubeconfig_path, folder / "kubeconfig"),
        env=settings,
        log_path=folder / "operator.log",
    )
    proc.start()
    yield proc
    proc.stop()
    print(f"operator log: {proc.log_path}")


@pytest.fixture
def gw(kube: client.ApiClient, namespace: str, gateway_operator: OperatorProcess) -> Api:
    return Api(kube, namespace)


@pytest.fixture
def anthropic_stub() -> Iterator[AnthropicStub]:
    with AnthropicStub(mode="ok", host=NODE) as stub:
        yield stub


def gateway_pods(api: Api) -> list[Any]:
    """The gateway's serving pods (not those on their way out after a rollout)."""
    pods = api.core.list_namespaced_pod(
        RELEASE_NAMESPACE, label_selector="app.kubernetes.io/name=harness-egress-gateway"
    ).items
    return [p for p in pods if p.metadata.deletion_timestamp is None and p.status.phase == "Running"]


def gateway_logs(api: Api) -> str:
    return "\n".join(
        api.core.read_namespaced_pod_log(p.metadata.name, RELEASE_NAMESPACE, container="squid")
        for p in gateway_pods(api)
        if p.status.phase == "Running"
    )


def gateway_metrics(api: Api) -> str:
    texts = []
    for pod in gateway_pods(api):
        with urllib.request.urlopen(f"http://{pod.status.pod_ip}:9101/metrics", timeout=5) as resp:
            texts.append(resp.read().decode())
    return "\n".join(texts)


def claude_run(stub: AnthropicStub, granted: str) -> dict[str, Any]:
    """Claude Code sent to the stub by name; the run's allowlist grants `granted` on the stub's port."""
    return {
        "provider": "claude",
        "prompt": "Say hello.",
        "env": [
            {"name": "ANTHROPIC_BASE_URL", "value": f"http://{STUB_NAME}:{stub.port}"},
            {"name": "CLAUDE_CODE_MAX_RETRIES", "value": "0"},
        ],
        "sandbox": {"networkPolicy": "allowlist", "egress": [{"host": granted, "ports": [stub.port]}]},
        "limits": {"timeoutSeconds": 180},
    }


def api_key(api: Api) -> None:
    api.core.create_namespaced_secret(
        api.ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="anthropic-api-key"), string_data={"api-key": "sk-t"}
        ),
    )


def test_claude_reaches_the_stub_through_the_gateway_by_a_granted_name(
    gw: Api, anthropic_stub: AnthropicStub
) -> None:
    api_key(gw)
    gw.create(run_body("granted", claude_run(anthropic_stub, STUB_NAME)))
    status = gw.wait_finished("granted", timeout=240)
    assert status["phase"] == "Succeeded", f"{status}\n{describe_namespace(gw.core.api_client, gw.ns)}"
    assert status["output"]["excerpt"] == TEXT
    # The name resolves nowhere but in the gateway's hostAliases (`.test` is reserved): only the gateway
    # could have reached the stub by it, which its metrics below confirm for this run.
    assert anthropic_stub.model_calls()
    pod = gw.core.read_namespaced_pod(status["attempts"][0]["podName"], gw.ns)
    env = {e.name: e for e in pod.spec.containers[0].env}
    assert env["HTTPS_PROXY"].value_from.secret_key_ref.key == "proxy-url-1"  # never a value in the pod
    policy = gw.net.read_namespaced_network_policy("granted-a1", gw.ns).to_dict()
    assert "0.0.0.0/0" not in json.dumps(policy, default=str)
    host = f"{STUB_NAME}:{anthropic_stub.port}"
    metric = f'harness_gateway_requests_total{{namespace="{gw.ns}",host="{host}",verdict="allowed"}}'
    assert metric in gateway_metrics(gw)
    # The run ended: its grant is gone, and with it what its credential opened.
    wait_until(
        lambda: (
            not gw.core.list_namespaced_config_map(
                RELEASE_NAMESPACE, field_selector=f"metadata.name={grant_name(gw.ns, 'granted')}"
            ).items
        ),
        timeout=30,
        what="the run's grant to be deleted",
    )


@pytest.mark.parametrize("provider", ["claude-acp", "codex-acp"])
def test_acp_adapters_reach_their_stub_through_the_gateway(gw: Api, provider: str) -> None:
    """The catalog's ACP adapters, in their own images, honour the proxy variables too (proxyEnv)."""
    stub_class = AnthropicStub if provider == "claude-acp" else OpenAIStub
    secret = "anthropic-api-key" if provider == "claude-acp" else "openai-api-key"
    gw.core.create_namespaced_secret(
        gw.ns, client.V1Secret(metadata=client.V1ObjectMeta(name=secret), string_data={"api-key": "sk-t"})
    )
    with stub_class(mode="ok", host=NODE) as stub:
        url = f"http://{STUB_NAME}:{stub.port}"
        spec: dict[str, Any] = {
            "provider": provider,
            "prompt": "Say hello.",
            "sandbox": {"networkPolicy": "allowlist", "egress": [{"host": STUB_NAME, "ports": [stub.port]}]},
            "limits": {"timeoutSeconds": 180},
        }
        if provider == "claude-acp":
            spec["env"] = [
                {"name": "ANTHROPIC_BASE_URL", "value": url},
                {"name": "CLAUDE_CODE_MAX_RETRIES", "value": "0"},
            ]
        else:
            provider_config = (
                f'{{name="stub", base_url="{url}/v1", env_key="OPENAI_API_KEY", wire_api="responses"}}'
            )
            spec["with"] = {"config": ["model_provider=stub", f"model_providers.stub={provider_config}"]}
        gw.create(run_body("acp", spec))
        status = gw.wait_finished("acp", timeout=240)
        assert status["phase"] == "Succeeded", f"{status}\n{describe_namespace(gw.core.api_client, gw.ns)}"
        assert stub.model_calls()
    host = f"{STUB_NAME}:{stub.port}"
    assert f'namespace="{gw.ns}",host="{host}",verdict="allowed"' in gateway_metrics(gw)


def test_claude_is_refused_a_name_it_was_not_granted(
    gw: Api, anthropic_stub: AnthropicStub, tmp_path: Path
) -> None:
    api_key(gw)
    gw.create(run_body("refused", claude_run(anthropic_stub, OTHER_NAME)))
    status = gw.wait_finished("refused", timeout=240)
    assert status["phase"] == "Failed", status
    assert not anthropic_stub.model_calls(), "the stub was reached without a grant"
    host = f"{STUB_NAME}:{anthropic_stub.port}"
    line = wait_until(
        lambda: next(
            (json.loads(x) for x in gateway_logs(gw).splitlines() if f'"run": "{gw.ns}/refused"' in x), None
        ),
        timeout=30,
        what="the gateway's log line naming the run",
    )
    assert (line["host"], line["verdict"]) == (host, "refused")
    # The refused host is the agent's choice: in the log line, not a label (bounded series).
    assert f'namespace="{gw.ns}",host="-",verdict="refused"' in gateway_metrics(gw)
    # The dashboard's egress panel, on a real Prometheus scraping the gateway's pods, shows the refusal.
    panels = dashboard_queries_by_source()["egress"]
    refused = [(title, q.replace(".*", gw.ns, 1)) for title, q in panels]  # the namespace variable
    with prometheus(
        tmp_path, {f"{RELEASE}-egress": [f"{p.status.pod_ip}:9101" for p in gateway_pods(gw)]}
    ) as prom:
        wait_until(lambda: not prom.empty(refused), timeout=30, what="the egress panel's series")
        shown = prom.query(refused[0][1])
    assert {r["metric"]["verdict"] for r in shown} == {"refused"}, shown


# The agent of the bypass test: the granted name through the gateway (urllib reads http_proxy), then a
# direct connection to the same listener, retried while it gets through: kube-router confines a pod only
# once it runs (up to 0.31 s measured, tests/cluster/README.md), so "blocked" is what it settles to.
BYPASS = r"""
import json, socket, sys, time, urllib.request
name, port, node = sys.argv[1].split()
via = urllib.request.urlopen(f"http://{name}:{port}/v1/models", timeout=10).status
direct, deadline = "open", time.monotonic() + 20
while time.monotonic() < deadline:
    try:
        socket.create_connection((node, int(port)), timeout=1).close()
    except OSError:
        direct = "blocked"
        break
    time.sleep(0.2)
print(json.dumps({"viaGateway": via, "direct": direct}))
"""
ENFORCER_HEALTH = "http://127.0.0.1:20244/healthz"  # kube-router, when tests/cluster/up runs it


def test_a_probe_cannot_bypass_the_gateway_by_connecting_directly(
    gw: Api, images: dict[str, str], anthropic_stub: AnthropicStub
) -> None:
    """Provider mode with a host rule: the definition's host opens through the gateway, and the same
    listener by address stays closed (the policy allows only DNS and the gateway)."""
    try:
        urllib.request.urlopen(ENFORCER_HEALTH, timeout=5).close()
    except OSError:
        pytest.skip("no NetworkPolicy enforcer in this cluster (kube-router, issue 9 part 1)")
    port = anthropic_stub.port
    definition = {
        "binary": "python3",
        "prefixArgs": ["-c", BYPASS],
        "image": images["sandbox"],
        "egress": [{"host": STUB_NAME, "ports": [port]}],
    }
    gw.create(
        {
            "apiVersion": "agentharness.dev/v1alpha1",
            "kind": "HarnessDefinition",
            "metadata": {"name": "bypass"},
            "spec": definition,
        }
    )
    gw.create(run_body("bypass", {"provider": "bypass", "prompt": f"{STUB_NAME} {port} {NODE}"}))
    status = gw.wait_finished("bypass")
    assert status["phase"] == "Succeeded", status
    assert json.loads(status["output"]["excerpt"]) == {"viaGateway": 200, "direct": "blocked"}


def proxy_get(pod_ip: str, user: str, password: str, url: str) -> int:
    """The status of GET `url` through the gateway pod at `pod_ip` as proxy user `user`."""
    handler = urllib.request.ProxyHandler({"http": f"http://{user}:{password}@{pod_ip}:3128"})
    opener = urllib.request.build_opener(handler)
    try:
        with opener.open(url, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_one_runs_credential_opens_none_of_another_runs_hosts(
    gw: Api, images: dict[str, str], anthropic_stub: AnthropicStub, kube: client.ApiClient
) -> None:
    """Two live runs (fake agents that wait), one granted the stub's name, one another name: each
    credential, as the operator derived it into the run's plan Secret, is tried against the gateway."""
    gw.create(definition_body("waits", images["test"], "hang"))
    for name, host in (("run-a", STUB_NAME), ("run-b", OTHER_NAME)):
        spec = {"networkPolicy": "allowlist", "egress": [{"host": host, "ports": [anthropic_stub.port]}]}
        gw.create(run_body(name, {"provider": "waits", "prompt": "x", "sandbox": spec}))
    secrets = {
        name: wait_until(
            lambda n=name: gw.core.read_namespaced_secret(f"{n}-plan", gw.ns),
            timeout=60,
            what=f"{name}'s plan",
        )
        for name in ("run-a", "run-b")
    }
    creds = {}
    for name, secret in secrets.items():
        url = base64.b64decode(secret.data["proxy-url-1"]).decode()
        creds[name] = url.split("//", 1)[1].split("@", 1)[0].split(":")
    pod_ip = next(p.status.pod_ip for p in gateway_pods(gw) if p.status.phase == "Running")
    stub_url = f"http://{STUB_NAME}:{anthropic_stub.port}/v1/models"
    assert proxy_get(pod_ip, *creds["run-a"], stub_url) == 200
    assert proxy_get(pod_ip, *creds["run-b"], stub_url) == 403  # B's credential, A's host
    assert proxy_get(pod_ip, creds["run-b"][0], creds["run-a"][1], stub_url) == 407  # A's password as B
    assert proxy_get(pod_ip, creds["run-a"][0], "guess", stub_url) == 407
    # The credential is what the operator derives from its key and the run's UID, nothing else.
    uid = gw.run("run-a")["metadata"]["uid"]
    key = gateway_operator_key(kube)
    assert creds["run-a"][1] == build_proxy_token(key, uid, 1)
    # Cancelled, the runs end and their grants go: A's credential opens nothing any more.
    for name in ("run-a", "run-b"):
        gw.custom.patch_namespaced_custom_object(
            "agentharness.dev", "v1alpha1", gw.ns, "harnessruns", name, {"spec": {"cancel": True}}
        )
        gw.wait_finished(name)
    wait_until(  # refused by the ACL (403) once its cache expires, or by authentication (407)
        lambda: proxy_get(pod_ip, *creds["run-a"], stub_url) in (403, 407),
        timeout=60,
        what="the gateway to refuse a finished run's credential",
    )


def gateway_operator_key(kube: client.ApiClient) -> str:
    data = client.CoreV1Api(kube).read_namespaced_secret(f"{GATEWAY}-key", RELEASE_NAMESPACE).data
    return base64.b64decode(data["key"]).decode()


def test_gateway_and_operator_rights_over_grants_stay_in_the_gateways_namespace(
    gateway_operator: OperatorProcess, service_account_client: Any
) -> None:
    def allowed(account: str, verb: str, resource: str, namespace: str) -> bool:
        authz = client.AuthorizationV1Api(service_account_client(RELEASE_NAMESPACE, account))
        attributes = client.V1ResourceAttributes(verb=verb, resource=resource, namespace=namespace)
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
        )
        return bool(authz.create_self_subject_access_review(review).status.allowed)

    assert allowed(GATEWAY, "list", "configmaps", RELEASE_NAMESPACE)
    assert allowed(GATEWAY, "watch", "configmaps", RELEASE_NAMESPACE)  # the helpers keep grants by a watch
    assert not allowed(GATEWAY, "list", "configmaps", "default")
    assert not allowed(GATEWAY, "watch", "configmaps", "default")
    assert not allowed(GATEWAY, "get", "secrets", RELEASE_NAMESPACE)
    assert not allowed(GATEWAY, "create", "configmaps", RELEASE_NAMESPACE)
    assert allowed("harness-operator", "delete", "configmaps", RELEASE_NAMESPACE)
    assert not allowed("harness-operator", "delete", "configmaps", "default")


# The agent of the metrics test: one connection to the gateway pod's metrics port.
METRICS_PROBE = r"""
import json, socket, sys
ip, port = sys.argv[1].split()
try:
    socket.create_connection((ip, int(port)), timeout=5).close()
    verdict = "open"
except OSError:
    verdict = "blocked"
print(json.dumps({"metrics": verdict}))
"""


def probe_metrics(api: Api, images: dict[str, str], pod_ip: str) -> str:
    """Whether a run of `api`'s namespace, its allowlist naming the gateway pod's metrics port by
    address, can connect to it."""
    api.create(
        {
            "apiVersion": "agentharness.dev/v1alpha1",
            "kind": "HarnessDefinition",
            "metadata": {"name": "metrics-probe"},
            "spec": {"binary": "python3", "prefixArgs": ["-c", METRICS_PROBE], "image": images["sandbox"]},
        }
    )
    sandbox = {"networkPolicy": "allowlist", "egress": [{"cidr": f"{pod_ip}/32", "ports": [9101]}]}
    api.create(
        run_body("probe", {"provider": "metrics-probe", "prompt": f"{pod_ip} 9101", "sandbox": sandbox})
    )
    status = api.wait_finished("probe")
    assert status["phase"] == "Succeeded", status
    return str(json.loads(status["output"]["excerpt"])["metrics"])


def test_only_the_scrapers_reach_the_gateways_metrics(
    gw: Api, kube: client.ApiClient, images: dict[str, str]
) -> None:
    """The gateway's metrics name every namespace's runs and hosts: a tenant's run whose allowlist opens
    the metrics port is refused by the gateway's NetworkPolicy; a run in a scraper namespace connects."""
    try:
        urllib.request.urlopen(ENFORCER_HEALTH, timeout=5).close()
    except OSError:
        pytest.skip("no NetworkPolicy enforcer in this cluster (kube-router, issue 9 part 1)")
    pod_ip = next(p.status.pod_ip for p in gateway_pods(gw))
    assert probe_metrics(gw, images, pod_ip) == "blocked"
    core = client.CoreV1Api(kube)
    scraper = f"{gw.ns[:50]}-scraper"
    labels = {"pod-security.kubernetes.io/enforce": "restricted", SCRAPER_LABEL: "scraper"}
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=scraper, labels=labels)))
    try:
        wait_until(
            lambda: core.read_namespaced_service_account("default", scraper), timeout=30, what="its SA"
        )
        assert probe_metrics(Api(kube, scraper), images, pod_ip) == "open"
    finally:
        core.delete_namespace(scraper, propagation_policy="Background")
