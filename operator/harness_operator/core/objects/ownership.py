"""The metadata that makes an object a run's child, and whether an object that exists is the child a run
expects: owner, content hash, shared-claim labels (pure).

`create` answering 409 proves only that a name is taken. A run's children carry its controller owner
reference (the run's UID); the plan Secret and the output ConfigMap also carry the sha256 of their data,
which is recomputed from what the object holds, so a forged or edited plan or output never passes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from harness_operator.api.v1alpha1 import API_VERSION, HarnessRun
from harness_operator.core.objects.naming import ANNOTATION_CONTENT_SHA256, LABEL_MANAGED_BY, LABEL_WORKSPACE


def compute_data_hash(data: Mapping[str, str]) -> str:
    """sha256 of a Secret's or ConfigMap's string data, independent of key order."""
    canonical = json.dumps(dict(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def read_data(obj: Mapping[str, Any]) -> dict[str, str] | None:
    """The string data an object holds (a Secret's `data` is base64); None when it cannot be decoded."""
    data = dict(obj.get("data") or {})
    if obj.get("kind") != "Secret":
        return {str(k): str(v) for k, v in data.items()} | dict(obj.get("stringData") or {})
    try:
        decoded = {str(k): base64.b64decode(str(v), validate=True).decode("utf-8") for k, v in data.items()}
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded | dict(obj.get("stringData") or {})


def controller_uid(obj: Mapping[str, Any]) -> str | None:
    """The UID of the object's controller owner, if it has one."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def _annotation_hash(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_CONTENT_SHA256)


def is_owned_child(obj: Mapping[str, Any], owner_uid: str, expected_hash: str | None = None) -> bool:
    """`obj` is controlled by `owner_uid` and, when `expected_hash` is given, carries that content hash
    and holds data that hashes to it."""
    if not owner_uid or controller_uid(obj) != owner_uid:
        return False
    if expected_hash is None:
        return True
    data = read_data(obj)
    return (
        _annotation_hash(obj) == expected_hash
        and data is not None
        and compute_data_hash(data) == expected_hash
    )


def is_shared_claim(obj: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """A shared workspace claim (scope agent/agentUser) is owned by no run: it must carry the operator's
    managed-by label and the same workspace scope label as the claim the operator would create."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    wanted = (desired.get("metadata") or {}).get("labels") or {}
    return all(labels.get(key) == wanted.get(key) for key in (LABEL_MANAGED_BY, LABEL_WORKSPACE))


def is_expected_child(obj: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """The existing `obj` may stand for `desired`: owned by the same run (with the same content hash when
    `desired` has one), or, for a shared claim, labelled as the operator labels it."""
    owner = controller_uid(desired)
    if owner is None:
        return is_shared_claim(obj, desired)
    return is_owned_child(obj, owner, _annotation_hash(desired))


def describe_conflict(obj: Mapping[str, Any], desired: Mapping[str, Any], run_name: str) -> str:
    """Why `obj` is not the child `desired`, naming it, for the run's ChildConflict message."""
    what = f"{desired['kind']} {desired['metadata']['name']}"
    owner = controller_uid(desired)
    if owner is None:
        why = (
            f"it lacks the labels {LABEL_MANAGED_BY}=harness-operator and {LABEL_WORKSPACE}="
            f"{desired['metadata']['labels'].get(LABEL_WORKSPACE)} the operator sets on shared claims"
        )
    elif controller_uid(obj) != owner:
        why = f"it is not controlled by HarnessRun {run_name} (uid {owner})"
    else:
        why = "its content is not what the operator wrote (sha256 differs)"
    return (
        f"{what} already exists and was not made by the operator for this run: {why}; nothing more runs. "
        "Delete it and create the run again under a new name"
    )


def is_run_output(config_map: Mapping[str, Any], run: Mapping[str, Any]) -> bool:
    """The ConfigMap is `run`'s output: controlled by the run, and its text hashes to the sha256 the
    run's status reports (status is written only by the operator)."""
    uid = (run.get("metadata") or {}).get("uid") or ""
    expected = ((run.get("status") or {}).get("output") or {}).get("sha256")
    text = (config_map.get("data") or {}).get("output")
    if not is_owned_child(config_map, str(uid)) or expected is None or text is None:
        return False
    return hashlib.sha256(str(text).encode("utf-8")).hexdigest() == str(expected)


def owner_reference(run: HarnessRun) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "HarnessRun",
        "name": run.metadata["name"],
        "uid": run.metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def build_child_meta(
    run: HarnessRun, name: str, labels: Mapping[str, str], data: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Owned by the run; with `data`, annotated with its hash so a squatted or edited copy is caught."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": run.metadata["namespace"],
        "labels": dict(labels),
        "ownerReferences": [owner_reference(run)],
    }
    if data is not None:
        meta["annotations"] = {ANNOTATION_CONTENT_SHA256: compute_data_hash(data)}
    return meta
