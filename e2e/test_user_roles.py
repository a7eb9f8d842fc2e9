"""Users get this API through Kubernetes' built-in roles (the chart's aggregated ClusterRoles): `view`
reads runs, definitions and budgets, `edit` also creates runs and definitions but not budgets (a team
cannot raise its own cap), `admin` also budgets. Each request is a real one (server-side dry run), as a
user bound in the namespace by a RoleBinding."""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes import client

from .conftest import kubectl, wait_until

ROLES = {"viewer": "view", "editor": "edit", "owner": "admin"}


def manifest(namespace: str, kind: str, spec: dict[str, Any]) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "agentharness.dev/v1alpha1",
            "kind": kind,
            "metadata": {"name": "roles-check", "namespace": namespace},
            "spec": spec,
        }
    )


def test_the_built_in_roles_grant_this_api(kube: client.ApiClient, namespace: str) -> None:
    rbac = client.RbacAuthorizationV1Api(kube)
    for user, role in ROLES.items():
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": user},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
            },
        )
    run = manifest(namespace, "HarnessRun", {"provider": "claude", "prompt": "p"})
    definition = manifest(namespace, "HarnessDefinition", {"binary": "my-cli"})
    budget = manifest(namespace, "HarnessBudget", {"period": "daily", "limits": {"maxCostUSD": 5}})

    def create(user: str, document: str) -> tuple[int, str]:
        done = kubectl("--as", user, "create", "--dry-run=server", "-f", "-", stdin=document, check=False)
        return done.returncode, done.stderr

    # The controller manager aggregates the chart's rules into the built-in roles asynchronously.
    wait_until(lambda: create("editor", run)[0] == 0, timeout=30, what="edit to grant creating runs")
    assert create("editor", definition)[0] == 0
    refused, message = create("editor", budget)
    assert refused and "forbidden" in message, message
    assert create("owner", budget)[0] == 0
    refused, message = create("viewer", run)
    assert refused and "forbidden" in message, message
    for user in ROLES:
        listed = kubectl("--as", user, "get", "hrun,hdef,hbudget", "-n", namespace, check=False)
        assert listed.returncode == 0, listed.stderr
