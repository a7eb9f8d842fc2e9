"""Offline checks of manifests: schema, the CRDs' CEL rules, cross-references, warnings (pure)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from harness_operator.api.crd import crd_schema_for
from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    API_VERSION,
    DNS_SUBDOMAIN_RULE,
    GROUP,
    KINDS,
    WITH_VALUES_CHECK,
    WITH_VALUES_MESSAGE,
    AcpTransport,
    ClusterHarnessDefinition,
    HarnessDefinitionSpec,
    HarnessRun,
    NetworkPolicyMode,
    ToolEnforcement,
    rule,
    validations,
)
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.manifests import Document
from harness_operator.contract.structured_output import output_schema_problem
from harness_operator.core.access.git_egress import describe_publish
from harness_operator.core.access.tool_policy import compute_tool_policy, compute_tool_policy_warning
from harness_operator.core.objects.cel import check_rules
from harness_operator.core.plan.invocation import find_unknown_options, merge_options
from harness_operator.core.plan.planning import PlanError, check_arguments
from harness_operator.core.plan.pricing import PRICE_TABLE, find_vendor, is_priced_by_table
from harness_operator.core.resolve.inputs import DependencyCycle, compute_dependencies, compute_run_order
from harness_operator.core.resolve.resolution import (
    ChainEntry,
    Rejection,
    check_mcp,
    check_tool_policy,
    compute_provider_chain,
    resolve_definition,
)
from harness_operator.core.schedule import InvalidSchedule, parse_cron

ERROR = "error"
WARNING = "warning"
NOTE = "note"  # what the run will do, worth knowing before it does


@dataclass(frozen=True)
class Finding:
    """One problem in one manifest."""

    path: str
    kind: str
    name: str
    field: str
    message: str
    severity: str = ERROR

    def render(self) -> str:
        label = {WARNING: "warning: ", NOTE: "note: "}.get(self.severity, "")
        return (
            f"{self.path}: {self.kind or '?'}/{self.name or '?'}: {self.field or '-'}: {label}{self.message}"
        )


def _loc(loc: Iterable[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def _seconds(text: str) -> int | None:
    """A Go-style duration ("30m", "1h30m", "45s") as seconds, else None."""
    match = _DURATION.match(text.strip())
    if not text.strip() or match is None:
        return None
    hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds


def _schema_message(error: Any) -> str:
    kind, msg, given = error["type"], error["msg"], error.get("input")
    if kind == "extra_forbidden":
        return "unknown field; remove it (kubectl explain shows the fields)"
    if kind == "missing":
        return "required field is missing"
    if kind == "list_type":
        return f"a list is expected, not {type(given).__name__} {given!r}: write [{given}]"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        seconds = _seconds(given) if isinstance(given, str) else None
        if seconds is not None and str(error["loc"][-1]).endswith("Seconds"):
            return f"a whole number of seconds is expected, not a duration: write {seconds} for {given}"
        return f"a whole number is expected, not {given!r}"
    if kind in ("bool_parsing", "bool_type"):
        return f"true or false is expected, not {given!r}"
    return str(msg)


def schema_findings(doc: Document) -> list[Finding]:
    """The document against the pydantic model of its kind."""
    model = KINDS[doc.kind]
    try:
        model.model_validate(doc.obj)
    except ValidationError as exc:
        return [
            Finding(doc.path, doc.kind, doc.name, _loc(e["loc"]), _schema_message(e)) for e in exc.errors()
        ]
    return []


def cel_findings(doc: Document) -> list[Finding]:
    """The CRD's own CEL rules, evaluated offline."""
    try:
        violations = check_rules(crd_schema_for(doc.kind), doc.obj)
    except ValueError as exc:  # CEL's integers are 64-bit: a larger number cannot be checked (nor stored)
        message = f"a number does not fit in a 64-bit integer ({exc}); the CEL rules could not be checked"
        return [Finding(doc.path, doc.kind, doc.name, "spec", message)]
    return [Finding(doc.path, doc.kind, doc.name, v.path, v.message) for v in violations]


# The check the chart's admission policy makes on every `with` map (the CRD cannot see their keys).
_WITH_SCHEMA = validations(rule(WITH_VALUES_CHECK.format(m="self"), WITH_VALUES_MESSAGE))


