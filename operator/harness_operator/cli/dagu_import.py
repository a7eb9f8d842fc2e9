"""Dagu DAG (`harnesses:`, `harness:` and harness steps) -> HarnessDefinition, and HarnessRun or
HarnessPipeline manifests (pure).

Dagu's rules, as its loader applies them: base-config `harnesses:` first, the DAG's entries over them by
name, `null` removing one; the DAG-level `harness:` block merged into every harness step (the step's
options win key by key, a step-level `fallback`, even `[]`, replaces the DAG's, both maps kebab-cased for
built-in providers); a step without `type` is a harness step when the DAG has `harness:`. A DAG of one
harness step is a HarnessRun; of several, one HarnessPipeline whose steps follow the DAG's order
(`chain` DAGs, the default, run their steps in order, `graph` DAGs by `depends:`) and read each other's
`output: NAME` as `${NAME}` (cli/dagu_pipeline.py). `params:` (with their defaults, or the values given on
import) and DAG-level `env:` read as `${NAME}`, `${params.NAME}` or `${env.NAME}` become literal inputs in
prompts and stdin, and are substituted in place in the provider and options. `schedule:` makes the run or
the pipeline a HarnessSchedule's template. A step's inline `output_schema` becomes `spec.outputSchema`.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness_operator.api.pipeline import STEP_NAME_MAX
from harness_operator.api.v1alpha1 import API_VERSION, RETRY_LIMIT_MAX
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.dagu_pipeline import (
    PIPELINE_SERVICE_ACCOUNT,
    build_continue_on,
    build_cron_entries,
    build_pipeline,
    build_schedules,
    substitute_outputs,
)
from harness_operator.contract.structured_output import output_schema_problem

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
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# ${NAME}, ${params.NAME} and ${env.NAME}: a parameter's or an env entry's value (Dagu's value resolution).
_VALUE_REFERENCE = re.compile(r"\$\{(?:(?:params|env)\.)?([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass
class ImportResult:
    """The manifests made, what could not be carried over, why Dagu itself would refuse the DAG, and what
    the manifests need besides themselves."""

    manifests: list[dict[str, Any]] = field(default_factory=list)
    unsupported: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


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


def dns_name(text: str, size: int = 63) -> str:
    """A DNS-1123 label from any text: lower case, '-' for the rest, at most `size` characters."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:size].strip("-") or "unnamed"


def unique_name(text: str, taken: set[str], size: int = 63) -> str:
    """dns_name(text, size), with -2, -3, ... when that name is taken; the result is added to `taken`."""
    base = dns_name(text, size)
    name, n = base, 1
    while name in taken:
        n += 1
        suffix = f"-{n}"
        name = base[: size - len(suffix)].rstrip("-") + suffix
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


def _ancestors(label: str, graph: Mapping[str, list[str]]) -> set[str]:
    """Every step `label` runs after in Dagu, directly or not."""
    seen: set[str] = set()
    todo = list(graph.get(label, []))
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += graph.get(current, [])
    return seen


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


@dataclass
class _Dag:
    """What translating any step of the DAG reads, and where its findings go."""

    harness: dict[str, Any] | None
    builtin: set[str]
    known: set[str]
    renamed: dict[str, str]
    values: dict[str, str]
    root_dir: Any
    notes: _Notes
    errors: list[str]


