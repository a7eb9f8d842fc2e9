"""The built-in ClusterHarnessDefinition catalog shipped with the package (reads package data)."""

from __future__ import annotations

from functools import cache
from importlib import resources

import yaml

from harness_operator.api.v1alpha1 import ClusterHarnessDefinition


@cache
def load_builtin_catalog() -> tuple[ClusterHarnessDefinition, ...]:
    """Every built-in provider, sorted by name."""
    folder = resources.files(__name__)
    docs = [
        yaml.safe_load(entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".yaml")
    ]
    return tuple(
        sorted((ClusterHarnessDefinition.model_validate(d) for d in docs), key=lambda d: d.metadata["name"])
    )
