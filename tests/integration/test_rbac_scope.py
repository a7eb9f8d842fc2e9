"""The chart's RBAC with watchNamespaces, judged by the real API server's authorizer: the operator's
ServiceAccount may do its work in the watched namespace and nothing of it elsewhere (the red team's
operator watching one namespace could create Jobs and get Secrets in kube-system)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, utils
from kubernetes.client.rest import ApiException

CHART = Path(__file__).parents[2] / "charts" / "harness-operator"
RELEASE = "scoped"  # a release of its own beside the tests' one: its cluster-wide names differ


@pytest.fixture
def scoped_rbac(kube: client.ApiClient, cluster_bin_dir: Path, namespace: str) -> Iterator[str]:
    """The chart's RBAC for a release watching only `namespace`, applied; yields the ServiceAccount's
    user name. The cluster-wide objects are deleted afterwards (the namespace takes the rest)."""
    rendered = subprocess.run(
        [
            str(cluster_bin_dir / "helm"),
            "template",
            RELEASE,
            str(CHART),
            "--namespace",
            namespace,
            "--set",
            f"watchNamespaces={{{namespace}}}",
            "--show-only",
            "templates/rbac.yaml",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = [doc for doc in yaml.safe_load_all(rendered) if doc]
    for doc in docs:
        utils.create_from_dict(kube, doc, namespace=doc["metadata"].get("namespace", namespace))
    try:
        yield f"system:serviceaccount:{namespace}:{RELEASE}-harness-operator"
    finally:
        rbac = client.RbacAuthorizationV1Api(kube)
        for doc in docs:
            name = doc["metadata"]["name"]
            try:
                if doc["kind"] == "ClusterRole":
                    rbac.delete_cluster_role(name)
                elif doc["kind"] == "ClusterRoleBinding":
                    rbac.delete_cluster_role_binding(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise


def can_i(
    kube: client.ApiClient,
    user: str,
    verb: str,
    resource: str,
    namespace: str = "",
    group: str = "",
    name: str = "",
) -> bool:
    """`kubectl auth can-i VERB RESOURCE[/NAME] -n NAMESPACE --as USER`, asked of the API server."""
    namespace_of_user = user.split(":")[2]
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=[
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace_of_user}",
                "system:authenticated",
            ],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, group=group, namespace=namespace or None, name=name or None
            ),
        )
    )
    return bool(client.AuthorizationV1Api(kube).create_subject_access_review(review).status.allowed)


def test_with_watch_namespaces_the_operator_may_act_only_there(
    kube: client.ApiClient, scoped_rbac: str, namespace: str
) -> None:
    user = scoped_rbac
    assert can_i(kube, user, "create", "jobs", namespace, "batch")
    assert can_i(kube, user, "get", "secrets", namespace)
    assert can_i(kube, user, "patch", "harnessruns", namespace, "agentharness.dev")
    assert can_i(kube, user, "list", "clusterharnessdefinitions", group="agentharness.dev")
    for elsewhere in ("kube-system", "default"):
        assert not can_i(kube, user, "create", "jobs", elsewhere, "batch"), elsewhere
        assert not can_i(kube, user, "get", "secrets", elsewhere), elsewhere
        assert not can_i(kube, user, "create", "secrets", elsewhere), elsewhere
        assert not can_i(kube, user, "list", "harnessruns", elsewhere, "agentharness.dev"), elsewhere
    assert not can_i(kube, user, "create", "jobs", group="batch"), "no cluster-wide Jobs"
