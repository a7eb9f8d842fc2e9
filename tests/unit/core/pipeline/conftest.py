"""Pipelines for the pipeline room's tests, built as a user writes them."""

from __future__ import annotations

from typing import Any

from harness_operator.api.v1alpha1 import HarnessPipeline


def make_pipeline(
    *steps: dict[str, Any], cancel: bool = False, status: dict[str, Any] | None = None
) -> HarnessPipeline:
    """A pipeline `p` in namespace `team` of the given steps (each: name, prompt, and any step field)."""
    body: dict[str, Any] = {
        "metadata": {"name": "p", "namespace": "team", "uid": "u-1", "generation": 1},
        "spec": {
            "serviceAccountName": "runner",
            "cancel": cancel,
            "steps": [
                {
                    **{k: v for k, v in s.items() if k not in ("prompt", "provider", "spec", "metadata")},
                    "run": {
                        **({"metadata": s["metadata"]} if "metadata" in s else {}),
                        "spec": {
                            "provider": s.get("provider", "claude"),
                            "prompt": s["prompt"],
                            **s.get("spec", {}),
                        },
                    },
                }
                for s in steps
            ],
        },
    }
    if status is not None:
        body["status"] = status
    return HarnessPipeline.model_validate(body)
