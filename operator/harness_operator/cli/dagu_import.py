"""Dagu DAG (`harnesses:`, `harness:` and harness steps) -> HarnessDefinition and HarnessRun manifests (pure).

Dagu's rules, as its loader applies them: base-config `harnesses:` first, the DAG's entries over them by
name, `null` removing one; the DAG-level `harness:` block merged into every harness step (the step's
options win key by key, a step-level `fallback`, even `[]`, replaces the DAG's, both maps kebab-cased for
built-in providers); a step without `type` is a harness step when the DAG has `harness:`; `chain` DAGs
(the default) run their steps in order, `graph` DAGs by `depends:`. `output: NAME` read back as `${NAME}`
becomes an input from that run's output (or the whole prompt or stdin). `params:` (with their defaults,
or the values given on import) and DAG-level `env:` read as `${NAME}`, `${params.NAME}` or `${env.NAME}`
become literal inputs in prompts and stdin, and are substituted in place in the provider and options.
`schedule:` (a cron expression, a list of them, or `start:`; `TZ=`/`CRON_TZ=` prefixes) makes the DAG's one
harness run a HarnessSchedule's template, concurrencyPolicy Forbid (Dagu's scheduler does not start a DAG
that is still running). A step's inline `output_schema` becomes `spec.outputSchema`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness_operator.api.v1alpha1 import API_VERSION, RETRY_LIMIT_MAX
from harness_operator.catalog import load_builtin_catalog
from harness_operator.contract.structured_output import output_schema_problem
from harness_operator.core.schedule import InvalidSchedule, parse_cron

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
    "gnu_long": "doubleDash",
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
    "config",
    "command",
    "script",
    "output",
    "dir",
    "working_dir",
    "depends",
    "description",
    "timeout_sec",
    "retry_policy",
    "output_schema",
}
_DAG_KEYS_HANDLED = {
    "harnesses",
    "harness",
    "steps",
    "working_dir",
    "name",
    "description",
    "type",
    "params",
    "env",
    "schedule",
}
# Executors a step without `type` gets from DAG-level settings before `harness:` (Dagu's order).
_DAG_EXECUTORS = ("container", "ssh", "redis")
_RESERVED = {"provider", "fallback"}
_REFERENCE = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
_ANY_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# ${NAME}, ${params.NAME} and ${env.NAME}: a parameter's or an env entry's value (Dagu's value resolution).
_VALUE_REFERENCE = re.compile(r"\$\{(?:(?:params|env)\.)?([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class ImportResult:
    """The manifests made, what could not be carried over, and why Dagu itself would refuse the DAG."""

    manifests: list[dict[str, Any]] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass
class _Notes:
    """Unsupported things, each said once with every step it concerns."""

    steps: dict[str, list[str]] = field(default_factory=dict)

    def add(self, message: str, step: str | None = None) -> None:
        names = self.steps.setdefault(message, [])
        if step is not None and step not in names:
            names.append(step)

    def render(self) -> list[str]:
        return [f"{m} (steps: {', '.join(s)})" if s else m for m, s in self.steps.items()]


def dns_name(text: str) -> str:
    """A DNS-1123 label from any text: lower case, '-' for the rest, at most 63 characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:63].strip("-") or "unnamed"


def unique_name(text: str, taken: set[str]) -> str:
    """dns_name(text), with -2, -3, ... when that name is taken; the result is added to `taken`."""
    base = dns_name(text)
    name, n = base, 1
    while name in taken:
        n += 1
        suffix = f"-{n}"
        name = base[: 63 - len(suffix)].rstrip("-") + suffix
    taken.add(name)
    return name


def merge_harnesses(base: dict[str, Any] | None, dag: dict[str, Any] | None) -> dict[str, Any]:
    """Base-config `harnesses:`, then the DAG's over them by name; a `null` entry removes one."""
    merged = {str(k).strip(): v for k, v in (base or {}).items() if v is not None}
    for name, entry in (dag or {}).items():
        if entry is None:
            merged.pop(str(name).strip(), None)
        else:
            merged[str(name).strip()] = entry
    return merged


