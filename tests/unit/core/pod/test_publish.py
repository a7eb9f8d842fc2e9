"""Publishing a run's change and starting from one (core/pod/publish.py), and what the Job, the observation
and the status make of it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun, Phase
from harness_operator.contract.changes import PUBLISH_PLAN_ENV, ChangesReport, PublishPlan
from harness_operator.controller.cache import slim_pod
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import AGENT_CONTAINER, PUBLISH_CONTAINER, RUNNER_CONTAINER
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.publish import (
    WorkspaceStart,
    branch_problem,
    build_publish_plan,
    check_publish,
    compute_changes,
    lost_publish,
    resolve_start,
)
from harness_operator.core.pod.run_data import build_changes_config_map
from harness_operator.core.resolve.resolution import AttemptTarget, Rejection, Waiting
from harness_operator.core.status.observed import FINISHED, RUNNING, Observed, observe_attempt
from harness_operator.core.status.status import compute_status

CONFIG = OperatorConfig()
NOW = datetime(2026, 12, 1, tzinfo=UTC)
URL = "https://github.com/acme/widgets.git"
DEFINITION = HarnessDefinitionSpec.model_validate(
    {
        "binary": "claude",
        "image": "harness.local/claude:2.1",
        "credentials": [
            {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "anthropic", "key": "api-key"}}
        ],
    }
)
TARGET = AttemptTarget(index=1, provider="claude", definition=DEFINITION, position=1)


def make_run(workspace: dict[str, Any] | None = None, name: str = "fix-1") -> HarnessRun:
    spec: dict[str, Any] = {"provider": "claude", "prompt": "Fix it."}
    spec["workspace"] = (
        workspace
        if workspace is not None
        else {
            "git": {"url": URL, "ref": "main", "credentialsSecretRef": {"name": "read", "key": "token"}},
            "publish": {
                "pullRequest": {"title": "$(run.name): $(output)", "body": "ns $(run.namespace)\n$(output)"},
                "credentialsSecretRef": {"name": "write", "key": "token"},
            },
        }
    )
    return HarnessRun.model_validate(
        {"metadata": {"name": name, "namespace": "team-a", "uid": "uid-1"}, "spec": spec}
    )


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("harness/fix-1", True),
        ("feature/a.b-c_d", True),
        ("", False),
        ("has space", False),
        ("a..b", False),
        ("a/.hidden", False),
        ("-leading", False),
        ("trailing/", False),
        ("x.lock", False),
        ("a@{b", False),
        ("a~1", False),
        ("a:b", False),
        ("a//b", False),
        ("dot.", False),
    ],
)
def test_branch_names_as_git_checks_them(name: str, valid: bool) -> None:
    assert (branch_problem(name) is None) == valid


def test_the_plan_renders_the_run_and_leaves_the_output_to_the_publisher() -> None:
    plan = build_publish_plan(
        make_run(), "/workspace", ["GIT_TOKEN", "ANTHROPIC_API_KEY", "GIT_TOKEN"], 90, []
    )
    assert plan is not None
    assert plan.branch == "harness/fix-1"  # a pull request implies the default branch
    assert plan.url == URL and plan.working_dir == "/workspace" and plan.timeout_seconds == 90
    assert plan.secret_envs == ["ANTHROPIC_API_KEY", "GIT_TOKEN"]
    pr = plan.pull_request
    assert pr is not None
    assert (pr.forge, pr.api_url, pr.repository, pr.base) == (
        "github",
        "https://api.github.com",
        "acme/widgets",
        "main",
    )
    assert pr.title == "fix-1: $(output)" and pr.body == "ns team-a\n$(output)"
    assert "fix-1" in plan.commit_message and "team-a/fix-1" in plan.commit_message


def test_patch_only_publishes_no_branch() -> None:
    run = make_run({"git": {"url": URL}, "publish": {}})
    plan = build_publish_plan(run, "/workspace", [], 120, [])
    assert plan is not None and plan.branch is None and plan.pull_request is None
    assert build_publish_plan(make_run({"git": {"url": URL}}), "/workspace", [], 120, []) is None


def test_an_invalid_branch_template_is_rejected_naming_the_field() -> None:
    run = make_run(
        {
            "git": {"url": URL},
            "publish": {
                "branch": {"name": "bad name $(run.name)"},
                "credentialsSecretRef": {"name": "w", "key": "t"},
            },
        }
    )
    with pytest.raises(Rejection) as caught:
        check_publish(run)
    assert caught.value.reason == Reason.InvalidSpec
    assert "spec.workspace.publish.branch.name" in caught.value.message
    check_publish(make_run())  # the default is valid


def follow_up(ref: str | None, name: str = "harness/pr-7", extra: dict[str, Any] | None = None) -> HarnessRun:
    """A follow-up run: it clones `ref` and publishes onto branch `name` with FastForward."""
    git: dict[str, Any] = {"url": URL, **({"ref": ref} if ref else {})}
    publish = {
        "branch": {"name": name, "ifExists": "FastForward"},
        "pullRequest": {},
        "credentialsSecretRef": {"name": "write", "key": "token"},
    }
    return make_run({"git": git, "publish": publish, **(extra or {})})


def test_a_follow_up_clones_the_branch_it_fast_forwards_and_the_pull_request_targets_the_default() -> None:
    run = follow_up("harness/pr-7")
    check_publish(run)
    job = build_job(run, decide_attempt(run, TARGET, CONFIG), CONFIG)
    by_name = containers(job)
    clone = {e["name"]: e.get("value") for e in by_name["git-clone"]["env"]}
    assert clone["GIT_REF"] == "harness/pr-7"
    publisher = {e["name"]: e for e in by_name[PUBLISH_CONTAINER]["env"]}
    plan = PublishPlan.model_validate_json(publisher[PUBLISH_PLAN_ENV]["value"].replace("$$", "$"))
    assert (plan.branch, plan.if_exists) == ("harness/pr-7", "FastForward")
    # Not git.ref (the pull request's own branch): the origin's default branch, unless base is set.
    assert plan.pull_request is not None and plan.pull_request.base is None
    # A new branch (the default) keeps today's plan: created only, into git.ref.
    plain = build_publish_plan(make_run(), "/workspace", [], 120, [])
    assert plain is not None and plain.if_exists == "Fail" and plain.pull_request is not None
    assert plain.pull_request.base == "main"


@pytest.mark.parametrize(
    ("ref", "name", "said"),
    [
        (None, "harness/pr-7", 'set spec.workspace.git.ref to "harness/pr-7" (it is unset)'),
        ("main", "harness/$(run.name)", 'set spec.workspace.git.ref to "harness/fix-1" (it is "main")'),
    ],
)
def test_fast_forward_needs_the_workspace_to_clone_its_branch(ref: str | None, name: str, said: str) -> None:
    with pytest.raises(Rejection) as caught:
        check_publish(follow_up(ref, name))
    assert caught.value.reason == Reason.InvalidSpec
    assert caught.value.message.startswith("spec.workspace.publish.branch.ifExists: FastForward")
    assert said in caught.value.message and "ifExists: Fail" in caught.value.message
    check_publish(follow_up("harness/fix-1", "harness/$(run.name)"))  # the template renders to the ref


class Runs:
    """resolution.Reader's run lookup over whole run objects."""

    def __init__(self, runs: Mapping[str, Any]) -> None:
        self.runs = runs

    def run(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.runs.get(name)


def earlier(status: dict[str, Any] | None, url: str = URL) -> dict[str, Any]:
    return {
        "metadata": {"name": "implement", "namespace": "team-a"},
        "spec": {"provider": "claude", "prompt": "p", "workspace": {"git": {"url": url}, "publish": {}}},
        "status": status or {},
    }


SUCCEEDED = [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}]


