"""Desired children of a HarnessRun: plan Secret, NetworkPolicy, claim, Job, output ConfigMap (pure).

Every builder returns a plain dict ready to apply. User-supplied pod fields are applied first and ours
last, so nothing in a run can override our labels or security settings.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    HarnessRun,
    SecretKeySelector,
)
from harness_operator.contract.changes import (
    BASE_FILE,
    CLONE_TOKEN_ENV,
    PUBLISH_DIR,
    PUBLISH_PLAN_ENV,
    PUBLISH_TOKEN_ENV,
    VERDICT_DIR,
    VERDICT_FILE,
)
from harness_operator.contract.plan import CONFINEMENT_ENV, SESSION_DIR, SESSION_KEY
from harness_operator.core.config import OperatorConfig
from harness_operator.core.confinement import compute_confinement
from harness_operator.core.egress import (
    NO_PROXY_ENVS,
    ROUTE_GATEWAY,
    build_no_proxy,
    build_proxy_env,
    compute_egress_rules,
    compute_route,
    with_gateway,
)
from harness_operator.core.model_route import (
    build_model_env,
    compute_model_route,
    merge_route_options,
    with_model_route,
)
from harness_operator.core.naming import (
    AGENT_CONTAINER,
    ANNOTATION_RUN,
    CLONE_CONTAINER,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    PUBLISH_CONTAINER,
    RUNNER_CONTAINER,
    attempt_labels,
    changes_config_map_name,
    job_name,
    output_config_map_name,
    plan_secret_name,
    resume_secret_name,
    run_labels,
)
from harness_operator.core.ownership import build_child_meta
from harness_operator.core.planning import PlanError, build_plan, merge_grants, with_output_limit
from harness_operator.core.pricing import with_pricing
from harness_operator.core.publish import (
    PATCH_KEY,
    WorkspaceStart,
    build_changes_config_map_data,
    build_publish_plan,
)
from harness_operator.core.resolution import AttemptTarget
from harness_operator.core.resumption import Resumption, build_replay_prompt, compute_continuation
from harness_operator.core.workspace import build_workspace_volume, working_dir, workspace_mount_path

PLAN_DIR = "/etc/harness"
PLAN_FILE = "plan.json"
# The runner's channel to the launcher (runner/channel.py): an emptyDir both containers mount.
CHANNEL_DIR = "/run/harness"
CHANNEL = f"{CHANNEL_DIR}/channel"
# The runner's own needs: the agent's stdout spooled past 8 MiB to its /tmp, parsing, redaction.
# Where the runner spools the agent's stdout past 8 MiB: bounded, so an agent cannot fill the node's disk
# through it (past the limit the kubelet evicts the pod and the attempt fails).
RUNNER_TMP_LIMIT = "1Gi"
RUNNER_RESOURCES = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}
# The sandbox user's home (sandbox-image/Dockerfile), an emptyDir: the root file system is read-only and
# agent CLIs keep config, caches and sessions there.
SANDBOX_HOME = "/home/sandbox"
# ConfigMaps hold at most 1 MiB: without maxOutputBytes, a run's output is cut (and flagged) here.
OUTPUT_CONFIG_MAP_LIMIT = 1_000_000
# The runner enforces timeoutSeconds itself and reports; the Job deadline is only a backstop after it.
DEADLINE_SLACK_SECONDS = 60
# The publisher's time past publish_timeout_seconds to write its report and exit.
PUBLISH_SLACK_SECONDS = 10
VERDICT_LIMIT = "1Mi"
# Where the clone reads the patch of spec.workspace.from's run (a ConfigMap volume).
FROM_PATCH_DIR = "/etc/harness-from"
FROM_PATCH = f"{FROM_PATCH_DIR}/changes.patch"


# What the plan Secret's attempts may take of the 1 MiB a Secret holds (the rest: gateway credentials).
PLANS_LIMIT = 1_000_000


def build_plans(
    run: HarnessRun,
    targets: Sequence[AttemptTarget],
    prompt: str,
    stdin: str | None,
    now: datetime,
    config: OperatorConfig | None = None,
    resumption: Resumption | None = None,
    secret_values: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Every attempt's plan as the plan Secret holds it: output bounded by what a ConfigMap holds, list
    prices of `now` from the pinned table. Fields at their defaults are left out, so a sandbox image
    older than the operator (pinned by a definition) still reads every plan that uses nothing new.
    With `config`, attempts whose host rules go through the egress gateway get its proxy variables, and
    attempts under a restricting policy the probe to wait on before the agent starts. With `resumption`,
    an attempt whose CLI can resume the earlier session does, any other gets it replayed in its prompt.
    `secret_values` (what the prompt and stdin took from Secrets) are redacted by every attempt's runner."""
    options = [run.spec.with_] + [fb.with_ for fb in run.spec.fallback]
    plans = []
    for t in targets:
        resume = compute_continuation(resumption, t.provider, t.definition)
        text = prompt if resumption is None or resume else build_replay_prompt(resumption, prompt)
        route = compute_model_route(run, t.definition, config) if config is not None else None
        given = options[t.position - 1]
        if route is not None and config is not None:
            given = merge_route_options(given, route, config)
        plan = with_pricing(
            with_output_limit(
                build_plan(run, t.definition, t.index, t.provider, given, text, stdin, t.position, resume),
                OUTPUT_CONFIG_MAP_LIMIT,
            ),
            t.definition,
            t.namespaced,
            now,
        )
        if config is not None and compute_route(run, t.definition, config) == ROUTE_GATEWAY:
            plan = with_gateway(plan, compute_egress_rules(run, t.definition))
        if route is not None and config is not None:
            plan = with_model_route(plan, route, config)
        if config is not None:
            plan = plan.model_copy(update={"confinement": compute_confinement(run, t.definition, config)})
        if secret_values:
            plan = plan.model_copy(update={"redacted_values": sorted(set(secret_values))})
        plans.append(plan.model_dump(by_alias=True, mode="json", exclude_defaults=True))
    size = sum(len(json.dumps(plan, sort_keys=True).encode()) for plan in plans)
    if size > PLANS_LIMIT:
        raise PlanError(
            Reason.PlanTooLarge,
            f"the plans of the run's {len(plans)} attempts are {size} bytes, more than the plan Secret "
            f"holds ({PLANS_LIMIT}): each attempt's plan carries the prompt and stdin (twice with "
            "spec.outputReprompts, for a CLI that cannot continue its session); lower spec.retry.limit or "
            "list fewer spec.fallback providers",
        )
    return plans


