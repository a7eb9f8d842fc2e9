"""Who may approve a run's publish, at the real API server: users create runs with `kubectl`
(impersonated), an approver decides with `harnessctl approve|reject`, and the chart's policy
<release>-approvals answers. A user without the verb `approve` is refused (the API server's message in
the CLI's error, exit 3); the ClusterRole <release>-approver grants it, and through aggregation the
namespace's `admin` role; the author alone may not approve (unless approvals.allowSelfApproval); a forged
approver or author, a changed decision, a decision written at creation are refused; a run needing approval
records its author, and the fix the refusal gives works. No operator runs: the run's AwaitingApproval
condition is written by the test as the operator would."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import wait_until
from .operator_env import RELEASE, apply_crds, helm_install, helm_uninstall

HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")
APPROVER_ROLE = f"{RELEASE}-approver"
AUTHOR = "agentharness.dev/author"
DECISION = "approval.agentharness.dev/decision"
APPROVER = "approval.agentharness.dev/user"
REASON = "approval.agentharness.dev/reason"
DENIED = (
    f"ValidatingAdmissionPolicy '{RELEASE}-approvals' with binding '{RELEASE}-approvals' denied request: "
)
# alice writes runs (edit), bob approves (the approver role), carol only edits, dave is the namespace's admin
ROLES = {"alice": "edit", "bob": APPROVER_ROLE, "carol": "edit", "dave": "admin"}


def run_manifest(name: str, author: str | None = None, **annotations: str) -> dict[str, Any]:
    """A run whose change is published only once approved."""
    metadata: dict[str, Any] = {"name": name}
    if author is not None:
        annotations = {AUTHOR: author, **annotations}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessRun",
        "metadata": metadata,
        "spec": {
            "provider": "claude",
            "prompt": "Fix the typo.",
            "workspace": {
                "git": {"url": "https://git.example.com/team/app.git"},
                "publish": {
                    "branch": {},
                    "credentialsSecretRef": {"name": "push-token", "key": "token"},
                    "approval": {"required": True},
                },
            },
        },
    }


class Cluster:
    """What the test's users do: kubectl and harnessctl as one of them (impersonated by the admin)."""

    def __init__(self, kube: client.ApiClient, kubeconfig: str, bin_dir: Path, namespace: str) -> None:
        self.kube, self.kubeconfig, self.bin_dir, self.ns = kube, kubeconfig, bin_dir, namespace
        self.custom = client.CustomObjectsApi(kube)

    def kubectl(self, user: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        argv = [str(self.bin_dir / "kubectl"), "--kubeconfig", self.kubeconfig, "-n", self.ns]
        if user != "admin":
            argv += ["--as", user]
        return subprocess.run([*argv, *args], input=stdin, capture_output=True, text=True, check=False)

    def create(self, user: str, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return self.kubectl(user, "create", "-f", "-", stdin=yaml.safe_dump(body))

    def harnessctl(self, user: str, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [HARNESSCTL, *args, "--kubeconfig", self.kubeconfig, "-n", self.ns, "--as", user]
        return subprocess.run(argv, capture_output=True, text=True, check=False)

    def run(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, "harnessruns", name))

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.run(name)["metadata"].get("annotations") or {})

    def await_approval(self, name: str) -> None:
        """What the operator writes once the change is kept: the condition AwaitingApproval True."""
        condition = {
            "type": "AwaitingApproval",
            "status": "True",
            "reason": "AwaitingApproval",
            "message": "the change is kept: approve or reject it",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.ns, "harnessruns", name, {"status": {"conditions": [condition]}}
        )

    def awaiting_run(self, name: str, author: str = "alice") -> None:
        created = self.create(author, run_manifest(name, author))
        assert created.returncode == 0, created.stderr
        self.await_approval(name)


def may(kube: client.ApiClient, user: str, verb: str, namespace: str) -> bool:
    """`kubectl auth can-i VERB harnessruns --as USER`, asked of the API server."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource="harnessruns", group=GROUP, namespace=namespace
            ),
        )
    )
    return bool(client.AuthorizationV1Api(kube).create_subject_access_review(review).status.allowed)


def bind(kube: client.ApiClient, namespace: str, user: str, role: str) -> None:
    """Bind the ClusterRole `role` to `user` in `namespace`, and wait until the authorizer sees it."""
    client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name=f"{user}-{role}"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role),
            subjects=[client.RbacV1Subject(kind="User", name=user, api_group="rbac.authorization.k8s.io")],
        ),
    )
    verb = "approve" if role in (APPROVER_ROLE, "admin") else "create"
    wait_until(lambda: may(kube, user, verb, namespace), timeout=60, what=f"{user} may {verb} harnessruns")


def enforced(cluster: Cluster) -> bool:
    """True once the policy refuses a forged author (a policy takes effect shortly after it is made)."""
    done = cluster.kubectl(
        "alice",
        "create",
        "--dry-run=server",
        "-f",
        "-",
        stdin=yaml.safe_dump(run_manifest("probe", "mallory")),
    )
    return DENIED in done.stderr


@pytest.fixture(scope="module")
def chart(kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path) -> Iterator[None]:
    """This tree's CRDs and the chart (no operator: only admission and RBAC are under test)."""
    apply_crds(cluster_bin_dir, kubeconfig_path)
    helm_install(cluster_bin_dir, kubeconfig_path, "replicaCount=0")
    yield
    helm_uninstall(cluster_bin_dir, kubeconfig_path)
    apply_crds(cluster_bin_dir, kubeconfig_path)


@pytest.fixture
def cluster(
    chart: None, kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path, namespace: str
) -> Cluster:
    """The namespace with its users bound (dave to admin) and the push token's Secret."""
    for user, role in ROLES.items():
        bind(kube, namespace, user, role)
    client.CoreV1Api(kube).create_namespaced_secret(
        namespace,
        client.V1Secret(metadata=client.V1ObjectMeta(name="push-token"), string_data={"token": "t"}),
    )
    # carol may patch runs; dave may approve once the aggregation controller adds the approver role to admin
    wait_until(lambda: may(kube, "carol", "patch", namespace), timeout=60, what="carol may patch runs")
    made = Cluster(kube, kubeconfig_path, cluster_bin_dir, namespace)
    wait_until(lambda: enforced(made), timeout=30, what="the approvals policy")
    return made


def test_a_run_needing_approval_records_its_author_and_the_refusal_says_how(cluster: Cluster) -> None:
    refused = cluster.create("alice", run_manifest("fix"))
    assert refused.returncode == 1
    assert (
        DENIED + "spec.workspace.publish.approval: a run that needs approval records its author, whom this "
        "cluster does not let approve it (approvals.allowSelfApproval is false): add the annotation "
        'metadata.annotations["agentharness.dev/author"]: "alice" (your username)'
    ) in refused.stderr
    forged = cluster.create("alice", run_manifest("fix", "bob"))
    assert forged.returncode == 1
    assert (
        DENIED
        + 'metadata.annotations["agentharness.dev/author"]: "bob" does not name the run\'s author, user '
        '"alice": set it to "alice", or leave it out'
    ) in forged.stderr
    fixed = cluster.create("alice", run_manifest("fix", "alice"))  # the fix, as the message spells it
    assert fixed.returncode == 0, fixed.stderr
    changed = cluster.kubectl("alice", "annotate", "--overwrite", "harnessrun/fix", f"{AUTHOR}=bob")
    assert changed.returncode == 1 and DENIED in changed.stderr
    assert "it may not be added, changed or removed: create a new run instead" in changed.stderr
    removed = cluster.kubectl("alice", "annotate", "harnessrun/fix", f"{AUTHOR}-")
    assert removed.returncode == 1 and DENIED in removed.stderr
    assert cluster.annotations("fix")[AUTHOR] == "alice"


def test_an_approver_approves_and_others_are_refused_by_the_api_server(cluster: Cluster) -> None:
    cluster.awaiting_run("fix")
    # carol may edit runs but lacks the verb approve: the API server's answer, in kubectl's words, exit 3
    carol = cluster.harnessctl("carol", "approve", "fix")
    assert carol.returncode == 3, carol.stderr
    assert carol.stderr.startswith(
        'Error from server (Forbidden): harnessruns.agentharness.dev "fix" is forbidden: ' + DENIED
    ), carol.stderr
    assert (
        f'user "carol" may not approve or reject harnessrun {cluster.ns}/fix (it needs the verb approve on '
        f"harnessruns.agentharness.dev): bind the ClusterRole {APPROVER_ROLE} (or the namespace's admin role) "
        f"to them in namespace {cluster.ns}"
    ) in carol.stderr
    assert "Traceback" not in carol.stderr and carol.stderr.count("\n") == 1
    # the author alone may not approve, even as an approver
    bind(cluster.kube, cluster.ns, "alice", APPROVER_ROLE)
    alice = cluster.harnessctl("alice", "approve", "fix")
    assert alice.returncode == 3 and DENIED in alice.stderr, alice.stderr
    assert (
        f'user "alice" created harnessrun {cluster.ns}/fix and may not approve it alone '
        "(approvals.allowSelfApproval is false): ask another approver"
    ) in alice.stderr
    assert DECISION not in cluster.annotations("fix")
    # bob, bound to the approver role, approves: the decision and who took it are on the run
    bob = cluster.harnessctl("bob", "approve", "fix", "--reason", "looks right")
    assert (bob.returncode, bob.stdout, bob.stderr) == (0, "harnessrun.agentharness.dev/fix approved\n", "")
    annotations = cluster.annotations("fix")
    assert (annotations[DECISION], annotations[APPROVER], annotations[REASON]) == (
        "Approved",
        "bob",
        "looks right",
    )
    # the decision never changes: not by the CLI, not by a patch that removes or rewrites it
    again = cluster.harnessctl("dave", "reject", "fix", "--reason", "changed my mind")
    assert again.returncode == 3 and "the run was Approved already" in again.stderr, again.stderr
    removed = cluster.kubectl("dave", "annotate", "harnessrun/fix", f"{DECISION}-", f"{APPROVER}-")
    assert removed.returncode == 1 and "never change or go" in removed.stderr, removed.stderr
    assert cluster.annotations("fix")[DECISION] == "Approved"


def test_the_namespace_admin_may_reject_and_the_author_may_reject_their_own(cluster: Cluster) -> None:
    cluster.awaiting_run("a")
    cluster.awaiting_run("b")
    # dave holds the namespace's admin role, into which the approver role is aggregated
    dave = cluster.harnessctl("dave", "reject", "a", "--reason", "not this way")
    assert (dave.returncode, dave.stdout) == (0, "harnessrun.agentharness.dev/a rejected\n"), dave.stderr
    assert cluster.annotations("a")[DECISION] == "Rejected" and cluster.annotations("a")[APPROVER] == "dave"
    # rejecting one's own run ends it as a cancel would: allowed (given the verb)
    bind(cluster.kube, cluster.ns, "alice", APPROVER_ROLE)
    alice = cluster.harnessctl("alice", "reject", "b", "--reason", "wrong ticket")
    assert alice.returncode == 0, alice.stderr


def test_forged_and_untimely_decisions_are_refused(cluster: Cluster) -> None:
    # a decision written before the run awaits one (here: at creation, or while it runs)
    early = cluster.create("alice", run_manifest("early", "alice", **{DECISION: "Approved", APPROVER: "bob"}))
    assert early.returncode == 1 and "never when it is created" in early.stderr, early.stderr
    cluster.create("alice", run_manifest("fix", "alice"))
    cli = cluster.harnessctl("bob", "approve", "fix")
    assert cli.returncode == 1, cli.stderr
    assert cli.stderr.startswith("error: harnessrun fix is not awaiting approval (phase: not started)")
    patched = cluster.kubectl("bob", "annotate", "harnessrun/fix", f"{DECISION}=Approved", f"{APPROVER}=bob")
    assert patched.returncode == 1 and "is not awaiting approval" in patched.stderr, patched.stderr
    cluster.await_approval("fix")
    # an approval in another's name, or no name, or a decision that is neither
    forged = cluster.kubectl("bob", "annotate", "harnessrun/fix", f"{DECISION}=Approved", f"{APPROVER}=dave")
    assert forged.returncode == 1, forged.stderr
    assert (
        'metadata.annotations["approval.agentharness.dev/user"]: "dave" is not who decides: it must be your username, "bob"'
        in forged.stderr
    )
    nameless = cluster.kubectl("bob", "annotate", "harnessrun/fix", f"{DECISION}=Approved")
    assert nameless.returncode == 1 and '"" is not who decides' in nameless.stderr, nameless.stderr
    odd = cluster.kubectl("bob", "annotate", "harnessrun/fix", f"{DECISION}=Maybe", f"{APPROVER}=bob")
    assert odd.returncode == 1 and '"Maybe" is not a decision: Approved or Rejected' in odd.stderr, odd.stderr
    assert DECISION not in cluster.annotations("fix")


def test_a_rerun_records_who_reran_it_and_not_the_old_decision(cluster: Cluster) -> None:
    cluster.awaiting_run("fix")
    assert cluster.harnessctl("bob", "approve", "fix").returncode == 0
    rerun = cluster.harnessctl("carol", "rerun", "fix")
    assert rerun.returncode == 0, rerun.stderr
    name = rerun.stdout.split()[0].split("/", 1)[1]
    annotations = cluster.annotations(name)
    assert annotations[AUTHOR] == "carol" and not any(k.startswith("approval.") for k in annotations)


def test_self_approval_when_the_platform_allows_it(
    cluster: Cluster, kubeconfig_path: str, cluster_bin_dir: Path
) -> None:
    helm_install(cluster_bin_dir, kubeconfig_path, "replicaCount=0", "approvals.allowSelfApproval=true")
    try:
        wait_until(
            lambda: cluster.create("alice", run_manifest("plain")).returncode == 0,
            timeout=30,
            what="the policy to allow runs recording no author",
        )
        cluster.awaiting_run("own")
        bind(cluster.kube, cluster.ns, "alice", APPROVER_ROLE)
        own = cluster.harnessctl("alice", "approve", "own")
        assert own.returncode == 0, own.stderr
        assert cluster.annotations("own")[APPROVER] == "alice"
    finally:
        helm_install(cluster_bin_dir, kubeconfig_path, "replicaCount=0")


CANCELLED_BY = "agentharness.dev/cancelled-by"


def test_who_cancelled_is_the_requester_recorded_once_and_never_claimed(cluster: Cluster) -> None:
    created = cluster.create("alice", run_manifest("stop", "alice", **{CANCELLED_BY: "alice"}))
    assert created.returncode != 0 and f'"{CANCELLED_BY}"' in created.stderr, (
        created.stderr
    )  # not at creation
    assert cluster.create("alice", run_manifest("stop", "alice")).returncode == 0
    claimed = cluster.kubectl(
        "carol", "patch", "hrun", "stop", "--type=merge",
        "-p", json.dumps({"spec": {"cancel": True}, "metadata": {"annotations": {CANCELLED_BY: "alice"}}}),
    )  # fmt: skip
    assert claimed.returncode != 0 and DENIED in claimed.stderr and '"carol"' in claimed.stderr, (
        claimed.stderr
    )
    cancelled = cluster.harnessctl("carol", "cancel", "stop")
    assert cancelled.returncode == 0, cancelled.stderr
    assert (
        cluster.run("stop")["spec"]["cancel"] is True and cluster.annotations("stop")[CANCELLED_BY] == "carol"
    )
    again = cluster.harnessctl("alice", "cancel", "stop")  # already cancelled: carol stays its canceller
    assert again.returncode == 0 and "already" in again.stdout, again.stdout
    overwritten = cluster.kubectl("dave", "annotate", "hrun", "stop", "--overwrite", f"{CANCELLED_BY}=dave")
    assert overwritten.returncode != 0 and DENIED in overwritten.stderr, overwritten.stderr
    assert cluster.annotations("stop")[CANCELLED_BY] == "carol"
    # A cancel without its canceller is still a cancel (kubectl patch, the operator's pipelines).
    assert cluster.create("alice", run_manifest("plain", "alice")).returncode == 0
    plain = cluster.kubectl(
        "alice", "patch", "hrun", "plain", "--type=merge", "-p", '{"spec": {"cancel": true}}'
    )
    assert plain.returncode == 0, plain.stderr