def chained() -> HarnessRun:
    return make_run({"git": {"url": URL}, "from": {"run": "implement"}}, name="review")


def test_a_chained_run_waits_then_starts_from_the_patch_or_the_branch() -> None:
    with pytest.raises(Waiting):
        resolve_start(Runs({}), chained())  # type: ignore[arg-type]
    running = earlier({"conditions": [{"type": "Succeeded", "status": "Unknown", "reason": "Running"}]})
    with pytest.raises(Waiting):
        resolve_start(Runs({"implement": running}), chained())  # type: ignore[arg-type]
    patched = {"base": "a" * 40, "patchConfigMapName": "implement-changes", "patchSHA256": "f" * 64}
    start = resolve_start(
        Runs({"implement": earlier({"conditions": SUCCEEDED, "changes": patched})}), chained()
    )  # type: ignore[arg-type]
    assert start == WorkspaceStart("a" * 40, "implement-changes", "f" * 64)
    branch_only = {
        "base": "a" * 40,
        "commit": "b" * 40,
        "branch": "harness/implement",
        "patchBytes": 2_000_000,
    }
    start = resolve_start(
        Runs({"implement": earlier({"conditions": SUCCEEDED, "changes": branch_only})}), chained()
    )  # type: ignore[arg-type]
    assert start == WorkspaceStart("b" * 40)


