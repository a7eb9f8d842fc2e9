"""The Job that publishes an approved change (core/pod/kept_publish.py): one container, the publisher in
PublishKept mode; the write token only there; no agent, no workspace; the kept patch read-only; the
attempt's labels (its NetworkPolicy) and git way out; the kept change as the status records it."""

from __future__ import annotations

import json
from typing import Any

from tests.unit.core.pod.test_publish import CONFIG, TARGET, make_run
from tests.unit.core.status.test_approval import awaiting_run

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.changes import PUBLISH_PLAN_ENV, PublishMode, PublishPlan
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.objects.naming import LABEL_ATTEMPT, publish_job_name
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.kept_publish import build_publish_job
from harness_operator.core.pod.network_policy import build_network_policy


def job_of(run: HarnessRun) -> dict[str, Any]:
    job = build_publish_job(run, decide_attempt(run, TARGET, CONFIG), CONFIG)
    assert job is not None
    return job


def test_one_container_the_publisher_with_the_token_and_no_agent() -> None:
    run = awaiting_run()
    job = job_of(run)
    spec = job["spec"]["template"]["spec"]
    [container] = spec["containers"]
    assert "initContainers" not in spec
    assert container["name"] == "publish"
    assert container["command"][-1] == "harness_operator.runner.publish_kept"
    secrets = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert secrets == {
        "GIT_TOKEN": {"name": "read", "key": "token"},
        "HARNESS_PUBLISH_TOKEN": {"name": "write", "key": "token"},
    }
    # No credential of the agent's (its vendor key), no workspace volume, no service account token.
    assert "ANTHROPIC_API_KEY" not in json.dumps(job)
    assert {v["name"] for v in spec["volumes"]} == {"publish", "kept"}
    assert spec["automountServiceAccountToken"] is False and spec["restartPolicy"] == "Never"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["kept"]["readOnly"] is True
    # The same pod security as the attempt's publisher.
    attempt = build_job(run, decide_attempt(run, TARGET, CONFIG), CONFIG)["spec"]["template"]["spec"]
    [sidecar] = [c for c in attempt["initContainers"] if c["name"] == "publish"]
    assert (
        container["securityContext"] == sidecar["securityContext"] and container["image"] == sidecar["image"]
    )
    assert spec["securityContext"] == attempt["securityContext"]
    assert job["spec"]["backoffLimit"] == 0 and job["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_the_plan_publishes_the_kept_change_the_status_records() -> None:
    job = job_of(awaiting_run())
    [container] = job["spec"]["template"]["spec"]["containers"]
    [value] = [e["value"] for e in container["env"] if e["name"] == PUBLISH_PLAN_ENV]
    plan = PublishPlan.model_validate_json(value.replace("$$", "$"))
    assert plan.mode == PublishMode.publish_kept and plan.branch == "harness/fix-1"
    assert plan.kept is not None
    assert (plan.kept.base, plan.kept.tree, plan.kept.patch_sha256) == ("a" * 40, "d" * 40, "c" * 64)
    assert plan.secret_envs == [] and plan.pull_request is not None


def test_the_patch_and_output_come_from_the_runs_configmaps() -> None:
    spec = job_of(awaiting_run())["spec"]["template"]["spec"]
    [kept] = [v for v in spec["volumes"] if v["name"] == "kept"]
    sources = kept["projected"]["sources"]
    assert sources[0]["configMap"]["name"] == "fix-1-changes"
    assert sources[0]["configMap"]["items"] == [{"key": "changes.patch", "path": "changes.patch"}]
    assert sources[1]["configMap"] == {
        "name": "fix-1-output",
        "items": [{"key": "output", "path": "output"}],
        "optional": True,
    }


def test_the_attempts_network_policy_selects_the_publish_pod() -> None:
    run = awaiting_run()
    job = job_of(run)
    policy = build_network_policy(run, decide_attempt(run, TARGET, CONFIG), CONFIG)
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    # The Job itself is no attempt's: the attempts' observation skips it.
    assert LABEL_ATTEMPT not in job["metadata"]["labels"]


def test_a_long_run_name_still_fits() -> None:
    name = "r" * 63
    assert len(publish_job_name(name)) <= 63 and publish_job_name(name) != publish_job_name("r" * 62 + "s")


def test_no_job_without_a_complete_kept_change() -> None:
    run = make_run()  # no status: nothing was kept
    assert build_publish_job(run, decide_attempt(run, TARGET, CONFIG), CONFIG) is None
