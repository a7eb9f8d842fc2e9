"""The Job of one attempt, in the sandbox: restricted, no API token, credentials only as env, one pod
ever (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun, ProtectedPathRule
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import (
    ANNOTATION_RUN,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    RUNNER_CONTAINER,
    attempt_labels,
    job_name,
    plan_secret_name,
    resume_secret_name,
)
from harness_operator.core.objects.ownership import build_child_meta
from harness_operator.core.pod.containers import (
    PLAN_FILE,
    RUNNER_TMP_LIMIT,
    build_agent_container,
    build_clone_container,
    build_publish_container,
    build_runner_container,
)
from harness_operator.core.pod.publish import PATCH_KEY, WorkspaceStart
from harness_operator.core.pod.workspace import build_workspace_volume

# The runner enforces timeoutSeconds itself and reports; the Job deadline is only a backstop after it.
DEADLINE_SLACK_SECONDS = 60
# The publisher's time past publish_timeout_seconds to write its report and exit.
PUBLISH_SLACK_SECONDS = 10
VERDICT_LIMIT = "1Mi"


def grace_period(run: HarnessRun, config: OperatorConfig) -> int:
    limits = run.spec.limits
    if limits and limits.grace_period_seconds is not None:
        return limits.grace_period_seconds
    return config.default_grace_period_seconds


def attempt_image(run: HarnessRun, target: Attempt, config: OperatorConfig) -> str:
    """The image of an attempt's containers: the run's, its definition's, or the operator's sandbox."""
    sandbox = run.spec.sandbox
    return (
        (sandbox.image if sandbox and sandbox.image else None)
        or target.definition.image
        or config.sandbox_image
    )


def build_pod_basics(run: HarnessRun, config: OperatorConfig) -> dict[str, Any]:
    """What every pod of a run holds: never restarted, no API token, no service links, the sandbox's user
    and seccomp profile, the sandbox's node placement and the image pull secrets."""
    sandbox = run.spec.sandbox
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": config.sandbox_uid,
            "runAsGroup": config.sandbox_uid,
            "fsGroup": config.sandbox_uid,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    if sandbox and sandbox.node_selector:
        pod_spec["nodeSelector"] = dict(sandbox.node_selector)
    if sandbox and sandbox.tolerations:
        pod_spec["tolerations"] = [t.to_api() for t in sandbox.tolerations]
    if config.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in config.image_pull_secrets]
    return pod_spec


def build_job(
    run: HarnessRun,
    target: Attempt,
    config: OperatorConfig,
    start: WorkspaceStart | None = None,
    queue: str | None = None,
    namespace_rules: Sequence[ProtectedPathRule] = (),
) -> dict[str, Any]:
    """The Job of one attempt, in the sandbox: restricted, no API token, credentials only as env; with
    spec.workspace.publish, the publishing sidecar; `start`: the change of spec.workspace.from; `queue`:
    the Kueue LocalQueue that admits it (core/queue/kueue.resolve_queue), which gets it suspended;
    `namespace_rules`: the protected paths the run's namespace adds (core/pod/protected_paths.py)."""
    name = run.metadata["name"]
    sandbox = run.spec.sandbox
    image = attempt_image(run, target, config)
    labels = attempt_labels(name, target.index, target.provider)
    job_labels = dict(labels)
    if queue:  # Kueue reads both from the Job: its LocalQueue and its WorkloadPriorityClass
        job_labels[KUEUE_QUEUE_LABEL] = queue
        priority = run.metadata.get("labels", {}).get(KUEUE_PRIORITY_LABEL)
        if priority:
            job_labels[KUEUE_PRIORITY_LABEL] = priority
    grace = grace_period(run, config)
    pod_spec = build_pod_basics(run, config)
    if sandbox and sandbox.runtime_class_name:
        pod_spec["runtimeClassName"] = sandbox.runtime_class_name
    init = build_clone_container(run, image, config, target, start)
    publisher = build_publish_container(run, target, config, image, namespace_rules)
    # The publisher acts after the agent, within the pod's grace period and the Job's deadline.
    publish_seconds = config.publish_timeout_seconds + PUBLISH_SLACK_SECONDS if publisher else 0
    pod_spec.update(
        {
            "terminationGracePeriodSeconds": grace + 5 + publish_seconds,
            "initContainers": [c for c in (init, publisher) if c],
            "containers": [
                build_runner_container(run, target, config, image),
                build_agent_container(run, config, image),
            ],
            "volumes": [
                {
                    "name": "plan",
                    "secret": {
                        "secretName": plan_secret_name(name),
                        "items": [{"key": f"attempt-{target.index}.json", "path": PLAN_FILE}],
                        "defaultMode": 0o440,
                    },
                },
                build_workspace_volume(run, target.provider),
                {"name": "tmp", "emptyDir": {"sizeLimit": config.scratch_size_limit}},
                {"name": "home", "emptyDir": {"sizeLimit": config.scratch_size_limit}},
                {"name": "channel", "emptyDir": {}},
                {"name": "runner-tmp", "emptyDir": {"sizeLimit": RUNNER_TMP_LIMIT}},
            ],
        }
    )
    if run.spec.resume_from is not None:
        # Optional: only an attempt whose plan continues the session reads it (the Secret exists then).
        secret = {"secretName": resume_secret_name(name), "optional": True, "defaultMode": 0o440}
        pod_spec["volumes"].append({"name": "resume", "secret": secret})
    if publisher:
        pod_spec["volumes"] += [
            {"name": "publish", "emptyDir": {"sizeLimit": config.scratch_size_limit}},
            {"name": "verdict", "emptyDir": {"sizeLimit": VERDICT_LIMIT}},
        ]
    if start is not None and start.patch_config_map:
        items = [{"key": PATCH_KEY, "path": PATCH_KEY}]
        pod_spec["volumes"].append(
            {"name": "from-patch", "configMap": {"name": start.patch_config_map, "items": items}}
        )
    if not pod_spec["initContainers"]:
        pod_spec.pop("initContainers")
    # One pod per attempt, ever: no retry, and a deleted pod is not replaced (Failed: not even once the
    # old one is gone), so the agent never runs twice; the operator reports the attempt as lost.
    job_spec: dict[str, Any] = {
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "template": {
            "metadata": {
                "labels": labels,
                "annotations": {
                    ANNOTATION_RUN: name,
                    "kubectl.kubernetes.io/default-container": RUNNER_CONTAINER,
                },
            },
            "spec": pod_spec,
        },
    }
    limits = run.spec.limits
    timeout = (limits.timeout_seconds if limits else None) or config.max_run_seconds
    job_spec["activeDeadlineSeconds"] = timeout + grace + DEADLINE_SLACK_SECONDS + publish_seconds
    if queue:
        job_spec["suspend"] = True
    metadata = build_child_meta(run, job_name(name, target.index), job_labels)
    metadata["annotations"] = {ANNOTATION_RUN: name}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}