def build_definition(name: str, manifest_name: str, entry: Any, errors: list[str]) -> dict[str, Any]:
    """One `harnesses:` entry as a HarnessDefinition; what Dagu would refuse goes to `errors`."""
    spec: dict[str, Any] = {}
    if not isinstance(entry, dict):
        errors.append(f"harnesses.{name}: a harness definition must be a mapping or null")
        entry = {}
    for key, value in entry.items():
        if key not in _HARNESS_KEYS:
            errors.append(f"harnesses.{name}.{key}: unknown harness definition key")
            continue
        if isinstance(value, str):
            value = value.strip()
            value = _ENUM_VALUES.get(value, value)
        spec[_HARNESS_KEYS[key]] = value
    if not spec.get("binary"):
        errors.append(f"harnesses.{name}.binary: binary is required")
    if (spec.get("promptMode") == "flag") != bool(spec.get("promptFlag")):
        errors.append(f"harnesses.{name}.prompt_flag: required when prompt_mode is flag, and only then")
    return {
        "apiVersion": API_VERSION,
        "kind": "HarnessDefinition",
        "metadata": {"name": manifest_name},
        "spec": spec,
    }


def normalize_builtin_keys(config: dict[str, Any]) -> dict[str, Any]:
    """Dagu's kebab-casing of a built-in provider's options: `max_turns` is `max-turns`, and when both
    spellings are given the kebab one wins (among equals, the first in sorted order)."""
    out: dict[str, Any] = {}
    source: dict[str, str] = {}
    for key in sorted(config):
        canonical = key if key in _RESERVED else key.replace("_", "-")
        previous = source.get(canonical)
        if previous is not None and not ("_" not in key and "_" in previous):
            continue
        out[canonical] = config[key]
        source[canonical] = key
    return out


def merge_harness_config(
    dag_harness: dict[str, Any] | None, step_config: dict[str, Any], builtin: Collection[str]
) -> dict[str, Any]:
    """Dagu's merge of the DAG-level `harness:` block into one step's options."""
    provider = str(step_config.get("provider") or "").strip()
    if not provider and dag_harness:
        provider = str(dag_harness.get("provider") or "").strip()
    is_builtin = provider in builtin
    merged = normalize_builtin_keys(step_config) if is_builtin else dict(step_config)
    if not dag_harness:
        return merged
    dag_config = {k: v for k, v in dag_harness.items() if k != "fallback"}
    if is_builtin:
        dag_config = normalize_builtin_keys(dag_config)
    for key, value in dag_config.items():
        merged.setdefault(key, value)
    if "fallback" in step_config:
        merged["fallback"] = step_config["fallback"]
    elif dag_harness.get("fallback") is not None:
        merged["fallback"] = dag_harness["fallback"]
    return merged


def check_provider_config(
    where: str, config: Any, known: Collection[str], errors: list[str], nested: bool = False
) -> None:
    """What Dagu checks of a harness config (the DAG's block, a step's, and each of their fallbacks)."""
    if not isinstance(config, dict):
        errors.append(f"{where}: must be a mapping")
        return
    if nested and "fallback" in config:
        errors.append(f"{where}.fallback: not supported inside fallback providers")
    for key in ("binary", "prompt_args"):
        if key in config:
            errors.append(
                f"{where}.{key}: not supported; define a named harness under harnesses: and reference it "
                "via provider"
            )
    provider = str(config.get("provider") or "").strip()
    if not provider:
        errors.append(f"{where}.provider: required")
    elif "${" not in provider and provider not in known:
        errors.append(f'{where}.provider: unknown provider "{provider}"')
    fallback = config.get("fallback")
    if nested or fallback is None:
        return
    if not isinstance(fallback, list):
        errors.append(f"{where}.fallback: must be a list of mappings")
        return
    for i, entry in enumerate(fallback):
        check_provider_config(f"{where}.fallback[{i}]", entry, known, errors, nested=True)


def _step_label(step: Any, index: int) -> str:
    if isinstance(step, dict):
        return str(step.get("id") or step.get("name") or f"steps[{index}]")
    return f"steps[{index}]"


def _step_type(step: dict[str, Any]) -> str:
    executor = step.get("executor")
    executor_type = executor.get("type") if isinstance(executor, dict) else executor
    return str(step.get("type") or executor_type or "").strip()


