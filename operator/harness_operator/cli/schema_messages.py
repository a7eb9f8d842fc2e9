"""Pydantic's errors as messages a newcomer can act on: the field in YAML terms, the mistake, a fix (pure).

No class name or pydantic wording reaches the user: each error type is translated, and an unknown field
is answered with the closest field the object takes."""

from __future__ import annotations

import difflib
import json
import re
import types
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def seconds_of(text: str) -> int | None:
    """A Go-style duration ("30m", "1h30m", "45s") as seconds, else None."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None:
        return None
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def yaml_path(loc: Iterable[Any]) -> str:
    """spec.fallback[0].with, from pydantic's location (its union tags, e.g. `list[str]`, dropped)."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" not in str(part) and "(" not in str(part):
            out += f".{part}" if out else str(part)
    return out


def flow(value: Any) -> str:
    """A value as one line of YAML (JSON is YAML; plain words stay unquoted)."""
    if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9_./-]+", value) and value not in ("true", "false"):
        return value
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return json.dumps(value)


def closest(word: str, choices: Sequence[str]) -> str | None:
    """The choice `word` most likely meant: the same but for case, else difflib's nearest."""
    folded = [c for c in choices if c.lower() == word.lower()]
    if folded:
        return folded[0]
    guess = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return guess[0] if guess else None


def _unwrap(annotation: Any) -> Any:
    """The type inside Optional[...] and Annotated[...]."""
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation = get_args(annotation)[0]
        elif origin in (Union, types.UnionType):
            rest = [a for a in get_args(annotation) if a is not type(None)]
            if len(rest) != 1:
                return annotation
            annotation = rest[0]
        else:
            return annotation


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _field(model: type[BaseModel], key: Any) -> Any:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info
    return None


def type_at(model: type[BaseModel], loc: Sequence[Any]) -> Any:
    """The annotation at `loc` inside `model` (unwrapped), or None where the path leaves the models."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if "[" in str(part) or "(" in str(part):
            continue  # a union's tag
        if isinstance(part, int):
            if get_origin(current) is not list:
                return None
            current = get_args(current)[0]
        elif _is_model(current):
            info = _field(current, part)
            if info is None:
                return None
            current = info.annotation
        elif get_origin(current) is dict:
            current = get_args(current)[1]
        else:
            return None
    return _unwrap(current)


def field_names(model: type[BaseModel]) -> list[str]:
    """The fields of `model` as YAML spells them."""
    return [info.alias or name for name, info in model.model_fields.items()]


def _nested_fields(model: type[BaseModel], depth: int = 2) -> list[list[str]]:
    """The paths of the fields one and two objects below `model`'s own (limits.maxTurns)."""
    found = []
    for name, info in model.model_fields.items():
        inner = _unwrap(info.annotation)
        if _is_model(inner) and depth > 0:
            found += [[info.alias or name, *rest] for rest in _fields_of(inner, depth - 1)]
    return found


def _fields_of(model: type[BaseModel], depth: int) -> list[list[str]]:
    return [[n] for n in field_names(model)] + _nested_fields(model, depth)


def _required(model: type[BaseModel]) -> list[str]:
    return [info.alias or name for name, info in model.model_fields.items() if info.is_required()]


def _what(value: Any) -> str:
    if isinstance(value, bool):
        return f"the boolean {flow(value)}"
    if isinstance(value, (int, float)):
        return f"the number {flow(value)}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if isinstance(value, list):
        return f"the list {flow(value)}"
    if isinstance(value, dict):
        return f"the mapping {flow(value)}"
    return "null" if value is None else repr(value)


def _as_object(model: type[BaseModel], value: Any) -> Any:
    """`value` as an object of `model`: a bare word becomes its only required field."""
    required = _required(model)
    if isinstance(value, str) and len(required) == 1:
        return {required[0]: value}
    return None


def _as_list(item: Any, value: Any) -> list[Any] | None:
    """`value` as a list of `item`: a {K: V} map of a name/value model becomes name/value items."""
    if _is_model(item):
        names = field_names(item)
        if isinstance(value, dict) and {"name", "value"} <= set(names):
            return [{"name": k, "value": v} for k, v in value.items()]
        one = _as_object(item, value)
        return [one] if one is not None else None
    if isinstance(value, (str, int, float)):
        return [value]
    return None


def _expected(error: ErrorDetails) -> list[str]:
    return re.findall(r"'([^']*)'", str((error.get("ctx") or {}).get("expected", "")))


