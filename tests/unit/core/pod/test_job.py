"""Child builders: golden YAML for every builder and mode, and tenant input never beats our settings.

Regenerate the golden files after an intended change with UPDATE_GOLDEN=1 and review the diff.
"""

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.core.attempt import decide_attempt, decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.ownership import compute_data_hash
from harness_operator.core.plan.planning import PlanError
from harness_operator.core.plan.plans import build_plans
from harness_operator.core.pod.job import DEADLINE_SLACK_SECONDS, build_job, grace_period
from harness_operator.core.pod.network_policy import build_network_policy
from harness_operator.core.pod.run_data import build_output_config_map, build_plan_secret
from harness_operator.core.pod.workspace import build_workspace_claim, workspace_mount_path
from harness_operator.core.queue.kueue import queue_of
from harness_operator.core.resolve.resolution import AttemptTarget

GOLDEN = Path(__file__).parents[2] / "golden"
CONFIG = OperatorConfig()
NOW = datetime(2026, 12, 1, tzinfo=UTC)
DEFINITION = HarnessDefinitionSpec.model_validate(
    {
        "binary": "claude",
        "image": "harness.local/claude:2.1",
        "credentials": [
            {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "anthropic", "key": "api-key"}}
        ],
        "env": [{"name": "DISABLE_TELEMETRY", "value": "1"}],
        "egress": [{"host": "api.anthropic.com", "ports": [443]}, {"cidr": "10.20.0.0/16", "ports": [8443]}],
    }
)


def make_run(spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "review", "namespace": "team-a", "uid": "uid-1", "labels": labels or {}},
            "spec": {"provider": "claude", "prompt": "Review.", **(spec or {})},
        }
    )


def golden(name: str, obj: Any) -> None:
    path = GOLDEN / f"{name}.yaml"
    text = yaml.safe_dump(obj, sort_keys=True)
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{path.name} differs from the builder's output"


def target(index: int = 1) -> AttemptTarget:
    return AttemptTarget(index=index, provider="claude", definition=DEFINITION, position=1)


JOB_CASES = {
    "job-minimal": ({}, {}),
    "job-limits-and-sandbox": (
        {
            "limits": {"timeoutSeconds": 600, "gracePeriodSeconds": 10},
            "sandbox": {
                "image": "harness.local/override:1",
                "runtimeClassName": "gvisor",
                "nodeSelector": {"pool": "agents"},
                "tolerations": [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}],
                "resources": {"requests": {"cpu": "2"}, "limits": {"memory": "4Gi"}},
            },
            "env": [{"name": "EXTRA", "value": "x"}],
            "credentials": [
                {"env": "GH_TOKEN", "secretKeyRef": {"name": "gh", "key": "t"}, "optional": True}
            ],
        },
        {},
    ),
    "job-git-workspace": (
        {
            "workspace": {
                "workingDir": "/work/repo",
                "git": {
                    "url": "https://git.example.internal/a.git",
                    "ref": "main",
                    "credentialsSecretRef": {"name": "git", "key": "token"},
                },
            }
        },
        {},
    ),
    "job-existing-claim": ({"workspace": {"volume": {"persistentVolumeClaim": {"claimName": "shared"}}}}, {}),
    "job-agent-claim": ({"workspace": {"volume": {"scope": "agent"}}}, {}),
    "job-kueue": ({}, {"kueue.x-k8s.io/queue-name": "agents"}),
}


@pytest.mark.parametrize("case", sorted(JOB_CASES))
def test_job_golden(case: str) -> None:
    spec, labels = JOB_CASES[case]
    run = make_run(spec, labels)
    golden(case, build_job(run, decide_attempt(run, target(), CONFIG), CONFIG, queue=queue_of(run)))


def test_job_golden_with_image_pull_secrets() -> None:
    """A private registry: every sandbox pod names the pull Secrets the operator was configured with."""
    config = OperatorConfig(image_pull_secrets=("registry-a", "registry-b"))
    golden(
        "job-image-pull-secrets", build_job(make_run(), decide_attempt(make_run(), target(), config), config)
    )


