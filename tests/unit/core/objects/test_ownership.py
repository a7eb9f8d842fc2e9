"""Is an existing object the child a run expects? Owner UID, recomputed content hash, shared-claim labels,
and the output ConfigMap a chained run may read: tables of genuine, squatted and edited children."""

import base64
import copy
import hashlib
from typing import Any

import pytest

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.core.objects.ownership import (
    compute_data_hash,
    describe_conflict,
    is_expected_child,
    is_owned_child,
    is_run_output,
    read_data,
)
from harness_operator.core.pod.run_data import build_output_config_map, build_plan_secret
from harness_operator.core.pod.workspace import build_workspace_claim

RUN = HarnessRun.model_validate(
    {
        "metadata": {"name": "victim", "namespace": "team-a", "uid": "uid-victim"},
        "spec": {"provider": "claude", "prompt": "p", "workspace": {"volume": {"scope": "agent"}}},
    }
)
PLANS = [{"argv": ["claude", "-p", "Review."], "attempt": 1}]


def as_read(desired: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server returns it: a Secret's stringData comes back base64 in data."""
    obj = copy.deepcopy(desired)
    if obj["kind"] == "Secret":
        obj["data"] = {k: base64.b64encode(v.encode()).decode() for k, v in obj.pop("stringData").items()}
    obj["metadata"]["uid"] = "child-uid"
    obj["metadata"]["resourceVersion"] = "7"
    return obj


def squatted(desired: dict[str, Any], **changes: Any) -> dict[str, Any]:
    obj = as_read(desired)
    meta = obj["metadata"]
    if "owner" in changes:
        meta["ownerReferences"] = changes["owner"]
    if "data" in changes:
        obj["data"] = changes["data"]
    if "annotations" in changes:
        meta["annotations"] = changes["annotations"]
    if "labels" in changes:
        meta["labels"] = changes["labels"]
    return obj


PLAN = build_plan_secret(RUN, PLANS)
FORGED_ARGV = {"attempt-1.json": base64.b64encode(b'{"argv": ["sh", "-c", "steal"]}').decode()}
OTHER_OWNER = [
    {"apiVersion": "v1", "kind": "HarnessRun", "name": "x", "uid": "uid-other", "controller": True}
]
NOT_CONTROLLER = [{**OTHER_OWNER[0], "uid": "uid-victim", "controller": False}]
CLAIM = build_workspace_claim(RUN, "claude")
assert CLAIM is not None


@pytest.mark.parametrize(
    ("obj", "desired", "expected"),
    [
        (as_read(PLAN), PLAN, True),
        (squatted(PLAN, owner=[]), PLAN, False),
        (squatted(PLAN, owner=OTHER_OWNER), PLAN, False),
        (squatted(PLAN, owner=NOT_CONTROLLER), PLAN, False),
        (squatted(PLAN, data=FORGED_ARGV), PLAN, False),
        (squatted(PLAN, data={"attempt-1.json": "not base64!"}), PLAN, False),
        (squatted(PLAN, annotations={}), PLAN, False),
        (as_read(build_output_config_map(RUN, "out")), build_output_config_map(RUN, "out"), True),
        (as_read(build_output_config_map(RUN, "forged")), build_output_config_map(RUN, "out"), False),
        (as_read(CLAIM), CLAIM, True),
        (squatted(CLAIM, labels={}), CLAIM, False),
        (
            squatted(CLAIM, labels={**CLAIM["metadata"]["labels"], "agentharness.dev/workspace": "run"}),
            CLAIM,
            False,
        ),
    ],
    ids=[
        "plan Secret the operator wrote",
        "plan Secret without owner",
        "plan Secret owned by another run",
        "owner reference that is not the controller",
        "owner forged, argv forged",
        "data that does not decode",
        "hash annotation missing",
        "output ConfigMap the operator wrote",
        "output ConfigMap with other text",
        "shared claim the operator made",
        "shared claim without our labels",
        "shared claim of another scope",
    ],
)
def test_is_expected_child(obj: dict[str, Any], desired: dict[str, Any], expected: bool) -> None:
    assert is_expected_child(obj, desired) is expected


def test_forged_hash_annotation_does_not_pass_without_matching_data() -> None:
    """A squatter who copies the annotation but not the content still fails: the hash is recomputed."""
    obj = squatted(PLAN, data=FORGED_ARGV)
    assert obj["metadata"]["annotations"] == PLAN["metadata"]["annotations"]
    assert not is_owned_child(
        obj, "uid-victim", PLAN["metadata"]["annotations"]["agentharness.dev/content-sha256"]
    )


def test_owner_only_check_for_jobs_and_policies() -> None:
    job = {"metadata": {"ownerReferences": [{"uid": "uid-victim", "controller": True}]}}
    assert is_owned_child(job, "uid-victim")
    assert not is_owned_child(job, "")
    assert not is_owned_child({"metadata": {}}, "uid-victim")


def test_data_hash_ignores_key_order_and_reads_secrets_decoded() -> None:
    assert compute_data_hash({"a": "1", "b": "2"}) == compute_data_hash({"b": "2", "a": "1"})
    assert compute_data_hash({"a": "1"}) != compute_data_hash({"a": "2"})
    assert read_data(as_read(PLAN)) == PLAN["stringData"]
    assert read_data({"kind": "ConfigMap", "data": {"output": "x"}}) == {"output": "x"}


@pytest.mark.parametrize(
    ("obj", "desired", "words"),
    [
        (squatted(PLAN, owner=OTHER_OWNER), PLAN, "Secret victim-plan already exists"),
        (squatted(PLAN, owner=OTHER_OWNER), PLAN, "not controlled by HarnessRun victim (uid uid-victim)"),
        (squatted(PLAN, data=FORGED_ARGV), PLAN, "content is not what the operator wrote"),
        (squatted(CLAIM, labels={}), CLAIM, "PersistentVolumeClaim harness-ws-claude already exists"),
        (squatted(CLAIM, labels={}), CLAIM, "agentharness.dev/workspace=agent"),
    ],
)
def test_describe_conflict_names_the_object_and_why(
    obj: dict[str, Any], desired: dict[str, Any], words: str
) -> None:
    assert words in describe_conflict(obj, desired, "victim")


def upstream(output: str, uid: str = "uid-victim") -> dict[str, Any]:
    return {
        "metadata": {"name": "victim", "uid": uid},
        "status": {"output": {"sha256": hashlib.sha256(output.encode()).hexdigest()}},
    }


@pytest.mark.parametrize(
    ("config_map", "run", "expected"),
    [
        (as_read(build_output_config_map(RUN, "answer")), upstream("answer"), True),
        (as_read(build_output_config_map(RUN, "answer")), upstream("other answer"), False),
        (squatted(build_output_config_map(RUN, "answer"), owner=[]), upstream("answer"), False),
        (as_read(build_output_config_map(RUN, "answer")), upstream("answer", uid="uid-recreated"), False),
        (as_read(build_output_config_map(RUN, "answer")), {"metadata": {"uid": "uid-victim"}}, False),
        ({"metadata": {"ownerReferences": [{"uid": "uid-victim", "controller": True}]}}, upstream(""), False),
    ],
    ids=[
        "the run's own output",
        "text differs from the sha256 in status",
        "squatted: not owned",
        "owned by an earlier run of the same name",
        "run reports no output",
        "no output key",
    ],
)
def test_is_run_output(config_map: dict[str, Any], run: dict[str, Any], expected: bool) -> None:
    assert is_run_output(config_map, run) is expected
