"""The Helm chart: its copies of the CRDs and catalog match the source, values.yaml fits its schema, and the
admission policies render from the values and cover every reference the API can hold."""

import json
import os
import shutil
import subprocess
import types
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel

from harness_operator.api.crd import build_crds, render_crd_yaml
from harness_operator.api.v1alpha1 import (
    WITH_VALUES_CHECK,
    WITH_VALUES_MESSAGE,
    ConfigMapKeySelector,
    HarnessDefinitionSpec,
    HarnessRunSpec,
    PersistentVolumeClaimRef,
    RunOutputRef,
    SecretKeySelector,
    WorkspaceFrom,
)

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "harness-operator"
CATALOG = ROOT / "operator" / "harness_operator" / "catalog"


@pytest.mark.parametrize("name", sorted(build_crds()))
def test_chart_crds_match_the_models(name: str) -> None:
    assert (CHART / "files" / "crds" / name).read_text() == render_crd_yaml(build_crds()[name]), (
        "run `make generate`"
    )


def test_chart_catalog_matches_the_package() -> None:
    source = {p.name: p.read_text() for p in CATALOG.glob("*.yaml")}
    copied = {p.name: p.read_text() for p in (CHART / "catalog").glob("*.yaml")}
    assert copied == source, "run `make generate`"
    assert len(source) == 18


def schema() -> dict:
    return json.loads((CHART / "values.schema.json").read_text())


def test_default_values_fit_the_schema() -> None:
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema())


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"maxRunsPerNamespace": 0}, ["maxRunsPerNamespace"]),
        ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, ["image", "pullPolicy"]),
        ({"unknownKey": 1}, []),
        ({"catalog": {"enabled": "yes"}}, ["catalog", "enabled"]),
        ({"replicaCount": 2}, ["replicaCount"]),
        ({"imagePullSecrets": ["registry"]}, ["imagePullSecrets", 0]),
        ({"sandboxImagePullSecrets": [{"name": ""}]}, ["sandboxImagePullSecrets", 0, "name"]),
        ({"podLabels": {"tier": 1}}, ["podLabels", "tier"]),
        ({"metrics": {"serviceMonitor": {"interval": "soon"}}}, ["metrics", "serviceMonitor", "interval"]),
        ({"admission": {"enabled": "yes"}}, ["admission", "enabled"]),
        ({"admission": {"runsMaySet": {"hostNetwork": True}}}, ["admission", "runsMaySet"]),
        ({"admission": {"deniedEnvNames": ["LD PRELOAD"]}}, ["admission", "deniedEnvNames", 0]),
        ({"admission": {"allowedImagePrefixes": "harness.local/"}}, ["admission", "allowedImagePrefixes"]),
    ],
)
def test_bad_values_are_refused(patch: dict, path: list[str]) -> None:
    values = {**yaml.safe_load((CHART / "values.yaml").read_text()), **patch}
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(values, schema())
    assert list(caught.value.absolute_path) == path


def test_the_admission_policy_checks_with_as_validate_does() -> None:
    """The CRD cannot see `with`'s keys; the chart's policy and `harnessctl validate` run one check."""
    policy = (CHART / "templates" / "admission-policy.yaml").read_text()
    assert WITH_VALUES_CHECK.format(m="variables.withMaps[i]") in policy
    assert f"': {WITH_VALUES_MESSAGE}'" in policy


def helm_binary() -> str:
    cache = Path(os.environ.get("HARNESS_CLUSTER_CACHE", "/var/cache/harness-operator/cluster"))
    found = shutil.which("helm") or (
        str(cache / "bin" / "helm") if (cache / "bin" / "helm").exists() else None
    )
    if found is None:
        pytest.skip("no helm binary (tests/cluster/build-bins builds one)")
    return found


def render_policies(*settings: str) -> dict[str, dict[str, Any]]:
    """The chart's admission objects, by kind and name suffix (runs, definitions)."""
    out = subprocess.run(
        [helm_binary(), "template", "r", str(CHART), *(a for s in settings for a in ("--set", s))],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d and d["kind"].startswith("ValidatingAdmissionPolicy")]
    return {f"{d['kind']}/{d['metadata']['name'].removeprefix('r-harness-operator-')}": d for d in docs}


def variable(policy: dict[str, Any], name: str) -> str:
    return str(next(v["expression"] for v in policy["spec"]["variables"] if v["name"] == name))


