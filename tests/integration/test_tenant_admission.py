"""Tenant isolation at the real API server, written as the attacks: a ServiceAccount that may create
HarnessRuns and read ConfigMaps, but not get Secrets, tries to have the operator read Secrets for it, to
place or replace its sandbox, to set loader variables, and to crash the runner with NUL bytes and
oversized prompts. The chart's ValidatingAdmissionPolicies and the CRD's CEL refuse each, naming the field;
a refused run does not exist, so nothing can run it. A HarnessSchedule's runs are created by the operator,
so its run template is judged for the schedule's author in the same way; a HarnessTrigger's token is sent
by the operator to the trigger's forge, so its Secrets are judged for the trigger's author."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.manifests import load_documents
from harness_operator.cli.validation import validate_documents

from .conftest import api_status, wait_until
from .operator_env import (
    RELEASE,
    RELEASE_NAMESPACE,
    ROOT,
    SERVICE_ACCOUNT,
    definition_body,
    helm_uninstall,
    install_chart_rbac_and_catalog,
    run_body,
)
from .test_crd_admission import apply_crds
from .test_rbac_scope import can_i

TENANT = "tenant"
IMAGE = "harness.local/sandbox-test:1"  # under the chart's default prefix, harness.local/
PLURALS = {
    "HarnessRun": "harnessruns",
    "HarnessDefinition": "harnessdefinitions",
    "HarnessSchedule": "harnessschedules",
    "HarnessTrigger": "harnesstriggers",
}


def denial(policy: str, message: str) -> str:
    return f"ValidatingAdmissionPolicy '{RELEASE}-{policy}' with binding '{RELEASE}-{policy}' denied request: {message}"


def create(api: client.ApiClient, namespace: str, body: dict[str, Any], dry_run: bool = False) -> None:
    extra = {"dry_run": "All"} if dry_run else {}
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURALS[body["kind"]], body, **extra
    )


def refusal(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> tuple[int, str]:
    """Create `body`; it must be refused. Returns the HTTP status and the API server's message."""
    with pytest.raises(ApiException) as caught:
        create(api, namespace, body)
    return caught.value.status, api_status(caught.value).get("message", "")


def exists(kube: client.ApiClient, namespace: str, body: dict[str, Any]) -> bool:
    try:
        client.CustomObjectsApi(kube).get_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURALS[body["kind"]], body["metadata"]["name"]
        )
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def schedule_body(name: str, run_spec: dict[str, Any]) -> dict[str, Any]:
    """A schedule that would create a run of `run_spec` nightly (no operator runs here: only admission)."""
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessSchedule",
        "metadata": {"name": name},
        "spec": {"schedule": "0 2 * * *", "runTemplate": {"spec": run_spec}},
    }


def refused_by_policy(api: client.ApiClient, body: dict[str, Any], policy: str) -> bool:
    """True once the named policy refuses a dry-run create of `body` (policies take effect shortly after
    they are created)."""
    try:
        create(api, "default", body, dry_run=True)
    except ApiException as exc:
        return f"ValidatingAdmissionPolicy '{RELEASE}-{policy}'" in api_status(exc).get("message", "")
    return False


@pytest.fixture(scope="module")
def chart(kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path) -> Iterator[None]:
    """The current CRDs and the chart with its default values (the operator itself is not needed: only
    admission is under test), removed again at the end."""
    apply_crds(kube)
    install_chart_rbac_and_catalog(cluster_bin_dir, kubeconfig_path)
    placed = run_body("probe", {"provider": "p", "prompt": "hi", "sandbox": {"tolerations": [{"key": "k"}]}})
    foreign = definition_body("probe", "elsewhere.internal/agent:1", "ok")
    scheduled = schedule_body(
        "probe", {"provider": "p", "prompt": "hi", "sandbox": {"tolerations": [{"key": "k"}]}}
    )
    for body, policy in ((placed, "runs"), (foreign, "definitions"), (scheduled, "schedules")):
        wait_until(
            lambda b=body, p=policy: refused_by_policy(kube, b, p), timeout=30, what=f"the {policy} policy"
        )
    yield
    helm_uninstall(cluster_bin_dir, kubeconfig_path)


