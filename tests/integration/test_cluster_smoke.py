"""Smoke test: the test cluster is a real Kubernetes, not a fake.

Covers what an operator must get right and a fake API server would not
check: CRD schemas with CEL rules, the status subresource, the Job
controller running a locally built image on a real kubelet (logs and
termination message), Pod Security admission, owner-reference garbage
collection and RBAC.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.integration.conftest import api_status, describe_namespace, wait_until

GROUP = "smoke.harness.local"
PLURAL = "widgets"
VERSION = "v1"
CRD_NAME = f"{PLURAL}.{GROUP}"

RESTRICTED_CONTAINER_SECURITY = client.V1SecurityContext(
    run_as_non_root=True,
    run_as_user=65532,
    run_as_group=65532,
    allow_privilege_escalation=False,
    read_only_root_filesystem=True,
    capabilities=client.V1Capabilities(drop=["ALL"]),
    seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault"),
)


def _widget_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {
                                        "size": {"type": "integer"},
                                        "color": {"type": "string"},
                                    },
                                    "x-kubernetes-validations": [
                                        {"rule": "self.size <= 10", "message": "size must be at most 10"}
                                    ],
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"observedSize": {"type": "integer"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def widget_crd(kube: client.ApiClient) -> Iterator[str]:
    ext = client.ApiextensionsV1Api(kube)
    try:
        ext.create_custom_resource_definition(_widget_crd())
    except ApiException as exc:
        if exc.status != 409:
            raise

    def established() -> bool:
        crd = ext.read_custom_resource_definition(CRD_NAME)
        conditions = crd.status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_until(established, timeout=30, what=f"CRD {CRD_NAME} Established")
    yield CRD_NAME
    ext.delete_custom_resource_definition(CRD_NAME)


def _widget(name: str, size: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size, "color": "blue"},
    }
    if status is not None:
        body["status"] = status
    return body


def test_crd_cel_rule_rejects_bad_input(kube: client.ApiClient, namespace: str, widget_crd: str) -> None:
    custom = client.CustomObjectsApi(kube)
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, _widget("too-big", 11))
    assert info.value.status == 422
    assert "size must be at most 10" in api_status(info.value)["message"]

    with pytest.raises(ApiException) as info:  # plain OpenAPI schema: wrong type
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, {**_widget("bad-type", 1), "spec": {"size": "big"}}
        )
    assert info.value.status == 422


def test_status_subresource_is_separate_from_spec(
    kube: client.ApiClient, namespace: str, widget_crd: str
) -> None:
    custom = client.CustomObjectsApi(kube)
    args = (GROUP, VERSION, namespace, PLURAL)

    # status in a create through the main endpoint is dropped
    created = custom.create_namespaced_custom_object(*args, _widget("w", 3, status={"observedSize": 99}))
    assert "status" not in created or not created["status"]
    generation = created["metadata"]["generation"]

    # status written through the status subresource; spec and generation untouched
    patched = custom.patch_namespaced_custom_object_status(*args, "w", {"status": {"observedSize": 3}})
    assert patched["status"] == {"observedSize": 3}
    assert patched["metadata"]["generation"] == generation

    # a spec change through the main endpoint (even one carrying a status) leaves status alone
    current = custom.get_namespaced_custom_object(*args, "w")
    current["spec"]["size"] = 5
    current["status"] = {"observedSize": 1234}
    replaced = custom.replace_namespaced_custom_object(*args, "w", current)
    assert replaced["spec"]["size"] == 5
    assert replaced["status"] == {"observedSize": 3}
    assert replaced["metadata"]["generation"] == generation + 1

    # and the status endpoint ignores spec changes
    current = custom.get_namespaced_custom_object(*args, "w")
    current["spec"]["size"] = 7
    current["status"] = {"observedSize": 5}
    after = custom.replace_namespaced_custom_object_status(*args, "w", current)
    assert after["spec"]["size"] == 5
    assert after["status"] == {"observedSize": 5}


# Runs on the node as uid 65532 with a read-only root filesystem; prints what a
# sandbox runner would and reports through the termination message.
JOB_SCRIPT = r"""
import json, os
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
print("hello from the node", flush=True)
print("uid", os.getuid(), "seccomp", status["Seccomp"].strip(), flush=True)
try:
    open("/should-fail", "w")
    print("root filesystem writable", flush=True)
except OSError as exc:
    print("root filesystem read-only:", exc.strerror, flush=True)
