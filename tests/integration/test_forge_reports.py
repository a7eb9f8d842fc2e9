"""The reporting step on the real cluster: the operator, as a process under the chart's RBAC, reports a
trigger's run on its forge while it works and when it ends (one comment, edited), and records the stage
and the comment's id on the run; a missing token Secret is a Warning Event. The forge is the comment and
status stub on loopback (tests/stubs/forge_threads.py); against the real Gitea, tests/forge/ walks the
whole loop."""

from __future__ import annotations

import base64
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.core.forge.report import ANNOTATION_REPORTED
from harness_operator.core.forge.triggering import ANNOTATION_COMMENT_ID
from harness_operator.core.objects.naming import (
    ANNOTATION_REPOSITORY,
    ANNOTATION_THREAD_KIND,
    LABEL_THREAD,
    LABEL_TRIGGER,
    as_service_account,
    with_author,
)
from tests.stubs.forge_threads import ForgeThreadsStub

from .conftest import Api, wait_until

TOKEN = "gta_integration_report_token"
ACCOUNT = "agent-trigger"


@pytest.fixture
def forge() -> Iterator[ForgeThreadsStub]:
    with ForgeThreadsStub(token=TOKEN) as stub:
        yield stub


def trigger_body(url: str) -> dict[str, Any]:
    forge = {
        "type": "gitea",
        "url": url,
        "webhookSecretRef": {"name": "forge-webhook", "key": "secret"},
        "tokenSecretRef": {"name": "forge-report-token", "key": "token"},
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessTrigger",
        "metadata": {"name": "fixer"},
        "spec": {
            "forge": forge,
            "repositories": ["acme/app"],
            "serviceAccountName": "agent-trigger",
            "events": [{"type": "IssueLabeled", "label": "agent"}],
            "authors": {"users": ["alice"]},
            "runTemplate": {"spec": {"provider": "quick", "prompt": "Fix #$(event.number)"}},
        },
    }


def triggered_run(name: str, provider: str, number: int) -> dict[str, Any]:
    """A run as the receiver creates it for issue `number` of acme/app."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessRun",
        "metadata": {
            "name": name,
            "labels": {LABEL_TRIGGER: "fixer", LABEL_THREAD: str(number)},
            "annotations": {ANNOTATION_REPOSITORY: "acme/app", ANNOTATION_THREAD_KIND: "issue"},
        },
        "spec": {"provider": provider, "prompt": "say ok"},
    }


def create_as_trigger(api: Api, body: dict[str, Any]) -> None:
    """Create the run as the receiver does: as the trigger's ServiceAccount, recorded as its author."""
    body = {**body, "metadata": {**body["metadata"], "namespace": api.ns}}
    api.custom.create_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnessruns", with_author(body, ACCOUNT),
        _headers=as_service_account(api.ns, ACCOUNT),
    )  # fmt: skip


@pytest.fixture
def account(api: Api) -> str:
    """The trigger's ServiceAccount, which may create runs (the team's grant, examples/forge-loop)."""
    api.core.create_namespaced_service_account(api.ns, client.V1ServiceAccount(metadata={"name": ACCOUNT}))
    rbac = client.RbacAuthorizationV1Api(api.core.api_client)
    rule = client.V1PolicyRule(api_groups=[GROUP], resources=["harnessruns"], verbs=["create", "get"])
    rbac.create_namespaced_role(api.ns, client.V1Role(metadata={"name": ACCOUNT}, rules=[rule]))
    rbac.create_namespaced_role_binding(
        api.ns,
        client.V1RoleBinding(
            metadata={"name": ACCOUNT},
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name=ACCOUNT),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=ACCOUNT, namespace=api.ns)],
        ),
    )
    return ACCOUNT


@pytest.fixture
def fixer(api: Api, fake: Callable[..., None], forge: ForgeThreadsStub, account: str) -> None:
    """Trigger fixer reporting to the stub with its token's Secret, and the provider its runs use."""
    fake("quick", "ok")
    api.custom.create_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnesstriggers", trigger_body(forge.base_url)
    )
    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(name="forge-report-token"),
        data={"token": base64.b64encode(TOKEN.encode()).decode()},
    )
    api.core.create_namespaced_secret(api.ns, secret)


def test_a_triggered_run_is_reported_on_its_forge(api: Api, forge: ForgeThreadsStub, fixer: None) -> None:
    create_as_trigger(api, triggered_run("fixer-7-run", "quick", 7))
    api.wait_finished("fixer-7-run")

    def reported() -> dict[str, Any] | None:
        meta = api.run("fixer-7-run")["metadata"]
        return meta if meta.get("annotations", {}).get(ANNOTATION_REPORTED) == "finished" else None

    meta = wait_until(reported, timeout=60, what="the run's end reported on the forge")
    [comment] = forge.comments("gitea", "acme/app", 7)
    assert meta["annotations"][ANNOTATION_COMMENT_ID] == str(comment["id"])
    assert comment["body"].startswith(f"<!-- harness-run {api.ns}/fixer-7-run {meta['uid']} -->")
    assert f"HarnessRun `{api.ns}/fixer-7-run` succeeded" in comment["body"]
    assert f"kubectl -n {api.ns} get hrun fixer-7-run" in comment["body"]
    assert not [m for m in api.events("fixer-7-run") if TOKEN in m]

    # Without its token's Secret, a run is not reported, and says why.
    api.core.delete_namespaced_secret("forge-report-token", api.ns)
    create_as_trigger(api, triggered_run("fixer-8-run", "quick", 8))
    wait_until(
        lambda: [m for m in api.events("fixer-8-run") if "has no key 'token'" in m],
        timeout=60,
        what="a ForgeReportFailed Event naming the missing Secret",
    )
    assert forge.comments("gitea", "acme/app", 8) == []


def test_a_run_only_labelled_as_the_triggers_is_not_reported(
    api: Api, forge: ForgeThreadsStub, fixer: None
) -> None:
    """Anyone who may create runs here may label one as the trigger's: the operator writes nothing with the
    trigger's token for a run the trigger's account did not make."""
    api.create(triggered_run("fixer-9-run", "quick", 9))  # as the test's admin, not the trigger's account
    api.wait_finished("fixer-9-run")
    wait_until(
        lambda: [m for m in api.events("fixer-9-run") if "reports only its own runs" in m],
        timeout=60,
        what="a ForgeReportFailed Event saying the run is not the trigger's",
    )
    assert forge.comments("gitea", "acme/app", 9) == []
