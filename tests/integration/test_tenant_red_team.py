"""Red team (issue 49) on the real API server, written as the attacks of a tenant: a ServiceAccount that
may write runs, schedules and definitions, and pods, Jobs, CronJobs, Deployments and claims, in its
namespace. It labels its own pods as the operator's so that the gateways admit them (item 14), points an
MCP server at a metadata service or the node's kubelet to open its sandbox's way there (item 13), and
labels a run as another user's to take that user's agentUser workspace (item 2b). The chart's policies
refuse each, naming the field and the fix; what the operator and the Job controller make still passes."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.core.objects.naming import encode_user_label

from .conftest import api_status, wait_until
from .operator_env import RELEASE, RELEASE_NAMESPACE, SERVICE_ACCOUNT, definition_body, run_body
from .test_tenant_admission import (  # noqa: F401 (chart: the module's fixture)
    IMAGE,
    TENANT,
    bind,
    chart,
    create,
    denial,
    exists,
    refusal,
    schedule_body,
    tenant,
    wait_allowed,
)

OURS = {"app.kubernetes.io/managed-by": "harness-operator"}
LABEL_MESSAGE = (
    '{field}["app.kubernetes.io/managed-by"]: "harness-operator" marks the operator\'s sandbox pods, which its '
    'gateways admit; only the operator (its Jobs) and the Job controller (their pods) may set it, not user "{user}": '
    "drop the label or give it another value"
)


@pytest.fixture
def short_namespace(kube: client.ApiClient) -> Iterator[str]:
    """A namespace with a short name (restricted Pod Security), so that its tenant's username can be a
    label value once encoded (63 characters)."""
    core = client.CoreV1Api(kube)
    name = f"it-rt-{uuid.uuid4().hex[:6]}"
    labels = {"pod-security.kubernetes.io/enforce": "restricted", "harness-operator.test/integration": "true"}
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    try:
        wait_until(
            lambda: core.read_namespaced_service_account("default", name), timeout=30, what="default SA"
        )
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def attacker(
    chart: None,  # noqa: F811
    kube: client.ApiClient,
    short_namespace: str,
    service_account_client: Callable[..., client.ApiClient],
) -> client.ApiClient:
    """The tenant: the rights `edit` gives a namespace's users over what these attacks use."""
    ns = short_namespace
    client.CoreV1Api(kube).create_namespaced_service_account(
        ns, client.V1ServiceAccount(metadata={"name": TENANT})
    )
    verbs = ["create", "get", "list", "patch", "update"]
    rules = [
        client.V1PolicyRule(
            api_groups=[GROUP],
            resources=["harnessruns", "harnessdefinitions", "harnessschedules"],
            verbs=verbs,
        ),
        client.V1PolicyRule(api_groups=[""], resources=["pods", "persistentvolumeclaims"], verbs=verbs),
        client.V1PolicyRule(api_groups=["batch"], resources=["jobs", "cronjobs"], verbs=verbs),
        client.V1PolicyRule(api_groups=["apps"], resources=["deployments"], verbs=verbs),
    ]
    client.RbacAuthorizationV1Api(kube).create_namespaced_role(
        ns, client.V1Role(metadata={"name": TENANT}, rules=rules)
    )
    bind(kube, ns, TENANT)
    for resource, group in (("pods", ""), ("deployments", "apps"), ("harnessruns", GROUP)):
        wait_allowed(kube, ns, "create", resource, group)
    return service_account_client(ns, TENANT)


def user_of(namespace: str) -> str:
    return f"system:serviceaccount:{namespace}:{TENANT}"