with open("/dev/termination-log", "w") as f:
    json.dump({"ok": True, "uid": os.getuid()}, f)
"""


def test_job_runs_local_image_on_the_node(
    kube: client.ApiClient, namespace: str, images: dict[str, str]
) -> None:
    batch = client.BatchV1Api(kube)
    core = client.CoreV1Api(kube)
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="smoke"),
        spec=client.V1JobSpec(
            backoff_limit=0,
            ttl_seconds_after_finished=600,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    automount_service_account_token=False,
                    security_context=client.V1PodSecurityContext(
                        run_as_non_root=True, seccomp_profile=client.V1SeccompProfile(type="RuntimeDefault")
                    ),
                    containers=[
                        client.V1Container(
                            name="main",
                            image=images["sandbox"],
                            command=["python3", "-c", JOB_SCRIPT],
                            security_context=RESTRICTED_CONTAINER_SECURITY,
                            resources=client.V1ResourceRequirements(
                                requests={"cpu": "10m", "memory": "32Mi"}, limits={"memory": "128Mi"}
                            ),
                        )
                    ],
                )
            ),
        ),
    )
    batch.create_namespaced_job(namespace, job)

    def finished() -> client.V1Job | None:
        j = batch.read_namespaced_job("smoke", namespace)
        conditions = j.status.conditions or []
        if any(c.type == "Failed" and c.status == "True" for c in conditions):
            pytest.fail(f"Job failed: {conditions}\n{describe_namespace(kube, namespace)}")
        return j if any(c.type == "Complete" and c.status == "True" for c in conditions) else None

    wait_until(
        finished,
        timeout=180,
        what="Job smoke to complete",
        diagnose=lambda: describe_namespace(kube, namespace),
    )

    pods = core.list_namespaced_pod(namespace, label_selector="batch.kubernetes.io/job-name=smoke").items
    assert len(pods) == 1
    pod = pods[0]
    assert pod.spec.node_name
    terminated = pod.status.container_statuses[0].state.terminated
    assert terminated.exit_code == 0
    assert json.loads(terminated.message) == {"ok": True, "uid": 65532}

    logs = core.read_namespaced_pod_log(pod.metadata.name, namespace, container="main")
    assert "hello from the node" in logs
    assert "uid 65532 seccomp 2" in logs  # 2 = SECCOMP_MODE_FILTER: RuntimeDefault is really applied
    assert "root filesystem read-only" in logs


def test_pod_security_admission_rejects_unrestricted_pod(kube: client.ApiClient, namespace: str) -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="too-loose"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="harness.local/none:1")]),
    )
    with pytest.raises(ApiException) as info:
        client.CoreV1Api(kube).create_namespaced_pod(namespace, pod)
    assert info.value.status == 403
    assert 'violates PodSecurity "restricted:latest"' in api_status(info.value)["message"]


def test_owner_reference_garbage_collection(kube: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(kube)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid, block_owner_deletion=True
    )
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="child", owner_references=[ref]))
    )
    core.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    def child_gone() -> bool:
        try:
            core.read_namespaced_config_map("child", namespace)
        except ApiException as exc:
            if exc.status == 404:
                return True
            raise
        return False

    wait_until(child_gone, timeout=60, what="the garbage collector to delete the child ConfigMap")


def test_rbac_denies_a_verb_the_service_account_lacks(
    kube: client.ApiClient, namespace: str, service_account_client: Callable[..., client.ApiClient]
) -> None:
    core = client.CoreV1Api(kube)
    rbac = client.RbacAuthorizationV1Api(kube)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader"))
    )
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="configmap-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["get", "list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="reader"),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="Role", name="configmap-reader"
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=namespace)],
        ),
    )
    as_reader = client.CoreV1Api(service_account_client(namespace, "reader"))

    # allowed verb (the RBAC authorizer's informer may lag the binding by a moment)
    wait_until(
        lambda: as_reader.list_namespaced_config_map(namespace) is not None,
        timeout=30,
        what="the reader ServiceAccount to be allowed to list configmaps",
    )
    # missing verb
    with pytest.raises(ApiException) as info:
        as_reader.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="nope"))
        )
    assert info.value.status == 403
    message = api_status(info.value)["message"]
    assert f"system:serviceaccount:{namespace}:reader" in message
    assert 'cannot create resource "configmaps"' in message
    # and no access at all to another resource
    with pytest.raises(ApiException) as info:
        as_reader.list_namespaced_secret(namespace)
    assert info.value.status == 403
