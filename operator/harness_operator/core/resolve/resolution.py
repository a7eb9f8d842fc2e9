"""One resolution seam: a run's provider chain and value sources, by one set of rules for the operator,
`harnessctl run`, `render` and `validate` (pure, over a Reader).

Readers: the API server (kube_reader.KubeReader), the files given to `harnessctl run` (local_run.FileReader),
the definitions of `validate` and `render` (validation.Catalog).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from pydantic import ValidationError

from harness_operator.api.reasons import Reason, ReasonedError
from harness_operator.api.v1alpha1 import (
    HarnessDefinitionSpec,
    HarnessRun,
    HarnessRunSpec,
    RunInput,
    ValueSource,
)
from harness_operator.contract.structured_output import pick_field
from harness_operator.core.access.mcp import (
    compute_mcp_servers,
    describe_mcp_unsupported,
    find_mcp_destination_problem,
    find_mcp_problem,
)
from harness_operator.core.access.tool_policy import (
    compute_tool_policy,
    describe_unenforced,
    find_guarded_env,
    find_guarded_options,
    find_unenforced,
)
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.conditions import FALSE, TRUE, find_succeeded
from harness_operator.core.objects.naming import output_config_map_name
from harness_operator.core.resolve.inputs import (
    compute_dependencies,
    compute_reference_problem,
    substitute_inputs,
)
from harness_operator.core.resolve.retry import build_positions


@dataclass(frozen=True)
class AttemptTarget:
    """One attempt: its 1-based index, the provider's name, its resolved definition, and the provider's
    1-based position in the chain (spec.provider is 1, spec.fallback[0] is 2: retry.py numbers the
    attempts of each), and whether its definition is a namespaced HarnessDefinition, whose prices only
    raise the platform's (contract/pricing.py)."""

    index: int
    provider: str
    definition: HarnessDefinitionSpec
    position: int
    namespaced: bool = True  # a HarnessDefinition's (its tenant's word), not a ClusterHarnessDefinition's


T = TypeVar("T")
Source = ValueSource | RunInput


class Rejection(ReasonedError):
    """The run cannot start: Accepted=False with this reason and message."""


class Waiting(ReasonedError):
    """The run cannot start yet: Succeeded=Unknown with this reason and message."""


class RunFailure(ReasonedError):
    """The run cannot go on (its spec was fine): Succeeded=False with this reason and message."""


class Unreadable(Exception):
    """A reader was refused with an answer retrying cannot change (403, 400, 422); says why."""


class NotTheOutput(Exception):
    """An object bears the name of a run's output but is not that run's output; it was not read."""