def _build_run_spec(
    index: int,
    label: str,
    step: dict[str, Any],
    dag: _Dag,
    outputs: Mapping[str, str],
    structured: Collection[str],
) -> tuple[dict[str, Any], list[str]]:
    """(the step's HarnessRun spec, the pipeline steps whose output it reads). `outputs` maps the output
    variables the step may read to their steps, `structured` names the steps with an output schema."""
    options, prompt, stdin = _step_config(step)
    options = substitute_values(merge_harness_config(dag.harness, options, dag.builtin), dag.values)
    check_provider_config(f"steps[{index}] ({label})", options, dag.known, dag.errors)
    spec: dict[str, Any] = {}
    provider = str(options.pop("provider", "") or "").strip()
    spec["provider"] = dag.renamed.get(provider, provider)
    if "${" in provider:
        dag.notes.add("a parameterised provider (${...}) is kept verbatim; set spec.provider", label)
    read: list[str] = []
    literals: dict[str, str] = {}
    for source_key, text in (("prompt", prompt), ("stdin", stdin)):
        if text is None:
            continue

        def note(message: str, key: str = source_key) -> None:
            dag.notes.add(f"{key}: {message}", label)

        spec[source_key], steps_read, unknown = substitute_outputs(str(text), outputs, structured, note)
        spec[source_key], named = substitute_inputs(spec[source_key], dag.values)
        read += steps_read
        literals.update(named)
        for variable in unknown:
            bare = variable.split(".", 1)[1] if variable.startswith(("params.", "env.")) else variable
            if bare not in dag.values:
                note(f"${{{variable}}} names no output, parameter or env entry; kept verbatim")
    if literals:
        spec["inputs"] = [{"name": n, "value": v} for n, v in literals.items()]
    fallback = options.pop("fallback", None) or []
    if fallback:
        spec["fallback"] = _fallback(fallback, dag.renamed)
    if options:
        spec["with"] = options
    working_dir = step.get("dir") or step.get("working_dir") or dag.root_dir
    if working_dir:
        spec["workspace"] = {"workingDir": str(working_dir)}
        if not str(working_dir).startswith("/"):
            dag.notes.add("dir is relative; spec.workspace.workingDir must be absolute", label)
    if step.get("timeout_sec"):
        spec["limits"] = {"timeoutSeconds": int(step["timeout_sec"])}
    if "retry_policy" in step and (retry := _retry(step["retry_policy"], dag.notes, label)):
        spec["retry"] = retry
        if fallback:
            what = "Dagu retries the whole chain (each provider, then all again); spec.retry retries"
            dag.notes.add(f"retry_policy with fallback: {what} each provider before the next", label)
    if "output_schema" in step:
        schema = step["output_schema"]
        problem = output_schema_problem(schema) if isinstance(schema, dict) else None
        if not isinstance(schema, dict):
            dag.notes.add("output_schema: not an inline schema (a file or URL); not imported", label)
        elif problem is not None:
            dag.errors.append(f"steps[{index}] ({label}).output_schema: {problem.split(': ', 1)[1]}")
        else:
            spec["outputSchema"] = schema
    return spec, list(dict.fromkeys(read))


