"""A run's workspace: the claim the operator makes for it, the volume the pod mounts and where (pure)."""

from __future__ import annotations

import posixpath
from typing import Any

from harness_operator.api.v1alpha1 import (
    HarnessRun,
)
from harness_operator.core.objects.naming import (
    LABEL_USER,
    LABEL_WORKSPACE,
    run_labels,
    workspace_claim_name,
)
from harness_operator.core.objects.ownership import owner_reference

DEFAULT_WORKING_DIR = "/workspace"


def workspace_claim(run: HarnessRun, provider: str) -> tuple[str, str] | None:
    """(claim name, scope) when the run asks the operator for a claim, else None."""
    workspace = run.spec.workspace
    volume = workspace.volume if workspace else None
    if volume is None or volume.scope is None:
        return None
    user = run.metadata.get("labels", {}).get(LABEL_USER)
    return workspace_claim_name(run.metadata["name"], provider, volume.scope, user), volume.scope


def build_workspace_claim(run: HarnessRun, provider: str) -> dict[str, Any] | None:
    """The claim for scope run (owned by the run) or agent/agentUser (shared, kept, not owned)."""
    claim = workspace_claim(run, provider)
    if claim is None:
        return None
    name, scope = claim
    volume = run.spec.workspace.volume  # type: ignore[union-attr]
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": volume.size or "1Gi"}},  # type: ignore[union-attr]
    }
    if volume.storage_class_name:  # type: ignore[union-attr]
        spec["storageClassName"] = volume.storage_class_name  # type: ignore[union-attr]
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": run.metadata["namespace"],
        "labels": {**run_labels(run.metadata["name"]), LABEL_WORKSPACE: scope},
    }
    if scope == "run":
        metadata["ownerReferences"] = [owner_reference(run)]
    else:
        metadata["labels"].pop("agentharness.dev/run")
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": metadata, "spec": spec}


def build_workspace_volume(run: HarnessRun, provider: str) -> dict[str, Any]:
    claim = workspace_claim(run, provider)
    if claim:
        return {"name": "workspace", "persistentVolumeClaim": {"claimName": claim[0]}}
    workspace = run.spec.workspace
    volume = workspace.volume if workspace else None
    if volume and volume.persistent_volume_claim:
        return {
            "name": "workspace",
            "persistentVolumeClaim": {"claimName": volume.persistent_volume_claim.claim_name},
        }
    return {"name": "workspace", "emptyDir": volume.empty_dir.to_api() if volume and volume.empty_dir else {}}


def working_dir(run: HarnessRun) -> str:
    workspace = run.spec.workspace
    return (workspace.working_dir if workspace else None) or DEFAULT_WORKING_DIR


def workspace_mount_path(workdir: str) -> str:
    """The workspace volume goes on the working directory's parent, so the directory itself (and a git
    clone in it) belongs to the sandbox user: git refuses a repository owned by someone else, and a
    volume's root is owned by root. A working directory right under / gets the volume itself."""
    parent = posixpath.dirname(workdir.rstrip("/"))
    return parent if parent not in ("", "/") else workdir