@pytest.fixture
def tenant(
    chart: None,
    kube: client.ApiClient,
    namespace: str,
    service_account_client: Callable[..., client.ApiClient],
) -> client.ApiClient:
    """A ServiceAccount that may create runs, definitions and schedules and read ConfigMaps; of the Secrets
    it may get only `own-key`. The namespace holds `victim` (a Secret it may not get) and `own-key`."""
    core = client.CoreV1Api(kube)
    rbac = client.RbacAuthorizationV1Api(kube)
    for secret in ("victim", "own-key"):
        core.create_namespaced_secret(
            namespace, client.V1Secret(metadata=client.V1ObjectMeta(name=secret), string_data={"k": "s3cr3t"})
        )
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata={"name": TENANT}))
    rules = [
        client.V1PolicyRule(
            api_groups=[GROUP],
            resources=["harnessruns", "harnessdefinitions", "harnessschedules", "harnesstriggers"],
            verbs=["create", "get", "list", "patch"],
        ),
        client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"]),
        client.V1PolicyRule(
            api_groups=[""], resources=["secrets"], verbs=["get"], resource_names=["own-key"]
        ),
    ]
    rbac.create_namespaced_role(namespace, client.V1Role(metadata={"name": TENANT}, rules=rules))
    bind(kube, namespace, TENANT)
    wait_allowed(kube, namespace, "create", "harnessruns", GROUP)
    wait_allowed(kube, namespace, "create", "harnessschedules", GROUP)
    return service_account_client(namespace, TENANT)


def bind(kube: client.ApiClient, namespace: str, role: str) -> None:
    client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata={"name": role},
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=role),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=TENANT, namespace=namespace)],
        ),
    )


def assert_read_refused(
    kube: client.ApiClient,
    tenant: client.ApiClient,
    namespace: str,
    body: dict[str, Any],
    policy: str,
    field: str,
    hint: str,
) -> None:
    """The tenant's create of `body` is refused by `policy` (403), naming `field`, the Secret "victim" the
    tenant may not get and the `hint`; nothing is created."""
    status, message = refusal(tenant, namespace, body)
    assert status == 403
    user = f"system:serviceaccount:{namespace}:{TENANT}"
    assert message.endswith(
        denial(
            policy, f'{field}: user "{user}" may not get Secret "victim" in namespace "{namespace}"; {hint}'
        )
    ), message
    assert not exists(kube, namespace, body)


def assert_admitted_once_granted(
    kube: client.ApiClient, tenant: client.ApiClient, namespace: str, body: dict[str, Any], what: str
) -> None:
    """Once the tenant may get the Secret "victim", the same `body` is admitted."""
    grant_get(kube, namespace, "victim")
    wait_until(lambda: create(tenant, namespace, body) or True, timeout=30, what=what)
    assert exists(kube, namespace, body)


def wait_allowed(
    kube: client.ApiClient, namespace: str, verb: str, resource: str, group: str = "", name: str = ""
) -> None:
    """Wait until the API server's authorizer sees a new binding: it reads RBAC from a watch cache, so a
    request right after the binding's create can still be forbidden."""
    user = f"system:serviceaccount:{namespace}:{TENANT}"
    wait_until(
        lambda: can_i(kube, user, verb, resource, namespace, group, name),
        timeout=30,
        what=f"{TENANT} may {verb} {resource}",
    )


def grant_get(kube: client.ApiClient, namespace: str, secret: str) -> None:
    """What the tenant's admin would do: allow get on that one Secret."""
    role = f"get-{secret}"
    client.RbacAuthorizationV1Api(kube).create_namespaced_role(
        namespace,
        client.V1Role(
            metadata={"name": role},
            rules=[
                client.V1PolicyRule(
                    api_groups=[""], resources=["secrets"], verbs=["get"], resource_names=[secret]
                )
            ],
        ),
    )
    bind(kube, namespace, role)
    wait_allowed(kube, namespace, "get", "secrets", name=secret)


VICTIM = {"name": "victim", "key": "k"}
SECRET_READS = [
    ("spec.promptFrom.secretKeyRef", {"promptFrom": {"secretKeyRef": VICTIM}}, "ask for get on it"),
    (
        "spec.stdinFrom.secretKeyRef",
        {"prompt": "echo", "stdinFrom": {"secretKeyRef": VICTIM}},
        "ask for get on it",
    ),
    (
        "spec.credentials[1].secretKeyRef",
        {
            "prompt": "echo $TOKEN",
            "credentials": [
                {"env": "OWN", "secretKeyRef": {"name": "own-key", "key": "k"}},
                {"env": "TOKEN", "secretKeyRef": VICTIM},
            ],
        },
        "ask for get on it or use a definition's grant",
    ),
    (
        "spec.inputs[1].secretKeyRef",
        {
            "prompt": "use $(inputs.b)",
            "inputs": [{"name": "a", "value": "x"}, {"name": "b", "secretKeyRef": VICTIM}],
        },
        "ask for get on it",
    ),
    (
        "spec.workspace.git.credentialsSecretRef",
        {
            "prompt": "push",
            "workspace": {"git": {"url": "https://git.internal/r.git", "credentialsSecretRef": VICTIM}},
        },
        "ask for get on it",
    ),
]