def _build_steps(
    dag: dict[str, Any], context: _Dag, labels: list[str], names: dict[str, str], whole: bool
) -> list[dict[str, Any]]:
    """Each harness step as a pipeline step (its name, after, continueOn and run); for a DAG of one
    harness step (`whole` false), that step's run spec is all that is used."""
    steps = list(dag.get("steps") or [])
    chain = str(dag.get("type") or "chain") != "graph"
    graph: dict[str, list[str]] = {}
    for index, (label, step) in enumerate(zip(labels, steps, strict=True)):
        depends = _depends(step) if isinstance(step, dict) else []
        if chain and depends:
            context.errors.append(
                f"steps[{index}] ({label}).depends: not allowed in a chain DAG (Dagu's default type, where "
                "each step follows the one before); set type: graph"
            )
        graph[label] = ([labels[index - 1]] if index else []) if chain else depends
    producers = {
        str(step["output"]): label
        for label, step in zip(labels, steps, strict=True)
        if label in names and isinstance(step.get("output"), str) and _VARIABLE.match(step["output"])
    }
    structured = {
        names[label]
        for label, step in zip(labels, steps, strict=True)
        if label in names
        and isinstance(step.get("output_schema"), dict)
        and output_schema_problem(step["output_schema"]) is None
    }
    handled = _STEP_KEYS_HANDLED | ({"continue_on"} if whole else set())
    made: list[dict[str, Any]] = []
    for index, (label, step) in enumerate(zip(labels, steps, strict=True)):
        if label not in names:
            context.notes.add("not a harness step; not imported", label)
            continue
        # an output of a step that runs after this one is not there yet (Dagu keeps the text)
        outputs = {
            v: names[p] for v, p in producers.items() if p != label and label not in _ancestors(p, graph)
        }
        spec, read = _build_run_spec(index, label, step, context, outputs, structured)
        after = _resolve_after(label, graph, names)
        waits = {names[a] for a in _ancestors(label, graph) if a in names}
        for source in read:
            if source not in waits:
                what = "without depending on it; imported to run after it"
                context.notes.add(f"reads the output of step {source} {what}", label)
                after.append(source)
        entry: dict[str, Any] = {"name": names[label], **({"after": after} if after else {})}
        where = f"steps[{index}] ({label}).continue_on"
        note = functools.partial(context.notes.add, step=label)
        if whole and (continue_on := build_continue_on(step.get("continue_on"), where, context.errors, note)):
            entry["continueOn"] = continue_on
        for key in sorted(set(step) - handled):
            context.notes.add(f"{key}: no HarnessRun field; not imported", label)
        if isinstance(step.get("output"), dict):
            context.notes.add("output: only `output: NAME` is imported", label)
        made.append({**entry, "run": {"spec": spec}})
    return made


def import_dagu(
    dag: dict[str, Any],
    dag_name: str,
    base: dict[str, Any] | None = None,
    builtins: Collection[str] | None = None,
    params: Mapping[str, str] | None = None,
    service_account: str = PIPELINE_SERVICE_ACCOUNT,
) -> ImportResult:
    """Every harness of the DAG (and of the base config) as a HarnessDefinition; a DAG of one harness step
    as a HarnessRun, of several as one HarnessPipeline whose runs are created as `service_account`; either
    made a HarnessSchedule's template when the DAG has a schedule. `params` override the DAG's parameter
    defaults."""
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
    context = _Dag(dag_harness, builtin, known, renamed, values, dag.get("working_dir"), notes, result.errors)

    steps = list(dag.get("steps") or [])
    labels = [_step_label(s, i) for i, s in enumerate(steps)]
    harness = [label for label, step in zip(labels, steps, strict=True) if is_harness_step(step, dag)]
    whole = len(harness) > 1
    step_taken: set[str] = set()
    names = {
        label: unique_name(label, step_taken, STEP_NAME_MAX)
        if whole
        else unique_name(f"{dag_name}-{label}", step_taken)
        for label in harness
    }
    made_steps = _build_steps(dag, context, labels, names, whole)
    made: dict[str, Any] | None = None
    if whole:
        made = build_pipeline(dag_name, service_account, made_steps)
        result.notes.append(
            f"the pipeline's runs are created as ServiceAccount {service_account}: it must exist in the "
            "pipeline's namespace and the operator must be allowed to impersonate it (README: Pipelines); "
            "--service-account names another"
        )
    elif made_steps:
        (step,) = made_steps
        made = {"apiVersion": API_VERSION, "kind": "HarnessRun", "metadata": {"name": step["name"]}}
        made["spec"] = step["run"]["spec"]
    if "schedule" in dag:
        entries = build_cron_entries(dag["schedule"], notes.add, result.errors)
        if made is None:
            notes.add("schedule: the DAG has no harness step to schedule; not imported")
        elif entries:
            result.manifests += build_schedules(made, entries)
            made = None
    if made is not None:
        result.manifests.append(made)
    for key in sorted(set(dag) - _DAG_KEYS_HANDLED):
        notes.add(f"{key}: DAG-level setting with no HarnessRun equivalent; not imported")
    result.unsupported = notes.render()
    return result
