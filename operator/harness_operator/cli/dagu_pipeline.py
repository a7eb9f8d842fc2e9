"""A Dagu DAG's steps as one HarnessPipeline, and a scheduled DAG as HarnessSchedules (pure).

`${NAME}` of an earlier step's `output: NAME` becomes `$(steps.STEP.output)`, `${NAME.field}` (Dagu's
jq path into a JSON output) `$(steps.STEP.output.field)` when that step has an output schema;
`continue_on` becomes `continueOn`; `schedule:` (cron expressions, `start:`, `TZ=`/`CRON_TZ=`) one
HarnessSchedule per expression, creating the DAG's run or pipeline, concurrencyPolicy Forbid (Dagu's
scheduler does not start a DAG that is still running).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from harness_operator.api.v1alpha1 import API_VERSION
from harness_operator.core.schedule import InvalidSchedule, parse_cron

PIPELINE_SERVICE_ACCOUNT = "harness-pipeline"
_ANY_REFERENCE = re.compile(r"\$\{([^}]*)\}")
# Dagu's jq paths that a runOutput path can say: fields and array indexes (.findings[0].file).
_JQ_PATH = re.compile(r"(?:\.[A-Za-z_][A-Za-z0-9_]*|\[[0-9]+\])+")
_JQ_SEGMENT = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[([0-9]+)\]")
_CONTINUE_FLAGS = ("skipped", "failed", "failure", "mark_success")

Note = Callable[[str], None]


def build_output_path(jq: str) -> str | None:
    """The runOutput path (findings.0.file) of Dagu's jq path (.findings[0].file); None for any other jq."""
    if not _JQ_PATH.fullmatch(jq):
        return None
    return ".".join(field or index for field, index in _JQ_SEGMENT.findall(jq))


def substitute_outputs(
    text: str, outputs: Mapping[str, str], structured: Collection[str], note: Note
) -> tuple[str, list[str], list[str]]:
    """(text with `${NAME}` of an output as `$(steps.STEP.output)` and `${NAME.path}` as
    `$(steps.STEP.output.PATH)`, the steps read, the other `${...}` kept verbatim). `outputs` maps each
    output variable to its step, `structured` holds the steps with an output schema."""
    read: list[str] = []
    unknown: list[str] = []

    def reference(match: re.Match[str]) -> str:
        variable, dot, jq = match.group(1).partition(".")
        step = outputs.get(variable)
        if step is None:
            unknown.append(match.group(1))
            return match.group(0)
        path = build_output_path(f".{jq}") if dot else None
        if dot and path is None:
            note(f"{match.group(0)}: only .field and [index] paths name a field of an output; kept verbatim")
            return match.group(0)
        if path is not None and step not in structured:
            note(f"{match.group(0)}: a field of step {step}'s output needs its output_schema; kept verbatim")
            return match.group(0)
        read.append(step)
        return f"$(steps.{step}.output{f'.{path}' if path else ''})"

    return _ANY_REFERENCE.sub(reference, text), list(dict.fromkeys(read)), unknown


def _continue_value_problem(key: str, value: Any) -> str | None:
    """Why Dagu refuses this value of a `continue_on` key, if it does."""
    if key in _CONTINUE_FLAGS:
        return None if isinstance(value, bool) else "expected true or false"
    listed = value if isinstance(value, list) else [] if value is None else [value]
    if key == "exit_code":
        numbers = all(
            isinstance(v, int) or (isinstance(v, str) and v.strip().lstrip("-").isdigit()) for v in listed
        )
        return None if numbers else "expected an exit code or a list of them"
    if key == "output":
        return None if all(isinstance(v, str) for v in listed) else "expected a string or a list of strings"
    return "unknown key"


def build_continue_on(value: Any, where: str, errors: list[str], note: Note) -> dict[str, Any] | None:
    """A pipeline step's continueOn from a Dagu step's `continue_on` (`failed`, `skipped`, or a map of
    skipped, failed/failure, exit_code, output, mark_success): failure carries over, what else is set is
    listed, and what Dagu refuses goes to `errors`."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word not in ("skipped", "failed"):
            errors.append(f"{where}: expected 'skipped' or 'failed', got {value!r}")
            return None
        value = {word: True}
    if value is None:
        return None
    if not isinstance(value, Mapping):
        errors.append(f"{where}: must be 'skipped', 'failed' or a map")
        return None
    failure = False
    for key, setting in value.items():
        problem = _continue_value_problem(str(key), setting)
        if problem is not None:
            errors.append(f"{where}.{key}: {problem}")
        elif key in ("failed", "failure"):
            failure = failure or setting
        elif setting not in (False, None, "", []):
            note(f"continue_on.{key}: a pipeline step continues after a failure only; not imported")
    return {"failure": True} if failure else None


def build_cron_entries(raw: Any, note: Note, errors: list[str]) -> list[tuple[str, str | None]]:
    """(cron, time zone) of each start expression of a DAG's `schedule:`, checked as the CRD's schedule."""
    if isinstance(raw, dict):
        for key in sorted(set(raw) - {"start"}):
            note(f"schedule.{key}: HarnessSchedules only start runs; not imported")
        raw = raw.get("start")
    expressions = [raw] if isinstance(raw, str) else list(raw or []) if isinstance(raw, list) else None
    if expressions is None or not all(isinstance(e, str) for e in expressions):
        errors.append("schedule: not a cron expression, a list of them, or a map with start:")
        return []
    entries: list[tuple[str, str | None]] = []
    for expression in expressions:
        text, zone = expression.strip(), None
        prefix = re.match(r"^(?:CRON_TZ|TZ)=(\S+)\s+", text)
        if prefix:
            zone, text = prefix.group(1), text[prefix.end() :]
        if text.startswith("@every"):
            note(f"schedule: {expression!r}: @every has no cron equivalent; not imported")
            continue
        try:
            parse_cron(text, zone)
        except InvalidSchedule as exc:
            errors.append(f"schedule: {expression!r}: {str(exc).split(': ', 1)[1]}")
            continue
        entries.append((text, zone))
    return entries


def build_pipeline(name: str, service_account: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The HarnessPipeline of the DAG's steps, its runs created as `service_account`."""
    return {
        "apiVersion": API_VERSION,
        "kind": "HarnessPipeline",
        "metadata": {"name": name},
        "spec": {"serviceAccountName": service_account, "steps": steps},
    }


def build_schedules(made: dict[str, Any], entries: list[tuple[str, str | None]]) -> list[dict[str, Any]]:
    """One HarnessSchedule per cron entry, each creating the run or pipeline `made` (named as it, then
    -2, -3, ...)."""
    base = made["metadata"]["name"]
    template = "pipelineTemplate" if made["kind"] == "HarnessPipeline" else "runTemplate"
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "HarnessSchedule",
            "metadata": {"name": base if index == 0 else f"{base}-{index + 1}"},
            "spec": {
                "schedule": cron,
                **({"timeZone": zone} if zone else {}),
                "concurrencyPolicy": "Forbid",
                template: {"spec": made["spec"]},
            },
        }
        for index, (cron, zone) in enumerate(entries)
    ]
