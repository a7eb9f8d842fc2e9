"""The chart rendered by the real `helm` (offline: `helm lint`, `helm template`): pod metadata, pull Secrets,
probes, the optional ServiceMonitor, and every env var it sets is a setting the operator reads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness_operator.api.crd import build_crds
from harness_operator.core.config import OperatorConfig

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "harness-operator"
CLUSTER_HELM = (
    Path(os.environ.get("HARNESS_CLUSTER_CACHE", "/var/cache/harness-operator/cluster")) / "bin" / "helm"
)
HELM = str(CLUSTER_HELM) if CLUSTER_HELM.exists() else shutil.which("helm")

pytestmark = pytest.mark.skipif(
    HELM is None, reason="helm not built yet: tests/cluster/build-bins builds it (make test does)"
)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    return subprocess.run([HELM, *args], capture_output=True, text=True, check=False)


def render(*settings: str) -> list[dict[str, Any]]:
    sets = [arg for s in settings for arg in ("--set", s)]
    result = helm("template", "harness-operator", str(CHART), "--namespace", "harness-system", *sets)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def one(docs: list[dict[str, Any]], kind: str, gateway: bool = False, model: bool = False) -> dict[str, Any]:
    """The one object of `kind`: the egress gateway's (named <release>-egress...), the model gateway's
    (<release>-model, not its store's) or else the operator's."""

    def owner(name: str) -> tuple[bool, bool]:
        return "-egress" in name, name.endswith("-model")

    found = [
        d
        for d in docs
        if d["kind"] == kind
        and owner(d["metadata"]["name"]) == (gateway, model)
        and not d["metadata"]["name"].endswith("-model-store")
    ]
    assert len(found) == 1, f"{len(found)} {kind} objects"
    return found[0]


def operator_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return container


def env_of(docs: list[dict[str, Any]]) -> dict[str, str]:
    """Plain values; a value from a Secret (the gateway's key) stands as FROM_SECRET."""
    return {e["name"]: e.get("value", FROM_SECRET) for e in operator_container(docs)["env"]}


FROM_SECRET = "from-a-secret"


EVERY_KNOB = (
    "imagePullSecrets[0].name=registry",
    "sandboxImagePullSecrets[0].name=registry-a",
    "sandboxImagePullSecrets[1].name=registry-b",
    "podAnnotations.team=agents",
    "podLabels.cost-center=ai",
    "priorityClassName=operators",
    "metrics.serviceMonitor.enabled=true",
    "metrics.serviceMonitor.interval=30s",
    "metrics.serviceMonitor.labels.release=prometheus",
    "runs.ttlSecondsAfterFinished=86400",
    "multiKueue.workers[0].name=worker-1",
    "multiKueue.workers[0].kubeconfigSecret=worker-1-kubeconfig",
    "publishing.signing.enabled=true",
    "publishing.signing.secretName=harness-signing",
    "publishing.signing.committerEmail=bot@example.invalid",
)


@pytest.mark.parametrize("settings", [(), EVERY_KNOB], ids=["defaults", "every-knob"])
def test_helm_lint_strict_passes(settings: tuple[str, ...]) -> None:
    result = helm("lint", "--strict", str(CHART), *(arg for s in settings for arg in ("--set", s)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_defaults_render_no_optional_pod_fields_and_no_service_monitor() -> None:
    docs = render()
    pod = one(docs, "Deployment")["spec"]["template"]
    assert "annotations" not in pod["metadata"]
    assert not {"imagePullSecrets", "priorityClassName"} & set(pod["spec"])
    assert "ServiceMonitor" not in {d["kind"] for d in docs}
    assert env_of(docs)["HARNESS_IMAGE_PULL_SECRETS"] == ""


def test_pod_metadata_pull_secrets_and_priority_reach_the_operator_pod() -> None:
    pod = one(render(*EVERY_KNOB), "Deployment")["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"team": "agents"}
    assert pod["metadata"]["labels"]["cost-center"] == "ai"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry"}]
    assert pod["spec"]["priorityClassName"] == "operators"


def test_pod_labels_cannot_override_the_selector_labels() -> None:
    deployment = one(render("podLabels.app\\.kubernetes\\.io/name=other"), "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector["app.kubernetes.io/name"] == "harness-operator"
    assert deployment["spec"]["template"]["metadata"]["labels"].items() >= selector.items()


def test_sandbox_pull_secrets_reach_the_operator_as_a_setting_it_reads() -> None:
    env = env_of(render(*EVERY_KNOB))
    assert OperatorConfig.from_env(env).image_pull_secrets == ("registry-a", "registry-b")


def test_signing_reaches_the_operator_and_is_on_only_with_a_secret() -> None:
    assert OperatorConfig.from_env(env_of(render())).signing_secret_name == ""
    config = OperatorConfig.from_env(env_of(render(*EVERY_KNOB, "publishing.signing.allowUnsigned=true")))
    assert (config.signing_secret_name, config.signing_secret_key) == ("harness-signing", "ssh-privatekey")
    assert config.signing_enabled and config.signing_allow_unsigned
    assert (config.signing_committer_name, config.signing_committer_email) == ("", "bot@example.invalid")
    refused = helm("template", "r", str(CHART), "--set", "publishing.signing.enabled=true")
    assert refused.returncode != 0
    assert "publishing.signing.enabled=true needs publishing.signing.secretName" in refused.stderr


def test_finished_runs_go_after_a_week_except_those_a_tool_applied_unless_the_chart_says_otherwise() -> None:
    defaults = OperatorConfig.from_env(env_of(render()))
    assert (defaults.default_ttl_seconds_after_finished, defaults.default_ttl_spares_applied) == (
        604800,
        True,
    )
    assert "HARNESS_DEFAULT_TTL_SECONDS_AFTER_FINISHED" not in env_of(
        render("runs.ttlSecondsAfterFinished=null")
    )
    env = env_of(render(*EVERY_KNOB, "runs.spareAppliedRuns=false"))
    assert OperatorConfig.from_env(env).default_ttl_seconds_after_finished == 86400
    assert OperatorConfig.from_env(env).default_ttl_spares_applied is False


def test_every_env_var_the_chart_sets_is_an_operator_setting() -> None:
    fields = {f"HARNESS_{name.upper()}" for name in OperatorConfig.__dataclass_fields__}
    assert set(env_of(render(*EVERY_KNOB))) <= fields


def test_liveness_and_readiness_are_different_endpoints_on_the_health_port() -> None:
    docs = render("healthPort=9090")
    container = operator_container(docs)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == 9090 and env_of(docs)["HARNESS_HEALTH_PORT"] == "9090"
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}


def test_two_replicas_elect_a_leader_on_a_lease_only_they_may_update() -> None:
    docs = render()
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    env = {e["name"]: e for e in operator_container(docs)["env"]}
    assert env["HARNESS_LEADER_ELECTION_LEASE"]["value"] == "harness-operator"
    assert env["HARNESS_LEADER_ELECTION_NAMESPACE"]["value"] == "harness-system"
    assert env["HARNESS_POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-leader-election")]
    assert role["metadata"]["namespace"] == "harness-system"
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert [(r["resourceNames"], r["verbs"]) for r in named] == [
        (["harness-operator"], ["get", "watch", "update"])
    ]
    assert verbs(role, "leases", "coordination.k8s.io") == {"create", "get", "watch", "update"}
    (binding,) = [
        d for d in docs if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == role["metadata"]["name"]
    ]
    assert binding["subjects"][0]["name"] == deployment["spec"]["template"]["spec"]["serviceAccountName"]


def test_without_leader_election_one_replica_at_most_and_no_lease() -> None:
    docs = render("leaderElection.enabled=false", "replicaCount=1")
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not {"HARNESS_LEADER_ELECTION_LEASE", "HARNESS_POD_NAME"} & set(env_of(docs))
    assert not [d for d in docs if d["metadata"]["name"].endswith("-leader-election")]
    refused = helm("template", "h", str(CHART), "--set", "leaderElection.enabled=false")
    assert refused.returncode != 0 and "replicaCount > 1 needs leaderElection.enabled=true" in refused.stderr


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's matchLabels and In expressions, as the Prometheus Operator reads them."""
    if not labels.items() >= selector.get("matchLabels", {}).items():
        return False
    return all(labels.get(e["key"]) in e["values"] for e in selector.get("matchExpressions", []))


def test_service_monitor_scrapes_the_operator_and_both_gateways_when_enabled() -> None:
    docs = render(*EVERY_KNOB)
    monitor = one(docs, "ServiceMonitor")
    assert monitor["metadata"]["namespace"] == "harness-system"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["harness-system"]}
    endpoints = monitor["spec"]["endpoints"]
    assert endpoints == [
        {"port": "metrics", "path": "/metrics", "honorLabels": True, "interval": "30s"},
        {"port": "admin", "path": "/metrics", "honorLabels": True, "interval": "30s"},
    ]
    scraped = {
        d["metadata"]["name"]: {p["name"] for p in d["spec"]["ports"]} & {e["port"] for e in endpoints}
        for d in docs
        if d["kind"] == "Service" and selects(monitor["spec"]["selector"], d["metadata"]["labels"])
    }
    # the model gateway's store (Redis) is not scraped; each scraped Service has one port to scrape
    assert scraped == {
        "harness-operator-metrics": {"metrics"},
        "harness-operator-egress": {"metrics"},
        "harness-operator-model": {"admin"},
    }


def test_service_monitor_without_the_metrics_service_is_refused_with_the_fix() -> None:
    result = helm(
        "template",
        "x",
        str(CHART),
        "--set",
        "metrics.serviceMonitor.enabled=true,metrics.service.enabled=false",
    )
    assert result.returncode != 0
    assert "metrics.serviceMonitor.enabled needs metrics.service.enabled=true" in result.stderr


def test_helm_applies_the_values_schema() -> None:
    result = helm("template", "x", str(CHART), "--set", "metrics.serviceMonitor.interval=soon")
    assert result.returncode != 0
    assert "interval" in result.stderr


def test_egress_gateway_is_deployed_and_configures_the_operator() -> None:
    """On by default: Squid behind a Service, its pods outside the operator's selector, the operator told
    where it is, and the key from a Secret (never a plain value)."""
    docs = render()
    gateway = one(docs, "Deployment", gateway=True)
    operator = one(docs, "Deployment")
    gateway_labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert not set(operator["spec"]["selector"]["matchLabels"].items()) <= set(gateway_labels.items())
    assert gateway["spec"]["replicas"] >= 2
    env = env_of(docs)
    config = OperatorConfig.from_env(env)
    assert config.egress_gateway_service == "harness-operator-egress.harness-system.svc"
    assert set(config.egress_gateway_pod_labels.items()) <= set(gateway_labels.items())
    assert env["HARNESS_EGRESS_GATEWAY_KEY"] == FROM_SECRET
    service = one(docs, "Service", gateway=True)
    assert service["spec"]["selector"] == gateway["spec"]["selector"]["matchLabels"]
    assert {p["port"] for p in service["spec"]["ports"]} == {config.egress_gateway_port, 9101}
    policy = one(docs, "NetworkPolicy", gateway=True)
    assert policy["spec"]["podSelector"]["matchLabels"] == gateway["spec"]["selector"]["matchLabels"]


def key_refs(docs: list[dict[str, Any]]) -> set[str]:
    """The Secret names every container's env reads a `key` from."""
    refs = set()
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for entry in container.get("env") or []:
                ref = (entry.get("valueFrom") or {}).get("secretKeyRef") or {}
                if ref.get("key") == "key":
                    refs.add(ref["name"])
    return refs


def test_gateway_keys_are_generated_or_brought_and_then_not_rendered() -> None:
    """`helm template` (Argo CD) cannot look the generated keys up, so it renders new ones each time:
    existingKeySecret names the user's Secrets, and the chart renders none."""
    generated = {d["metadata"]["name"] for d in render() if d["kind"] == "Secret"}
    assert {"harness-operator-egress-key", "harness-operator-model-key"} <= generated
    assert key_refs(render()) == {"harness-operator-egress-key", "harness-operator-model-key"}
    docs = render("egressGateway.existingKeySecret=my-egress", "modelGateway.existingKeySecret=my-model")
    secrets = {d["metadata"]["name"] for d in docs if d["kind"] == "Secret"}
    assert not secrets & {
        "harness-operator-egress-key",
        "harness-operator-model-key",
        "my-egress",
        "my-model",
    }
    assert key_refs(docs) == {"my-egress", "my-model"}


def test_the_chart_can_be_a_subchart() -> None:
    """A parent chart passes `global`; the schema lets it through."""
    assert render("global.imageRegistry=parent.example/x")


def test_gateway_reads_grants_only_in_its_namespace_and_the_operator_writes_them_there() -> None:
    docs = render()
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    assert roles["harness-operator-egress"]["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}
    ]
    assert roles["harness-operator-egress-grants"]["rules"][0]["verbs"] == ["create", "update", "delete"]
    assert all(r["metadata"]["namespace"] == "harness-system" for r in roles.values())


def test_egress_gateway_can_be_switched_off_and_host_aliases_reach_its_pods() -> None:
    off = render("egressGateway.enabled=false", "egressGateway.fqdnPolicy=cilium")
    assert not [d for d in off if "-egress" in d["metadata"]["name"]]
    config = OperatorConfig.from_env(env_of(off))
    assert (config.egress_gateway_service, config.fqdn_policy) == ("", "cilium")
    on = render(
        "egressGateway.hostAliases[0].ip=10.88.0.1", "egressGateway.hostAliases[0].hostnames[0]=stub.test"
    )
    pod = one(on, "Deployment", gateway=True)["spec"]["template"]["spec"]
    assert pod["hostAliases"] == [{"ip": "10.88.0.1", "hostnames": ["stub.test"]}]


NAMESPACED = {
    "harnessruns",
    "harnessschedules",
    "harnessschedules/status",
    "harnesstriggers",
    "jobs",
    "pods",
    "secrets",
    "configmaps",
    "persistentvolumeclaims",
    "events",
}


def granted(obj: dict[str, Any]) -> set[str]:
    return {resource for rule in obj.get("rules") or [] for resource in rule["resources"]}


def test_with_watch_namespaces_the_namespaced_rights_are_roles_in_those_namespaces_only():
    """The red team's operator could create Jobs and get Secrets in kube-system although it watched one
    namespace: with watchNamespaces the ClusterRole keeps only what is cluster-wide."""
    objs = render("watchNamespaces={team-a,team-b}")
    (cluster,) = [
        o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-operator")
    ]
    assert granted(cluster) == {
        "clusterharnessdefinitions",
        "clusterharnessdefinitions/status",
        "customresourcedefinitions",
        "namespaces",
        "clusterqueues",
        "admissionchecks",
        "multikueueconfigs",
        "multikueueclusters",
    }
    roles = {
        o["metadata"]["namespace"]: o
        for o in objs
        if o["kind"] == "Role" and o["metadata"]["name"].endswith("-operator")
    }
    assert set(roles) == {"team-a", "team-b"}
    assert all(granted(role) >= NAMESPACED for role in roles.values())
    bindings = [
        o
        for o in objs
        if o["kind"] == "RoleBinding"
        and o["roleRef"]["kind"] == "Role"
        and o["metadata"]["name"].endswith("-operator")
    ]
    assert {b["metadata"]["namespace"] for b in bindings} == {"team-a", "team-b"}


def test_without_watch_namespaces_the_cluster_role_holds_every_right():
    (cluster,) = [
        o for o in render() if o["kind"] == "ClusterRole" and o["metadata"]["name"].endswith("-operator")
    ]
    assert NAMESPACED | {"clusterharnessdefinitions", "namespaces"} <= granted(cluster)


def test_admission_bindings_cover_only_the_watched_namespaces() -> None:
    """Two releases in one cluster: each one's guardrails bind in its own namespaces."""
    scoped = [
        d
        for d in render("watchNamespaces={team-a,team-b}")
        if d["kind"] == "ValidatingAdmissionPolicyBinding"
    ]
    assert sorted(b["spec"]["policyName"] for b in scoped) == [
        "harness-operator-approvals",
        "harness-operator-definitions",
        "harness-operator-mcp-servers",
        "harness-operator-operator-pods",
        "harness-operator-pipelines",
        "harness-operator-run-user",
        "harness-operator-runs",
        "harness-operator-schedules",
        "harness-operator-trigger-secrets",
        "harness-operator-triggers",
    ]
    for binding in scoped:
        selector = binding["spec"]["matchResources"]["namespaceSelector"]
        assert selector == {
            "matchExpressions": [
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}
            ]
        }
    everywhere = [d for d in render() if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert everywhere and all("matchResources" not in d["spec"] for d in everywhere)


def test_the_catalog_outlives_its_release_unless_told_not_to() -> None:
    def policies(*settings: str) -> set[str | None]:
        return {
            (d["metadata"].get("annotations") or {}).get("helm.sh/resource-policy")
            for d in render(*settings)
            if d["kind"] == "ClusterHarnessDefinition"
        }

    assert policies() == {"keep"}
    assert policies("catalog.keep=false") == {None}
    assert policies("catalog.enabled=false") == set()


def test_the_crds_are_rendered_as_generated_and_kept_at_uninstall_unless_told_not_to() -> None:
    def crds(*settings: str) -> dict[str, dict[str, Any]]:
        found = [d for d in render(*settings) if d["kind"] == "CustomResourceDefinition"]
        return {d["metadata"]["name"]: d for d in found}

    rendered = crds()
    generated = {crd["metadata"]["name"]: crd for crd in build_crds().values()}
    assert rendered.keys() == generated.keys()
    for name, crd in rendered.items():
        # Helm's YAML round trip keeps the schema (numbers, CEL rules, descriptions) as generated
        assert crd["spec"] == generated[name]["spec"], name
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == "harness-operator"
    assert all("annotations" not in d["metadata"] for d in crds("crds.keep=false").values())
    assert crds("crds.enabled=false") == {}


def test_replicated_deployments_have_a_disruption_budget_and_spread_and_no_pod_runs_with_a_low_id() -> None:
    docs = render("egressGateway.replicas=3", "modelGateway.replicas=3")
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    budgets = [d for d in docs if d["kind"] == "PodDisruptionBudget"]
    replicated = [d for d in deployments if d["spec"]["replicas"] > 1]
    assert {d["metadata"]["name"] for d in replicated} == {
        "harness-operator",
        "harness-operator-egress",
        "harness-operator-model",
    }
    for deployment in replicated:
        labels = deployment["spec"]["selector"]["matchLabels"]
        assert [
            b["spec"]["maxUnavailable"] for b in budgets if b["spec"]["selector"]["matchLabels"] == labels
        ] == [1]
        (spread,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert (
            spread["topologyKey"] == "kubernetes.io/hostname"
            and spread["labelSelector"]["matchLabels"] == labels
        )
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        for context in [pod["securityContext"], *(c.get("securityContext", {}) for c in pod["containers"])]:
            for key in ("runAsUser", "runAsGroup", "fsGroup"):
                assert context.get(key, 65532) >= 10000, (deployment["metadata"]["name"], key)
    single = render("egressGateway.replicas=1", "modelGateway.replicas=1", "replicaCount=1")
    assert not [d for d in single if d["kind"] == "PodDisruptionBudget"]


def verbs(obj: dict[str, Any], resource: str, group: str = "agentharness.dev") -> set[str]:
    """The verbs a role grants on `resource` of `group`, over all its rules."""
    return {
        verb
        for rule in obj.get("rules") or []
        if group in rule["apiGroups"] and resource in rule["resources"]
        for verb in rule["verbs"]
    }


@pytest.mark.parametrize("settings", [(), ("watchNamespaces={team-a}",)], ids=["cluster-role", "role"])
def test_the_operator_may_run_schedules_and_make_and_delete_their_runs_but_not_edit_schedules(
    settings: tuple[str, ...],
) -> None:
    """Schedules: watched, kopf's annotations patched, status written; the runs they make created and
    deleted (history limits, Replace). Never an update or create of a schedule: that is its author's."""
    kind = "Role" if settings else "ClusterRole"
    (operator,) = [
        o for o in render(*settings) if o["kind"] == kind and o["metadata"]["name"] == "harness-operator"
    ]
    assert verbs(operator, "harnessschedules") == {"get", "list", "watch"}
    assert verbs(operator, "harnessschedules/status") == {"get", "patch"}
    assert verbs(operator, "harnessruns") == {"get", "list", "watch", "create", "patch", "delete"}
    assert verbs(operator, "harnessruns/status") == {"get", "patch"}
    # Triggers: read by the reporting step (forge, token Secret's name, what to report); never written.
    assert verbs(operator, "harnesstriggers") == {"get", "list", "watch"}
    assert not verbs(operator, "harnesstriggers/status")


def test_users_view_roles_read_schedules_and_edit_roles_write_them() -> None:
    roles = {
        o["metadata"]["name"].removeprefix("harness-operator-"): o
        for o in render()
        if o["kind"] == "ClusterRole"
    }
    view, edit, admin = roles["view"], roles["edit"], roles["admin"]
    assert view["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert edit["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    for resource in ("harnessschedules", "harnessschedules/status"):
        assert verbs(view, resource) == {"get", "list", "watch"}, resource
    assert verbs(edit, "harnessschedules") == {"create", "update", "patch", "delete", "deletecollection"}
    # the operator writes a schedule's status; users of any role do not
    assert not verbs(edit, "harnessschedules/status") | verbs(admin, "harnessschedules/status")
    assert verbs(edit, "harnessruns") == verbs(edit, "harnessschedules")
    for resource in ("harnesstriggers", "harnesstriggers/status"):
        assert verbs(view, resource) == {"get", "list", "watch"}, resource
    assert verbs(edit, "harnesstriggers") == verbs(edit, "harnessschedules")
    assert not verbs(edit, "harnesstriggers/status") | verbs(admin, "harnesstriggers/status")


def test_each_multikueue_worker_kubeconfig_is_mounted_where_the_operator_setting_names_it() -> None:
    docs = render(
        *EVERY_KNOB, "multiKueue.workers[1].name=worker.b", "multiKueue.workers[1].kubeconfigSecret=b"
    )
    workers = OperatorConfig.from_env(env_of(docs)).multikueue_workers
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in operator_container(docs)["volumeMounts"]}
    secrets = {v["name"]: v["secret"] for v in pod["volumes"]}
    found = {
        name: (secrets[volume]["secretName"], secrets[volume]["items"][0]["key"], path)
        for volume, path in mounts.items()
        for name, file in workers.items()
        if file == f"{path}/{secrets[volume]['items'][0]['path']}"
    }
    assert found == {
        "worker-1": ("worker-1-kubeconfig", "kubeconfig", "/etc/harness-operator/multikueue/worker-1"),
        "worker.b": ("b", "kubeconfig", "/etc/harness-operator/multikueue/worker.b"),
    }
    assert all(m["readOnly"] for m in operator_container(docs)["volumeMounts"])
    assert OperatorConfig.from_env(env_of(render())).multikueue_workers == {}
    assert "volumes" not in one(render(), "Deployment")["spec"]["template"]["spec"]


def test_a_worker_without_its_kubeconfig_secret_is_refused_by_the_schema() -> None:
    result = helm("template", "h", str(CHART), "--set", "multiKueue.workers[0].name=worker-1")
    assert result.returncode != 0
    assert "kubeconfigSecret" in result.stderr


WORKER_CHART = ROOT / "charts" / "harness-multikueue-worker"


def render_worker(*settings: str) -> list[dict[str, Any]]:
    sets = [arg for s in settings for arg in ("--set", s)]
    result = helm("template", "mk", str(WORKER_CHART), "--namespace", "harness-system", *sets)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_the_worker_chart_grants_the_operator_reads_creates_and_its_finalizer_only() -> None:
    """On a MultiKueue worker the operator reads the copies of its Jobs and their pods, holds a copy
    with a finalizer (patch), and creates the copy's plan Secret, policy and claim: nothing updated or
    deleted, nothing of Kueue's."""
    assert helm("lint", "--strict", str(WORKER_CHART)).returncode == 0
    docs = render_worker()
    (role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    rights = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert rights == {
        ("jobs", "get"), ("jobs", "list"), ("jobs", "watch"), ("jobs", "patch"),
        ("pods", "get"), ("pods", "list"), ("pods", "watch"), ("pods/log", "get"),
        ("secrets", "get"), ("secrets", "create"),
        ("persistentvolumeclaims", "get"), ("persistentvolumeclaims", "create"),
        ("networkpolicies", "get"), ("networkpolicies", "create"),
        ("ciliumnetworkpolicies", "get"), ("ciliumnetworkpolicies", "create"),
    }  # fmt: skip
    (account,) = [d for d in docs if d["kind"] == "ServiceAccount"]
    (binding,) = [d for d in docs if d["kind"] == "ClusterRoleBinding"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "harness-system"}
    ]
    (token,) = [d for d in docs if d["kind"] == "Secret"]
    assert token["type"] == "kubernetes.io/service-account-token"
    assert (
        token["metadata"]["annotations"]["kubernetes.io/service-account.name"] == account["metadata"]["name"]
    )


def test_the_worker_chart_binds_only_in_the_namespaces_it_is_given() -> None:
    docs = render_worker("namespaces={team-a,team-b}", "tokenSecret=false")
    assert not [d for d in docs if d["kind"] in ("ClusterRoleBinding", "Secret")]
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    assert {b["metadata"]["namespace"] for b in bindings} == {"team-a", "team-b"}
    assert all(b["roleRef"]["kind"] == "ClusterRole" for b in bindings)


SANDBOX_PEER = {"app.kubernetes.io/managed-by": "harness-operator"}


def sandbox_peers(policy: dict[str, Any], port: int) -> list[dict[str, Any]]:
    """The peers a gateway's NetworkPolicy admits to `port`."""
    return [
        peer
        for rule in policy["spec"]["ingress"]
        if any(p["port"] == port for p in rule["ports"])
        for peer in rule["from"]
    ]


@pytest.mark.parametrize(
    ("settings", "namespaces"),
    [((), {}), (("watchNamespaces={team-a,team-b}",), {"key": "kubernetes.io/metadata.name"})],
)
def test_the_gateways_admit_only_pods_with_the_label_the_admission_policy_keeps_the_operators(
    settings: tuple[str, ...], namespaces: dict[str, str]
) -> None:
    """Both gateways admit sandboxes by the operator's label, which only the operator's Jobs can give a
    pod (the operator-pods policy: its ServiceAccount and the Job controller), and only in the namespaces
    the release watches, where that policy binds."""
    docs = render(*settings)
    egress = one(docs, "NetworkPolicy", gateway=True)
    model = one(docs, "NetworkPolicy", model=True)
    for policy, port in ((egress, 3128), (model, 8080)):
        (peer,) = sandbox_peers(policy, port)
        assert peer["podSelector"] == {"matchLabels": SANDBOX_PEER}
        if namespaces:
            assert peer["namespaceSelector"] == {
                "matchExpressions": [{**namespaces, "operator": "In", "values": ["team-a", "team-b"]}]
            }
        else:
            assert peer["namespaceSelector"] == {}
    (pods,) = [
        d
        for d in docs
        if d["metadata"]["name"] == "harness-operator-operator-pods"
        and d["kind"] == "ValidatingAdmissionPolicy"
    ]
    conditions = {c["name"]: c["expression"] for c in pods["spec"]["matchConditions"]}
    assert (
        "request.userInfo.username != 'system:serviceaccount:harness-system:harness-operator'"
        in (conditions["not-the-operator"])
    )
    assert "harness-operator" in json.dumps(pods["spec"]["variables"])


def test_the_operator_is_told_where_mcp_servers_may_be_as_admission_is() -> None:
    env = env_of(render("mcp.allowedCIDRs={10.20.0.0/16,fd00::/8}", "mcp.allowedHosts={*.tools.svc}"))
    config = OperatorConfig.from_env(env)
    assert config.mcp_allowed_cidrs == ("10.20.0.0/16", "fd00::/8")
    assert config.mcp_allowed_hosts == ("*.tools.svc",)
    assert OperatorConfig.from_env(env_of(render())).mcp_allowed_cidrs == ()


def test_the_chart_s_protected_paths_are_the_operator_s_and_the_platform_s_to_change() -> None:
    """The default is the operator's own list; a platform's list (RequireApproval on CI) is what it reads;
    a path from "/" fails at install, naming the value."""
    default = OperatorConfig.from_env(
        {"HARNESS_PROTECTED_PATHS": env_of(render())["HARNESS_PROTECTED_PATHS"]}
    )
    assert default.protected_paths == OperatorConfig().protected_paths
    docs = render(
        "publishing.protectedPaths[0].path=.github/workflows/",
        "publishing.protectedPaths[0].action=RequireApproval",
    )
    loosened = OperatorConfig.from_env({"HARNESS_PROTECTED_PATHS": env_of(docs)["HARNESS_PROTECTED_PATHS"]})
    assert [(r.path, r.action) for r in loosened.protected_paths] == [
        (".github/workflows/", "RequireApproval")
    ]
    refused = helm("template", "x", str(CHART), "--set", "publishing.protectedPaths[0].path=/etc")
    assert refused.returncode != 0 and "protectedPaths" in refused.stderr
