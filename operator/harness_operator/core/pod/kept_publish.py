"""The Job that publishes a run's approved change (pure): one container, the publisher in PublishKept mode
(runner/publish_kept.py), no agent and no workspace.

It holds what the attempt's publisher held to push, and nothing more: the write token (and the clone's
read token, to fetch the base), the attempt's git way out (its git proxy credential, and the pod carries
the attempt's labels so the attempt's NetworkPolicy is the one that selects it), the kept patch and the
run's output read-only from the run's ConfigMaps, and the sandbox's pod security. The patch's sha256 and
the tree it must give come from the run's status, which only the operator writes.
"""

from __future__ import annotations

from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.changes import (
    KEPT_DIR,
    KEPT_OUTPUT_FILE,
    KEPT_PATCH_FILE,
    PUBLISH_DIR,
    PUBLISH_PLAN_ENV,
    KeptChange,
    PublishMode,
)
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import (
    ANNOTATION_RUN,
    LABEL_ATTEMPT,
    changes_config_map_name,
    output_config_map_name,
    publish_job_name,
    run_labels,
)
from harness_operator.core.objects.ownership import build_child_meta
from harness_operator.core.pod.containers import (
    build_git_proxy_env,
    build_publisher_container,
    build_publisher_token_env,
)
from harness_operator.core.pod.job import PUBLISH_SLACK_SECONDS, attempt_image, build_pod_basics
from harness_operator.core.pod.publish import PATCH_KEY, build_publish_plan
from harness_operator.core.pod.signing import build_signing_env, build_signing_plan
from harness_operator.core.pod.workspace import working_dir


def build_kept_change(run: HarnessRun) -> KeptChange | None:
    """The kept change as the run's status records it, or None when it records no complete one."""
    changes = run.status.changes if run.status else None
    if changes is None or not (changes.base and changes.tree and changes.patch_sha256):
        return None
    return KeptChange(base=changes.base, tree=changes.tree, patch_sha256=changes.patch_sha256)


def build_publish_job(run: HarnessRun, target: Attempt, config: OperatorConfig) -> dict[str, Any] | None:
    """The publish Job of the run's approved change, `target` the attempt that kept it; None when the run
    publishes no branch or records no kept change."""
    name = run.metadata["name"]
    workspace = run.spec.workspace
    publish = workspace.publish if workspace else None
    git = workspace.git if workspace else None
    kept = build_kept_change(run)
    # No rules and no scan: the policy judged the change when it was kept, and the tree checked is the one
    # judged. The commit made again is signed as the attempt's would have been.
    sign = build_signing_plan(run, config)
    plan = build_publish_plan(run, working_dir(run), [], config.publish_timeout_seconds, [], None, sign)
    if publish is None or git is None or kept is None or plan is None or plan.branch is None:
        return None
    plan = plan.model_copy(update={"mode": PublishMode.publish_kept, "kept": kept})
    env = build_git_proxy_env(run, target, config) + build_publisher_token_env(run)
    if sign is not None:
        env.append(build_signing_env(config))
    # `$$` is the kubelet's escape for `$`: a template's $(NAME) must not become another variable's value.
    env.append({"name": PUBLISH_PLAN_ENV, "value": plan.to_json().replace("$", "$$")})
    mounts: list[dict[str, Any]] = [
        {"name": "publish", "mountPath": PUBLISH_DIR},
        {"name": "kept", "mountPath": KEPT_DIR, "readOnly": True},
    ]
    image = attempt_image(run, target, config)
    container = build_publisher_container(config, image, "harness_operator.runner.publish_kept", env, mounts)
    sources = [
        {
            "configMap": {
                "name": changes_config_map_name(name),
                "items": [{"key": PATCH_KEY, "path": _leaf(KEPT_PATCH_FILE)}],
            }
        },
        {
            "configMap": {
                "name": output_config_map_name(name),
                "items": [{"key": "output", "path": _leaf(KEPT_OUTPUT_FILE)}],
                "optional": True,  # a run may keep no output; the pull request's $(output) is empty then
            }
        },
    ]
    pod_spec: dict[str, Any] = {
        **build_pod_basics(run, config),
        "containers": [container],
        "volumes": [
            {"name": "publish", "emptyDir": {"sizeLimit": config.scratch_size_limit}},
            {"name": "kept", "projected": {"sources": sources, "defaultMode": 0o444}},
        ],
    }
    # The attempt's label: its NetworkPolicy (egress to the gateway and the run's git rules) selects the pod.
    pod_labels = {**run_labels(name), LABEL_ATTEMPT: str(target.index)}
    metadata = build_child_meta(run, publish_job_name(name), run_labels(name))
    metadata["annotations"] = {ANNOTATION_RUN: name}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {
            "backoffLimit": 0,
            "podReplacementPolicy": "Failed",
            "activeDeadlineSeconds": config.publish_timeout_seconds + PUBLISH_SLACK_SECONDS,
            "template": {
                "metadata": {"labels": pod_labels, "annotations": {ANNOTATION_RUN: name}},
                "spec": pod_spec,
            },
        },
    }


def _leaf(path: str) -> str:
    return path.rsplit("/", 1)[-1]
