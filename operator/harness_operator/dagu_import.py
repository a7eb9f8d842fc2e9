"""Dagu DAG (`harnesses:` and `harness.run` steps) -> HarnessDefinition and HarnessRun manifests (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from harness_operator.api.v1alpha1 import API_VERSION

_HARNESS_KEYS = {
    "binary": "binary",
    "prefix_args": "prefixArgs",
    "prompt_mode": "promptMode",
    "prompt_flag": "promptFlag",
    "prompt_position": "promptPosition",
    "flag_style": "flagStyle",
    "option_flags": "optionFlags",
}
_ENUM_VALUES = {
    "before_flags": "beforeFlags",
    "after_flags": "afterFlags",
    "double_dash": "doubleDash",
    "single_dash": "singleDash",
}
_STEP_KEYS_HANDLED = {
    "id",
    "name",
    "action",
    "type",
    "executor",
    "with",
    "command",
    "script",
    "output",
    "dir",
    "working_dir",
    "depends",
    "description",
}
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_ANY_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class ImportResult:
    """The manifests made and what could not be carried over."""

    manifests: list[dict[str, Any]] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)


def dns_name(text: str) -> str:
    """A DNS-1123 label from any text: lower case, '-' for the rest, at most 63 characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:63].strip("-") or "unnamed"


def build_definition(name: str, entry: dict[str, Any], result: ImportResult) -> dict[str, Any]:
    """One `harnesses:` entry as a HarnessDefinition."""
    spec: dict[str, Any] = {}
    for key, value in entry.items():
        if key not in _HARNESS_KEYS:
            result.unsupported.append(f"harnesses.{name}.{key}: no HarnessDefinition field; not imported")
            continue
        spec[_HARNESS_KEYS[key]] = _ENUM_VALUES.get(value, value) if isinstance(value, str) else value
    return {
        "apiVersion": API_VERSION,
        "kind": "HarnessDefinition",
        "metadata": {"name": dns_name(name)},
        "spec": spec,
    }


def _is_harness_step(step: dict[str, Any]) -> bool:
    executor = step.get("executor")
    executor_type = executor.get("type") if isinstance(executor, dict) else executor
    return step.get("action") == "harness.run" or "harness" in (step.get("type"), executor_type)


def _step_config(step: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """(options, prompt, stdin) from either the `action: harness.run` or the legacy executor shape."""
    if step.get("action") == "harness.run":
        options = dict(step.get("with") or {})
        return options, options.pop("prompt", None), options.pop("stdin", None)
    executor = step.get("executor")
    config = executor.get("config", {}) if isinstance(executor, dict) else {}
    return dict(config or step.get("with") or {}), step.get("command"), step.get("script")


def import_dagu(dag: dict[str, Any], dag_name: str) -> ImportResult:
    """Every harness of the DAG as a HarnessDefinition and every harness step as a HarnessRun."""
    result = ImportResult()
    harnesses = dag.get("harnesses") or {}
    renamed = {name: dns_name(name) for name in harnesses}
    for name, entry in harnesses.items():
        result.manifests.append(build_definition(name, entry or {}, result))

    root_dir = dag.get("working_dir")
    outputs: dict[str, str] = {}
    for index, step in enumerate(dag.get("steps") or []):
        if not isinstance(step, dict) or not _is_harness_step(step):
            label = step.get("id") or step.get("name") if isinstance(step, dict) else index
            result.unsupported.append(f"steps[{index}] ({label}): not a harness.run step; not imported")
            continue
        step_id = str(step.get("id") or step.get("name") or f"step-{index}")
        run_name = dns_name(f"{dag_name}-{step_id}")
        where = f"steps[{index}] ({step_id})"
        options, prompt, stdin = _step_config(step)
        spec: dict[str, Any] = {}
        provider = options.pop("provider", None)
        spec["provider"] = renamed.get(provider, provider)
        for source_key, text in (("prompt", prompt), ("stdin", stdin)):
            if text is None:
                continue
            match = _REFERENCE.match(str(text).strip())
            if match and match.group(1) in outputs:
                spec[f"{source_key}From"] = {"runOutput": {"name": outputs[match.group(1)]}}
                continue
            spec[source_key] = str(text)
            for ref in _ANY_REFERENCE.findall(str(text)):
                result.unsupported.append(
                    f"{where}.{source_key}: ${{{ref}}} is kept verbatim; a HarnessRun takes another run's "
                    "output only as its whole prompt or stdin (promptFrom/stdinFrom.runOutput)"
                )
        fallback = options.pop("fallback", None) or []
        if fallback:
            spec["fallback"] = []
            for fb in fallback:
                fb = dict(fb)
                name = fb.pop("provider", None)
                item: dict[str, Any] = {"provider": renamed.get(name, name)}
                if fb:
                    item["with"] = fb
                spec["fallback"].append(item)
        if options:
            spec["with"] = options
        working_dir = step.get("dir") or step.get("working_dir") or root_dir
        if working_dir:
            spec["workspace"] = {"workingDir": str(working_dir)}
            if not str(working_dir).startswith("/"):
                result.unsupported.append(
                    f"{where}.dir: {working_dir!r} is relative; spec.workspace.workingDir must be absolute"
                )
        for key in sorted(set(step) - _STEP_KEYS_HANDLED):
            result.unsupported.append(f"{where}.{key}: no HarnessRun field; not imported")
        if step.get("depends") and not ({"promptFrom", "stdinFrom"} & set(spec)):
            result.unsupported.append(
                f"{where}.depends: runs start independently; only promptFrom/stdinFrom.runOutput orders them"
            )
        if step.get("output"):
            outputs[str(step["output"])] = run_name
        result.manifests.append(
            {"apiVersion": API_VERSION, "kind": "HarnessRun", "metadata": {"name": run_name}, "spec": spec}
        )
    for key in sorted(set(dag) - {"harnesses", "steps", "working_dir", "name", "description"}):
        result.unsupported.append(f"{key}: DAG-level setting with no HarnessRun equivalent; not imported")
    return result