@pytest.mark.parametrize(("field", "spec", "hint"), SECRET_READS, ids=[f for f, _, _ in SECRET_READS])
def test_a_run_may_name_only_secrets_its_author_may_get(
    kube: client.ApiClient,
    tenant: client.ApiClient,
    namespace: str,
    field: str,
    spec: dict[str, Any],
    hint: str,
) -> None:
    """The confused deputy: the operator reads Secrets with its own rights, so the run's author must
    have them. Once granted get on that one Secret, the same run is admitted."""
    body = run_body("steal", {"provider": "claude", **spec})
    assert_read_refused(kube, tenant, namespace, body, "runs", field, hint)

    assert_admitted_once_granted(kube, tenant, namespace, body, "the run admitted once granted")


def test_references_the_author_may_read_are_admitted(
    kube: client.ApiClient, tenant: client.ApiClient, namespace: str
) -> None:
    """The check is on rights, not on references: ConfigMaps (readable) and runs' outputs pass."""
    create(
        tenant,
        namespace,
        run_body(
            "from-cm", {"provider": "claude", "promptFrom": {"configMapKeyRef": {"name": "p", "key": "k"}}}
        ),
    )
    chained = run_body("chained", {"provider": "claude", "promptFrom": {"runOutput": {"name": "from-cm"}}})
    create(tenant, namespace, chained)
    assert exists(kube, namespace, chained)
    resumed = run_body("resumed", {"provider": "claude", "prompt": "go on", "resumeFrom": {"run": "from-cm"}})
    create(tenant, namespace, resumed)
    assert exists(kube, namespace, resumed)


@pytest.mark.parametrize("make_body", [run_body, schedule_body], ids=["run", "schedule"])
def test_a_definitions_grant_stays_allowed(
    kube: client.ApiClient,
    tenant: client.ApiClient,
    namespace: str,
    make_body: Callable[[str, dict[str, Any]], dict[str, Any]],
) -> None:
    """The platform team's definition grants a Secret the run's author cannot read: its choice. As for a
    run, so for a schedule: the check is on what the template names, not on what its provider grants."""
    create(
        kube,
        namespace,
        definition_body("granted", IMAGE, "ok", credentials=[{"env": "TOKEN", "secretKeyRef": VICTIM}]),
    )
    body = make_body("uses-grant", {"provider": "granted", "prompt": "hi"})
    create(tenant, namespace, body)
    assert exists(kube, namespace, body)


def test_a_definition_may_grant_only_secrets_its_author_may_get(
    kube: client.ApiClient, tenant: client.ApiClient, namespace: str
) -> None:
    """Else a tenant defines a provider granting the Secret, then runs it."""
    body = definition_body("smuggle", IMAGE, "ok", credentials=[{"env": "TOKEN", "secretKeyRef": VICTIM}])
    field = "spec.credentials[0].secretKeyRef"
    hint = "ask for get on it: a definition grants only Secrets its author may read"
    assert_read_refused(kube, tenant, namespace, body, "definitions", field, hint)


def test_cancel_metadata_and_status_updates_are_not_judged_again(
    kube: client.ApiClient,
    tenant: client.ApiClient,
    namespace: str,
    service_account_client: Callable[..., client.ApiClient],
) -> None:
    """A run admitted for its author (here an admin) stays cancellable by a tenant who may patch runs but
    not read its Secret, and the operator's own writes (kopf's annotations, status) always pass."""
    create(
        kube,
        namespace,
        run_body(
            "admitted",
            {"provider": "claude", "prompt": "hi", "credentials": [{"env": "T", "secretKeyRef": VICTIM}]},
        ),
    )
    custom = client.CustomObjectsApi(tenant)
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessruns", "admitted", {"spec": {"cancel": True}}
    )
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessruns", "admitted", {"metadata": {"labels": {"team": "a"}}}
    )
    operator = client.CustomObjectsApi(service_account_client(RELEASE_NAMESPACE, SERVICE_ACCOUNT))
    operator.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "harnessruns",
        "admitted",
        {"metadata": {"annotations": {f"{GROUP}/probe": "x"}}},
    )
    operator.patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "harnessruns", "admitted", {"status": {"phase": "Cancelled"}}
    )
    run = client.CustomObjectsApi(kube).get_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessruns", "admitted"
    )
    assert run["spec"]["cancel"] is True
    assert run["metadata"]["labels"] == {"team": "a"}
    assert run["status"]["phase"] == "Cancelled"


