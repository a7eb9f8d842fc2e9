"""The protected paths a run's publisher enforces (pure): the platform's (the chart's), its namespace's
(an annotation) and the run's, merged so that only the platform can loosen a rule.

A path falls under its strictest matching rule (runner/protected_paths.py), so a rule added below the
platform can only tighten; the merge also keeps one rule per path, the strictest, so that the plan shows
what is enforced.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from pydantic import TypeAdapter, ValidationError

from harness_operator.api.v1alpha1 import ProtectedPathAction, ProtectedPathRule

# Set by whoever may edit the Namespace (tenants usually may not): a JSON list of {path, action}.
NAMESPACE_ANNOTATION = "agentharness.dev/protected-paths"
_STRICTNESS = {ProtectedPathAction.require_approval: 0, ProtectedPathAction.refuse: 1}


def merge_protected_paths(*layers: Iterable[ProtectedPathRule]) -> list[ProtectedPathRule]:
    """The rules of every layer (platform, namespace, run) in order, one per path (case ignored, as
    they match), each with the strictest action any layer gives it."""
    merged: dict[str, ProtectedPathRule] = {}
    for layer in layers:
        for rule in layer:
            key = rule.path.casefold()
            held = merged.get(key)
            if held is None or _STRICTNESS[rule.action] > _STRICTNESS[held.action]:
                merged[key] = ProtectedPathRule(path=held.path if held else rule.path, action=rule.action)
    return list(merged.values())


def parse_namespace_rules(annotations: Mapping[str, str] | None) -> list[ProtectedPathRule]:
    """The namespace's rules from its annotation (none when absent); ValueError naming the annotation
    and the form it takes when it is not a list of rules."""
    raw = (annotations or {}).get(NAMESPACE_ANNOTATION)
    if raw is None or not raw.strip():
        return []
    try:
        rules = TypeAdapter(list[ProtectedPathRule]).validate_python(json.loads(raw))
    except (ValueError, ValidationError) as exc:
        first = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise ValueError(
            f"the namespace's annotation {NAMESPACE_ANNOTATION} is not a JSON list of rules ({first}): "
            'write it as [{"path": "deploy/", "action": "Refuse"}] (action Refuse or RequireApproval)'
        ) from None
    for rule in rules:
        if rule.path.startswith("/"):
            raise ValueError(
                f'the namespace\'s annotation {NAMESPACE_ANNOTATION}: path "{rule.path}" is relative to '
                'the repository\'s root: drop the leading "/"'
            )
    return rules
