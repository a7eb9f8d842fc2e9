"""The Helm chart: its copies of the CRDs and catalog match the source, values.yaml fits its schema, and the
admission policies render from the values and cover every reference the API can hold (a schedule's run
template judged as a run is)."""

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
    HarnessScheduleSpec,
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
        ({"replicaCount": -1}, ["replicaCount"]),
        ({"leaderElection": {"enabled": "yes"}}, ["leaderElection", "enabled"]),
        ({"imagePullSecrets": ["registry"]}, ["imagePullSecrets", 0]),
        ({"sandboxImagePullSecrets": [{"name": ""}]}, ["sandboxImagePullSecrets", 0, "name"]),
        ({"podLabels": {"tier": 1}}, ["podLabels", "tier"]),
        ({"metrics": {"serviceMonitor": {"interval": "soon"}}}, ["metrics", "serviceMonitor", "interval"]),
        ({"admission": {"enabled": "yes"}}, ["admission", "enabled"]),
        ({"admission": {"runsMaySet": {"hostNetwork": True}}}, ["admission", "runsMaySet"]),
        ({"admission": {"deniedEnvNames": ["LD PRELOAD"]}}, ["admission", "deniedEnvNames", 0]),
        ({"admission": {"allowedImagePrefixes": "harness.local/"}}, ["admission", "allowedImagePrefixes"]),
        ({"publishing": {"signing": {"secretName": "Not A Name"}}}, ["publishing", "signing", "secretName"]),
        ({"publishing": {"signing": {"enabled": "yes"}}}, ["publishing", "signing", "enabled"]),
        ({"publishing": {"signing": {"committerEmail": "bot"}}}, ["publishing", "signing", "committerEmail"]),
        ({"publishing": {"signing": {"key": "x"}}}, ["publishing", "signing"]),
        ({"approvals": {"allowSelfApproval": "no"}}, ["approvals", "allowSelfApproval"]),
        ({"approvals": {"approvers": ["alice"]}}, ["approvals"]),
        ({"approvals": {"exemptGroups": [""]}}, ["approvals", "exemptGroups", 0]),
    ],
)
def test_bad_values_are_refused(patch: dict, path: list[str]) -> None:
    values = {**yaml.safe_load((CHART / "values.yaml").read_text()), **patch}
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(values, schema())
    assert list(caught.value.absolute_path) == path


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


# The policies that judge a run spec, and how their messages spell its path.
RUN_SPECS = {"runs": "spec", "schedules": "spec.runTemplate.spec"}


@pytest.mark.parametrize(("name", "field"), RUN_SPECS.items())
def test_the_admission_policy_checks_with_as_validate_does(name: str, field: str) -> None:
    """The CRD cannot see `with`'s keys; the chart's policy and `harnessctl validate` run one check."""
    policy = render_policies()[f"ValidatingAdmissionPolicy/{name}"]
    root = "object." + field
    assert variable(policy, "withMaps").startswith(f"[{root}.?with.orValue({{}})]")
    assert WITH_VALUES_CHECK.format(m="variables.withMaps[i]") in variable(policy, "badWith")
    (check,) = [v for v in policy["spec"]["validations"] if v["expression"] == "size(variables.badWith) == 0"]
    assert check["messageExpression"].startswith(f"(variables.badWith[0] == 0 ? '{field}.with' : '{field}.")
    assert check["messageExpression"].endswith(f"': {WITH_VALUES_MESSAGE}'")


def test_policies_are_bound_and_never_match_the_status_subresource() -> None:
    objects = render_policies()
    assert sorted(objects) == [
        f"{kind}/{name}"
        for kind in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
        for name in (
            "approvals",
            "definitions",
            "mcp-servers",
            "operator-pods",
            "pipelines",
            "run-user",
            "runs",
            "schedules",
            "trigger-secrets",
            "triggers",
        )
    ]
    for name in ("approvals", "mcp-servers", "operator-pods", "run-user", "trigger-secrets"):
        assert objects[f"ValidatingAdmissionPolicy/{name}"]["spec"]["failurePolicy"] == "Fail"
        binding = objects[f"ValidatingAdmissionPolicyBinding/{name}"]["spec"]
        assert binding == {"policyName": f"r-harness-operator-{name}", "validationActions": ["Deny"]}
    for name in ("runs", "definitions", "schedules", "triggers"):
        policy = objects[f"ValidatingAdmissionPolicy/{name}"]["spec"]
        assert policy["failurePolicy"] == "Fail"
        assert [r["resources"] for r in policy["matchConstraints"]["resourceRules"]] == [[f"harness{name}"]]
        assert [r["operations"] for r in policy["matchConstraints"]["resourceRules"]] == [
            ["CREATE", "UPDATE"]
        ]
        binding = objects[f"ValidatingAdmissionPolicyBinding/{name}"]["spec"]
        assert binding == {"policyName": f"r-harness-operator-{name}", "validationActions": ["Deny"]}
    # A pipeline's account, named by a pipeline or by a schedule's or trigger's pipelineTemplate.
    pipelines = objects["ValidatingAdmissionPolicy/pipelines"]["spec"]
    assert pipelines["failurePolicy"] == "Fail"
    assert [r["resources"] for r in pipelines["matchConstraints"]["resourceRules"]] == [
        ["harnesspipelines", "harnessschedules", "harnesstriggers"]
    ]
    binding = objects["ValidatingAdmissionPolicyBinding/pipelines"]["spec"]
    assert binding["policyName"] == "r-harness-operator-pipelines" and binding["validationActions"] == [
        "Deny"
    ]


