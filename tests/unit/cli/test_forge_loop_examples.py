"""examples/forge-loop/: each forge's example (and Gitea's best of three, a trigger of pipelines) validates
with `harnessctl validate` (real subprocess), its RBAC grants the receiver exactly what the trigger names
(impersonate its ServiceAccount, get its webhook Secret), the trigger's runs only the Secrets their
templates name and the operator only to act as the pipelines' account, and its commented kubectl lines
create exactly the Secrets and keys the trigger and its templates reference."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.cli.test_main import GATEWAY, operator_deployment

from harness_operator.api.v1alpha1 import HarnessTrigger, SecretKeySelector

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples" / "forge-loop").glob("*.yaml"))
CLUSTER_HELM = (
    Path(os.environ.get("HARNESS_CLUSTER_CACHE", "/var/cache/harness-operator/cluster")) / "bin" / "helm"
)
RECEIVER = {
    "kind": "ServiceAccount",
    "name": "harness-operator-receiver",
    "namespace": "harness-system",
}
OPERATOR = {"kind": "ServiceAccount", "name": "harness-operator", "namespace": "harness-system"}


def load(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(path.read_text()) if d}


def trigger_of(docs: dict[tuple[str, str], dict[str, Any]]) -> HarnessTrigger:
    (trigger,) = [d for (kind, _), d in docs.items() if kind == "HarnessTrigger"]
    return HarnessTrigger.model_validate(trigger)


def role_bound_to(docs: dict[tuple[str, str], dict[str, Any]], subject: dict[str, str]) -> dict[str, Any]:
    """The one Role of the file bound (in the trigger's namespace) to `subject`."""
    bindings = [d for (kind, _), d in docs.items() if kind == "RoleBinding" and subject in d["subjects"]]
    assert len(bindings) == 1, f"one RoleBinding for {subject}, found {len(bindings)}"
    ref = bindings[0]["roleRef"]
    assert ref["kind"] == "Role"
    return docs[("Role", ref["name"])]


def grants(role: dict[str, Any]) -> set[tuple[str, str, str, str | None]]:
    """(apiGroup, resource, verb, resourceName or None) for every rule of the Role."""
    return {
        (group, resource, verb, name)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames") or [None]
    }


def publish_secrets(trigger: HarnessTrigger) -> set[str]:
    """The push Secrets the trigger's templates name: its run's and its pipeline's steps'."""
    specs = [trigger.spec.run_template.spec] if trigger.spec.run_template else []
    if trigger.spec.pipeline_template is not None:
        specs += [step.run.spec for step in trigger.spec.pipeline_template.spec.steps]
    refs: list[SecretKeySelector | None] = [
        s.workspace.publish.credentials_secret_ref for s in specs if s.workspace and s.workspace.publish
    ]
    return {ref.name for ref in refs if ref is not None}


def test_there_is_one_example_per_forge_and_one_of_pipelines() -> None:
    made = {
        path.name: (str(trigger.spec.forge.type), trigger.spec.pipeline_template is not None)
        for path in EXAMPLES
        for trigger in [trigger_of(load(path))]
    }
    assert made == {
        "gitea.yaml": ("gitea", False),
        "github.yaml": ("github", False),
        "gitlab.yaml": ("gitlab", False),
        "gitea-best-of-three.yaml": ("gitea", True),
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_example_validates(path: Path, tmp_path: Path) -> None:
    """Clean, for an operator whose model gateway holds the vendors' keys (the chart's modelGateway)."""
    deployment = tmp_path / "operator.yaml"
    deployment.write_text(
        operator_deployment({**GATEWAY, "HARNESS_MODEL_GATEWAY_VENDORS": "anthropic,openai,gemini"})
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness_operator.cli.main",
            "validate",
            "--strict",
            "--operator",
            str(deployment),
            str(path.relative_to(ROOT)),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 errors, 0 warnings" in result.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_receiver_is_granted_exactly_what_the_trigger_names(path: Path) -> None:
    docs = load(path)
    trigger = trigger_of(docs)
    namespace = trigger.metadata["namespace"]
    role = role_bound_to(docs, RECEIVER)
    assert role["metadata"]["namespace"] == namespace
    assert grants(role) == {
        ("", "serviceaccounts", "impersonate", trigger.spec.service_account_name),
        ("", "secrets", "get", trigger.spec.forge.webhook_secret_ref.name),
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_runs_may_read_only_the_secrets_their_template_names(path: Path) -> None:
    docs = load(path)
    trigger = trigger_of(docs)
    account = trigger.spec.service_account_name
    namespace = trigger.metadata["namespace"]
    assert ("ServiceAccount", account) in docs
    role = role_bound_to(docs, {"kind": "ServiceAccount", "name": account, "namespace": namespace})
    named = publish_secrets(trigger)
    assert named
    runs = {("agentharness.dev", "harnessruns", verb, None) for verb in ("create", "get", "delete")}
    pipeline = trigger.spec.pipeline_template
    if pipeline is not None:  # its runs read earlier steps' runs; the receiver makes and replaces pipelines
        assert pipeline.spec.service_account_name == account  # the trigger's own: no other to act as
        runs |= {("agentharness.dev", "harnessruns", "list", None)}
        runs |= {("agentharness.dev", "harnesspipelines", verb, None) for verb in ("create", "delete")}
        operator = role_bound_to(docs, OPERATOR)
        assert grants(operator) == {("", "serviceaccounts", "impersonate", account)}
    else:
        assert not [d for d in docs.values() if d["kind"] == "RoleBinding" and OPERATOR in d["subjects"]]
    assert grants(role) == {*runs, *{("", "secrets", "get", name) for name in named}}
    # The webhook secret and the reporting token are the receiver's and the operator's, never a run's.
    assert trigger.spec.forge.webhook_secret_ref.name not in named
    assert trigger.spec.forge.token_secret_ref is not None
    assert trigger.spec.forge.token_secret_ref.name not in named


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_commented_kubectl_lines_create_every_secret_referenced(path: Path) -> None:
    trigger = trigger_of(load(path))
    namespace = trigger.metadata["namespace"]
    text = path.read_text()
    created = set(
        re.findall(r"kubectl -n (\S+) create secret generic (\S+) \\\n#\s+--from-file=(\w+)=/dev/stdin", text)
    )
    forge = trigger.spec.forge
    refs = [forge.webhook_secret_ref, forge.token_secret_ref]
    expected = {(namespace, ref.name, ref.key) for ref in refs if ref is not None}
    expected |= {(namespace, name, "token") for name in publish_secrets(trigger)}
    assert created == expected
    assert "--from-literal" not in text  # a value in argv is in the shell's history and in ps


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_forge_side_setup_names_the_receivers_path(path: Path) -> None:
    trigger = trigger_of(load(path))
    hook = f"/hooks/{trigger.metadata['namespace']}/{trigger.metadata['name']}"
    assert re.search(rf"https?://<receiver address>{hook}\s", path.read_text())


def test_the_receiver_named_is_the_one_the_chart_installs() -> None:
    """The examples bind the receiver's ServiceAccount as `helm install harness-operator -n harness-system`
    with triggerReceiver.enabled names it (the real helm, offline)."""
    helm = CLUSTER_HELM if CLUSTER_HELM.exists() else shutil.which("helm")
    if helm is None:
        pytest.skip("helm not built yet: tests/cluster/build-bins builds it (make test does)")
    chart = str(ROOT / "charts" / "harness-operator")
    settings = ["--namespace", "harness-system", "--set", "triggerReceiver.enabled=true"]
    rendered = subprocess.run(
        [str(helm), "template", "harness-operator", chart, *settings],
        capture_output=True,
        text=True,
        check=True,
    )
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    deployment = next(
        d
        for d in docs
        if d["kind"] == "Deployment"
        and d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component")
        == "trigger-receiver"
    )
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert {"kind": "ServiceAccount", "name": account, "namespace": "harness-system"} == RECEIVER