def pod_spec(claim: str | None = None) -> dict[str, Any]:
    """A pod the restricted profile admits."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "c",
                "image": IMAGE,
                "command": ["sleep", "1"],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }
        ],
    }
    if claim:
        spec["volumes"] = [{"name": "w", "persistentVolumeClaim": {"claimName": claim}}]
    return spec


def pod_body(name: str, labels: dict[str, str] | None = None, claim: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": pod_spec(claim),
    }


def template(labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"labels": labels}, "spec": pod_spec()}


def refused(call: Callable[[], Any]) -> tuple[int, str]:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value.status, api_status(caught.value).get("message", "")


def await_policy(policy: str, dry_run: Callable[[], Any]) -> None:
    """Wait until `policy` (created with the chart moments ago) refuses the dry run of an attack."""

    def refuses() -> bool:
        try:
            dry_run()
        except ApiException as exc:
            return f"ValidatingAdmissionPolicy '{RELEASE}-{policy}'" in api_status(exc).get("message", "")
        return False

    wait_until(refuses, timeout=30, what=f"the {policy} policy")


# --- item 14: the operator's label on pods ------------------------------------------------------------


def test_a_tenants_pod_with_the_operators_label_is_refused(
    attacker: client.ApiClient, short_namespace: str
) -> None:
    """The gateways' NetworkPolicies admit pods by this label: a tenant's own pod may carry it neither
    from its creation nor by a later relabel; without it, the same pod is admitted."""
    ns, core = short_namespace, client.CoreV1Api(attacker)
    message = denial("operator-pods", LABEL_MESSAGE.format(field="metadata.labels", user=user_of(ns)))
    spoof = pod_body("spoof", {**OURS, "x": "y"})
    await_policy("operator-pods", lambda: core.create_namespaced_pod(ns, spoof, dry_run="All"))
    status, text = refused(lambda: core.create_namespaced_pod(ns, spoof))
    assert status == 403 and text.endswith(message), text
    core.create_namespaced_pod(ns, pod_body("plain", {"app.kubernetes.io/managed-by": "helm"}))
    status, text = refused(lambda: core.patch_namespaced_pod("plain", ns, {"metadata": {"labels": OURS}}))
    assert status == 403 and text.endswith(message), text
    assert client.CoreV1Api(attacker).read_namespaced_pod("plain", ns).metadata.labels == {
        "app.kubernetes.io/managed-by": "helm"
    }


WORKLOADS = {
    "Job": (
        "spec.template.metadata.labels",
        lambda api, ns, labels: client.BatchV1Api(api).create_namespaced_job(
            ns,
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": "w"},
                "spec": {"template": template(labels)},
            },
        ),
    ),
    "CronJob": (
        "spec.jobTemplate.spec.template.metadata.labels",
        lambda api, ns, labels: client.BatchV1Api(api).create_namespaced_cron_job(
            ns,
            {
                "apiVersion": "batch/v1",
                "kind": "CronJob",
                "metadata": {"name": "w"},
                "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": template(labels)}}},
            },
        ),
    ),
    "Deployment": (
        "spec.template.metadata.labels",
        lambda api, ns, labels: client.AppsV1Api(api).create_namespaced_deployment(
            ns,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "w"},
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {**template(labels), "spec": {**pod_spec(), "restartPolicy": "Always"}},
                },
            },
        ),
    ),
}


@pytest.mark.parametrize("kind", sorted(WORKLOADS))
def test_a_tenants_workload_may_not_template_pods_with_the_operators_label(
    attacker: client.ApiClient, short_namespace: str, kind: str
) -> None:
    """Their controllers, not the tenant, would create the pods: the template is judged instead."""
    field, make = WORKLOADS[kind]
    message = denial("operator-pods", LABEL_MESSAGE.format(field=field, user=user_of(short_namespace)))
    core = client.CoreV1Api(attacker)
    await_policy(
        "operator-pods",
        lambda: core.create_namespaced_pod(short_namespace, pod_body("p", OURS), dry_run="All"),
    )
    status, text = refused(lambda: make(attacker, short_namespace, {**OURS, "app": "w"}))
    assert status == 403 and text.endswith(message), text


def test_the_operators_job_gets_its_pod_and_a_tenant_may_not_mount_or_plant_a_shared_claim(
    attacker: client.ApiClient,
    kube: client.ApiClient,
    short_namespace: str,
    service_account_client: Callable[..., client.ApiClient],
) -> None:
    """The Job controller creates the pods of the operator's Jobs, label and claim included; a tenant may
    neither mount the operator's shared workspace claims in a pod of its own nor create a claim labelled
    as the operator's (which the operator would take for the shared claim of that name)."""
    ns = short_namespace
    claim = "harness-ws-claude-alice-0123abcd"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "attempt", "labels": OURS},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": OURS}, "spec": pod_spec(claim)}},
    }
    operator = service_account_client(RELEASE_NAMESPACE, SERVICE_ACCOUNT)
    client.BatchV1Api(operator).create_namespaced_job(ns, job)
    pods = wait_until(
        lambda: client.CoreV1Api(kube).list_namespaced_pod(ns, label_selector="job-name=attempt").items,
        timeout=30,
        what="the Job controller's pod of the operator's Job",
    )
    assert pods[0].metadata.labels["app.kubernetes.io/managed-by"] == "harness-operator"

    core = client.CoreV1Api(attacker)
    status, text = refused(lambda: core.create_namespaced_pod(ns, pod_body("peek", claim=claim)))
    assert status == 403 and text.endswith(
        denial(
            "operator-pods",
            f'spec.volumes: claim "{claim}" is a shared workspace of the operator\'s (harness-ws-*: scope agent or '
            f'agentUser), which only its sandboxes mount; user "{user_of(ns)}" may not: run a HarnessRun with '
            "that workspace scope instead",
        )
    ), text
    planted = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "harness-ws-claude-bob",
            "labels": {**OURS, "agentharness.dev/workspace": "agentUser"},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    status, text = refused(lambda: core.create_namespaced_persistent_volume_claim(ns, planted))
    assert status == 403 and text.endswith(
        denial(
            "operator-pods",
            'metadata.labels["app.kubernetes.io/managed-by"]: "harness-operator" marks the operator\'s own objects; '
            f'only the operator may set it on a PersistentVolumeClaim, not user "{user_of(ns)}": drop the label '
            "or give it another value",
        )
    ), text