def test_a_triggers_secrets_are_judged_for_its_author() -> None:
    """The operator sends spec.forge.tokenSecretRef's value to spec.forge.url: the trigger's author must
    be allowed to get it (and the webhook Secret), or a trigger would carry any Secret to any host; with a
    run template or only a pipeline template."""
    secrets = render_policies()["ValidatingAdmissionPolicy/trigger-secrets"]["spec"]
    assert [c["name"] for c in secrets["matchConditions"]] == ["creates-or-changes-the-spec"]
    reads = variable({"spec": secrets}, "reads")
    assert (
        "'field': 'spec.forge.tokenSecretRef'" in reads and "object.spec.forge.?tokenSecretRef.?name" in reads
    )
    assert "'field': 'spec.forge.webhookSecretRef'" in reads and "runTemplate" not in reads
    assert sum("check('get').allowed()" in v["expression"] for v in secrets["validations"]) == 2
    # Then what its run template names, as a schedule's: judged for the trigger's author when applied.
    policy = render_policies()["ValidatingAdmissionPolicy/triggers"]
    assert policy["spec"]["matchConditions"][0]["expression"] == "has(object.spec.runTemplate)"
    assert "object.spec.runTemplate.spec.?credentials" in variable(policy, "reads")
    checks = [v["expression"] for v in policy["spec"]["validations"]]
    assert sum("check('get').allowed()" in c for c in checks) == 74
    schedules = render_policies()["ValidatingAdmissionPolicy/schedules"]
    names = [v["name"] for v in policy["spec"]["variables"]]
    assert names == [v["name"] for v in schedules["spec"]["variables"]]


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
    for name in ("runs", "definitions", "schedules", "triggers"):
        policy = render_policies(*settings)[f"ValidatingAdmissionPolicy/{name}"]
        assert json.loads(variable(policy, "imagePrefixes")) == prefixes


def placement_rules(policy: dict[str, Any]) -> list[str]:
    return [
        v["message"].split(":")[0]
        for v in policy["spec"]["validations"]
        if "runsMaySet" in v.get("message", "")
    ]


@pytest.mark.parametrize(("name", "field"), RUN_SPECS.items())
def test_sandbox_placement_is_refused_unless_the_values_allow_it(name: str, field: str) -> None:
    policy = render_policies()[f"ValidatingAdmissionPolicy/{name}"]
    assert placement_rules(policy) == [
        f"{field}.sandbox.nodeSelector",
        f"{field}.sandbox.runtimeClassName",
        f"{field}.sandbox.tolerations",
    ]
    policy = render_policies("admission.runsMaySet.tolerations=true")[f"ValidatingAdmissionPolicy/{name}"]
    assert placement_rules(policy) == [f"{field}.sandbox.nodeSelector", f"{field}.sandbox.runtimeClassName"]
    (rule,) = [
        v for v in policy["spec"]["validations"] if v.get("message", "").startswith(f"{field}.sandbox.node")
    ]
    assert rule["expression"] == (
        f"!has(object.{field}.sandbox) || !has(object.{field}.sandbox.nodeSelector) "
        f"|| size(object.{field}.sandbox.nodeSelector) == 0"
    )