class DefinitionReader(Protocol):
    def definition(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """The HarnessDefinition (namespace given) or ClusterHarnessDefinition (None) as stored."""


class Reader(DefinitionReader, Protocol):
    """Where a run's sources are read; each returns None when the object or key is missing."""

    def config_map_key(self, namespace: str, name: str, key: str) -> str | None: ...

    def secret_key(self, namespace: str, name: str, key: str) -> str | None: ...

    def run(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def run_output(self, run: Mapping[str, Any]) -> str | None:
        """The text a succeeded run produced; NotTheOutput for an impostor."""


# --- providers -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainEntry:
    """One element of the provider chain as the API has it: a provider and its `with`, and the fields
    they are written in (spec.provider and spec.with, or spec.fallback[i]'s)."""

    field: str
    options_field: str
    provider: str
    options: dict[str, Any]


def compute_provider_chain(spec: HarnessRunSpec) -> list[ChainEntry]:
    """The primary and each fallback, in the order their attempts run."""
    return [ChainEntry("spec.provider", "spec.with", spec.provider, spec.with_)] + [
        ChainEntry(f"spec.fallback[{i}].provider", f"spec.fallback[{i}].with", fb.provider, fb.with_)
        for i, fb in enumerate(spec.fallback)
    ]


def resolve_definition(
    reader: DefinitionReader, namespace: str, provider: str
) -> HarnessDefinitionSpec | None:
    """A namespaced HarnessDefinition shadows the ClusterHarnessDefinition of the same name; one that
    does not parse is a Rejection (InvalidProvider)."""
    found = resolve_scoped_definition(reader, namespace, provider)
    return None if found is None else found[0]


def resolve_scoped_definition(
    reader: DefinitionReader, namespace: str, provider: str
) -> tuple[HarnessDefinitionSpec, bool] | None:
    """resolve_definition's definition, and whether it is the namespaced one (True) or the cluster's."""
    raw = reader.definition(namespace, provider)
    namespaced = raw is not None
    if raw is None:
        raw = reader.definition(None, provider)
    if raw is None:
        return None
    try:
        return HarnessDefinitionSpec.model_validate(raw.get("spec") or {}), namespaced
    except ValidationError as exc:
        raise Rejection(
            Reason.InvalidProvider, f'provider "{provider}" is invalid: {exc.errors()[0]["msg"]}'
        ) from exc


def resolve_targets(reader: DefinitionReader, run: HarnessRun) -> list[AttemptTarget]:
    """Every attempt's definition, retries included (retry.py); the first provider nobody defines is a
    Rejection (UnknownProvider)."""
    chain = compute_provider_chain(run.spec)
    definitions = []
    for position, entry in enumerate(chain, start=1):
        found = resolve_scoped_definition(reader, run.metadata["namespace"], entry.provider)
        if found is None:
            message = f'unknown provider "{entry.provider}"'
            if position > 1:
                message = f"invalid fallback[{position - 2}]: {message}"
            raise Rejection(Reason.UnknownProvider, message)
        definitions.append(found)
    for entry, (definition, _) in zip(chain, definitions, strict=True):
        check_tool_policy(run, entry, definition)
        check_mcp(run, entry.provider, definition)
    return [
        AttemptTarget(index, chain[position - 1].provider, definition, position, namespaced)
        for index, position in enumerate(build_positions(run.spec), start=1)
        for definition, namespaced in [definitions[position - 1]]
    ]


def find_mcp_destinations_problem(
    run: HarnessRun, targets: Sequence[AttemptTarget], config: OperatorConfig
) -> str | None:
    """Why an attempt's remote MCP server may not be reached from this cluster (its URL would open that
    way out, under every mode: core/access/mcp.find_mcp_destination_problem, the platform's allowances from
    `config`); None when every one may. The operator refuses such a run before any attempt."""
    for target in targets:
        problem = find_mcp_destination_problem(
            run, target.provider, target.definition, config.mcp_allowed_cidrs, config.mcp_allowed_hosts
        )
        if problem is not None:
            return problem
    return None


def check_mcp(run: HarnessRun, provider: str, definition: HarnessDefinitionSpec) -> None:
    """Rejection (McpUnsupported) when the attempt has MCP servers its CLI cannot take."""
    servers = compute_mcp_servers(run, definition)
    if servers and definition.mcp is None:
        raise Rejection(Reason.McpUnsupported, describe_mcp_unsupported(provider))
    if servers and definition.mcp and (problem := find_mcp_problem(servers, definition.mcp)):
        raise Rejection(Reason.McpUnsupported, f"provider {provider!r}: {problem}")


def check_tool_policy(run: HarnessRun, entry: ChainEntry, definition: HarnessDefinitionSpec) -> None:
    """Rejection when the provider's `with` sets an option its tool policy guards (ToolPolicyConflict), or
    a strict policy asks for what the provider's CLI cannot enforce (ToolPolicyUnenforceable)."""
    policy = compute_tool_policy(run.spec.tools, definition)
    if policy is None:
        return
    provider, field, options = entry.provider, entry.options_field, entry.options
    env = find_guarded_env(policy, definition, [e.name for e in run.spec.env])
    if env:
        raise Rejection(
            Reason.ToolPolicyConflict,
            f'spec.env.{env[0]}: provider "{provider}" enforces the tool policy, which this variable would '
            "loosen, so the run may not set it; say what the agent may use in spec.tools instead",
        )
    guarded = find_guarded_options(policy, definition, options)
    if guarded:
        raise Rejection(
            Reason.ToolPolicyConflict,
            f'{field}.{guarded[0]}: provider "{provider}" enforces the tool policy with this option, so '
            "the run may not set it; say what the agent may use in spec.tools instead",
        )
    parts = find_unenforced(policy, definition)
    if parts and policy.enforcement == "strict":
        raise Rejection(
            Reason.ToolPolicyUnenforceable,
            f"{describe_unenforced(provider, definition, parts)}; use a provider that can, drop those "
            "parts, or set spec.tools.enforcement: advisory to run without them",
        )


# --- value sources ---------------------------------------------------------------------------------


def _read(field: str, what: str, fetch: Callable[[], T]) -> T:
    """One read; a refusal retrying cannot change fails the run with the reason rather than leaving it
    waiting with no status."""
    try:
        return fetch()
    except Unreadable as exc:
        raise Rejection(Reason.InputUnavailable, f"{field}: cannot read {what}: {exc}") from exc


def require_succeeded(reader: Reader, run: HarnessRun, field: str, other_name: str) -> Mapping[str, Any]:
    """The run named by `field` once it has succeeded: Waiting until then, Rejection if it failed."""
    if other_name == run.metadata["name"]:
        raise Rejection(Reason.DependsOnItself, f"{field}: names this run itself, which would wait forever")
    ns = run.metadata["namespace"]
    other = _read(field, f'HarnessRun "{other_name}"', lambda: reader.run(ns, other_name))
    if other is None:
        raise Waiting(Reason.WaitingForRunOutput, f'{field}: waiting for HarnessRun "{other_name}" to exist')
    state = find_succeeded(HarnessRun.model_validate(other))
    if state == FALSE:
        raise Rejection(Reason.RunOutputFailed, f'{field}: HarnessRun "{other_name}" did not succeed')
    if state != TRUE:
        raise Waiting(
            Reason.WaitingForRunOutput, f'{field}: waiting for HarnessRun "{other_name}" to succeed'
        )
    return other


def read_run_output(reader: Reader, field: str, other: Mapping[str, Any]) -> str | None:
    """The output of a succeeded run, only when it is that run's: an impostor is never read."""
    other_name = other["metadata"]["name"]
    name = output_config_map_name(other_name)
    try:
        return _read(field, f"ConfigMap {name}", lambda: reader.run_output(other))
    except NotTheOutput as exc:
        raise Rejection(
            Reason.InputUnavailable,
            f'{field}: ConfigMap {name} is not the output of HarnessRun "{other_name}" '
            "(not owned by it, or not the text its status reports); it was not read",
        ) from exc


def _pick_output_field(field: str, other: Mapping[str, Any], output: str, path: str) -> str:
    """One field of a succeeded run's validated JSON output (its text read, hash-checked, as a whole)."""
    other_name = other["metadata"]["name"]
    if not (other.get("spec") or {}).get("outputSchema"):
        raise Rejection(
            Reason.InputUnavailable,
            f'{field}.runOutput.path: HarnessRun "{other_name}" has no spec.outputSchema, so its output is '
            "not validated JSON; give it a schema, or drop path to take the whole output",
        )
    try:
        return pick_field(output, path)
    except (KeyError, ValueError) as exc:
        raise Rejection(
            Reason.InputUnavailable,
            f'{field}.runOutput.path: the output of HarnessRun "{other_name}" has no field {exc}; check the '
            "path against its spec.outputSchema",
        ) from exc


def resolve_source(reader: Reader, run: HarnessRun, field: str, source: Source) -> str:
    """A prompt, stdin or input's value from its ConfigMap key, Secret key or run's output."""
    ns = run.metadata["namespace"]
    if source.config_map_key_ref:
        ref = source.config_map_key_ref
        what = f"ConfigMap {ref.name} key {ref.key}"
        value = _read(field, what, lambda: reader.config_map_key(ns, ref.name, ref.key))
    elif source.secret_key_ref:
        secret = source.secret_key_ref
        what = f"Secret {secret.name} key {secret.key}"
        value = _read(field, what, lambda: reader.secret_key(ns, secret.name, secret.key))
    else:
        assert source.run_output is not None
        other_name = source.run_output.name
        other = require_succeeded(reader, run, field, other_name)
        value = read_run_output(reader, field, other)
        what = f'the output of HarnessRun "{other_name}"'
        if value is not None and source.run_output.path is not None:
            value = _pick_output_field(field, other, value, source.run_output.path)
    if value is None:
        raise Rejection(Reason.InputUnavailable, f"{field}: cannot read {what}")
    return value


def check_references(spec: HarnessRunSpec) -> None:
    """Rejection (UnknownInput) when spec.prompt or spec.stdin references an undeclared input."""
    problem = compute_reference_problem(spec)
    if problem is not None:
        raise Rejection(Reason.UnknownInput, problem)


def compose_inputs(spec: HarnessRunSpec, read: Callable[[str, Source], str]) -> tuple[str, str | None]:
    """The prompt and stdin: `$(inputs.NAME)` in spec.prompt and spec.stdin replaced by the inputs'
    values, text from promptFrom/stdinFrom taken as it is; `read(field, source)` gives a source's text."""
    values = {
        item.name: item.value if item.value is not None else read(f"spec.inputs[{index}]", item)
        for index, item in enumerate(spec.inputs)
    }
    if spec.prompt is not None:
        prompt = substitute_inputs(spec.prompt, values)
    else:
        assert spec.prompt_from is not None  # the schema requires one of the two
        prompt = read("spec.promptFrom", spec.prompt_from)
    stdin = None if spec.stdin is None else substitute_inputs(spec.stdin, values)
    if spec.stdin_from is not None:
        stdin = read("spec.stdinFrom", spec.stdin_from)
    return prompt, stdin


class ResolvedInputs(NamedTuple):
    """The prompt and stdin, and every value among them taken from a Secret (redacted like a credential)."""

    prompt: str
    stdin: str | None
    secret_values: list[str]


def resolve_inputs(reader: Reader, run: HarnessRun) -> ResolvedInputs:
    """The prompt and stdin, once every run this one depends on has succeeded."""
    check_references(run.spec)
    for field, other_name in compute_dependencies(run.spec):
        if field.startswith("spec.after"):
            require_succeeded(reader, run, field, other_name)
    taken: list[str] = []

    def read(field: str, source: Source) -> str:
        value = resolve_source(reader, run, field, source)
        if source.secret_key_ref is not None:
            taken.append(value)
        return value

    prompt, stdin = compose_inputs(run.spec, read)
    return ResolvedInputs(prompt, stdin, taken)


def taken_secrets(spec: HarnessRunSpec) -> dict[str, str]:
    """Secret name -> the field that takes a value from it (promptFrom, stdinFrom, inputs), first each."""
    sources: list[tuple[str, Source | None]] = [
        ("spec.promptFrom", spec.prompt_from),
        ("spec.stdinFrom", spec.stdin_from),
    ]
    sources += [(f"spec.inputs[{i}]", item) for i, item in enumerate(spec.inputs)]
    taken: dict[str, str] = {}
    for field, source in sources:
        if source is not None and source.secret_key_ref is not None:
            taken.setdefault(source.secret_key_ref.name, f"{field}.secretKeyRef")
    return taken