def test_config_reads_image_pull_secrets_from_env() -> None:
    env = {"HARNESS_IMAGE_PULL_SECRETS": "registry-a, registry-b,"}
    assert OperatorConfig.from_env(env).image_pull_secrets == ("registry-a", "registry-b")
    assert OperatorConfig.from_env({"HARNESS_IMAGE_PULL_SECRETS": ""}).image_pull_secrets == ()


@pytest.mark.parametrize("mode", ["none", "provider", "allowlist", "unrestricted"])
def test_network_policy_golden(mode: str) -> None:
    spec = {"sandbox": {"networkPolicy": mode, "egress": [{"host": "git.example.internal", "ports": [443]}]}}
    golden(
        f"networkpolicy-{mode}",
        build_network_policy(make_run(spec), decide_attempt(make_run(spec), target(2), CONFIG), CONFIG),
    )


@pytest.mark.parametrize("scope", ["run", "agent", "agentUser"])
def test_workspace_claim_golden(scope: str) -> None:
    run = make_run(
        {"workspace": {"volume": {"scope": scope, "size": "5Gi", "storageClassName": "fast"}}},
        {"agentharness.dev/user": "alice"},
    )
    golden(f"pvc-{scope}", build_workspace_claim(run, "claude"))


def test_no_claim_without_scope() -> None:
    assert build_workspace_claim(make_run(), "claude") is None


def test_plan_secret_golden() -> None:
    plans = [{"argv": ["claude", "-p", "Review."], "attempt": 1}, {"argv": ["codex", "exec"], "attempt": 2}]
    golden("plan-secret", build_plan_secret(make_run(), plans))


def test_output_config_map_golden() -> None:
    golden("output-configmap", build_output_config_map(make_run(), "All good.\n"))


def test_a_validated_json_output_is_kept_beside_the_text_and_hashed_with_it() -> None:
    plain = build_output_config_map(make_run(), '{"a": 1}')
    structured = build_output_config_map(make_run(), '{"a": 1}', '{"a":1}')
    assert structured["data"] == {"output": '{"a": 1}', "output.json": '{"a":1}'}
    assert structured["immutable"] is True
    annotations = (plain["metadata"]["annotations"], structured["metadata"]["annotations"])
    assert annotations[0] != annotations[1]  # the hash covers output.json too


