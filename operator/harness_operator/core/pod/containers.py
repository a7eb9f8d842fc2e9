"""The containers of an attempt's pod: the clone (an init container), the publisher (a sidecar), the
runner and the agent (pure). User-supplied fields are applied first and ours last, so nothing in a run can
override our security settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun, ProtectedPathRule, SecretKeySelector
from harness_operator.contract.changes import (
    BASE_FILE,
    CLONE_TOKEN_ENV,
    PUBLISH_DIR,
    PUBLISH_PLAN_ENV,
    PUBLISH_TOKEN_ENV,
    VERDICT_DIR,
    VERDICT_FILE,
)
from harness_operator.contract.plan import CONFINEMENT_ENV, SESSION_DIR
from harness_operator.core.access.credentials import merge_grants
from harness_operator.core.access.egress import ROUTE_GATEWAY
from harness_operator.core.access.git_egress import compute_git_no_proxy
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import (
    AGENT_CONTAINER,
    CLONE_CONTAINER,
    PUBLISH_CONTAINER,
    RUNNER_CONTAINER,
    plan_secret_name,
)
from harness_operator.core.pod.egress_grant import (
    NO_PROXY_ENVS,
    PROXY_URL_ENVS,
    SANDBOX_PROXY_ENV,
    build_no_proxy,
    build_proxy_env,
    git_slot,
    has_git_credential,
    proxy_url_key,
)
from harness_operator.core.pod.model_grant import build_model_env
from harness_operator.core.pod.protected_paths import merge_protected_paths
from harness_operator.core.pod.publish import WorkspaceStart, build_publish_plan, build_secret_scan_plan
from harness_operator.core.pod.signing import build_signing_env, build_signing_plan
from harness_operator.core.pod.workspace import working_dir, workspace_mount_path

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
# Where the clone reads the patch of spec.workspace.from's run (a ConfigMap volume).
FROM_PATCH_DIR = "/etc/harness-from"
FROM_PATCH = f"{FROM_PATCH_DIR}/changes.patch"


def container_security(config: OperatorConfig, uid: int | None = None) -> dict[str, Any]:
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


def build_credential_env(run: HarnessRun, target: Attempt) -> list[dict[str, Any]]:
    """Credentials, each only by secretKeyRef, then HOME. The plain env travels in the plan and the
    runner sets it on the agent only: LD_PRELOAD or PYTHONPATH from a run never reach the runner.
    Through the egress gateway, the proxy URLs come from the plan Secret, in place of any grant of
    those names."""
    grants = merge_grants(run, target.definition)
    route = target.model_route
    if route is not None:  # a run's own key (the token's variable) is the gateway's to hold
        grants = {k: v for k, v in grants.items() if k not in {e.name for e in route.env}}
    proxy: list[dict[str, Any]] = []
    if target.route == ROUTE_GATEWAY:
        proxy = build_proxy_env(plan_secret_name(run.metadata["name"]), target.index)
        grants = {k: v for k, v in grants.items() if k not in {e["name"] for e in proxy}}
    env: list[dict[str, Any]] = []
    for name, grant in sorted(grants.items()):
        ref: dict[str, Any] = {"name": grant.secret_key_ref.name, "key": grant.secret_key_ref.key}
        if grant.optional:
            ref["optional"] = True
        env.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    env += proxy
    env += build_model_env(target, plan_secret_name(run.metadata["name"]))
    env.append({"name": "HOME", "value": SANDBOX_HOME})
    return env


def _secret_env(name: str, ref: SecretKeySelector) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def build_clone_container(
    run: HarnessRun,
    image: str,
    config: OperatorConfig,
    target: Attempt,
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
    probe = target.confinement
    publishing = publishes(run)
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
    env += build_git_proxy_env(run, target, config)
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
        "securityContext": container_security(config),
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


def build_publish_container(
    run: HarnessRun,
    target: Attempt,
    config: OperatorConfig,
    image: str,
    namespace_rules: Sequence[ProtectedPathRule] = (),
) -> dict[str, Any] | None:
    """The publisher (runner/publish.py), a sidecar: the kubelet stops it only after the runner and the
    agent have ended, and then it takes the change. It holds the write credential and the platform's
    signing key, which no other container does, and every credential the agent is granted, to refuse a
    change that holds one."""
    workspace = run.spec.workspace
    publish = workspace.publish if workspace else None
    git = workspace.git if workspace else None
    if publish is None or git is None:
        return None
    env = [e for e in build_credential_env(run, target) if e["name"] != "HOME"]
    proxy = build_git_proxy_env(run, target, config)
    if proxy:  # its own way out, in place of the sandbox's
        env = [e for e in env if e["name"] not in PROXY_URL_ENVS] + proxy
    if has_git_credential(run, target, config) and target.route == ROUTE_GATEWAY:
        # The sandbox's proxy URL only to refuse a change that holds it.
        sandbox = {"name": plan_secret_name(run.metadata["name"]), "key": proxy_url_key(target.index)}
        env.append({"name": SANDBOX_PROXY_ENV, "valueFrom": {"secretKeyRef": sandbox}})
    tokens = build_publisher_token_env(run)
    secrets = [e["name"] for e in env if "valueFrom" in e] + [e["name"] for e in tokens]
    env += tokens
    rules = merge_protected_paths(config.protected_paths, namespace_rules, publish.protected_paths)
    sign = build_signing_plan(run, config)
    if sign is not None:
        env.append(build_signing_env(config))
    plan = build_publish_plan(
        run,
        working_dir(run),
        secrets,
        config.publish_timeout_seconds,
        rules,
        build_secret_scan_plan(config),
        sign,
    )
    assert plan is not None
    # `$$` is the kubelet's escape for `$`: a template's $(NAME) must not become another variable's value.
    env.append({"name": PUBLISH_PLAN_ENV, "value": plan.to_json().replace("$", "$$")})
    mounts: list[dict[str, Any]] = [
        {"name": "workspace", "mountPath": workspace_mount_path(working_dir(run)), "readOnly": True},
        {"name": "publish", "mountPath": PUBLISH_DIR},
        {"name": "verdict", "mountPath": VERDICT_DIR, "readOnly": True},
    ]
    container = build_publisher_container(config, image, "harness_operator.runner.publish", env, mounts)
    return {**container, "restartPolicy": "Always"}


def build_publisher_token_env(run: HarnessRun) -> list[dict[str, Any]]:
    """The publisher's tokens, which no other container holds: the clone's read token (to fetch) and the
    write token (to push and open the pull request), each where the run names one."""
    workspace = run.spec.workspace
    git = workspace.git if workspace else None
    publish = workspace.publish if workspace else None
    tokens = (
        (CLONE_TOKEN_ENV, git.credentials_secret_ref if git else None),
        (PUBLISH_TOKEN_ENV, publish.credentials_secret_ref if publish else None),
    )
    return [_secret_env(name, ref) for name, ref in tokens if ref is not None]


def build_publisher_container(
    config: OperatorConfig, image: str, module: str, env: list[dict[str, Any]], mounts: list[dict[str, Any]]
) -> dict[str, Any]:
    """The publisher's container, the attempt's sidecar or the publish Job's one: `module` the runner's
    entry point, its report the termination message."""
    return {
        "name": PUBLISH_CONTAINER,
        "image": image,
        "imagePullPolicy": config.image_pull_policy,
        "command": ["tini", "--", *isolated_python(module)],
        "workingDir": "/",
        "env": env,
        "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}},
        "securityContext": container_security(config),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": mounts,
    }


def build_git_proxy_env(run: HarnessRun, target: Attempt, config: OperatorConfig) -> list[dict[str, Any]]:
    """The clone's and the publisher's way to the run's git host and forge API through the gateway: the
    attempt's git credential (egress_grant.git_slot), which no other container holds; else, where the
    attempt goes through the gateway, the sandbox's (a git:// or ssh remote goes direct either way)."""
    secret = plan_secret_name(run.metadata["name"])
    if has_git_credential(run, target, config):
        proxy = build_proxy_env(secret, git_slot(target.index))
    elif target.route == ROUTE_GATEWAY:
        proxy = build_proxy_env(secret, target.index)
    else:
        return []
    # What the attempt's rules open by address goes direct, as the policy lets it.
    direct = compute_git_no_proxy(run, target.egress)
    no_proxy = ",".join([build_no_proxy(target.egress), *direct])
    return proxy + [{"name": name, "value": no_proxy} for name in NO_PROXY_ENVS]


