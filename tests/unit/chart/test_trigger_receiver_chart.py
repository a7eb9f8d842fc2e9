"""The chart's trigger receiver rendered by the real `helm`: off by default; on, a hardened Deployment from
the operator's image, its Service, disruption budget and NetworkPolicy, and RBAC that holds no Secret and
no impersonation of its own (each team grants those in its namespace)."""

from __future__ import annotations

import functools
import inspect
import re
from typing import Any

import pytest
from tests.unit.chart.test_chart_render import CHART, helm, selects
from tests.unit.chart.test_chart_render import render as render_fresh

from harness_operator.receiver import __main__ as receiver_main

ON = "triggerReceiver.enabled=true"
NAME = "harness-operator-receiver"


@functools.cache
def _rendered(settings: tuple[str, ...]) -> list[dict[str, Any]]:
    return render_fresh(*settings)


def render(*settings: str) -> list[dict[str, Any]]:
    """The chart rendered once per settings (helm takes seconds); callers read, never change, it."""
    return _rendered(settings)


def receiver_objects(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The receiver's objects by kind (one of each; RoleBindings are keyed by namespace too)."""
    found: dict[str, dict[str, Any]] = {}
    for doc in docs:
        if doc["metadata"]["name"] != NAME:
            continue
        key = doc["kind"] if doc["kind"] != "RoleBinding" else f"RoleBinding/{doc['metadata']['namespace']}"
        assert key not in found, f"two {key}"
        found[key] = doc
    return found


def test_off_by_default_nothing_listens_for_forges() -> None:
    docs = render()
    assert receiver_objects(docs) == {}
    assert not [d for d in docs if "receiver" in d["metadata"]["name"]]


def test_on_it_runs_the_receiver_from_the_operators_image_hardened_with_probes() -> None:
    docs = render(ON)
    objects = receiver_objects(docs)
    assert set(objects) == {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }
    deployment = objects["Deployment"]
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    (container,) = pod["containers"]
    (operator,) = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "harness-operator"
    ]
    assert container["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"] == ["python3", "-m", "harness_operator.receiver"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] >= 10000
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"hooks": 8080, "admin": 9103}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert container["resources"]["limits"]["memory"] == "192Mi"
    (spread,) = pod["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    budget = objects["PodDisruptionBudget"]
    assert budget["spec"] == {"maxUnavailable": 1, "selector": deployment["spec"]["selector"]}
    assert "PodDisruptionBudget" not in receiver_objects(render(ON, "triggerReceiver.replicas=1"))


def test_every_env_var_the_chart_sets_is_one_the_receiver_reads_with_the_values_given() -> None:
    docs = render(
        ON,
        "triggerReceiver.port=8443",
        "triggerReceiver.adminPort=9200",
        "triggerReceiver.maxDeliveryBytes=2097152",
        "watchNamespaces={team-a,team-b}",
    )
    (container,) = receiver_objects(docs)["Deployment"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    read = set(re.findall(r"HARNESS_[A-Z_]+", inspect.getsource(receiver_main.serve)))
    assert set(env) == read
    assert env == {
        "HARNESS_PORT": "8443",
        "HARNESS_ADMIN_PORT": "9200",
        "HARNESS_MAX_DELIVERY_BYTES": "2097152",
        "HARNESS_NAMESPACES": "team-a,team-b",
    }
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"hooks": 8443, "admin": 9200}


def rules(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_its_own_rights_are_reading_triggers_listing_runs_and_pipelines_marking_runs_events_and_status() -> (
    None
):
    """No Secret, no impersonation, no run create: a team grants those for its own trigger, so a
    receiver holds nothing a team did not hand it."""
    objects = receiver_objects(render(ON))
    group = "agentharness.dev"
    assert rules(objects["ClusterRole"]) == {
        (group, "harnesstriggers", "get"),
        (group, "harnesstriggers", "list"),
        (group, "harnesstriggers", "watch"),
        (group, "harnesstriggers/status", "patch"),
        (group, "harnessruns", "list"),
        (group, "harnessruns", "patch"),  # the checks-changed mark only (receiver/checks.py)
        (group, "harnesspipelines", "list"),  # a pipeline trigger's, for duplicates and concurrency
        ("", "events", "create"),
        ("", "events", "patch"),
    }
    binding = objects["ClusterRoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": NAME,
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": "harness-system"}]


def test_its_patch_of_runs_is_narrowed_to_the_checks_mark_by_an_admission_policy() -> None:
    """RBAC cannot name a field: the policy (its CEL run for real in tests/integration/
    test_trigger_receiver.py) judges every update the receiver makes to a run; admission off, none."""
    docs = render(ON)
    [policy] = [
        d for d in docs if d["kind"] == "ValidatingAdmissionPolicy" and "marks-only" in d["metadata"]["name"]
    ]
    [binding] = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding" and "marks-only" in d["metadata"]["name"]
    ]
    assert policy["metadata"]["name"] == f"{NAME}-marks-only" == binding["spec"]["policyName"]
    assert binding["spec"]["validationActions"] == ["Deny"] and "matchResources" not in binding["spec"]
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"][0]["resources"] == ["harnessruns"]
    assert spec["matchConditions"] == [
        {
            "name": "the-receiver",
            "expression": f"request.userInfo.username == 'system:serviceaccount:harness-system:{NAME}'",
        }
    ]
    assert "agentharness.dev/checks-changed" in spec["variables"][0]["expression"]
    assert not [d for d in render(ON, "admission.enabled=false") if "marks-only" in d["metadata"]["name"]]


def test_with_watch_namespaces_its_rights_hold_only_in_those_namespaces() -> None:
    objects = receiver_objects(render(ON, "watchNamespaces={team-a,team-b}"))
    assert "ClusterRoleBinding" not in objects
    for namespace in ("team-a", "team-b"):
        binding = objects[f"RoleBinding/{namespace}"]
        assert binding["roleRef"]["kind"] == "ClusterRole" and binding["roleRef"]["name"] == NAME
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": NAME, "namespace": "harness-system"}
        ]


def test_forges_reach_the_hooks_port_from_anywhere_and_only_scrapers_the_admin_port() -> None:
    objects = receiver_objects(render(ON, "triggerReceiver.service.type=LoadBalancer"))
    service = objects["Service"]
    assert service["spec"]["type"] == "LoadBalancer"
    assert {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        "hooks": (80, "hooks"),
        "admin": (9103, "admin"),
    }
    selector = objects["Deployment"]["spec"]["selector"]["matchLabels"]
    assert service["spec"]["selector"] == selector
    policy = objects["NetworkPolicy"]["spec"]
    assert policy["podSelector"] == {"matchLabels": selector}
    hooks, admin = policy["ingress"]
    assert hooks == {"ports": [{"protocol": "TCP", "port": 8080}]}  # no `from`: every source
    assert admin["ports"] == [{"protocol": "TCP", "port": 9103}]
    assert admin["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


def test_the_service_monitor_scrapes_the_receivers_admin_port() -> None:
    docs = render(ON, "metrics.serviceMonitor.enabled=true")
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    service = receiver_objects(docs)["Service"]
    assert selects(monitor["spec"]["selector"], service["metadata"]["labels"])
    scraped = {e["port"] for e in monitor["spec"]["endpoints"]} & {
        p["name"] for p in service["spec"]["ports"]
    }
    assert scraped == {"admin"}


def test_helm_lint_strict_passes_with_the_receiver_on() -> None:
    result = helm("lint", "--strict", str(CHART), "--set", ON)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("setting", "field"),
    [
        ("triggerReceiver.service.type=Ingress", "type"),
        ("triggerReceiver.maxDeliveryBytes=1000", "maxDeliveryBytes"),
        ("triggerReceiver.replicas=-1", "replicas"),
        ("triggerReceiver.ingress=true", "ingress"),
    ],
)
def test_bad_receiver_values_are_refused_naming_the_field(setting: str, field: str) -> None:
    result = helm("template", "x", str(CHART), "--set", ON, "--set", setting)
    assert result.returncode != 0
    assert "triggerReceiver" in result.stderr and field in result.stderr, result.stderr