def pod(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["template"]["spec"]


def test_job_is_restricted_and_has_no_api_token() -> None:
    spec = pod(build_job(make_run(), decide_attempt(make_run(), target(), CONFIG), CONFIG))
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    ctx = spec["containers"][0]["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["capabilities"] == {"drop": ["ALL"]}


def test_credentials_only_as_secret_key_refs_and_never_in_argv() -> None:
    job = build_job(make_run(), decide_attempt(make_run(), target(), CONFIG), CONFIG)
    env = {e["name"]: e for e in pod(job)["containers"][0]["env"]}
    assert env["ANTHROPIC_API_KEY"] == {
        "name": "ANTHROPIC_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "anthropic", "key": "api-key"}},
    }
    assert "anthropic" not in " ".join(pod(job)["containers"][0]["command"])


def test_run_grant_overrides_definition_grant_of_same_env() -> None:
    run = make_run(
        {"credentials": [{"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "mine", "key": "k"}}]}
    )
    env = {
        e["name"]: e
        for e in pod(build_job(run, decide_attempt(run, target(), CONFIG), CONFIG))["containers"][0]["env"]
    }
    assert env["ANTHROPIC_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "k"}


def test_tenant_labels_cannot_override_ours() -> None:
    run = make_run(labels={"agentharness.dev/run": "someone-else", "app.kubernetes.io/managed-by": "me"})
    job = build_job(run, decide_attempt(run, target(2), CONFIG), CONFIG)
    for labels in (job["metadata"]["labels"], job["spec"]["template"]["metadata"]["labels"]):
        assert labels["agentharness.dev/run"] == "review"
        assert labels["app.kubernetes.io/managed-by"] == "harness-operator"
        assert labels["agentharness.dev/attempt"] == "2"


def test_each_attempt_mounts_its_own_plan() -> None:
    job = build_job(make_run(), decide_attempt(make_run(), target(3), CONFIG), CONFIG)
    plan = next(v for v in pod(job)["volumes"] if v["name"] == "plan")
    assert plan["secret"]["items"] == [{"key": "attempt-3.json", "path": "plan.json"}]
    assert job["metadata"]["name"] == "review-a3"


def test_job_deadline_is_a_backstop_after_the_runners_own_timeout() -> None:
    job = build_job(
        make_run({"limits": {"timeoutSeconds": 100, "gracePeriodSeconds": 7}}),
        decide_attempt(
            make_run({"limits": {"timeoutSeconds": 100, "gracePeriodSeconds": 7}}), target(), CONFIG
        ),
        CONFIG,
    )
    assert job["spec"]["activeDeadlineSeconds"] == 100 + 7 + 60
    assert job["spec"]["backoffLimit"] == 0


def test_children_are_owned_by_the_run() -> None:
    run = make_run()
    for obj in (
        build_job(run, decide_attempt(run, target(), CONFIG), CONFIG),
        build_network_policy(run, decide_attempt(run, target(), CONFIG), CONFIG),
        build_plan_secret(run, []),
        build_output_config_map(run, "x"),
    ):
        assert obj["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "agentharness.dev/v1alpha1",
                "kind": "HarnessRun",
                "name": "review",
                "uid": "uid-1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]


def test_shared_claims_are_not_owned_so_they_are_kept() -> None:
    run = make_run({"workspace": {"volume": {"scope": "agent"}}})
    claim = build_workspace_claim(run, "claude")
    assert claim is not None
    assert "ownerReferences" not in claim["metadata"]
    assert claim["metadata"]["name"] == "harness-ws-claude"


def test_workspace_volume_mounts_on_the_working_dirs_parent() -> None:
    assert workspace_mount_path("/workspace/repo") == "/workspace"
    assert workspace_mount_path("/workspace/repo/") == "/workspace"
    assert workspace_mount_path("/workspace") == "/workspace"
    assert workspace_mount_path("/a/b/c") == "/a/b"


def test_plans_over_what_the_plan_secret_holds_are_refused_naming_the_fields() -> None:
    """Each attempt's plan carries the prompt: many retries of a long stdin would not fit one Secret."""
    run, prompt = make_run({"retry": {"limit": 5}}), "x" * 100_000  # read from a ConfigMap, say
    targets = [
        AttemptTarget(i, "claude", DEFINITION, 1) for i in range(1, 13)
    ]  # twelve attempts of one provider
    with pytest.raises(PlanError) as caught:
        build_plans(run, decide_attempts(run, targets, OperatorConfig()), prompt, None, NOW, OperatorConfig())
    assert caught.value.reason == "PlanTooLarge"
    assert "12 attempts" in caught.value.message and "spec.retry.limit" in caught.value.message
    assert (
        len(
            build_plans(
                run, decide_attempts(run, targets[:8], OperatorConfig()), prompt, None, NOW, OperatorConfig()
            )
        )
        == 8
    )


def test_plain_env_travels_in_the_plan_never_on_the_container() -> None:
    """LD_PRELOAD, PYTHONPATH, NODE_OPTIONS from a run would reach the runner's own interpreter as
    container env; they go in the plan, which the runner applies to the agent process only."""
    loaders = [{"name": n, "value": "/tmp/x"} for n in ("LD_PRELOAD", "PYTHONPATH", "NODE_OPTIONS")]
    run = make_run({"env": loaders})
    env = pod(build_job(run, decide_attempt(run, target(), CONFIG), CONFIG))["containers"][0]["env"]
    assert [e["name"] for e in env] == ["ANTHROPIC_API_KEY", "HOME"]
    (plan,) = build_plans(
        run, decide_attempts(run, [target()], OperatorConfig()), "p", None, NOW, OperatorConfig()
    )
    assert {e["name"]: e["value"] for e in plan["env"]} == {
        "DISABLE_TELEMETRY": "1",
        "LD_PRELOAD": "/tmp/x",
        "NODE_OPTIONS": "/tmp/x",
        "PYTHONPATH": "/tmp/x",
    }


def test_values_taken_from_secrets_reach_every_attempts_runner_for_redaction() -> None:
    run = make_run()
    retry = AttemptTarget(index=2, provider="claude", definition=DEFINITION, position=1)
    plans = build_plans(
        run,
        decide_attempts(run, [target(), retry], OperatorConfig()),
        "p",
        None,
        NOW,
        OperatorConfig(),
        secret_values=["b", "a", "b"],
    )
    assert [plan["redactedValues"] for plan in plans] == [["a", "b"], ["a", "b"]]
    (plain,) = build_plans(
        run, decide_attempts(run, [target()], OperatorConfig()), "p", None, NOW, OperatorConfig()
    )
    assert "redactedValues" not in plain


def test_a_deleted_pod_is_never_replaced() -> None:
    spec = build_job(make_run(), decide_attempt(make_run(), target(), CONFIG), CONFIG)["spec"]
    assert (spec["backoffLimit"], spec["podReplacementPolicy"]) == (0, "Failed")


def test_plan_secret_and_output_carry_the_hash_of_their_data() -> None:
    secret = build_plan_secret(make_run(), [{"argv": ["a"]}])
    cm = build_output_config_map(make_run(), "text")
    assert secret["metadata"]["annotations"] == {
        "agentharness.dev/content-sha256": compute_data_hash(secret["stringData"])
    }
    assert cm["metadata"]["annotations"] == {"agentharness.dev/content-sha256": compute_data_hash(cm["data"])}
    assert cm["immutable"] is True


def test_plans_leave_out_fields_at_their_defaults() -> None:
    """A sandbox image older than the operator rejects unknown plan fields: a plan that uses nothing
    new (no table prices, no pinned CLI version) carries none of the newer keys."""
    (plan,) = build_plans(
        make_run(),
        decide_attempts(make_run(), [target()], OperatorConfig()),
        "p",
        None,
        NOW,
        OperatorConfig(),
    )
    assert not {"tablePricing", "priceTable", "cliVersion"} & set(plan)
    assert {"attempt", "totalAttempts", "provider", "binary"} <= set(plan)


def test_an_attempt_without_a_timeout_still_has_a_deadline():
    """A run with no limits.timeoutSeconds ran without any deadline: the chart's runs.maxRunSeconds is it."""
    config = OperatorConfig(max_run_seconds=3600)
    run = make_run()
    job = build_job(run, decide_attempt(run, AttemptTarget(1, "claude", DEFINITION, 1), config), config)
    assert job["spec"]["activeDeadlineSeconds"] == 3600 + grace_period(run, config) + DEADLINE_SLACK_SECONDS


def test_a_kueue_run_gives_its_job_its_queue_and_priority_class_and_only_with_a_queue() -> None:
    labels = {"kueue.x-k8s.io/queue-name": "agents", "kueue.x-k8s.io/priority-class": "low"}
    job = build_job(
        make_run({}, labels), decide_attempt(make_run({}, labels), target(), CONFIG), CONFIG, queue="agents"
    )
    assert {k: v for k, v in job["metadata"]["labels"].items() if k.startswith("kueue.x-k8s.io/")} == labels
    assert job["spec"]["suspend"] is True
    defaulted = build_job(
        make_run({}, {}), decide_attempt(make_run({}, {}), target(), CONFIG), CONFIG, queue="default"
    )  # a default queue
    assert defaulted["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "default"
    alone = build_job(
        make_run({}, {"kueue.x-k8s.io/priority-class": "low"}),
        decide_attempt(make_run({}, {"kueue.x-k8s.io/priority-class": "low"}), target(), CONFIG),
        CONFIG,
    )
    assert "kueue.x-k8s.io/priority-class" not in alone["metadata"]["labels"]
    assert "suspend" not in alone["spec"]
