"""Evaluate a CRD schema's `x-kubernetes-validations` offline, as the API server does (pure).

`harnessctl validate` uses the rules of the generated CRDs, so one set of rules serves both the API
server and offline validation; tests/integration checks that both reach the same verdicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError


@dataclass(frozen=True)
class RuleViolation:
    """A rule that did not hold: where (dotted path) and the rule's message."""

    path: str
    message: str


# Kubernetes' CEL libraries that celpy lacks, as far as our rules use them.
def _find_all(text: Any, pattern: Any) -> celtypes.ListType:
    return celtypes.ListType([celtypes.StringType(m.group(0)) for m in re.finditer(str(pattern), str(text))])


def _find(text: Any, pattern: Any) -> celtypes.StringType:
    match = re.search(str(pattern), str(text))
    return celtypes.StringType(match.group(0) if match else "")


def _split(text: Any, separator: Any) -> celtypes.ListType:
    return celtypes.ListType([celtypes.StringType(part) for part in str(text).split(str(separator))])


def _replace(text: Any, old: Any, new: Any) -> celtypes.StringType:
    return celtypes.StringType(str(text).replace(str(old), str(new)))


def _sum(items: Any) -> celtypes.IntType:
    return celtypes.IntType(sum(int(item) for item in items))


_FUNCTIONS: dict[str, Any] = {
    "findAll": _find_all,
    "find": _find,
    "split": _split,
    "replace": _replace,
    "sum": _sum,
}


@cache
def _program(expr: str) -> Any:
    env = celpy.Environment()
    return env.program(env.compile(expr), functions=_FUNCTIONS)


def _message(entry: dict[str, Any], value: Any, old: Any) -> str:
    """The rule's messageExpression when it evaluates to a string, as the API server does; else message."""
    expr = entry.get("messageExpression")
    if expr:
        activation = {"self": json_to_cel(value)}
        if old is not None:
            activation["oldSelf"] = json_to_cel(old)
        try:
            result = _program(expr).evaluate(activation)
        except CELEvalError:
            result = None
        if isinstance(result, str) and result:
            return str(result)
    return str(entry["message"])


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
            found.append(RuleViolation(where, _message(entry, value, old)))
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