def build_plan_secret(
    run: HarnessRun, plans: Sequence[Mapping[str, Any]], credentials: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The attempts' plans (prompt, stdin, argv, limits): prompts may be sensitive, so a Secret. It also
    holds each attempt's gateway credentials: the egress gateway's proxy URL (`egress.build_proxy_urls`)
    and the model gateway's routed variables (`model_route.build_model_secrets`)."""
    data = {f"attempt-{i}.json": json.dumps(plan, sort_keys=True) for i, plan in enumerate(plans, start=1)}
    data.update(credentials or {})
    return _run_secret(run, plan_secret_name(run.metadata["name"]), data)


def build_resume_secret(run: HarnessRun, archive: bytes) -> dict[str, Any]:
    """The earlier session's archive (spec.resumeFrom), owned by the continuing run; its runner reads it
    mounted and checks it against its plan's SHA-256."""
    data = {SESSION_KEY: base64.b64encode(archive).decode("ascii")}
    return _run_secret(run, resume_secret_name(run.metadata["name"]), data)


def _run_secret(run: HarnessRun, name: str, data: dict[str, str]) -> dict[str, Any]:
    """An immutable Secret of the run's, its content hashed into its metadata."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": build_child_meta(run, name, run_labels(run.metadata["name"]), data),
        "immutable": True,
        "stringData": data,
    }


def _container_security(config: OperatorConfig, uid: int | None = None) -> dict[str, Any]:
    uid = config.sandbox_uid if uid is None else uid
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _resources(run: HarnessRun, config: OperatorConfig) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": config.default_cpu_request, "memory": config.default_memory_request}
    limits: dict[str, Any] = {"memory": config.default_memory_limit}
    sandbox = run.spec.sandbox
    if sandbox and sandbox.resources:
        requests.update(sandbox.resources.requests)
        limits.update(sandbox.resources.limits)
    return {"requests": requests, "limits": limits}


def _env(run: HarnessRun, target: AttemptTarget, config: OperatorConfig) -> list[dict[str, Any]]:
    """Credentials, each only by secretKeyRef, then HOME. The plain env travels in the plan and the
    runner sets it on the agent only: LD_PRELOAD or PYTHONPATH from a run never reach the runner.
    Through the egress gateway, the proxy URLs come from the plan Secret, in place of any grant of
    those names."""
    grants = merge_grants(run, target.definition)
    route = compute_model_route(run, target.definition, config)
    if route is not None:  # a run's own key (the token's variable) is the gateway's to hold
        grants = {k: v for k, v in grants.items() if k not in {e.name for e in route.env}}
    proxy: list[dict[str, Any]] = []
    if compute_route(run, target.definition, config) == ROUTE_GATEWAY:
        proxy = build_proxy_env(plan_secret_name(run.metadata["name"]), target.index)
        grants = {k: v for k, v in grants.items() if k not in {e["name"] for e in proxy}}
    env: list[dict[str, Any]] = []
    for name, grant in sorted(grants.items()):
        ref: dict[str, Any] = {"name": grant.secret_key_ref.name, "key": grant.secret_key_ref.key}
        if grant.optional:
            ref["optional"] = True
        env.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    env += proxy
    env += build_model_env(run, target, config, plan_secret_name(run.metadata["name"]))
    env.append({"name": "HOME", "value": SANDBOX_HOME})
    return env


def grace_period(run: HarnessRun, config: OperatorConfig) -> int:
    limits = run.spec.limits
    if limits and limits.grace_period_seconds is not None:
        return limits.grace_period_seconds
    return config.default_grace_period_seconds


def _secret_env(name: str, ref: SecretKeySelector) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def _git_init_container(
    run: HarnessRun,
    image: str,
    config: OperatorConfig,
    target: AttemptTarget,
    start: WorkspaceStart | None = None,
) -> dict[str, Any] | None:
    workspace = run.spec.workspace
    git = workspace.git if workspace else None
    if git is None:
        return None
    workdir = working_dir(run)
    # The URL and ref travel as env; a token is read by git's credential helper from env. A shared claim
    # holds what the last agent wrote, `.git` too (config, hooks, filters, attributes, commondir,
    # alternates, a broken HEAD that makes git look further up): git never discovers a repository here
    # (GIT_DIR and GIT_WORK_TREE are explicit) and `.git` is made anew, from no template, before the
    # fetch. Checkout applies no attribute (no eol, ident, filter or encoding conversion), so the
    # working tree holds the committed bytes and the publisher can compare the agent's bytes with them.
    # Init containers start before the enforcer programs the pod: the clone waits for it first.
    # Starting from an earlier run's change (start), the exact commit is fetched, and its patch applied
    # once its sha256 is the one that run's status reports. With publish, the commit the workspace
    # starts from is recorded where only the publisher reads it.
    probe = compute_confinement(run, target.definition, config)
    publishing = _publishes(run)
    script = (
        "set -eu\n"
        + ("python3 -I -m harness_operator.runner.confinement\n" if probe else "")
        + 'export GIT_DIR="$WORKDIR/.git" GIT_WORK_TREE="$WORKDIR"\n'
        'if [ -L "$WORKDIR" ] || { [ -e "$WORKDIR" ] && [ ! -d "$WORKDIR" ]; }; then rm -f "$WORKDIR"; fi\n'
        'mkdir -p "$WORKDIR" && cd "$WORKDIR"\n'
        'if [ -d "$GIT_DIR" ] && [ ! -L "$GIT_DIR" ]; then '
        'chmod -R u+rwX "$GIT_DIR" 2>/dev/null || true; fi\n'
        'rm -rf "$GIT_DIR"\n'
        "git init -q --template=\n"
        'mkdir "$GIT_DIR/info"\n'
        "printf '* -text -crlf -ident -filter -working-tree-encoding\\n' >\"$GIT_DIR/info/attributes\"\n"
        'git remote add origin "$GIT_URL"\n'
        'git fetch -q --depth 1 --no-tags origin "${GIT_COMMIT:-${GIT_REF:-HEAD}}"\n'
        'if [ -z "${GIT_COMMIT:-}" ] && [ -n "${GIT_REF:-}" ] &&\n'
        '  grep -qF "branch \'$GIT_REF\' of " "$GIT_DIR/FETCH_HEAD"; then '
        'git checkout -q -f -B "$GIT_REF" FETCH_HEAD\n'
        "else git checkout -q -f --detach FETCH_HEAD; fi\n"
    )
    if start is not None and start.patch_config_map:
        script += (
            f'echo "$PATCH_SHA256  {FROM_PATCH}" | sha256sum -c --quiet -\n'
            f'git apply --binary "{FROM_PATCH}"\n'
        )
    if publishing:
        script += f'git rev-parse HEAD >"{BASE_FILE}"\n'
    env: list[dict[str, Any]] = [
        {"name": "GIT_URL", "value": git.url},
        {"name": "WORKDIR", "value": workdir},
        {"name": "HOME", "value": SANDBOX_HOME},
        {"name": "GIT_TERMINAL_PROMPT", "value": "0"},
    ]
    if git.ref:
        env.append({"name": "GIT_REF", "value": git.ref})
    if start is not None:
        env.append({"name": "GIT_COMMIT", "value": start.commit})
        if start.patch_sha256:
            env.append({"name": "PATCH_SHA256", "value": start.patch_sha256})
    if probe:
        env.append({"name": CONFINEMENT_ENV, "value": probe.model_dump_json(by_alias=True)})
    if compute_route(run, target.definition, config) == ROUTE_GATEWAY:
        # The clone, too, reaches a named host only through the gateway (git reads these variables).
        env += build_proxy_env(plan_secret_name(run.metadata["name"]), target.index)
        no_proxy = build_no_proxy(compute_egress_rules(run, target.definition))
        env += [{"name": name, "value": no_proxy} for name in NO_PROXY_ENVS]
    config_entries = [("core.hooksPath", "/dev/null"), ("core.fsmonitor", "false")]
    if git.credentials_secret_ref:
        env.append(_secret_env(CLONE_TOKEN_ENV, git.credentials_secret_ref))
        # An empty helper first clears any helper configured before ours.
        config_entries += [
            ("credential.helper", ""),
            ("credential.helper", '!f() { echo username=x-access-token; echo "password=$GIT_TOKEN"; }; f'),
        ]
    env.append({"name": "GIT_CONFIG_COUNT", "value": str(len(config_entries))})
    for i, (key, value) in enumerate(config_entries):
        env += [
            {"name": f"GIT_CONFIG_KEY_{i}", "value": key},
            {"name": f"GIT_CONFIG_VALUE_{i}", "value": value},
        ]
    return {
        "name": CLONE_CONTAINER,
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": ["/bin/sh", "-c", script],
        "env": env,
        "securityContext": _container_security(config),
        # A failed clone's message is its log's end (git's own error), which status then names.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        "volumeMounts": [
            {"name": "workspace", "mountPath": workspace_mount_path(workdir)},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "home", "mountPath": SANDBOX_HOME},
            *([{"name": "publish", "mountPath": PUBLISH_DIR}] if publishing else []),
            *(
                [{"name": "from-patch", "mountPath": FROM_PATCH_DIR, "readOnly": True}]
                if start is not None and start.patch_config_map
                else []
            ),
        ],
    }


def _publish_container(
    run: HarnessRun, target: AttemptTarget, config: OperatorConfig, image: str
) -> dict[str, Any] | None:
    """The publisher (runner/publish.py), a sidecar: the kubelet stops it only after the runner and the
    agent have ended, and then it takes the change. It holds the write credential, which no other
    container does, and every credential the agent is granted, to refuse a change that holds one."""
    workspace = run.spec.workspace
    publish = workspace.publish if workspace else None
    git = workspace.git if workspace else None
    if publish is None or git is None:
        return None
    env = [e for e in _env(run, target, config) if e["name"] != "HOME"]
    secrets = [e["name"] for e in env if "valueFrom" in e]
    tokens = (
        (CLONE_TOKEN_ENV, git.credentials_secret_ref),
        (PUBLISH_TOKEN_ENV, publish.credentials_secret_ref),
    )
    for name, ref in tokens:
        if ref is not None:
            env.append(_secret_env(name, ref))
            secrets.append(name)
    if compute_route(run, target.definition, config) == ROUTE_GATEWAY:
        no_proxy = build_no_proxy(compute_egress_rules(run, target.definition))
        env += [{"name": name, "value": no_proxy} for name in NO_PROXY_ENVS]
    plan = build_publish_plan(run, working_dir(run), secrets, config.publish_timeout_seconds)
    assert plan is not None
    # `$$` is the kubelet's escape for `$`: a template's $(NAME) must not become another variable's value.
    env.append({"name": PUBLISH_PLAN_ENV, "value": plan.to_json().replace("$", "$$")})
    return {
        "name": PUBLISH_CONTAINER,
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "restartPolicy": "Always",
        "command": ["tini", "--", *isolated_python("harness_operator.runner.publish")],
        "workingDir": "/",
        "env": env,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": _container_security(config),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"name": "workspace", "mountPath": workspace_mount_path(working_dir(run)), "readOnly": True},
            {"name": "publish", "mountPath": PUBLISH_DIR},
            {"name": "verdict", "mountPath": VERDICT_DIR, "readOnly": True},
        ],
    }


def isolated_python(module: str, *args: str) -> list[str]:
    """`python3 -I -m module`: isolated mode, so nothing in the working directory or the environment
    (PYTHONPATH, a workspace's own package) changes which code runs."""
    return ["python3", "-I", "-m", module, *args]


def _runner_container(
    run: HarnessRun, target: AttemptTarget, config: OperatorConfig, image: str
) -> dict[str, Any]:
    """The runner: its own user, isolated interpreter, working directory outside the workspace (which
    it does not mount), the credentials (for the agent's environment and for redaction) and the plan.
    tini forwards signals to it; its exit code and termination message are the attempt's report."""
    return {
        "name": RUNNER_CONTAINER,
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": [
            "tini",
            "--",
            *isolated_python(
                "harness_operator.runner",
                "--plan",
                f"{PLAN_DIR}/{PLAN_FILE}",
                "--channel",
                CHANNEL,
                "--workdir",
                working_dir(run),
                *(["--verdict", VERDICT_FILE] if _publishes(run) else []),
            ),
        ],
        "workingDir": "/",
        "env": _env(run, target, config),
        "resources": RUNNER_RESOURCES,
        "securityContext": _container_security(config, config.runner_uid),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"name": "plan", "mountPath": PLAN_DIR, "readOnly": True},
            {"name": "channel", "mountPath": CHANNEL_DIR},
            {"name": "runner-tmp", "mountPath": "/tmp"},
            *([{"name": "verdict", "mountPath": VERDICT_DIR}] if _publishes(run) else []),
            *(
                [{"name": "resume", "mountPath": SESSION_DIR, "readOnly": True}]
                if run.spec.resume_from
                else []
            ),
        ],
    }


