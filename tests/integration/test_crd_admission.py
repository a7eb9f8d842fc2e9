"""The generated CRDs in the real kube-apiserver: they install, and the API server and `harnessctl validate`
reach the same verdict on every bad manifest (one set of CEL rules serves both)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from harness_operator.api.crd import build_crds
from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.manifests import load_documents
from harness_operator.cli.validation import schema_findings, validate_documents

from .conftest import api_status, wait_until

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "fixtures" / "bad-manifests"
PLURALS = {
    "HarnessRun": "harnessruns",
    "HarnessDefinition": "harnessdefinitions",
    "ClusterHarnessDefinition": "clusterharnessdefinitions",
    "HarnessSchedule": "harnessschedules",
    "HarnessTrigger": "harnesstriggers",
}
# Cross-reference checks (a provider or run that exists or not) are not single-object rules, nor is
# reading a cron expression, a time zone or a JSON Schema: the API server stores those objects and the
# operator reports them as a condition.
CROSS_REFERENCE = {
    "unknown-provider",
    "unknown-fallback",
    "missing-run-output",
    "bad-cron",
    "bad-time-zone",
    "output-schema-not-a-schema",
}


def apply_crds(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    for crd in build_crds().values():
        name = crd["metadata"]["name"]
        try:
            current = ext.read_custom_resource_definition(name)
            crd["metadata"]["resourceVersion"] = current.metadata.resource_version
            ext.replace_custom_resource_definition(name, crd)
        except ApiException as exc:
            if exc.status != 404:
                raise
            ext.create_custom_resource_definition(crd)
    for crd in build_crds().values():
        wait_until(
            lambda n=crd["metadata"]["name"]: any(
                c.type == "Established" and c.status == "True"
                for c in (ext.read_custom_resource_definition(n).status.conditions or [])
            ),
            timeout=30,
            what="CRD established",
        )


@pytest.fixture(scope="module")
def crds(kube: client.ApiClient) -> Iterator[None]:
    apply_crds(kube)
    yield


def create(api: client.ApiClient, namespace: str, body: dict[str, Any], dry_run: bool = True) -> None:
    custom = client.CustomObjectsApi(api)
    plural = PLURALS[body["kind"]]
    extra: dict[str, str] = {"field_validation": "Strict"}  # as kubectl apply does
    if dry_run:
        extra["dry_run"] = "All"
    if body["kind"] == "ClusterHarnessDefinition":
        custom.create_cluster_custom_object(GROUP, VERSION, plural, body, **extra)
    else:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, plural, body, **extra)


def bad_documents() -> list[Any]:
    """The bad manifests the CRD itself refuses (admission.yaml's are the chart policy's, checked in
    test_tenant_admission.py)."""
    docs = [
        d
        for d in load_documents([str(BAD)])
        if not d.error and d.kind in PLURALS and Path(d.path).name != "admission.yaml"
    ]
    return [pytest.param(d, id=d.name) for d in docs]


@pytest.mark.parametrize("doc", bad_documents())
def test_api_server_and_validate_agree(crds: None, kube: client.ApiClient, namespace: str, doc: Any) -> None:
    found = validate_documents([doc], load_builtin_catalog(), strict=True)
    offline = [f for f in found if f.severity == "error"]
    assert offline, f"validate accepted {doc.name}"
    body = dict(doc.obj)
    body["metadata"] = {"name": doc.name}
    if doc.name in CROSS_REFERENCE:
        create(kube, namespace, body)  # stored: the operator sets Accepted=False for it
        return
    with pytest.raises(ApiException) as caught:
        create(kube, namespace, body)
    message = api_status(caught.value).get("message", "") or str(caught.value.body)
    assert caught.value.status in (400, 422)
    translated = schema_findings(doc)  # pydantic's errors in our words: the server's name the field
    for finding in offline:
        if finding in translated:
            assert finding.field.split(".")[-1] in message, message
        else:
            assert finding.message in message, message


def test_examples_are_accepted(crds: None, kube: client.ApiClient, namespace: str) -> None:
    docs = [d for d in load_documents([str(ROOT / "examples")]) if d.kind in PLURALS]
    assert docs
    for doc in docs:
        body = dict(doc.obj)
        body["metadata"] = {"name": doc.name}
        create(kube, namespace, body)


def test_spec_is_immutable_except_cancel(crds: None, kube: client.ApiClient, namespace: str) -> None:
    custom = client.CustomObjectsApi(kube)
    body = yaml.safe_load(
        "apiVersion: agentharness.dev/v1alpha1\nkind: HarnessRun\nmetadata: {name: frozen}\n"
        "spec: {provider: claude, prompt: hi, with: {model: a}}\n"
    )
    create(kube, namespace, body, dry_run=False)
    patched = custom.patch_namespaced_custom_object(
        GROUP, VERSION, namespace, "harnessruns", "frozen", {"spec": {"cancel": True}}
    )
    assert patched["spec"]["cancel"] is True
    for change in (
        {"prompt": "other"},
        {"with": {"model": "b"}},
        {"with": {"extra": True}},
        {"limits": {"timeoutSeconds": 5}},
    ):
        with pytest.raises(ApiException) as caught:
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, "harnessruns", "frozen", {"spec": change}
            )
        assert "spec is immutable after creation except spec.cancel" in api_status(caught.value)["message"]


def test_status_subresource_and_printer_columns(
    crds: None, kube: client.ApiClient, namespace: str, cluster_bin_dir: Path, kubeconfig_path: str
) -> None:
    custom = client.CustomObjectsApi(kube)
    body = yaml.safe_load(
        "apiVersion: agentharness.dev/v1alpha1\nkind: HarnessRun\nmetadata: {name: cols}\n"
        "spec: {provider: claude, prompt: hi}\n"
    )
    create(kube, namespace, body, dry_run=False)
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "harnessruns",
        "cols",
        {
            "status": {
                "phase": "Succeeded",
                "reason": "Succeeded",
                "exitCode": 0,
                "attempts": [{"index": 1, "provider": "claude"}, {"index": 2, "provider": "codex"}],
                "usage": {"costUSD": 0.25, "costSource": "reported"},
                "progress": {"costUSD": 0.25},  # the Cost column: the run so far, then its totals
            }
        },
    )
    out = subprocess.run(
        [
            str(cluster_bin_dir / "kubectl"),
            "--kubeconfig",
            kubeconfig_path,
            "-n",
            namespace,
            "get",
            "hrun",
            "cols",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    # RAN: the provider of the latest attempt (here the fallback that succeeded).
    assert out[0].split() == ["NAME", "PROVIDER", "RAN", "PHASE", "REASON", "COST", "AGE"]
    assert out[1].split()[:6] == ["cols", "claude", "codex", "Succeeded", "Succeeded", "0.25"]