@pytest.mark.parametrize(
    "other",
    [
        earlier({"conditions": SUCCEEDED}),  # published nothing
        earlier(
            {"conditions": SUCCEEDED, "changes": {"base": "a" * 40}}, url="https://github.com/acme/other.git"
        ),
    ],
)
def test_a_chained_run_needs_a_change_of_its_repository(other: dict[str, Any]) -> None:
    with pytest.raises(Rejection) as caught:
        resolve_start(Runs({"implement": other}), chained())  # type: ignore[arg-type]
    assert caught.value.reason == Reason.ChangesUnavailable
    assert "spec.workspace.from.run" in caught.value.message


def containers(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    spec = job["spec"]["template"]["spec"]
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


def secret_refs(container: dict[str, Any]) -> set[str]:
    return {
        e["valueFrom"]["secretKeyRef"]["name"]
        for e in container.get("env", [])
        if "valueFrom" in e and "secretKeyRef" in e["valueFrom"]
    }


def test_only_the_publisher_holds_the_write_credential_and_it_starts_after_the_clone() -> None:
    job = build_job(make_run(), decide_attempt(make_run(), TARGET, CONFIG), CONFIG)
    spec = job["spec"]["template"]["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["git-clone", PUBLISH_CONTAINER]
    by_name = containers(job)
    publisher = by_name[PUBLISH_CONTAINER]
    assert publisher["restartPolicy"] == "Always"  # a sidecar: stopped only after the others ended
    assert "write" in secret_refs(publisher)
    assert all("write" not in secret_refs(c) for n, c in by_name.items() if n != PUBLISH_CONTAINER)
    assert secret_refs(by_name[AGENT_CONTAINER]) == set()
    mounts = {m["name"]: m for m in publisher["volumeMounts"]}
    assert mounts["workspace"]["readOnly"] and mounts["verdict"]["readOnly"]
    agent_mounts = {m["name"] for m in by_name[AGENT_CONTAINER]["volumeMounts"]}
    assert not agent_mounts & {"publish", "verdict"}  # the agent reaches neither the base nor the verdict
    runner = by_name[RUNNER_CONTAINER]
    assert "--verdict" in runner["command"] and "verdict" in {m["name"] for m in runner["volumeMounts"]}
    assert "rev-parse HEAD" in by_name["git-clone"]["command"][-1]
    plain = build_job(
        make_run({"git": {"url": URL}}),
        decide_attempt(make_run({"git": {"url": URL}}), TARGET, CONFIG),
        CONFIG,
    )["spec"]
    grow = CONFIG.publish_timeout_seconds + 10
    assert job["spec"]["activeDeadlineSeconds"] == plain["activeDeadlineSeconds"] + grow
    assert (
        spec["terminationGracePeriodSeconds"]
        == plain["template"]["spec"]["terminationGracePeriodSeconds"] + grow
    )


def test_the_publisher_plan_escapes_the_kubelets_variable_references() -> None:
    run = make_run(
        {
            "git": {"url": URL},
            "publish": {
                "pullRequest": {"body": "$(HARNESS_PUBLISH_TOKEN) and $(output)"},
                "credentialsSecretRef": {"name": "w", "key": "t"},
            },
        }
    )
    env = {
        e["name"]: e
        for e in containers(build_job(run, decide_attempt(run, TARGET, CONFIG), CONFIG))[PUBLISH_CONTAINER][
            "env"
        ]
    }
    raw = env[PUBLISH_PLAN_ENV]["value"]
    assert "$$(HARNESS_PUBLISH_TOKEN)" in raw
    plan = PublishPlan.model_validate_json(raw.replace("$$", "$"))  # as the kubelet hands it over
    assert plan.pull_request is not None and plan.pull_request.body.startswith("$(HARNESS_PUBLISH_TOKEN)")
    assert {"ANTHROPIC_API_KEY", "HARNESS_PUBLISH_TOKEN"} <= set(plan.secret_envs)


def test_a_chained_run_clones_the_commit_and_applies_the_checked_patch() -> None:
    start = WorkspaceStart("a" * 40, "implement-changes", "f" * 64)
    job = build_job(chained(), decide_attempt(chained(), TARGET, CONFIG), CONFIG, start)
    clone = containers(job)["git-clone"]
    env = {e["name"]: e.get("value") for e in clone["env"]}
    assert env["GIT_COMMIT"] == "a" * 40 and env["PATCH_SHA256"] == "f" * 64
    script = clone["command"][-1]
    assert script.index("sha256sum -c") < script.index("git apply --binary")
    volumes = {v["name"]: v for v in job["spec"]["template"]["spec"]["volumes"]}
    assert volumes["from-patch"]["configMap"]["name"] == "implement-changes"


def pod(
    init: list[dict[str, Any]], runner: dict[str, Any], publisher: dict[str, Any] | None
) -> dict[str, Any]:
    statuses = [{"name": PUBLISH_CONTAINER, "state": publisher or {"running": {}}}]
    return {
        "metadata": {"name": "fix-1-a1-x", "creationTimestamp": "2026-12-01T00:00:00Z"},
        "spec": {"initContainers": init},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {"name": RUNNER_CONTAINER, "state": {"terminated": runner}},
                {"name": AGENT_CONTAINER, "state": {"terminated": {"exitCode": 0}}},
            ],
            "initContainerStatuses": statuses,
        },
    }