def with_findings(doc: Document) -> list[Finding]:
    """The admission policy's check of spec.with and each spec.fallback[].with, offline."""
    spec = doc.obj.get("spec") or {}
    maps = [("spec.with", spec.get("with"))] + [
        (f"spec.fallback[{i}].with", fb.get("with"))
        for i, fb in enumerate(spec.get("fallback") or [])
        if isinstance(fb, dict)
    ]
    found = []
    for field, value in maps:
        if isinstance(value, dict):
            found += [
                Finding(doc.path, doc.kind, doc.name, v.path, v.message)
                for v in check_rules(_WITH_SCHEMA, value, path=field)
            ]
    return found


@dataclass(frozen=True)
class Catalog:
    """Definitions known to the check: the files' own, then the built-in catalog."""

    namespaced: dict[tuple[str, str], HarnessDefinitionSpec]
    cluster: dict[str, HarnessDefinitionSpec]

    def definition(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        """resolution.DefinitionReader: the definitions here parsed already."""
        spec = self.cluster.get(name) if namespace is None else self.namespaced.get((namespace, name))
        return None if spec is None else {"spec": spec}


def build_catalog(docs: Sequence[Document], builtins: Iterable[ClusterHarnessDefinition]) -> Catalog:
    """Collect the definitions that parse; broken ones are reported by the schema check."""
    cluster = {d.metadata["name"]: d.spec for d in builtins}
    namespaced: dict[tuple[str, str], HarnessDefinitionSpec] = {}
    for doc in docs:
        if doc.kind not in ("HarnessDefinition", "ClusterHarnessDefinition"):
            continue
        try:
            spec = HarnessDefinitionSpec.model_validate(doc.obj.get("spec") or {})
        except ValidationError:
            continue
        if doc.kind == "ClusterHarnessDefinition":
            cluster[doc.name] = spec
        else:
            namespaced[(doc.namespace, doc.name)] = spec
    return Catalog(namespaced, cluster)


def _provider_findings(doc: Document, run: HarnessRun, catalog: Catalog) -> list[Finding]:
    found = []
    for index, entry in enumerate(compute_provider_chain(run.spec)):
        field, provider = entry.field, entry.provider
        definition = resolve_definition(catalog, doc.namespace, provider)
        if definition is None:
            what = "provider" if index == 0 else "fallback provider"
            known = sorted({n for ns, n in catalog.namespaced if ns == doc.namespace} | set(catalog.cluster))
            message = f'unknown {what} "{provider}"; known here: {", ".join(known) or "none"}'
            found.append(Finding(doc.path, doc.kind, doc.name, field, message))
            continue
        try:
            check_tool_policy(run, entry, definition)
            check_mcp(run, provider, definition)
        except Rejection as exc:
            where, message = "spec.tools", exc.message
            if exc.reason in (Reason.ToolPolicyConflict, Reason.McpUnsupported):
                where, _, message = exc.message.partition(": ")
            found.append(Finding(doc.path, doc.kind, doc.name, where, message))
    return found


def _run_output_findings(doc: Document, run: HarnessRun, runs: set[tuple[str, str]]) -> list[Finding]:
    found = []
    for field, source in (("spec.promptFrom", run.spec.prompt_from), ("spec.stdinFrom", run.spec.stdin_from)):
        if source and source.run_output and (doc.namespace, source.run_output.name) not in runs:
            found.append(
                Finding(
                    doc.path,
                    doc.kind,
                    doc.name,
                    f"{field}.runOutput.name",
                    f'HarnessRun "{source.run_output.name}" is not among the given manifests',
                )
            )
    return found


def _dependency_findings(doc: Document, run: HarnessRun, runs: set[tuple[str, str]]) -> list[Finding]:
    """spec.after and spec.inputs[].runOutput name runs of the given manifests (promptFrom/stdinFrom are
    checked above), never the run itself."""
    found = []
    for field, name in compute_dependencies(run.spec):
        if field.startswith(("spec.promptFrom", "spec.stdinFrom")):
            continue
        if name == doc.name:
            found.append(Finding(doc.path, doc.kind, doc.name, field, "names this run itself"))
        elif (doc.namespace, name) not in runs:
            message = f'HarnessRun "{name}" is not among the given manifests'
            found.append(Finding(doc.path, doc.kind, doc.name, field, message))
    return found


def _cycle_findings(docs: Sequence[Document]) -> list[Finding]:
    """A cycle of runs waiting for each other (spec.after, runOutput) would never start."""
    graph: dict[str, list[str]] = {}
    where: dict[str, Document] = {}
    for doc in docs:
        if doc.kind != "HarnessRun" or doc.error or schema_findings(doc):
            continue
        spec = HarnessRun.model_validate(doc.obj).spec
        label = f"{doc.namespace}/{doc.name}"
        graph[label] = [
            f"{doc.namespace}/{name}" for _, name in compute_dependencies(spec) if name != doc.name
        ]
        where[label] = doc
    try:
        compute_run_order(graph)
    except DependencyCycle as exc:
        first = where[exc.cycle[0]]
        return [Finding(first.path, first.kind, first.name, "spec.after", str(exc))]
    return []


def _argument_problem(
    run: HarnessRun, definition: HarnessDefinitionSpec, entry: ChainEntry
) -> PlanError | None:
    """What the operator would refuse when it plans this provider (inline prompt and stdin only)."""
    spec = run.spec
    stdin = spec.stdin if spec.stdin_from is None else None
    try:
        check_arguments(
            run, definition, entry.provider, entry.options_field, entry.options, spec.prompt or "", stdin
        )
    except PlanError as exc:
        return exc
    return None


# The built-ins no image of ours ships (their ClusterHarnessDefinitions are not Ready: NoImage).
IMAGELESS_BUILTINS = [
    e.spec
    for e in load_builtin_catalog()
    if e.spec.image is None and e.spec.transport in (None, AcpTransport.stdio)
]


def _warnings(
    doc: Document, run: HarnessRun, catalog: Catalog, secrets: set[tuple[str, str]]
) -> list[Finding]:
    def warn(field: str, message: str) -> Finding:
        return Finding(doc.path, doc.kind, doc.name, field, message, WARNING)

    spec = run.spec
    found = []
    if not (spec.workspace and spec.workspace.working_dir):
        found.append(
            warn("spec.workspace.workingDir", "not set; the agent runs in the sandbox's default directory")
        )
    sandbox = spec.sandbox
    if sandbox and sandbox.network_policy == NetworkPolicyMode.unrestricted:
        found.append(warn("spec.sandbox.networkPolicy", "unrestricted: the agent may reach any address"))
    if sandbox and sandbox.egress and sandbox.network_policy != NetworkPolicyMode.allowlist:
        found.append(warn("spec.sandbox.egress", "ignored unless spec.sandbox.networkPolicy is allowlist"))
    granted_by_run = {c.env for c in spec.credentials}
    for index, entry in enumerate(compute_provider_chain(spec), start=1):
        field, name = entry.field, entry.provider
        definition = resolve_definition(catalog, doc.namespace, name)
        if definition is None:
            continue
        if definition in IMAGELESS_BUILTINS and not (sandbox and sandbox.image):
            found.append(
                warn(
                    field,
                    f"no sandbox image ships {definition.binary}: the built-in {name} is a recipe; the run "
                    "ends BinaryNotFound unless spec.sandbox.image names an image with the CLI",
                )
            )
        problem = _argument_problem(run, definition, entry)
        if problem is not None:
            found.append(
                warn("spec.prompt" if problem.reason == Reason.PromptTooLarge else field, problem.message)
            )
        for key, why in find_unknown_options(name, definition, entry.options):
            found.append(warn(f"{entry.options_field}.{key}", why))
        policy = compute_tool_policy(spec.tools, definition)
        unheld = compute_tool_policy_warning(policy, index, name, definition)
        if unheld is not None and policy is not None and policy.enforcement == ToolEnforcement.advisory:
            found.append(warn("spec.tools", unheld))  # a strict one is an error (_provider_findings)
        caps = definition.capabilities
        model = merge_options(definition, entry.options).get("model")
        if isinstance(model, str) and model:
            table_knows = is_priced_by_table(definition, model)
        else:  # the CLI picks its model: the runner prices it if the vendor's table has it
            table_knows = find_vendor(definition, None) is not None
        can_cost = caps.cost_reporting or (caps.usage_reporting and (bool(definition.pricing) or table_knows))
        if spec.limits and spec.limits.max_cost_usd is not None and not can_cost:
            found.append(
                warn(
                    "spec.limits.maxCostUSD",
                    f'provider "{name}" reports no cost and neither its pricing nor the price table '
                    f"({PRICE_TABLE}) knows model {model or '(the CLI default)'!r}, so the cost limit cannot "
                    "be enforced; request a model the table prices, or add pricing (and usageReporting) to "
                    "its definition",
                )
            )
        missing = [
            c
            for c in definition.credentials
            if c.env not in granted_by_run and (doc.namespace, c.secret_key_ref.name) not in secrets
        ]
        if definition.credentials and len(missing) == len(definition.credentials):
            envs = ", ".join(f"{c.env} (Secret {c.secret_key_ref.name})" for c in missing)
            found.append(
                warn(
                    field,
                    f'provider "{name}" reads {envs}; no Secret given here provides it and spec.credentials '
                    "grants nothing for it: create the Secret or add a spec.credentials grant",
                )
            )
    return found


def output_schema_findings(doc: Document) -> list[Finding]:
    """A spec.outputSchema that is not a JSON Schema (the CRD takes any object): the operator would
    refuse the run as InvalidSpec."""
    spec = doc.obj.get("spec") or {}
    prefix = ""
    if doc.kind == "HarnessSchedule":
        spec, prefix = (spec.get("runTemplate") or {}).get("spec") or {}, "spec.runTemplate."
    problem = output_schema_problem(spec.get("outputSchema"))
    if problem is None:
        return []
    field, _, message = problem.partition(": ")
    return [Finding(doc.path, doc.kind, doc.name, prefix + field, message)]


def schedule_findings(doc: Document) -> list[Finding]:
    """A cron schedule or time zone the operator cannot read (the CRD checks neither): its Ready would be
    False with InvalidSchedule."""
    spec = doc.obj.get("spec") or {}
    try:
        parse_cron(str(spec.get("schedule", "")), spec.get("timeZone"))
    except InvalidSchedule as exc:
        field, _, message = str(exc).partition(": ")
        return [Finding(doc.path, doc.kind, doc.name, field, message)]
    return []


def validate_documents(
    docs: Sequence[Document], builtins: Iterable[ClusterHarnessDefinition]
) -> list[Finding]:
    """All findings for a set of manifests, in document order."""
    catalog = build_catalog(docs, builtins)
    runs = {(d.namespace, d.name) for d in docs if d.kind == "HarnessRun"}
    secrets = {(d.namespace, d.name) for d in docs if d.kind == "Secret"}
    found: list[Finding] = []
    for doc in docs:
        if doc.error:
            found.append(Finding(doc.path, "", "", "", doc.error))
            continue
        api_version = str(doc.obj.get("apiVersion", ""))
        if not api_version or not doc.kind:
            missing = " and ".join(f for f in ("apiVersion", "kind") if not doc.obj.get(f))
            found.append(
                Finding(
                    doc.path,
                    doc.kind,
                    doc.name,
                    missing,
                    "required: the API server refuses a manifest without it",
                )
            )
            continue
        if doc.kind not in KINDS:
            if api_version.startswith(GROUP + "/"):
                found.append(Finding(doc.path, doc.kind, doc.name, "kind", f"unknown kind in {GROUP}"))
            continue
        if api_version != API_VERSION:
            found.append(
                Finding(
                    doc.path, doc.kind, doc.name, "apiVersion", f"must be {API_VERSION}, not {api_version!r}"
                )
            )
            continue
        if not doc.name:
            found.append(Finding(doc.path, doc.kind, doc.name, "metadata.name", "required field is missing"))
        elif len(doc.name) > 253 or not re.fullmatch(DNS_SUBDOMAIN_RULE, doc.name):
            found.append(
                Finding(
                    doc.path,
                    doc.kind,
                    doc.name,
                    "metadata.name",
                    "must be a DNS subdomain (lower-case letters, digits, '-' and '.', starting and ending "
                    "with a letter or digit, at most 253 characters), as the API server requires",
                )
            )
        refused = schema_findings(doc) + cel_findings(doc)
        if doc.kind == "HarnessRun":
            refused += with_findings(doc)
        if doc.kind in ("HarnessRun", "HarnessSchedule") and not refused:
            refused += output_schema_findings(doc)
        if doc.kind == "HarnessSchedule" and not refused:
            refused += schedule_findings(doc)
        found += refused
        if refused or doc.kind != "HarnessRun":
            continue  # what the API server refuses gets no cross-reference checks or warnings on top
        run = HarnessRun.model_validate(doc.obj)
        found += _provider_findings(doc, run, catalog)
        found += _run_output_findings(doc, run, runs)
        found += _dependency_findings(doc, run, runs)
        found += _warnings(doc, run, catalog, secrets)
        definitions = [
            resolve_definition(catalog, doc.namespace, e.provider) for e in compute_provider_chain(run.spec)
        ]
        found += [
            Finding(doc.path, doc.kind, doc.name, field, message, WARNING if warn else NOTE)
            for field, message, warn in describe_publish(run, [d for d in definitions if d is not None])
        ]
    return found + _cycle_findings(docs)