# --- item 13: MCP servers inside the cluster ----------------------------------------------------------

METADATA = "http://169.254.169.254/"
KUBELET = "http://10.88.0.1:10250/"


def mcp_server(url: str) -> dict[str, Any]:
    return {"name": "docs", "url": url, "tools": ["search"]}


MCP_BODIES = {
    "run": (
        "spec",
        lambda url: run_body("mcp", {"provider": "claude", "prompt": "hi", "mcpServers": [mcp_server(url)]}),
    ),
    "schedule": (
        "spec.runTemplate.spec",
        lambda url: schedule_body(
            "mcp", {"provider": "claude", "prompt": "hi", "mcpServers": [mcp_server(url)]}
        ),
    ),
    "definition": (
        "spec",
        lambda url: definition_body(
            "mcp",
            IMAGE,
            "ok",
            mcp={"flag": "--mcp-config", "toolName": "mcp__{server}__{tool}"},
            mcpServers=[mcp_server(url)],
        ),
    ),
}


@pytest.mark.parametrize("kind", sorted(MCP_BODIES))
@pytest.mark.parametrize("url", [METADATA, KUBELET], ids=["metadata-service", "kubelet"])
def test_an_mcp_server_inside_the_cluster_is_refused(
    attacker: client.ApiClient, short_namespace: str, kind: str, url: str
) -> None:
    """Its host and port would join the attempt's egress, under `provider` too."""
    field, make = MCP_BODIES[kind]
    host = url.split("//")[1].split(":")[0].rstrip("/")
    message = denial(
        "mcp-servers",
        f'{field}.mcpServers[0].url: "{url}" points at {host}, an address MCP servers may not use in this cluster '
        "(loopback, link-local such as metadata services, private, shared or reserved: the node, pods and "
        "Services); use the server's public DNS name, or ask the platform team to allow it (chart value "
        "mcp.allowedCIDRs or mcp.allowedHosts)",
    )
    await_policy("mcp-servers", lambda: create(attacker, short_namespace, make(url), dry_run=True))
    status, text = refusal(attacker, short_namespace, make(url))
    assert status == 403 and text.endswith(message), text
    assert not exists(attacker, short_namespace, make(url))


def test_mcp_names_of_the_cluster_are_refused_and_public_servers_admitted(
    attacker: client.ApiClient, short_namespace: str
) -> None:
    _, make = MCP_BODIES["run"]
    status, text = refusal(attacker, short_namespace, make("http://kubernetes.default.svc/"))
    assert status == 403 and 'names host "kubernetes.default.svc"' in text, text
    status, text = refusal(
        attacker, short_namespace, make("http://2852039166/")
    )  # 169.254.169.254 as a number
    assert status == 403 and 'names host "2852039166"' in text, text
    body = make("https://mcp.example.com/mcp")
    create(attacker, short_namespace, body)
    assert exists(attacker, short_namespace, body)


# --- item 2b: the user label names the run's author ---------------------------------------------------

USER = "agentharness.dev/user"


def user_run(name: str, label: str | None, scope: str | None = "agentUser") -> dict[str, Any]:
    spec: dict[str, Any] = {"provider": "claude", "prompt": "hi"}
    if scope:
        spec["workspace"] = {"volume": {"scope": scope}}
    body = run_body(name, spec)
    if label is not None:
        body["metadata"]["labels"] = {USER: label}
    return body


