"""spec.outputSchema: the schema checked, the output read as one JSON value and validated, a field of
it picked for a later run (pure). JSON Schema 2020-12, with the `jsonschema` library.

Messages name the failing path and the schema's keyword, never the output's own values: the output may
hold what the agent read, and a status message is readable by anyone who may `get` the run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match

SCHEMA_FIELD = "spec.outputSchema"
MAX_SCHEMA_BYTES = 32 * 1024
# One fenced block around the whole output (```json ... ```), as chat-tuned models often write it.
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*)\n```$", re.DOTALL)


@dataclass(frozen=True)
class OutputChecked:
    """A valid output: the JSON value as canonical text (sorted keys, no spaces)."""

    json: str


@dataclass(frozen=True)
class OutputMismatch:
    """An output that is not one JSON value, or does not match; `message` names path and keyword."""

    message: str


def output_schema_problem(schema: Mapping[str, Any] | None) -> str | None:
    """What is wrong with spec.outputSchema (not a valid 2020-12 schema, or too big), naming the field;
    None when it is fine or unset."""
    if schema is None:
        return None
    size = len(json.dumps(schema, separators=(",", ":")))
    if size > MAX_SCHEMA_BYTES:
        return f"{SCHEMA_FIELD}: {size} bytes as JSON, more than {MAX_SCHEMA_BYTES}; keep the schema smaller"
    try:
        Draft202012Validator.check_schema(dict(schema))
    except SchemaError as exc:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        return f"{SCHEMA_FIELD}{where}: not a valid JSON Schema (2020-12): {exc.message}"
    return None


def read_json_output(text: str) -> Any:
    """The output as one JSON value (whitespace and one ```json fence around it allowed); ValueError
    whose message says where it stops being JSON."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not one JSON value ({exc.msg} at line {exc.lineno} column {exc.colno})") from None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(text: str) -> str:
    """The output's JSON value as canonical text (sorted keys, no spaces); ValueError if not JSON."""
    return _canonical(read_json_output(text))


def _describe(error: ValidationError) -> str:
    """What failed, in the schema's words: the keyword, and for `required` and `type` what the schema
    asks (names the schema holds, not the output)."""
    path = error.json_path
    keyword = str(error.validator)
    if keyword == "required" and isinstance(error.instance, dict):
        missing = [k for k in error.validator_value if k not in error.instance]
        return f"at {path}: missing required {', '.join(repr(k) for k in missing)}"
    if keyword == "type":
        return f"at {path}: must be of type {error.validator_value!r}"
    if keyword in ("enum", "const"):
        return f"at {path}: not one of the values the schema allows ({keyword})"
    return f"at {path}: fails the schema's {keyword!r}"


def validate_output(schema: Mapping[str, Any], text: str) -> OutputChecked | OutputMismatch:
    """The output checked against the run's schema."""
    try:
        value = read_json_output(text)
    except ValueError as exc:
        return OutputMismatch(f"{SCHEMA_FIELD}: the output is {exc}")
    errors = list(Draft202012Validator(dict(schema)).iter_errors(value))
    if not errors:
        return OutputChecked(_canonical(value))
    first = best_match(errors)
    assert first is not None
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return OutputMismatch(f"{SCHEMA_FIELD}: the output does not match {_describe(first)}{more}")


def pick_field(output: str, path: str) -> str:
    """One field of a run's JSON output, by a dotted path (`verdict`, `review.items.0`): a string as
    it is, anything else as compact JSON. KeyError naming the first step that is not there; ValueError
    if the output is not JSON."""
    value: Any = read_json_output(output)
    walked = ""
    for step in path.split("."):
        walked = f"{walked}.{step}" if walked else step
        if isinstance(value, dict) and step in value:
            value = value[step]
        elif isinstance(value, list) and step.isdigit() and int(step) < len(value):
            value = value[int(step)]
        else:
            raise KeyError(walked)
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))


def build_correction(schema: Mapping[str, Any], message: str) -> str:
    """What a re-prompt says: why the answer was refused (path and keyword, as `validate_output` says),
    and the schema to answer in."""
    return (
        f"Your answer was refused: {message}. Answer again with only one JSON value, no other text, "
        f"that matches this JSON Schema: {json.dumps(dict(schema), sort_keys=True, separators=(',', ':'))}"
    )