def describe_schema_error(model: type[BaseModel], error: ErrorDetails) -> tuple[str, str]:
    """(field, message) for one pydantic error of `model`: what is wrong and what to write instead."""
    loc, kind, given = error["loc"], error["type"], error.get("input")
    field = yaml_path(loc)
    key = str(loc[-1]) if loc else ""
    ctx = error.get("ctx") or {}
    here = type_at(model, loc)
    if kind == "extra_forbidden":
        parent = type_at(model, loc[:-1])
        known = field_names(parent) if _is_model(parent) else []
        guess = closest(key, known)
        listed = f" ({yaml_path(loc[:-1]) or 'here'} takes {', '.join(known)})" if known else ""
        if guess:
            return field, f"unknown field {key!r}; did you mean `{guess}`? Rename it{listed}"
        deeper = _nested_fields(parent) if _is_model(parent) else []
        moved = closest(key, [p[-1] for p in deeper])
        if moved is not None:
            path = next(p for p in deeper if p[-1] == moved)
            nested: Any = given
            for part in reversed(path[1:]):
                nested = {part: nested}
            where = ".".join([yaml_path(loc[:-1]), *path])
            return (
                field,
                f"unknown field {key!r} here; did you mean {where}? Write `{path[0]}: {flow(nested)}`",
            )
        return field, f"unknown field {key!r}: remove it{listed}"
    if kind == "missing":
        parent = type_at(model, loc[:-1])
        info = _field(parent, key) if _is_model(parent) else None
        about = f" ({info.description.split('. ')[0].rstrip('.')})" if info and info.description else ""
        return field, f"required field is missing: add `{key}:`{about}"
    if kind in ("enum", "literal_error"):
        allowed = _expected(error)
        guess = closest(str(given), allowed)
        fix = f"did you mean `{guess}`?" if guess else "write one of them"
        return field, f"{given!r} is not one of {', '.join(allowed)}: {fix}"
    if kind == "list_type":
        items = _as_list(get_args(here)[0] if get_origin(here) is list else None, given)
        fix = f": write `{key}: {flow(items)}`" if items is not None else ""
        return field, f"a list is expected, not {_what(given)}{fix}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        one = _as_object(here, given) if _is_model(here) else None
        if one is not None:
            return field, f"an object is expected, not {_what(given)}: write `{flow(one)}` in its place"
        fields = f" with the fields {', '.join(field_names(here))}" if _is_model(here) else ""
        return field, f"a mapping{fields} is expected, not {_what(given)}"
    if kind in ("string_type", "str_type"):
        if isinstance(given, (int, float, bool)):
            text = json.dumps(str(given))
            return field, f"a string is expected, not {_what(given)}: quote it, write `{key}: {text}`"
        return (
            field,
            f"a string is expected, not {_what(given)}; for several lines write `{key}: |` and the lines "
            "below",
        )
    if kind in ("int_parsing", "int_type", "int_from_float"):
        seconds = seconds_of(given) if isinstance(given, str) else None
        if seconds is not None and key.endswith("Seconds"):
            return field, (
                f"a whole number of seconds is expected, not a duration: write `{key}: {seconds}` for {given}"
            )
        return field, f"a whole number is expected, not {_what(given)}"
    if kind in ("float_parsing", "float_type"):
        number = str(given).strip().lstrip("$").strip() if isinstance(given, str) else ""
        fix = f": write `{key}: {number}`" if re.fullmatch(r"\d+(\.\d+)?", number) else ""
        return field, f"a number is expected, not {_what(given)}{fix}"
    if kind in ("bool_parsing", "bool_type"):
        return field, f"true or false is expected, not {_what(given)}"
    bounds = {
        "greater_than": ("more than", "gt"),
        "greater_than_equal": ("at least", "ge"),
        "less_than": ("less than", "lt"),
        "less_than_equal": ("at most", "le"),
    }
    if kind in bounds:
        words, name = bounds[kind]
        bound = ctx.get(name)
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)
        return field, f"must be {words} {flow(bound)}, not {flow(given)}"
    if kind in ("string_too_long", "string_too_short", "too_long", "too_short"):
        unit = "characters" if kind.startswith("string") else "items"
        if "max_length" in ctx:
            size = len(given) if isinstance(given, (str, list, dict)) else "more"
            return field, f"at most {ctx['max_length']} {unit}, not {size}: shorten it"
        if ctx.get("min_length") == 1:
            return field, "may not be empty: give a value or remove the field"
        return field, f"at least {ctx.get('min_length')} {unit} are needed"
    if kind == "string_pattern_mismatch":
        return field, f"{given!r} does not have the expected form (the pattern {ctx.get('pattern')})"
    # Our own validators (value_error, assertion_error) speak the user's terms already.
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return field, re.sub(r" or instance of \w+", "", message).replace("Input should be", "must be")