def test_policies_are_bound_and_never_match_the_status_subresource() -> None:
    objects = render_policies()
    assert sorted(objects) == [
        "ValidatingAdmissionPolicy/definitions",
        "ValidatingAdmissionPolicy/runs",
        "ValidatingAdmissionPolicyBinding/definitions",
        "ValidatingAdmissionPolicyBinding/runs",
    ]
    for name in ("runs", "definitions"):
        policy = objects[f"ValidatingAdmissionPolicy/{name}"]["spec"]
        assert policy["failurePolicy"] == "Fail"
        assert [r["resources"] for r in policy["matchConstraints"]["resourceRules"]] == [[f"harness{name}"]]
        binding = objects[f"ValidatingAdmissionPolicyBinding/{name}"]["spec"]
        assert binding == {"policyName": f"r-harness-operator-{name}", "validationActions": ["Deny"]}


def test_admission_can_be_switched_off() -> None:
    assert render_policies("admission.enabled=false") == {}


@pytest.mark.parametrize(
    ("settings", "prefixes"),
    [
        ((), ["harness.local/"]),
        (("sandboxImage=harness.local:5000/team/sandbox:1",), ["harness.local:5000/team/"]),
        (("sandboxImage=sandbox:1",), ["sandbox:", "sandbox@"]),
        (("admission.allowedImagePrefixes={a.internal/x/,b.internal/}",), ["a.internal/x/", "b.internal/"]),
    ],
)
def test_allowed_image_prefixes_default_to_the_sandbox_images_registry_path(
    settings: tuple[str, ...], prefixes: list[str]
) -> None:
    for name in ("runs", "definitions"):
        policy = render_policies(*settings)[f"ValidatingAdmissionPolicy/{name}"]
        assert json.loads(variable(policy, "imagePrefixes")) == prefixes


def placement_rules(policy: dict[str, Any]) -> list[str]:
    return [
        v["message"].split(":")[0]
        for v in policy["spec"]["validations"]
        if "runsMaySet" in v.get("message", "")
    ]


def test_sandbox_placement_is_refused_unless_the_values_allow_it() -> None:
    runs = render_policies()["ValidatingAdmissionPolicy/runs"]
    assert placement_rules(runs) == [
        "spec.sandbox.nodeSelector",
        "spec.sandbox.runtimeClassName",
        "spec.sandbox.tolerations",
    ]
    runs = render_policies("admission.runsMaySet.tolerations=true")["ValidatingAdmissionPolicy/runs"]
    assert placement_rules(runs) == ["spec.sandbox.nodeSelector", "spec.sandbox.runtimeClassName"]


def test_denied_env_names_split_into_exact_names_and_prefixes() -> None:
    policy = render_policies("admission.deniedEnvNames={LD_*,PYTHONPATH}")["ValidatingAdmissionPolicy/runs"]
    assert variable(policy, "deniedEnv") == (
        'variables.envNames.filter(e, e.name in ["PYTHONPATH"] || ["LD_"].exists(p, e.name.startsWith(p)))'
    )


REFERENCES = (SecretKeySelector, ConfigMapKeySelector, RunOutputRef, PersistentVolumeClaimRef, WorkspaceFrom)


def reference_paths(model: type[BaseModel], prefix: str) -> list[str]:
    """Every field path under `model` that names a Secret, ConfigMap, run or claim, as the policy's
    messages spell it (list items as `[' + string(i) + ']`)."""
    paths = []
    for name, field in model.model_fields.items():
        path = f"{prefix}.{field.alias or name}"
        annotation = field.annotation
        if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        if typing.get_origin(annotation) is list:
            annotation = typing.get_args(annotation)[0]
            path += "[' + string(i) + ']"
        if annotation in REFERENCES:
            paths.append(path)
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            paths += reference_paths(annotation, path)
    return paths


@pytest.mark.parametrize(
    ("name", "model"), [("runs", HarnessRunSpec), ("definitions", HarnessDefinitionSpec)]
)
def test_every_reference_the_api_can_hold_is_checked_against_the_requester(
    name: str, model: type[BaseModel]
) -> None:
    """A new input source (a `variables` list, say) fails here until the policy checks it."""
    reads = variable(render_policies()[f"ValidatingAdmissionPolicy/{name}"], "reads")
    paths = reference_paths(model, "spec")
    assert paths
    for path in paths:
        assert f"'field': '{path}'" in reads, path
