"""`harnessctl` acts as the kubeconfig says, against the real API server: a view-only identity
(impersonated through the kubeconfig's `as:` or --as, or a ServiceAccount's token from an exec credential
plugin) cannot cancel or rerun a run, gets kubectl's Forbidden line and exit 3, no traceback; it can
describe the run, whose Events are its own, not those of a deleted run of the same name."""

from __future__ import annotations

import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.controller.kube import Kube

from .operator_env import apply_crds

HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")
RUN = {
    "apiVersion": f"{GROUP}/{VERSION}",
    "kind": "HarnessRun",
    "metadata": {"name": "review"},
    "spec": {
        "provider": "claude",
        "prompt": "Review $(inputs.ticket).",
        "inputs": [{"name": "ticket", "value": "T-1"}],
    },
}


def harnessctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARNESSCTL, *args], capture_output=True, text=True, check=False)


def grant_view(kube: client.ApiClient, namespace: str, subject: client.RbacV1Subject) -> None:
    """Read-only rights on runs, their Events and ConfigMaps in `namespace` (deleted with it)."""
    rbac = client.RbacAuthorizationV1Api(kube)
    rules = [
        client.V1PolicyRule(api_groups=[GROUP], resources=["harnessruns"], verbs=["get", "list", "watch"]),
        client.V1PolicyRule(
            api_groups=[""], resources=["events", "configmaps", "pods"], verbs=["get", "list", "watch"]
        ),
    ]
    rbac.create_namespaced_role(
        namespace, client.V1Role(metadata=client.V1ObjectMeta(name="viewer"), rules=rules)
    )
    binding = client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name="viewer"),
        role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="viewer"),
        subjects=[subject],
    )
    rbac.create_namespaced_role_binding(namespace, binding)


def kubeconfig_with(
    admin: str, path: Path, user: dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]
) -> str:
    """The admin kubeconfig with its user entry changed (`as:` added, or an exec plugin instead)."""
    doc = yaml.safe_load(Path(admin).read_text())
    doc["users"][0]["user"] = user(doc["users"][0]["user"]) if callable(user) else user
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def assert_refused(done: subprocess.CompletedProcess[str], verb: str, who: str) -> None:
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("Error from server (Forbidden): ") and done.stderr.count("\n") == 1, (
        done.stderr
    )
    assert (
        f'User "{who}" cannot {verb} resource "harnessruns"' in done.stderr and "Traceback" not in done.stderr
    )


def test_an_impersonated_viewer_cannot_cancel_or_rerun(
    kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path, namespace: str, tmp_path: Path
) -> None:
    apply_crds(cluster_bin_dir, kubeconfig_path)
    custom = client.CustomObjectsApi(kube)
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", RUN)
    viewer = f"viewer@{namespace}"
    grant_view(
        kube, namespace, client.RbacV1Subject(kind="User", name=viewer, api_group="rbac.authorization.k8s.io")
    )

    as_viewer = kubeconfig_with(kubeconfig_path, tmp_path / "as-viewer", lambda u: {**u, "as": viewer})
    for flags in (["--kubeconfig", as_viewer], ["--kubeconfig", kubeconfig_path, "--as", viewer]):
        assert_refused(harnessctl("cancel", "review", "-n", namespace, *flags), "patch", viewer)
        assert_refused(harnessctl("rerun", "review", "-n", namespace, *flags), "create", viewer)
        shown = harnessctl("describe", "review", "-n", namespace, *flags)
        assert shown.returncode == 0, shown.stderr
        assert "Name:         review" in shown.stdout and "ticket  value   3 bytes" in shown.stdout
    run = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", "review")
    assert not run["spec"].get("cancel")
    listed = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns")["items"]
    assert [r["metadata"]["name"] for r in listed] == ["review"]  # no rerun was created

    done = harnessctl(
        "cancel", "review", "-n", namespace, "--kubeconfig", kubeconfig_path
    )  # the admin itself
    assert done.returncode == 0, done.stderr


def test_a_service_account_from_an_exec_plugin_is_refused_as_itself(
    kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path, namespace: str, tmp_path: Path
) -> None:
    apply_crds(cluster_bin_dir, kubeconfig_path)
    core = client.CoreV1Api(kube)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="viewer"))
    )
    grant_view(
        kube, namespace, client.RbacV1Subject(kind="ServiceAccount", name="viewer", namespace=namespace)
    )
    client.CustomObjectsApi(kube).create_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessruns", RUN
    )
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=600)
    )
    token = core.create_namespaced_service_account_token("viewer", namespace, request).status.token
    (tmp_path / "token").write_text(token)
    plugin = tmp_path / "credential"
    plugin.write_text(
        "#!/bin/sh\n"
        'printf \'{"apiVersion":"client.authentication.k8s.io/v1beta1","kind":"ExecCredential",'
        f'"status":{{"token":"%s"}}}}\' "$(cat {tmp_path / "token"})"\n'
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}}
    path = kubeconfig_with(kubeconfig_path, tmp_path / "exec", exec_user)
    assert_refused(
        harnessctl("cancel", "review", "-n", namespace, "--kubeconfig", path),
        "patch",
        f"system:serviceaccount:{namespace}:viewer",
    )


def test_describe_lists_the_runs_own_events_not_a_deleted_namesakes(
    kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path, namespace: str
) -> None:
    apply_crds(cluster_bin_dir, kubeconfig_path)
    custom = client.CustomObjectsApi(kube)
    events = Kube(kube)
    old = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", RUN)
    events.create_event(old, "Warning", "ProviderFailed", "the old run failed")
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", "review")
    new = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", RUN)
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    events.create_event(new, "Normal", "Started", "the new run started")

    shown = harnessctl("describe", "review", "-n", namespace, "--kubeconfig", kubeconfig_path)
    assert shown.returncode == 0, shown.stderr
    assert "the new run started" in shown.stdout and "the old run failed" not in shown.stdout