SCHEDULE_READS = [
    (
        "spec.runTemplate.spec.credentials[0].secretKeyRef",
        {"prompt": "echo $TOKEN", "credentials": [{"env": "TOKEN", "secretKeyRef": VICTIM}]},
        "ask for get on it or use a definition's grant",
    ),
    (
        "spec.runTemplate.spec.promptFrom.secretKeyRef",
        {"promptFrom": {"secretKeyRef": VICTIM}},
        "ask for get on it",
    ),
]


@pytest.mark.parametrize(("field", "spec", "hint"), SCHEDULE_READS, ids=[f for f, _, _ in SCHEDULE_READS])
def test_a_schedules_run_template_may_name_only_secrets_its_author_may_get(
    kube: client.ApiClient,
    tenant: client.ApiClient,
    namespace: str,
    field: str,
    spec: dict[str, Any],
    hint: str,
) -> None:
    """The operator's ServiceAccount creates a schedule's runs, and may get any Secret, so the runs
    policy would pass them all: the template is judged for the schedule's author when it is applied."""
    body = schedule_body("nightly-steal", {"provider": "claude", **spec})
    assert_read_refused(kube, tenant, namespace, body, "schedules", field, hint)

    assert_admitted_once_granted(kube, tenant, namespace, body, "the schedule admitted once granted")


def test_a_schedules_spec_changes_are_judged_and_its_metadata_and_status_are_not(
    kube: client.ApiClient,
    tenant: client.ApiClient,
    namespace: str,
    service_account_client: Callable[..., client.ApiClient],
) -> None:
    """An update is judged as a create: a tenant cannot slip the Secret into a schedule admitted without
    it, nor take over (here: reschedule or resume) an admin's schedule that names a Secret it may not
    get. Labels, a suspend and the operator's status writes (under the chart's RBAC) always pass."""
    user = f"system:serviceaccount:{namespace}:{TENANT}"
    custom = client.CustomObjectsApi(tenant)
    create(tenant, namespace, schedule_body("own", {"provider": "claude", "prompt": "hi"}))
    smuggled = {"spec": {"runTemplate": {"spec": {"credentials": [{"env": "T", "secretKeyRef": VICTIM}]}}}}
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, "harnessschedules", "own", smuggled)
    assert caught.value.status == 403
    assert api_status(caught.value)["message"].endswith(
        denial(
            "schedules",
            f'spec.runTemplate.spec.credentials[0].secretKeyRef: user "{user}" may not get Secret "victim" in '
            f'namespace "{namespace}"; ask for get on it or use a definition\'s grant',
        )
    )

    create(
        kube,
        namespace,
        schedule_body(
            "admins",
            {"provider": "claude", "prompt": "hi", "credentials": [{"env": "T", "secretKeyRef": VICTIM}]},
        ),
    )
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "harnessschedules", "admins", {"spec": {"schedule": "* * * * *"}}
        )
    assert caught.value.status == 403
    assert f'may not get Secret "victim" in namespace "{namespace}"' in api_status(caught.value)["message"]
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessschedules", "admins", {"metadata": {"labels": {"team": "a"}}}
    )
    # Stopping it is never blocked; resuming it is judged as a create.
    custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessschedules", "admins", {"spec": {"suspend": True}}
    )
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, "harnessschedules", "admins", {"spec": {"suspend": False}}
        )
    assert f'may not get Secret "victim" in namespace "{namespace}"' in api_status(caught.value)["message"]
    operator = client.CustomObjectsApi(service_account_client(RELEASE_NAMESPACE, SERVICE_ACCOUNT))
    operator.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "harnessschedules",
        "admins",
        {"status": {"lastScheduleTime": "2025-01-01T02:00:00Z"}},
    )
    stored = {
        name: client.CustomObjectsApi(kube).get_namespaced_custom_object(
            GROUP, VERSION, namespace, "harnessschedules", name
        )
        for name in ("own", "admins")
    }
    assert "credentials" not in stored["own"]["spec"]["runTemplate"]["spec"]
    assert stored["admins"]["spec"]["schedule"] == "0 2 * * *"
    assert stored["admins"]["metadata"]["labels"] == {"team": "a"}
    assert stored["admins"]["spec"]["suspend"] is True
    assert stored["admins"]["status"]["lastScheduleTime"] == "2025-01-01T02:00:00Z"