RUNNER_OK = {
    "exitCode": 0,
    "message": json.dumps({"version": 1, "attempt": 1, "provider": "claude", "exitCode": 0}),
}
JOB = {"metadata": {"name": "fix-1-a1"}, "status": {}}


def test_an_attempt_that_publishes_ends_when_its_publisher_reported() -> None:
    init = [{"name": "git-clone"}, {"name": PUBLISH_CONTAINER}]
    waiting = observe_attempt(1, "claude", JOB, [pod(init, RUNNER_OK, None)])
    assert waiting.state == RUNNING
    report = {"terminated": {"exitCode": 0, "message": ChangesReport(base="a" * 40, files=1).render()}}
    done = observe_attempt(1, "claude", JOB, [pod(init, RUNNER_OK, report)])
    assert done.state == FINISHED and done.publisher == report["terminated"]
    failed = {
        **RUNNER_OK,
        "exitCode": 1,
        "message": json.dumps({"version": 1, "exitCode": 1, "reason": "AuthFailed"}),
    }
    assert observe_attempt(1, "claude", JOB, [pod(init, failed, None)]).state == FINISHED


def test_the_operators_slim_copy_of_the_pod_still_waits_for_the_publisher() -> None:
    """The watch cache keeps slim pods (controller/cache.py): they must show the publisher too, or the
    run ends before its change is taken (as it once did on the cluster)."""
    init = [{"name": "git-clone", "image": "i", "env": []}, {"name": PUBLISH_CONTAINER, "image": "i"}]
    report = {"terminated": {"exitCode": 0, "message": ChangesReport(base="a" * 40, files=1).render()}}
    for publisher in (None, report):
        full = pod(init, RUNNER_OK, publisher)
        assert observe_attempt(1, "claude", JOB, [slim_pod(full)]) == observe_attempt(
            1, "claude", JOB, [full]
        )
    assert observe_attempt(1, "claude", JOB, [slim_pod(pod(init, RUNNER_OK, None))]).state == RUNNING