def _publishes(run: HarnessRun) -> bool:
    return run.spec.workspace is not None and run.spec.workspace.publish is not None


def _agent_container(run: HarnessRun, config: OperatorConfig, image: str) -> dict[str, Any]:
    """The agent: the launcher (isolated interpreter, outside the workspace) starts the CLI with the
    environment the runner sends; no secret of the pod spec, no plan, the run's resources. The launcher is
    the container's PID 1 (non-dumpable, it reaps the agent's orphans); its exit code is the agent's,
    which the operator checks against the report."""
    workdir = working_dir(run)
    return {
        "name": AGENT_CONTAINER,
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": isolated_python("harness_operator.runner.launcher", "--channel", CHANNEL),
        "workingDir": "/",
        "resources": _resources(run, config),
        "securityContext": _container_security(config),
        "volumeMounts": [
            {"name": "channel", "mountPath": CHANNEL_DIR},
            {"name": "workspace", "mountPath": workspace_mount_path(workdir)},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "home", "mountPath": SANDBOX_HOME},
        ],
    }


def build_job(
    run: HarnessRun,
    target: AttemptTarget,
    config: OperatorConfig,
    start: WorkspaceStart | None = None,
    queue: str | None = None,
) -> dict[str, Any]:
    """The Job of one attempt, in the sandbox: restricted, no API token, credentials only as env; with
    spec.workspace.publish, the publishing sidecar; `start`: the change of spec.workspace.from; `queue`:
    the Kueue LocalQueue that admits it (core/kueue.resolve_queue), which gets it suspended."""
    name = run.metadata["name"]
    sandbox = run.spec.sandbox
    image = (
        (sandbox.image if sandbox and sandbox.image else None)
        or target.definition.image
        or config.sandbox_image
    )
    labels = attempt_labels(name, target.index, target.provider)
    job_labels = dict(labels)
    if queue:  # Kueue reads both from the Job: its LocalQueue and its WorkloadPriorityClass
        job_labels[KUEUE_QUEUE_LABEL] = queue
        priority = run.metadata.get("labels", {}).get(KUEUE_PRIORITY_LABEL)
        if priority:
            job_labels[KUEUE_PRIORITY_LABEL] = priority
    grace = grace_period(run, config)
    pod_spec: dict[str, Any] = {}
    if sandbox:
        if sandbox.runtime_class_name:
            pod_spec["runtimeClassName"] = sandbox.runtime_class_name
        if sandbox.node_selector:
            pod_spec["nodeSelector"] = dict(sandbox.node_selector)
        if sandbox.tolerations:
            pod_spec["tolerations"] = [t.to_api() for t in sandbox.tolerations]
    if config.image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": secret} for secret in config.image_pull_secrets]
    init = _git_init_container(run, image, config, target, start)
    publisher = _publish_container(run, target, config, image)
    # The publisher acts after the agent, within the pod's grace period and the Job's deadline.
    publish_seconds = config.publish_timeout_seconds + PUBLISH_SLACK_SECONDS if publisher else 0
    pod_spec.update(
        {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": grace + 5 + publish_seconds,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": config.sandbox_uid,
                "runAsGroup": config.sandbox_uid,
                "fsGroup": config.sandbox_uid,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "initContainers": [c for c in (init, publisher) if c],
            "containers": [
                _runner_container(run, target, config, image),
                _agent_container(run, config, image),
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


def build_output_config_map(run: HarnessRun, output: str, json_value: str | None = None) -> dict[str, Any]:
    """The full output of the successful attempt, owned by the run, immutable and hashed; with the
    validated JSON value (spec.outputSchema) as output.json."""
    name = run.metadata["name"]
    data = {"output": output, **({"output.json": json_value} if json_value is not None else {})}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": build_child_meta(run, output_config_map_name(name), run_labels(name), data),
        "immutable": True,
        "data": data,
    }


def build_changes_config_map(run: HarnessRun, patch: bytes) -> dict[str, Any]:
    """The patch of the run's change (key changes.patch), owned by the run, immutable and hashed."""
    name = run.metadata["name"]
    payload = build_changes_config_map_data(patch)
    data = payload.get("data") or payload["binaryData"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": build_child_meta(run, changes_config_map_name(name), run_labels(name), data),
        "immutable": True,
        **payload,
    }