@pytest.mark.parametrize(("name", "field"), RUN_SPECS.items())
def test_denied_env_names_split_into_exact_names_and_prefixes(name: str, field: str) -> None:
    policy = render_policies("admission.deniedEnvNames={LD_*,PYTHONPATH}")[
        f"ValidatingAdmissionPolicy/{name}"
    ]
    assert variable(policy, "deniedEnv") == (
        'variables.envNames.filter(e, e.name in ["PYTHONPATH"] || ["LD_"].exists(p, e.name.startsWith(p)))'
    )
    env_names = variable(policy, "envNames")
    assert (
        f"'field': '{field}.env[' + string(i) + '].name', 'name': string(object.{field}.env[i].name)"
        in env_names
    )
    assert f"'field': '{field}.credentials[' + string(i) + '].env'" in env_names


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
    ("name", "model"),
    [("runs", HarnessRunSpec), ("definitions", HarnessDefinitionSpec), ("schedules", HarnessScheduleSpec)],
)
def test_every_reference_the_api_can_hold_is_checked_against_the_requester(
    name: str, model: type[BaseModel]
) -> None:
    """A new input source (a `variables` list, say) fails here until the policy checks it; a schedule's
    references are those of its run template (spec.runTemplate.spec.*)."""
    reads = variable(render_policies()[f"ValidatingAdmissionPolicy/{name}"], "reads")
    # A pipelineTemplate's runs are created as its ServiceAccount and judged as any run it creates: the
    # pipelines policy judges only whether the schedule's author may act as that account.
    paths = [p for p in reference_paths(model, "spec") if not p.startswith("spec.pipelineTemplate.")]
    assert paths
    for path in paths:
        assert f"'field': '{path}'" in reads, path
    if name == "schedules":
        assert "'field': 'spec.runTemplate.spec.credentials[' + string(i) + '].secretKeyRef'" in reads
        assert all(p.startswith("spec.runTemplate.spec.") for p in paths)


def readings(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in policy["spec"]["validations"] if "authorizer" in v["expression"]]


def test_a_schedules_run_template_is_judged_against_the_schedules_author_as_a_run_is() -> None:
    """The operator creates a schedule's runs with its own rights, so the runs policy would admit any of
    them: the schedules policy makes the same checks on spec.runTemplate.spec, for the schedule's author,
    with the template's field names. Its CEL is the runs policy's with that one path changed."""
    objects = render_policies()
    runs, schedules = (objects[f"ValidatingAdmissionPolicy/{n}"]["spec"] for n in ("runs", "schedules"))
    assert schedules["failurePolicy"] == "Fail"
    conditions = {c["name"]: c["expression"] for c in schedules["matchConditions"]}
    assert conditions["has-a-run-template"] == "has(object.spec.runTemplate)"  # pipelineTemplate: pipelines
    condition = conditions["creates-or-changes-the-spec"]
    assert condition.startswith("request.operation == 'CREATE' || (object.spec != oldObject.spec")
    # A suspend alone is not judged: every other spec field must be unchanged, so a field added to the
    # spec fails here until the exemption compares it.
    assert "!(object.spec.?suspend.orValue(false)" in condition
    for field in HarnessScheduleSpec.model_fields.values():
        key = field.alias or ""
        if key not in ("suspend", "pipelineTemplate"):
            assert f"object.spec.?{key} == oldObject.spec.?{key}" in condition or (
                f"object.spec.{key} == oldObject.spec.{key}" in condition
            ), key
    assert objects["ValidatingAdmissionPolicyBinding/schedules"]["spec"] == {
        "policyName": "r-harness-operator-schedules",
        "validationActions": ["Deny"],
    }

    def over_the_template(part: Any) -> str:
        text = json.dumps(part)
        for old, new in (
            ("object.spec", "object.spec.runTemplate.spec"),
            ("'spec.", "'spec.runTemplate.spec."),
            ('"message": "spec.', '"message": "spec.runTemplate.spec.'),
        ):
            text = text.replace(old, new)
        return text

    for part in ("variables", "validations"):
        assert json.dumps(schedules[part]) == over_the_template(runs[part]), part
    # each checked reference is one `get` by the requesting user, named by the template's field
    reads = variable({"spec": schedules}, "reads")
    assert (
        "{'field': 'spec.runTemplate.spec.promptFrom.secretKeyRef', 'group': '', 'resource': 'secrets', "
        "'kind': 'Secret', 'name': string(object.spec.runTemplate.spec.?promptFrom.?secretKeyRef.?name"
        ".orValue(''))"
    ) in reads
    assert "string(object.spec.runTemplate.spec.credentials[i].secretKeyRef.name)" in reads
    assert len(readings({"spec": schedules})) == len(readings({"spec": runs})) == 74
    first = readings({"spec": schedules})[0]
    assert first["expression"] == (
        "size(variables.reads) <= 0 || authorizer.group(variables.reads[0].group).resource("
        "variables.reads[0].resource).namespace(request.namespace).name(variables.reads[0].name)"
        ".check('get').allowed()"
    )
    assert first["messageExpression"].startswith(
        "variables.reads[0].field + ': user \"' + request.userInfo.username + '\" may not get '"
    )
    (image,) = [v for v in schedules["validations"] if "imagePrefixes.exists" in v["expression"]]
    assert "object.spec.runTemplate.spec.?sandbox.?image" in image["expression"]
    assert image["messageExpression"].startswith("'spec.runTemplate.spec.sandbox.image: image \"'")