def test_nul_bytes_in_a_schedules_with_are_refused(
    kube: client.ApiClient, tenant: client.ApiClient, namespace: str
) -> None:
    body = schedule_body(
        "nul",
        {"provider": "claude", "prompt": "hi", "fallback": [{"provider": "codex", "with": {"m": "a\0b"}}]},
    )
    status, got = refusal(tenant, namespace, body)
    assert status == 422
    assert got.endswith(
        denial(
            "schedules",
            "spec.runTemplate.spec.fallback[0].with: keys and values must not contain a NUL character (a "
            "command-line argument cannot carry one); a key is at most 253 characters, a string at most 8192, "
            "a list at most 64 items",
        )
    ), got
    assert not exists(kube, namespace, body)


ENV_REFUSED = (
    "is refused in this cluster (chart value admission.deniedEnvNames): it changes what code the sandbox runs "
    "(dynamic loader, interpreter, shell or git), not how the agent behaves"
)
PLACEMENT = "in this cluster (chart value admission.runsMaySet.{0}); sandbox placement is the platform team's"
GUARDRAILS = [
    (
        "run-image",
        run_body(
            "x", {"provider": "claude", "prompt": "hi", "sandbox": {"image": "elsewhere.internal/miner:1"}}
        ),
        "runs",
        'spec.sandbox.image: image "elsewhere.internal/miner:1" is not allowed in this cluster; it must start '
        'with "harness.local/" (chart value admission.allowedImagePrefixes)',
    ),
    (
        "run-tolerations",
        run_body(
            "x", {"provider": "claude", "prompt": "hi", "sandbox": {"tolerations": [{"operator": "Exists"}]}}
        ),
        "runs",
        "spec.sandbox.tolerations: runs may not set tolerations " + PLACEMENT.format("tolerations"),
    ),
    (
        "run-node-selector",
        run_body("x", {"provider": "claude", "prompt": "hi", "sandbox": {"nodeSelector": {"pool": "gpu"}}}),
        "runs",
        "spec.sandbox.nodeSelector: runs may not set nodeSelector " + PLACEMENT.format("nodeSelector"),
    ),
    (
        "run-runtime-class",
        run_body(
            "x", {"provider": "claude", "prompt": "hi", "sandbox": {"runtimeClassName": "runc-privileged"}}
        ),
        "runs",
        "spec.sandbox.runtimeClassName: runs may not set runtimeClassName "
        + PLACEMENT.format("runtimeClassName"),
    ),
    (
        "run-env",
        run_body(
            "x",
            {
                "provider": "claude",
                "prompt": "hi",
                "env": [{"name": "MODE", "value": "a"}, {"name": "LD_PRELOAD", "value": "/tmp/x.so"}],
            },
        ),
        "runs",
        f'spec.env[1].name: "LD_PRELOAD" {ENV_REFUSED}',
    ),
    (
        "run-credential-env",
        run_body(
            "x",
            {
                "provider": "claude",
                "prompt": "hi",
                "credentials": [{"env": "NODE_OPTIONS", "secretKeyRef": {"name": "own-key", "key": "k"}}],
            },
        ),
        "runs",
        f'spec.credentials[0].env: "NODE_OPTIONS" {ENV_REFUSED}',
    ),
    (
        "schedule-image",
        schedule_body(
            "x", {"provider": "claude", "prompt": "hi", "sandbox": {"image": "elsewhere.internal/miner:1"}}
        ),
        "schedules",
        'spec.runTemplate.spec.sandbox.image: image "elsewhere.internal/miner:1" is not allowed in this cluster; '
        'it must start with "harness.local/" (chart value admission.allowedImagePrefixes)',
    ),
    (
        "schedule-tolerations",
        schedule_body(
            "x", {"provider": "claude", "prompt": "hi", "sandbox": {"tolerations": [{"operator": "Exists"}]}}
        ),
        "schedules",
        "spec.runTemplate.spec.sandbox.tolerations: runs may not set tolerations "
        + PLACEMENT.format("tolerations"),
    ),
    (
        "schedule-env",
        schedule_body(
            "x",
            {"provider": "claude", "prompt": "hi", "env": [{"name": "LD_PRELOAD", "value": "/tmp/x.so"}]},
        ),
        "schedules",
        f'spec.runTemplate.spec.env[0].name: "LD_PRELOAD" {ENV_REFUSED}',
    ),
    (
        "definition-image",
        definition_body("x", "elsewhere.internal/agent:1", "ok"),
        "definitions",
        'spec.image: image "elsewhere.internal/agent:1" is not allowed in this cluster; it must start with '
        '"harness.local/" (chart value admission.allowedImagePrefixes)',
    ),
    (
        "definition-env",
        definition_body("x", IMAGE, "ok", env=[{"name": "PYTHONPATH", "value": "/workspace/evil"}]),
        "definitions",
        f'spec.env[0].name: "PYTHONPATH" {ENV_REFUSED}',
    ),
    (
        "definition-credential-env",
        definition_body(
            "x",
            IMAGE,
            "ok",
            credentials=[{"env": "GIT_CONFIG_COUNT", "secretKeyRef": {"name": "own-key", "key": "k"}}],
        ),
        "definitions",
        f'spec.credentials[0].env: "GIT_CONFIG_COUNT" {ENV_REFUSED}',
    ),
    (
        "definition-model-route-env",
        definition_body(
            "x",
            IMAGE,
            "ok",
            modelRoute={
                "vendor": "anthropic",
                "env": [
                    {"name": "ANTHROPIC_API_KEY", "value": "$(HARNESS_MODEL_GATEWAY_TOKEN)"},
                    {"name": "LD_PRELOAD", "value": "/workspace/evil.so"},
                ],
            },
        ),
        "definitions",
        f'spec.modelRoute.env[1].name: "LD_PRELOAD" {ENV_REFUSED}',
    ),
]


