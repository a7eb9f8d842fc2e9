"""Evaluate a CRD schema's `x-kubernetes-validations` offline, as the API server does (pure).

`harnessctl validate` uses the rules of the generated CRDs, so one set of rules serves both the API
server and offline validation; tests/integration checks that both reach the same verdicts.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import celpy
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError


@dataclass(frozen=True)
class RuleViolation:
    """A rule that did not hold: where (dotted path) and the rule's message."""

    path: str
    message: str


@cache
def _program(expr: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expr))


def _holds(expr: str, value: Any, old: Any) -> bool:
    activation = {"self": json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = json_to_cel(old)
    try:
        result = _program(expr).evaluate(activation)
    except CELEvalError:
        return False
    return bool(result) and not isinstance(result, CELEvalError)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def check_rules(schema: dict[str, Any], value: Any, old: Any = None, path: str = "") -> list[RuleViolation]:
    """Every rule violated by `value` under `schema`; transition rules only when `old` is given."""
    if value is None:
        return []
    found: list[RuleViolation] = []
    for entry in schema.get("x-kubernetes-validations", []):
        expr = entry["rule"]
        if "oldSelf" in expr and old is None:
            continue
        if not _holds(expr, value, old):
            where = path + entry.get("fieldPath", "") if entry.get("fieldPath") else path
            found.append(RuleViolation(where, entry["message"]))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, child in value.items():
            sub = props.get(key) or schema.get("additionalProperties")
            if isinstance(sub, dict):
                old_child = old.get(key) if isinstance(old, dict) else None
                found += check_rules(sub, child, old_child, _join(path, key))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += check_rules(schema["items"], item, None, f"{path}[{index}]")
    return found