def test_the_schedules_policy_is_scoped_and_switched_off_with_the_others() -> None:
    scoped = render_policies("watchNamespaces={team-a}")["ValidatingAdmissionPolicyBinding/schedules"]
    assert scoped["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "team-a"
    ]
    assert "ValidatingAdmissionPolicy/schedules" not in render_policies("admission.enabled=false")


def resources(policy: dict[str, Any]) -> dict[str, list[str]]:
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in rules)
    return {r["apiGroups"][0]: sorted(r["resources"]) for r in rules}


def test_only_the_operator_and_the_job_controller_make_pods_with_the_operators_label() -> None:
    """Every kind whose controller makes pods from a template a tenant writes is judged, and pods
    themselves; the operator's ServiceAccount and the exempt groups are never judged; only the listed
    pod creators (the Job controller) may give a pod the label."""
    policy = render_policies()["ValidatingAdmissionPolicy/operator-pods"]
    assert resources(policy) == {
        "": ["persistentvolumeclaims", "pods", "replicationcontrollers"],
        "batch": ["cronjobs", "jobs"],
        "apps": ["daemonsets", "deployments", "replicasets", "statefulsets"],
    }
    (condition,) = policy["spec"]["matchConditions"]
    assert condition["expression"].startswith(
        "request.userInfo.username != 'system:serviceaccount:default:r-harness-operator'"
    )
    assert '["system:masters"]' in condition["expression"]
    assert variable(policy, "podCreator").endswith(
        'request.userInfo.username in ["system:serviceaccount:kube-system:job-controller"]'
    )
    label = "'app.kubernetes.io/managed-by' in l && l['app.kubernetes.io/managed-by'] == 'harness-operator'"
    assert label in variable(policy, "labelled") and label in variable(policy, "objectLabelled")
    own = render_policies(
        "admission.operatorPods.podCreators={system:kube-controller-manager}",
        "admission.operatorPods.exemptGroups=null",
        "serviceAccount.name=ops",
    )["ValidatingAdmissionPolicy/operator-pods"]
    assert variable(own, "podCreator").endswith('["system:kube-controller-manager"]')
    assert "'system:serviceaccount:default:ops'" in own["spec"]["matchConditions"][0]["expression"]


def test_mcp_urls_are_judged_for_runs_schedules_triggers_and_definitions_with_the_operators_ranges() -> None:
    from harness_operator.core.access.mcp import MCP_REFUSED_CIDRS

    policy = render_policies()["ValidatingAdmissionPolicy/mcp-servers"]
    assert resources(policy) == {
        "agentharness.dev": ["harnessdefinitions", "harnessruns", "harnessschedules", "harnesstriggers"]
    }
    assert json.loads(variable(policy, "refused")) == [str(n) for n in MCP_REFUSED_CIDRS]
    assert json.loads(variable(policy, "allowedCIDRs")) == []
    allowed = render_policies("mcp.allowedCIDRs={10.88.0.1/32}", "mcp.allowedHosts={*.tools.svc}")
    policy = allowed["ValidatingAdmissionPolicy/mcp-servers"]
    assert json.loads(variable(policy, "allowedCIDRs")) == ["10.88.0.1/32"]
    assert json.loads(variable(policy, "allowedHosts")) == ["*.tools.svc"]
    (check,) = policy["spec"]["validations"]
    assert "chart value mcp.allowedCIDRs or mcp.allowedHosts" in check["messageExpression"]


def test_the_user_label_is_judged_by_the_encoding_the_operator_documents() -> None:
    """core/objects/naming.encode_user_label and the policy write a username the same way."""
    from harness_operator.core.objects.naming import encode_user_label

    policy = render_policies()["ValidatingAdmissionPolicy/run-user"]
    # A trigger's template is judged for shared claims only: the receiver sets its runs' user label.
    assert resources(policy) == {"agentharness.dev": ["harnessruns", "harnessschedules", "harnesstriggers"]}
    assert variable(policy, "user") == (
        "request.userInfo.username.replace('_', '__').replace('@', '_at_').replace(':', '_c_')"
    )
    assert variable(policy, "encodable") == (
        "variables.user.matches('^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$')"
    )
    assert encode_user_label("a_b@c:d") == "a__b_at_c_c_d"
