"""The run's data children: the plan Secret, the earlier session's Secret, the output and changes
ConfigMaps, each owned by the run, immutable and hashed (pure)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.plan import SESSION_KEY
from harness_operator.core.objects.naming import (
    changes_config_map_name,
    output_config_map_name,
    plan_secret_name,
    resume_secret_name,
    run_labels,
)
from harness_operator.core.objects.ownership import build_child_meta
from harness_operator.core.pod.publish import build_changes_config_map_data


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