@pytest.mark.parametrize(
    ("body", "policy", "message"), [g[1:] for g in GUARDRAILS], ids=[g[0] for g in GUARDRAILS]
)
def test_guardrails_refuse_what_the_platform_did_not_allow(
    kube: client.ApiClient,
    tenant: client.ApiClient,
    namespace: str,
    body: dict[str, Any],
    policy: str,
    message: str,
) -> None:
    status, got = refusal(tenant, namespace, body)
    assert status == 403
    assert got.endswith(denial(policy, message)), got
    assert not exists(kube, namespace, body)


def test_what_the_guardrails_allow_is_admitted(
    kube: client.ApiClient, tenant: client.ApiClient, namespace: str
) -> None:
    create(tenant, namespace, definition_body("own", IMAGE, "ok", env=[{"name": "MODE", "value": "fast"}]))
    body = run_body(
        "allowed",
        {
            "provider": "own",
            "prompt": "hi",
            "sandbox": {"image": IMAGE},
            "env": [{"name": "LOG_LEVEL", "value": "debug"}],
        },
    )
    create(tenant, namespace, body)
    assert exists(kube, namespace, body)
    schedule = schedule_body("allowed", body["spec"])
    create(tenant, namespace, schedule)
    assert exists(kube, namespace, schedule)


NAME = "(a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit; no '/')"
CEL_REFUSALS = [
    (
        "secret-in-other-namespace",
        {"promptFrom": {"secretKeyRef": {"name": "kube-system/bootstrap", "key": "k"}}},
        f'spec.promptFrom.secretKeyRef.name: Invalid value: "string": must be a valid Secret name {NAME}',
    ),
    (
        "run-output-path",
        {"promptFrom": {"runOutput": {"name": "rt-b/../x"}}},
        f'spec.promptFrom.runOutput.name: Invalid value: "string": must be a valid HarnessRun name {NAME}',
    ),
    (
        "nul-in-prompt",
        {"prompt": "hi\0--dangerously-skip-permissions"},
        'spec.prompt: Invalid value: "string": must not contain a NUL character',
    ),
    (
        "nul-in-stdin",
        {"prompt": "hi", "stdin": "a\0b"},
        'spec.stdin: Invalid value: "string": must not contain a NUL character',
    ),
]


@pytest.mark.parametrize(("spec", "message"), [c[1:] for c in CEL_REFUSALS], ids=[c[0] for c in CEL_REFUSALS])
def test_the_crd_refuses_paths_in_names_and_nul_bytes(
    kube: client.ApiClient, tenant: client.ApiClient, namespace: str, spec: dict[str, Any], message: str
) -> None:
    body = run_body("bad", {"provider": "claude", **spec})
    status, got = refusal(tenant, namespace, body)
    assert status == 422
    assert message in got, got
    assert not exists(kube, namespace, body)


def admission_documents() -> list[Any]:
    docs = load_documents([str(ROOT / "tests" / "fixtures" / "bad-manifests" / "admission.yaml")])
    return [pytest.param(d, id=d.name) for d in docs]


@pytest.mark.parametrize("doc", admission_documents())
def test_nul_bytes_in_with_are_refused_as_validate_says(
    kube: client.ApiClient, tenant: client.ApiClient, namespace: str, doc: Any
) -> None:
    """The CRD cannot see `with`'s keys; the policy refuses NUL there with `harnessctl validate`'s words."""
    (finding,) = [f for f in validate_documents([doc], load_builtin_catalog()) if f.severity == "error"]
    body = {**doc.obj, "metadata": {"name": doc.name}}
    status, got = refusal(tenant, namespace, body)
    assert status == 422
    assert got.endswith(denial("runs", f"{finding.field}: {finding.message}")), got
    assert not exists(kube, namespace, body)