def finished_run() -> tuple[HarnessRun, Observed]:
    init = [{"name": "git-clone"}, {"name": PUBLISH_CONTAINER}]
    report = {"terminated": {"exitCode": 0, "message": "{}"}}
    attempt = observe_attempt(1, "claude", JOB, [pod(init, RUNNER_OK, report)])
    return make_run(), Observed(["claude"], [attempt], output=b"done")


def test_the_status_names_the_pull_request_or_the_publish_failure_keeping_the_output() -> None:
    run, observed = finished_run()
    report = ChangesReport(
        base="a" * 40,
        commit="b" * 40,
        branch="harness/fix-1",
        files=2,
        insertions=3,
        deletions=1,
        patch_bytes=200,
        patch_sha256="c" * 64,
        pull_request_url="https://github.com/acme/widgets/pull/7",
        pull_request_number=7,
    )
    changes, failure = compute_changes(report, True, "fix-1")
    assert failure is None and changes is not None
    assert changes.patch_config_map_name == "fix-1-changes"
    assert changes.pull_request_number == 7 and changes.to_api()["pullRequestNumber"] == 7
    status = compute_status(
        run, Observed(observed.providers, observed.attempts, b"done", changes=changes), NOW
    )
    assert status.phase == Phase.succeeded and status.changes == changes
    assert status.message == (
        "attempt 1/1 with claude succeeded; 2 files changed (+3 -1), pull request https://github.com/acme/widgets/pull/7"
    )

    refused = report.model_copy(
        update={
            "reason": Reason.PushRejected,
            "message": "the origin refused",
            "commit": None,
            "branch": None,
            "pull_request_url": None,
        }
    )
    changes, failure = compute_changes(refused, True, "fix-1")
    status = compute_status(
        run,
        Observed(observed.providers, observed.attempts, b"done", changes=changes, publish_failed=failure),
        NOW,
    )
    assert (status.phase, status.reason, status.exit_code) == (Phase.failed, Reason.PushRejected, 1)
    assert status.output is not None and status.output.bytes == 4  # the agent's output is kept
    assert status.changes is not None and status.changes.patch_sha256 == "c" * 64

    moved = refused.model_copy(update={"reason": Reason.BranchMoved, "message": "branch harness/fix-1 moved"})
    changes, failure = compute_changes(moved, True, "fix-1")
    assert failure == (Reason.BranchMoved, "branch harness/fix-1 moved")
    status = compute_status(
        run,
        Observed(observed.providers, observed.attempts, b"done", changes=changes, publish_failed=failure),
        NOW,
    )
    assert (status.phase, status.reason) == (Phase.failed, Reason.BranchMoved)
    assert status.message is not None and "branch harness/fix-1 moved" in status.message


def test_a_publisher_without_a_report_is_lost_and_a_skipped_one_changes_nothing() -> None:
    reason, message = lost_publish({"exitCode": 137, "reason": "Error"})
    assert reason == Reason.PublishLost and "publishTimeoutSeconds" in message
    assert compute_changes(ChangesReport(skipped=True), False, "fix-1") == (None, None)


def test_the_patch_config_map_holds_text_or_binary_data() -> None:
    run = make_run()
    text = build_changes_config_map(run, b"diff --git a/x b/x\n")
    assert text["data"] == {"changes.patch": "diff --git a/x b/x\n"} and text["immutable"]
    binary = build_changes_config_map(run, b"\xff\xfe latin-1 \xe9")
    assert "data" not in binary and binary["binaryData"]["changes.patch"]
    assert text["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