def isolated_python(module: str, *args: str) -> list[str]:
    """`python3 -I -m module`: isolated mode, so nothing in the working directory or the environment
    (PYTHONPATH, a workspace's own package) changes which code runs."""
    return ["python3", "-I", "-m", module, *args]


def build_runner_container(
    run: HarnessRun, target: Attempt, config: OperatorConfig, image: str
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
                *(["--verdict", VERDICT_FILE] if publishes(run) else []),
            ),
        ],
        "workingDir": "/",
        "env": build_credential_env(run, target),
        "resources": RUNNER_RESOURCES,
        "securityContext": container_security(config, config.runner_uid),
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "volumeMounts": [
            {"name": "plan", "mountPath": PLAN_DIR, "readOnly": True},
            {"name": "channel", "mountPath": CHANNEL_DIR},
            {"name": "runner-tmp", "mountPath": "/tmp"},
            *([{"name": "verdict", "mountPath": VERDICT_DIR}] if publishes(run) else []),
            *(
                [{"name": "resume", "mountPath": SESSION_DIR, "readOnly": True}]
                if run.spec.resume_from
                else []
            ),
        ],
    }


def publishes(run: HarnessRun) -> bool:
    return run.spec.workspace is not None and run.spec.workspace.publish is not None


def build_agent_container(run: HarnessRun, config: OperatorConfig, image: str) -> dict[str, Any]:
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
        "securityContext": container_security(config),
        "volumeMounts": [
            {"name": "channel", "mountPath": CHANNEL_DIR},
            {"name": "workspace", "mountPath": workspace_mount_path(workdir)},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "home", "mountPath": SANDBOX_HOME},
        ],
    }