def kubectl_apply(bin_dir: Path, kubeconfig: str, manifest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir / "kubectl"), "--kubeconfig", kubeconfig, "apply", "-f", str(manifest)],
        capture_output=True,
        text=True,
        check=False,
    )


def write_run(path: Path, namespace: str, **spec: str) -> Path:
    path.write_text(
        json.dumps(
            {
                **run_body("big", {"provider": "claude", **spec}),
                "metadata": {"name": "big", "namespace": namespace},
            }
        )
    )
    return path


def source_text(size: int) -> str:
    """Real code (this repository's), as prompts often are: quotes, newlines, '<' and '&' to escape."""
    text = "".join(
        p.read_text() for p in sorted((ROOT / "operator" / "harness_operator" / "core").rglob("*.py"))
    )
    # `size` bytes, as the limits count them: the code holds non-ASCII characters too (a '·'), so the cut is
    # by bytes, a character split at the end dropped and made up with ASCII.
    cut = (text * (size // len(text) + 1)).encode()[:size].decode("utf-8", "ignore")
    return cut + "x" * (size - len(cut.encode()))


def test_a_prompt_at_the_maximum_applies(
    chart: None,
    namespace: str,
    cluster_bin_dir: Path,
    kubeconfig_path: str,
    tmp_path: Path,
) -> None:
    """`kubectl apply` keeps a copy in its annotation: at the old maximum the apply was refused. Now a
    131072-byte prompt of real code applies (and the operator writes no annotation on runs: kopf, whose
    diff base once pushed such a run past 256 KiB of annotations, handles no run)."""
    manifest = write_run(tmp_path / "max.json", namespace, prompt=source_text(131072))
    applied = kubectl_apply(cluster_bin_dir, kubeconfig_path, manifest)
    assert applied.returncode == 0, applied.stderr


def test_a_with_at_the_maximum_is_admitted_and_one_key_more_is_not(
    chart: None, tenant: client.ApiClient, namespace: str
) -> None:
    """A red team's 740 KB `with` once pushed kopf's diff base past the 256 KiB of annotations. Now
    `with` is bounded (64 keys, strings of 8192 characters): a run at the maximum (512 KiB of options) is
    admitted, and one key more is refused by the CRD, naming the field."""
    options = {f"option_{i:02d}": source_text(8192) for i in range(64)}
    body = run_body("wide", {"provider": "claude", "prompt": "p", "with": options})
    custom = client.CustomObjectsApi(tenant)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", body)
    body = run_body("wider", {"provider": "claude", "prompt": "p", "with": {**options, "one_more": "x"}})
    with pytest.raises(ApiException) as caught:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", body)
    assert "spec.with: Too many: 65: must have at most 64 items" in api_status(caught.value)["message"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"prompt": "a" * 131073}, "spec.prompt: Too long: may not be more than 131072"),
        (
            {"prompt": "a" * 100000, "stdin": "b" * 40000},
            "spec.prompt and spec.stdin together must be at most 131072 bytes, what kubectl apply can carry; put "
            "larger input in a ConfigMap and use spec.promptFrom or spec.stdinFrom",
        ),
        (
            {"prompt": "é" * 70000},
            "spec.prompt and spec.stdin together must be at most 131072 bytes",
        ),
    ],
    ids=["prompt-over-maximum", "prompt-and-stdin-together", "multibyte-prompt"],
)
def test_an_oversized_prompt_is_refused_at_apply(
    chart: None,
    kube: client.ApiClient,
    namespace: str,
    cluster_bin_dir: Path,
    kubeconfig_path: str,
    tmp_path: Path,
    spec: dict[str, str],
    message: str,
) -> None:
    applied = kubectl_apply(
        cluster_bin_dir, kubeconfig_path, write_run(tmp_path / "big.json", namespace, **spec)
    )
    assert applied.returncode != 0
    assert message in applied.stderr, applied.stderr
    assert not exists(kube, namespace, run_body("big", {}))