def test_a_run_labelled_as_another_user_is_refused(attacker: client.ApiClient, short_namespace: str) -> None:
    """Else the run mounts that user's agentUser claim, and its earlier agents' files."""
    ns = short_namespace
    own = encode_user_label(user_of(ns))
    assert own is not None
    message = denial(
        "run-user",
        f'metadata.labels["{USER}"]: "alice" does not name the run\'s author; for user "{user_of(ns)}" it is '
        f'"{own}": set that, or leave the label out',
    )
    await_policy("run-user", lambda: create(attacker, ns, user_run("as-alice", "alice"), dry_run=True))
    status, text = refusal(attacker, ns, user_run("as-alice", "alice"))
    assert status == 403 and text.endswith(message), text
    assert not exists(attacker, ns, user_run("as-alice", "alice"))

    status, text = refusal(attacker, ns, user_run("unlabelled", None))
    assert status == 403 and text.endswith(
        denial(
            "run-user",
            "spec.workspace.volume.scope: agentUser keys the workspace claim on the run's author, named by the "
            f'label {USER}: add metadata.labels["{USER}"]: "{own}"',
        )
    ), text

    mine = user_run("mine", own)
    create(attacker, ns, mine)
    assert exists(attacker, ns, mine)
    custom = client.CustomObjectsApi(attacker)
    status, text = refused(
        lambda: custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "harnessruns", "mine", {"metadata": {"labels": {USER: "alice"}}}
        )
    )
    assert status == 403 and text.endswith(
        denial(
            "run-user",
            f'metadata.labels["{USER}"]: names the run\'s author, set when it is created; it may not be changed '
            f'or removed (it was "{own}"): create a new run instead',
        )
    ), text
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "harnessruns", "mine", {"metadata": {"labels": {"team": "a"}}}
    )


def test_a_schedules_runs_are_labelled_for_the_schedules_author_and_the_operator_creates_them(
    attacker: client.ApiClient,
    short_namespace: str,
    service_account_client: Callable[..., client.ApiClient],
) -> None:
    ns = short_namespace
    body = schedule_body(
        "nightly", {"provider": "claude", "prompt": "hi", "workspace": {"volume": {"scope": "agentUser"}}}
    )
    body["spec"]["runTemplate"]["metadata"] = {"labels": {USER: "alice"}}
    await_policy("run-user", lambda: create(attacker, ns, body, dry_run=True))
    status, text = refusal(attacker, ns, body)
    assert status == 403 and f'spec.runTemplate.metadata.labels["{USER}"]: "alice" does not name' in text, (
        text
    )
    own = encode_user_label(user_of(ns))
    body["spec"]["runTemplate"]["metadata"] = {"labels": {USER: own}}
    create(attacker, ns, body)
    operator = service_account_client(RELEASE_NAMESPACE, SERVICE_ACCOUNT)
    create(operator, ns, user_run("nightly-1", own))  # as the operator copies the template
    assert exists(attacker, ns, user_run("nightly-1", own))


def test_a_username_no_label_can_hold_cannot_use_agent_user(
    tenant: client.ApiClient,  # noqa: F811
    namespace: str,
) -> None:
    """The long test namespace makes the tenant's username too long for a label value once encoded."""
    user = user_of(namespace)
    assert encode_user_label(user) is None
    status, text = refusal(tenant, namespace, user_run("unencodable", None))
    assert status == 403 and text.endswith(
        denial(
            "run-user",
            "spec.workspace.volume.scope: agentUser keys the workspace claim on the run's author, named by the "
            f"label {USER}: user \"{user}\" cannot be written as a label value (letters, digits, '.', '-', "
            "'_', '@' and ':', at most 63 characters with '_' doubled, '@' as '_at_' and ':' as '_c_', a letter "
            "or digit at both ends); use scope run or agent, or a persistentVolumeClaim",
        )
    ), text
    create(tenant, namespace, user_run("per-run", None, scope="run"))


def test_a_run_may_not_name_another_users_shared_claim(
    attacker: client.ApiClient, short_namespace: str
) -> None:
    """The claim's name is predictable, and the author may get it: the run reaches it only by its scope."""
    ns = short_namespace
    claim = "harness-ws-claude-alice-0123abcd"
    body = run_body(
        "by-name",
        {
            "provider": "claude",
            "prompt": "hi",
            "workspace": {"volume": {"persistentVolumeClaim": {"claimName": claim}}},
        },
    )
    await_policy("run-user", lambda: create(attacker, ns, body, dry_run=True))
    status, text = refusal(attacker, ns, body)
    assert status == 403 and text.endswith(
        denial(
            "run-user",
            f'spec.workspace.volume.persistentVolumeClaim.claimName: "{claim}" is a shared workspace of the '
            "operator's (harness-ws-*: scope agent or agentUser), which a run reaches only through its scope: set "
            "workspace.volume.scope instead",
        )
    ), text