def is_harness_step(step: Any, dag: dict[str, Any]) -> bool:
    """`type: harness`, the legacy `executor: harness`, `action: harness.run`, or (Dagu's inference) a
    step with no type in a DAG with a `harness:` block and no other DAG-level executor."""
    if not isinstance(step, dict):
        return False
    if step.get("action") == "harness.run" or _step_type(step) == "harness":
        return True
    if _step_type(step) or step.get("action") or step.get("container") or step.get("call"):
        return False
    inferred = dag.get("harness") is not None and not any(dag.get(k) for k in _DAG_EXECUTORS)
    return inferred and (step.get("command") is not None or step.get("script") is not None)


def _step_config(step: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    """(options, prompt, stdin) from the `action: harness.run`, `type: harness` or executor shape."""
    if step.get("action") == "harness.run":
        options = dict(step.get("with") or {})
        return options, options.pop("prompt", None), options.pop("stdin", None)
    executor = step.get("executor")
    config = executor.get("config") if isinstance(executor, dict) else None
    options = dict(config or step.get("with") or step.get("config") or {})
    return options, step.get("command"), step.get("script")


def _depends(step: dict[str, Any]) -> list[str]:
    depends = step.get("depends")
    if depends is None:
        return []
    return [str(d) for d in (depends if isinstance(depends, list) else [depends])]


def _resolve_after(
    label: str,
    graph: dict[str, list[str]],
    runs: dict[str, str],
    seen: set[str] | None = None,
) -> list[str]:
    """The runs a step waits for: its harness dependencies, and through a step that is not imported,
    that step's own, so the order among the imported runs is kept."""
    seen = set() if seen is None else seen
    found: list[str] = []
    for dependency in graph.get(label, []):
        if dependency in seen:
            continue
        seen.add(dependency)
        if dependency in runs:
            found.append(runs[dependency])
        else:
            found += _resolve_after(dependency, graph, runs, seen)
    return list(dict.fromkeys(found))


def substitute_outputs(text: str, outputs: dict[str, str]) -> tuple[str, dict[str, str], list[str]]:
    """(text with each `${NAME}` of an output as `$(inputs.NAME)`, {NAME: run} used, other `${...}`
    kept verbatim)."""
    used: dict[str, str] = {}
    unknown: list[str] = []

    def reference(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable in outputs:
            used[variable] = outputs[variable]
            return f"$(inputs.{variable})"
        unknown.append(variable)
        return match.group(0)

    return _ANY_REFERENCE.sub(reference, text), used, unknown


def substitute_inputs(text: str, values: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """(text with each `${NAME}`, `${params.NAME}` or `${env.NAME}` of a known value as
    `$(inputs.NAME)`, {NAME: value} used); other references are kept verbatim."""
    used: dict[str, str] = {}

    def reference(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in values:
            return match.group(0)
        used[name] = values[name]
        return f"$(inputs.{name})"

    return _VALUE_REFERENCE.sub(reference, text), used


def _fallback(items: Iterable[Any], renamed: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for entry in items:
        entry = dict(entry)
        name = entry.pop("provider", None)
        item: dict[str, Any] = {"provider": renamed.get(name, name)}
        if entry:
            item["with"] = entry
        out.append(item)
    return out


def _seconds(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _retry(policy: Any, notes: _Notes, label: str) -> dict[str, Any] | None:
    """spec.retry from a step's `retry_policy`, `retryOn: Any` (Dagu retries every failure but a timeout or a
    cancel): its limit (at most RETRY_LIMIT_MAX), its `exit_code` list as exitCodes, its interval as the
    first backoff, doubled when `backoff` is true or 2 and constant without one (the maximum is the
    interval then), capped by `max_interval_sec`. What spec.retry cannot say is listed."""
    if not isinstance(policy, Mapping):
        notes.add("retry_policy: not a map; not imported", label)
        return None
    limit = _seconds(policy.get("limit"))
    if not limit:
        what = "not a positive number (a ${...} reference resolves at run time); not imported"
        notes.add(f"retry_policy.limit: {what}", label)
        return None
    if limit > RETRY_LIMIT_MAX:
        notes.add(
            f"retry_policy.limit: spec.retry.limit is at most {RETRY_LIMIT_MAX}; imported as that", label
        )
    retry: dict[str, Any] = {"limit": min(limit, RETRY_LIMIT_MAX), "retryOn": "Any"}
    if codes := policy.get("exit_code"):
        listed = codes if isinstance(codes, list) else [codes]
        kept = [c for c in listed if isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= 255]
        if len(kept) < len(listed):
            what = "codes outside 1-255 dropped (a failed attempt exits 1 to 255, 128 + N when signal N"
            notes.add(f"retry_policy.exit_code: {what} killed it)", label)
        if not kept:
            notes.add("retry_policy.exit_code: no code left, so nothing is retried; not imported", label)
            return None
        retry["exitCodes"] = kept
    interval = _seconds(policy.get("interval_sec"))
    if interval is not None:
        retry["backoffSeconds"] = min(interval, 3600)
    backoff = policy.get("backoff")
    if backoff in (None, False, 0):
        retry["maxBackoffSeconds"] = retry.get("backoffSeconds", 10)  # Dagu's constant interval
    elif backoff is True or backoff == 2:
        if (cap := _seconds(policy.get("max_interval_sec"))) is not None:
            retry["maxBackoffSeconds"] = cap
    else:
        notes.add(f"retry_policy.backoff: {backoff}: spec.retry doubles each wait; imported as 2", label)
    return retry


def _pairs(entries: Any, where: str, errors: list[str]) -> list[tuple[str, Any]]:
    """(name, value) of a map, a list of one-key maps, a list of `NAME=value` strings, or (params) a list
    of `{name, default}` declarations; a shape Dagu refuses is an error naming it."""
    if isinstance(entries, Mapping):
        return [(str(k), v) for k, v in entries.items()]
    found: list[tuple[str, Any]] = []
    for index, entry in enumerate(entries if isinstance(entries, list) else [entries]):
        if isinstance(entry, str) and "=" in entry:
            name, _, value = entry.partition("=")
            found.append((name.strip(), value))
        elif isinstance(entry, Mapping) and "name" in entry:
            found.append((str(entry["name"]), entry.get("default")))
        elif isinstance(entry, Mapping) and len(entry) == 1:
            ((name, value),) = entry.items()
            found.append((str(name), value))
        else:
            errors.append(
                f"{where}[{index}]: not NAME=value, {{NAME: value}} or {{name: NAME, default: value}}"
            )
    return found


def collect_values(
    dag: Mapping[str, Any], given: Mapping[str, str], errors: list[str], notes: _Notes
) -> dict[str, str]:
    """The DAG's params (their defaults, or the values `given` on import) and then its env entries, each
    env value with the earlier values substituted as Dagu does, by name."""
    values: dict[str, str] = {}
    raw = dag.get("params")
    if isinstance(raw, str):
        declared: list[tuple[str, Any]] = []
        for index, token in enumerate(shlex.split(raw)):
            if "=" in token:
                name, _, value = token.partition("=")
                declared.append((name, value))
            else:
                notes.add(f"params: positional parameter {index + 1} ({token!r}) has no name; not imported")
    else:
        declared = _pairs(raw or [], "params", errors)
    for name, default in declared:
        if not _VARIABLE.match(name):
            errors.append(f"params: {name!r} is not a parameter name (letters, digits and '_')")
        elif name in given:
            values[name] = given[name]
        elif default is None:
            errors.append(f"params: {name} has no default; give its value on import (--param {name}=VALUE)")
        else:
            values[name] = str(default)
    for name in sorted(set(given) - {n for n, _ in declared}):
        errors.append(f"--param {name}: the DAG declares no such parameter")
    for name, value in _pairs(dag.get("env") or [], "env", errors):
        if not _VARIABLE.match(name):
            errors.append(f"env: {name!r} is not an environment variable name")
            continue
        text = str(value)
        if "`" in text:
            notes.add(f"env: {name} runs a command (`...`); its text is imported verbatim")
        values[name] = substitute_values(text, values)
    return values


def substitute_values(value: Any, values: Mapping[str, str]) -> Any:
    """Every string in `value` (options, a provider's name) with the params' and env's values in place."""
    if isinstance(value, str):
        return _VALUE_REFERENCE.sub(lambda m: values.get(m.group(1), m.group(0)), value)
    if isinstance(value, list):
        return [substitute_values(v, values) for v in value]
    if isinstance(value, dict):
        return {k: substitute_values(v, values) for k, v in value.items()}
    return value


def _cron_entries(raw: Any, notes: _Notes, errors: list[str]) -> list[tuple[str, str | None]]:
    """(cron, time zone) of each start expression of a DAG's `schedule:`, checked as the CRD's schedule."""
    if isinstance(raw, dict):
        for key in sorted(set(raw) - {"start"}):
            notes.add(f"schedule.{key}: HarnessSchedules only start runs; not imported")
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
            notes.add(f"schedule: {expression!r}: @every has no cron equivalent; not imported")
            continue
        try:
            parse_cron(text, zone)
        except InvalidSchedule as exc:
            errors.append(f"schedule: {expression!r}: {str(exc).split(': ', 1)[1]}")
            continue
        entries.append((text, zone))
    return entries


def _scheduled(run: dict[str, Any], entries: list[tuple[str, str | None]]) -> list[dict[str, Any]]:
    """One HarnessSchedule per cron entry, each creating `run` (its name, then -2, -3, ...)."""
    base = run["metadata"]["name"]
    return [
        {
            "apiVersion": API_VERSION,
            "kind": "HarnessSchedule",
            "metadata": {"name": base if index == 0 else f"{base}-{index + 1}"},
            "spec": {
                "schedule": cron,
                **({"timeZone": zone} if zone else {}),
                "concurrencyPolicy": "Forbid",
                "runTemplate": {"spec": run["spec"]},
            },
        }
        for index, (cron, zone) in enumerate(entries)
    ]


def import_dagu(
    dag: dict[str, Any],
    dag_name: str,
    base: dict[str, Any] | None = None,
    builtins: Collection[str] | None = None,
    params: Mapping[str, str] | None = None,
) -> ImportResult:
    """Every harness of the DAG (and of the base config) as a HarnessDefinition, every harness step as
    a HarnessRun, in step order; `params` override the DAG's parameter defaults."""
    builtin = set(builtins) if builtins is not None else {d.metadata["name"] for d in load_builtin_catalog()}
    result = ImportResult()
    notes = _Notes()
    values = collect_values(dag, params or {}, result.errors, notes)
    harnesses = merge_harnesses((base or {}).get("harnesses"), dag.get("harnesses"))
    taken: set[str] = set()
    renamed = {name: unique_name(name, taken) for name in harnesses}
    for name, entry in harnesses.items():
        result.manifests.append(build_definition(name, renamed[name], entry, result.errors))
    builtin -= set(harnesses)  # a namespaced definition of the same name shadows the built-in
    known = builtin | set(harnesses)

    dag_harness = dag.get("harness")
    if dag_harness is not None:
        check_provider_config("harness", dag_harness, known, result.errors)
        dag_harness = dag_harness if isinstance(dag_harness, dict) else None

    steps = list(dag.get("steps") or [])
    labels = [_step_label(s, i) for i, s in enumerate(steps)]
    chain = str(dag.get("type") or "chain") != "graph"
    graph: dict[str, list[str]] = {}
    for index, (label, step) in enumerate(zip(labels, steps, strict=True)):
        depends = _depends(step) if isinstance(step, dict) else []
        if chain and depends:
            result.errors.append(
                f"steps[{index}] ({label}).depends: not allowed in a chain DAG (Dagu's default type, where "
                "each step follows the one before); set type: graph"
            )
        graph[label] = ([labels[index - 1]] if index else []) if chain else depends
    run_taken: set[str] = set()
    runs = {
        label: unique_name(f"{dag_name}-{label}", run_taken)
        for label, step in zip(labels, steps, strict=True)
        if is_harness_step(step, dag)
    }
    outputs = {
        str(step["output"]): runs[label]
        for label, step in zip(labels, steps, strict=True)
        if label in runs and isinstance(step.get("output"), str) and _VARIABLE.match(step["output"])
    }

    root_dir = dag.get("working_dir")
    for index, (label, step) in enumerate(zip(labels, steps, strict=True)):
        if label not in runs:
            notes.add("not a harness step; not imported", label)
            continue
        run_name = runs[label]
        options, prompt, stdin = _step_config(step)
        options = substitute_values(merge_harness_config(dag_harness, options, builtin), values)
        check_provider_config(f"steps[{index}] ({label})", options, known, result.errors)
        spec: dict[str, Any] = {}
        provider = str(options.pop("provider", "") or "").strip()
        spec["provider"] = renamed.get(provider, provider)
        if "${" in provider:
            notes.add("a parameterised provider (${...}) is kept verbatim; set spec.provider", label)
        inputs: dict[str, str] = {}
        literals: dict[str, str] = {}
        for source_key, text in (("prompt", prompt), ("stdin", stdin)):
            if text is None:
                continue
            whole = _REFERENCE.match(str(text).strip())
            if whole and whole.group(1) in outputs and outputs[whole.group(1)] != run_name:
                spec[f"{source_key}From"] = {"runOutput": {"name": outputs[whole.group(1)]}}
                continue
            others = {k: v for k, v in outputs.items() if v != run_name}
            spec[source_key], used, unknown = substitute_outputs(str(text), others)
            spec[source_key], named = substitute_inputs(spec[source_key], values)
            inputs.update(used)
            literals.update(named)
            for variable in unknown:
                bare = variable.split(".", 1)[1] if variable.startswith(("params.", "env.")) else variable
                if bare not in values:
                    what = "names no output, parameter or env entry; kept verbatim"
                    notes.add(f"{source_key}: ${{{variable}}} {what}", label)
        if inputs or literals:
            spec["inputs"] = [{"name": n, "runOutput": {"name": r}} for n, r in inputs.items()] + [
                {"name": n, "value": v} for n, v in literals.items()
            ]
        fallback = options.pop("fallback", None) or []
        if fallback:
            spec["fallback"] = _fallback(fallback, renamed)
        if options:
            spec["with"] = options
        working_dir = step.get("dir") or step.get("working_dir") or root_dir
        if working_dir:
            spec["workspace"] = {"workingDir": str(working_dir)}
            if not str(working_dir).startswith("/"):
                notes.add("dir is relative; spec.workspace.workingDir must be absolute", label)
        if step.get("timeout_sec"):
            spec["limits"] = {"timeoutSeconds": int(step["timeout_sec"])}
        if "retry_policy" in step and (retry := _retry(step["retry_policy"], notes, label)):
            spec["retry"] = retry
            if fallback:
                what = "Dagu retries the whole chain (each provider, then all again); spec.retry retries"
                notes.add(f"retry_policy with fallback: {what} each provider before the next", label)
        if "output_schema" in step:
            schema = step["output_schema"]
            problem = output_schema_problem(schema) if isinstance(schema, dict) else None
            if not isinstance(schema, dict):
                notes.add("output_schema: not an inline schema (a file or URL); not imported", label)
            elif problem is not None:
                result.errors.append(f"steps[{index}] ({label}).output_schema: {problem.split(': ', 1)[1]}")
            else:
                spec["outputSchema"] = schema
        reads = set(inputs.values()) | {
            s["runOutput"]["name"] for k in ("promptFrom", "stdinFrom") if (s := spec.get(k))
        }
        after = [r for r in _resolve_after(label, graph, runs) if r not in reads]
        if after:
            spec["after"] = after
        for key in sorted(set(step) - _STEP_KEYS_HANDLED):
            notes.add(f"{key}: no HarnessRun field; not imported", label)
        if isinstance(step.get("output"), dict):
            notes.add("output: only `output: NAME` is imported", label)
        result.manifests.append(
            {"apiVersion": API_VERSION, "kind": "HarnessRun", "metadata": {"name": run_name}, "spec": spec}
        )
    if "schedule" in dag:
        entries = _cron_entries(dag["schedule"], notes, result.errors)
        made = [m for m in result.manifests if m["kind"] == "HarnessRun"]
        if len(made) != 1:
            notes.add(
                f"schedule: a HarnessSchedule creates one run, and this DAG has {len(made)} harness steps; "
                "not imported (schedule each run, or a DAG of one step)"
            )
        elif entries:
            index = result.manifests.index(made[0])
            result.manifests[index : index + 1] = _scheduled(made[0], entries)
    for key in sorted(set(dag) - _DAG_KEYS_HANDLED):
        notes.add(f"{key}: DAG-level setting with no HarnessRun equivalent; not imported")
    result.unsupported = notes.render()
    return result