def trigger_body(
    name: str, token: str, webhook: str, run_spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A trigger whose reporting token the operator would send to a forge of its author's choosing."""
    forge = {
        "type": "gitea",
        "url": "http://collector.example:3000",
        "webhookSecretRef": {"name": webhook, "key": "k"},
        "tokenSecretRef": {"name": token, "key": "k"},
    }
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessTrigger",
        "metadata": {"name": name},
        "spec": {
            "forge": forge,
            "repositories": ["acme/app"],
            "serviceAccountName": "agent-trigger",
            "events": [{"type": "IssueLabeled", "label": "agent"}],
            "authors": {"users": ["alice"]},
            "runTemplate": {"spec": run_spec or {"provider": "claude", "prompt": "Fix #$(event.number)"}},
        },
    }


@pytest.mark.parametrize(
    ("field", "token", "webhook"),
    [
        ("spec.forge.tokenSecretRef", "victim", "own-key"),
        ("spec.forge.webhookSecretRef", "own-key", "victim"),
    ],
)
def test_a_trigger_may_name_only_secrets_its_author_may_get(
    kube: client.ApiClient, tenant: client.ApiClient, namespace: str, field: str, token: str, webhook: str
) -> None:
    wait_allowed(kube, namespace, "create", "harnesstriggers", GROUP)
    body = trigger_body("steal", token, webhook)
    hint = (
        "ask for get on it: the operator sends this token to spec.forge.url"
        if token == "victim"
        else ("ask for get on it")
    )
    assert_read_refused(kube, tenant, namespace, body, "trigger-secrets", field, hint)
    # A trigger of pipelines only (no run template) is held to the same.
    piped = trigger_body("steal-piped", token, webhook)
    steps = [{"name": "fix", "run": piped["spec"].pop("runTemplate")}]
    piped["spec"]["pipelineTemplate"] = {"spec": {"serviceAccountName": TENANT, "steps": steps}}  # itself
    assert_read_refused(kube, tenant, namespace, piped, "trigger-secrets", field, hint)
    create(tenant, namespace, trigger_body("own", "own-key", "own-key"))
    assert exists(kube, namespace, trigger_body("own", "own-key", "own-key"))


@pytest.mark.parametrize(("field", "spec", "hint"), SCHEDULE_READS, ids=[f for f, _, _ in SCHEDULE_READS])
def test_a_triggers_run_template_may_name_only_secrets_its_author_may_get(
    kube: client.ApiClient,
    tenant: client.ApiClient,
    namespace: str,
    field: str,
    spec: dict[str, Any],
    hint: str,
) -> None:
    """A trigger's runs are judged as its ServiceAccount's at each delivery; its template is judged as a
    schedule's is, for the trigger's author when it is applied: refused at apply, not at each delivery."""
    wait_allowed(kube, namespace, "create", "harnesstriggers", GROUP)
    body = trigger_body("steal-template", "own-key", "own-key", {"provider": "claude", **spec})
    assert_read_refused(kube, tenant, namespace, body, "triggers", field, hint)
    assert_admitted_once_granted(kube, tenant, namespace, body, "the trigger admitted once granted")


def test_a_triggers_run_template_may_not_name_a_shared_workspace_claim(
    kube: client.ApiClient, tenant: client.ApiClient, namespace: str
) -> None:
    wait_allowed(kube, namespace, "create", "harnesstriggers", GROUP)
    claim = "harness-ws-claude-alice-0123abcd"
    spec = {
        "provider": "claude",
        "prompt": "hi",
        "workspace": {"volume": {"persistentVolumeClaim": {"claimName": claim}}},
    }
    # Even an author who may get the claim by name (the triggers policy's check) may not name it.
    client.RbacAuthorizationV1Api(kube).create_namespaced_role(
        namespace,
        client.V1Role(
            metadata={"name": "get-claim"},
            rules=[
                client.V1PolicyRule(
                    api_groups=[""],
                    resources=["persistentvolumeclaims"],
                    verbs=["get"],
                    resource_names=[claim],
                )
            ],
        ),
    )
    bind(kube, namespace, "get-claim")
    wait_allowed(kube, namespace, "get", "persistentvolumeclaims", name=claim)
    status, message = refusal(tenant, namespace, trigger_body("reach", "own-key", "own-key", spec))
    assert status == 403
    assert f"ValidatingAdmissionPolicy '{RELEASE}-run-user'" in message, message
    assert (
        f'spec.runTemplate.spec.workspace.volume.persistentVolumeClaim.claimName: "{claim}" is a shared '
        "workspace of the operator's"
    ) in message, message
    # A template label naming someone is not judged: the receiver replaces it with the ServiceAccount's.
    labelled = trigger_body("labelled", "own-key", "own-key")
    labelled["spec"]["runTemplate"]["metadata"] = {"labels": {"agentharness.dev/user": "someone-else"}}
    create(tenant, namespace, labelled)
    assert exists(kube, namespace, labelled)
