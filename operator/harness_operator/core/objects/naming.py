"""Deterministic child names and labels, safe for Kubernetes' 63-character limits (pure)."""

from __future__ import annotations

import hashlib
import re
from typing import Any

from harness_operator.api.v1alpha1 import GROUP

MANAGED_BY = "harness-operator"
# A trigger's runs (core/forge/triggering.py) and the runs of a pipeline it made carry the forge context
# (core/pipeline/runs.py hands the pipeline's on): the reporting step and the receiver find them by it.
LABEL_TRIGGER = f"{GROUP}/trigger"
LABEL_THREAD = f"{GROUP}/forge-thread"
ANNOTATION_REPOSITORY = f"{GROUP}/forge-repository"
ANNOTATION_THREAD_KIND = f"{GROUP}/forge-thread-kind"
ANNOTATION_DELIVERY = f"{GROUP}/forge-delivery"
ANNOTATION_EVENT = f"{GROUP}/forge-event"
ANNOTATION_HEAD = f"{GROUP}/forge-head"
FORGE_LABELS = (LABEL_TRIGGER, LABEL_THREAD)
FORGE_ANNOTATIONS = (
    ANNOTATION_REPOSITORY,
    ANNOTATION_THREAD_KIND,
    ANNOTATION_DELIVERY,
    ANNOTATION_EVENT,
    ANNOTATION_HEAD,
)
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_RUN = f"{GROUP}/run"
LABEL_ATTEMPT = f"{GROUP}/attempt"
LABEL_PROVIDER = f"{GROUP}/provider"
LABEL_USER = f"{GROUP}/user"
LABEL_WORKSPACE = f"{GROUP}/workspace"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# The run's full name (labels stop at 63 characters); the operator finds a child's run through it.
ANNOTATION_RUN = f"{GROUP}/run-name"
# Who created a run and who cancelled it (the API server's usernames for them: harnessctl writes them) and
# the decision on its publish, written by harnessctl approve|reject; the admission policy
# <release>-approvals makes them trustworthy.
ANNOTATION_AUTHOR = f"{GROUP}/author"
ANNOTATION_CANCELLED_BY = f"{GROUP}/cancelled-by"
APPROVAL_PREFIX = f"approval.{GROUP}/"
ANNOTATION_DECISION = f"{APPROVAL_PREFIX}decision"
ANNOTATION_APPROVER = f"{APPROVAL_PREFIX}user"
ANNOTATION_DECISION_REASON = f"{APPROVAL_PREFIX}reason"
# sha256 of the data the operator wrote into a child (plan Secret, output ConfigMap): checked on read.
ANNOTATION_CONTENT_SHA256 = f"{GROUP}/content-sha256"
# An attempt's pod: the runner's container (its log and termination message are the report the operator
# reads) and the agent's (the launcher and the CLI, another user, another process namespace).
RUNNER_CONTAINER = "runner"
AGENT_CONTAINER = "agent"
CLONE_CONTAINER = "git-clone"  # the workspace's clone, an init container
PUBLISH_CONTAINER = "publish"  # the agent's change published (a sidecar: it acts once the others ended)

MAX_NAME = 63


def short_hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def fit_name(base: str, suffix: str = "", limit: int = MAX_NAME) -> str:
    """`base` + `suffix`, cut to `limit` with a hash of the whole kept so distinct inputs stay distinct."""
    name = f"{base}{suffix}"
    if len(name) <= limit:
        return name
    digest = short_hash(name)
    keep = limit - len(suffix) - len(digest) - 1
    return f"{base[:keep].rstrip('-.')}-{digest}{suffix}"


def label_value(text: str) -> str:
    """A valid label value: at most 63 characters of [A-Za-z0-9-_.], alphanumeric at both ends."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", text).strip("-_.")
    if len(cleaned) > MAX_NAME:
        cleaned = f"{cleaned[:54].rstrip('-_.')}-{short_hash(text)}"
    return cleaned


def job_name(run: str, attempt: int) -> str:
    """The Job of attempt `attempt` (1-based) of run `run`."""
    return fit_name(run, f"-a{attempt}")


def publish_job_name(run: str) -> str:
    """The Job that publishes the run's approved change (runner/publish_kept.py)."""
    return fit_name(run, "-publish")


def plan_secret_name(run: str) -> str:
    return fit_name(run, "-plan", 253)


def output_config_map_name(run: str) -> str:
    return fit_name(run, "-output", 253)


def resume_secret_name(run: str) -> str:
    """The Secret holding the earlier session a run continues (spec.resumeFrom)."""
    return fit_name(run, "-resume", 253)


def changes_config_map_name(run: str) -> str:
    """The ConfigMap holding the patch of the run's change (spec.workspace.publish)."""
    return fit_name(run, "-changes", 253)


def end_event_name(run: str, uid: str) -> str:
    """The one Event that says a run ended: fixed per run, so posting it again is refused (409)."""
    return fit_name(f"{run}.{uid}", ".end", 253)


def network_policy_name(run: str, attempt: int) -> str:
    return fit_name(run, f"-a{attempt}", 253)


def encode_user_label(username: str) -> str | None:
    """The value of LABEL_USER that names an authenticated user, as the chart's admission policy computes
    it from request.userInfo.username (templates/admission-run-user.yaml): '_' doubled, '@' as '_at_', ':'
    as '_c_', so no two usernames share one; None when the result is no label value (other characters,
    over 63 characters, not a letter or digit at both ends)."""
    value = username.replace("_", "__").replace("@", "_at_").replace(":", "_c_")
    return value if _USER_LABEL_VALUE.fullmatch(value) else None


_USER_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")


def workspace_claim_name(run: str, provider: str, scope: str, user: str | None) -> str:
    """run scope: one claim per run; agent: per provider (shared, kept); agentUser: per provider and user,
    `user` being the run's LABEL_USER (the author, as admission checks it): its readable part lowercased
    for a DNS name, and a hash of it as written, so no two users' claims share a name."""
    if scope == "run":
        return fit_name(run, "-workspace")
    if scope == "agent":
        return fit_name(f"harness-ws-{provider}")
    key = user or "anonymous"
    readable = re.sub(r"[^a-z0-9-]+", "-", key.lower()).strip("-")
    return fit_name(f"harness-ws-{provider}-{readable}", f"-{short_hash(key)}")


def run_labels(run: str) -> dict[str, str]:
    """Labels every child of a run carries; the operator's watches select on them."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_RUN: label_value(run)}


def attempt_labels(run: str, attempt: int, provider: str) -> dict[str, str]:
    return {**run_labels(run), LABEL_ATTEMPT: str(attempt), LABEL_PROVIDER: label_value(provider)}


def service_account_user(namespace: str, name: str) -> str:
    """The username the API server gives a ServiceAccount."""
    return f"system:serviceaccount:{namespace}:{name}"


def with_author(obj: dict[str, Any], service_account: str) -> dict[str, Any]:
    """`obj` recorded as created by the ServiceAccount of its namespace (agentharness.dev/author, which
    admission holds to the requester): what a create as that account sends."""
    meta = obj["metadata"]
    author = {ANNOTATION_AUTHOR: service_account_user(meta["namespace"], service_account)}
    return {**obj, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}), **author}}}


def as_service_account(namespace: str, name: str) -> dict[str, str]:
    """The header that makes one request the ServiceAccount's. No Impersonate-Group: the API server gives
    an impersonated ServiceAccount its own groups (system:serviceaccounts, ...:<namespace>,
    system:authenticated) itself, while naming them would need a cluster-wide right to impersonate groups."""
    return {"Impersonate-User": service_account_user(namespace, name)}
