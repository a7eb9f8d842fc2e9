"""Checks of manifests: schema, the CRDs' CEL rules, cross-references, warnings (pure; a run named but
not given is looked up only through the lookup the caller passes)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
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
    ClusterHarnessDefinition,
    HarnessDefinitionSpec,
    HarnessRun,
    rule,
    validations,
)
from harness_operator.cli.manifests import ERROR as ERROR
from harness_operator.cli.manifests import NOTE as NOTE
from harness_operator.cli.manifests import WARNING as WARNING
from harness_operator.cli.manifests import Document, Finding
from harness_operator.cli.pipeline_checks import pipeline_findings
from harness_operator.cli.run_checks import (
    find_literal_variables,
    find_option_typos,
    find_run_references,
    find_run_warnings,
)
from harness_operator.cli.schema_messages import describe_schema_error
from harness_operator.contract.structured_output import output_schema_problem
from harness_operator.core.access.git_egress import describe_publish
from harness_operator.core.config import OperatorConfig
from harness_operator.core.forge.triggering import EVENT_PARAMETERS, find_unknown_parameters
from harness_operator.core.objects.cel import check_rules
from harness_operator.core.resolve.inputs import DependencyCycle, compute_run_order
from harness_operator.core.resolve.resolution import (
    Rejection,
    check_mcp,
    check_tool_policy,
    compute_provider_chain,
    resolve_definition,
)
from harness_operator.core.schedule import InvalidSchedule, parse_cron


def schema_findings(doc: Document) -> list[Finding]:
    """The document against the pydantic model of its kind."""
    model = KINDS[doc.kind]
    try:
        model.model_validate(doc.obj)
    except ValidationError as exc:
        return [Finding(doc.path, doc.kind, doc.name, *describe_schema_error(model, e)) for e in exc.errors()]
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


# Looks a run up on the cluster: (namespace as the manifest gives it, else None; name) -> it exists.
RunLookup = Callable[[str | None, str], bool]


def _reference_findings(
    doc: Document, run: HarnessRun, runs: set[tuple[str, str]], strict: bool, lookup: RunLookup | None
) -> list[Finding]:
    """Every other run this run names is among the given manifests, or (with `lookup`) on the cluster;
    one in neither is a warning, an error with `strict` or `lookup`; the run itself is always an error."""
    found = []
    for field, name in find_run_references(run.spec):
        if name == doc.name:
            message = "names this run itself, which would wait for itself forever: name another run"
            found.append(Finding(doc.path, doc.kind, doc.name, field, message))
        elif (doc.namespace, name) in runs:
            continue
        elif lookup is not None:
            explicit = (doc.obj.get("metadata") or {}).get("namespace")
            if not lookup(explicit, name):
                where = f"namespace {explicit}" if explicit else "the namespace -n or the context gives"
                message = (
                    f'HarnessRun "{name}" is neither among the given manifests nor on the cluster '
                    f"({where}): this run would wait for it forever; create it, or correct the name"
                )
                found.append(Finding(doc.path, doc.kind, doc.name, field, message))
        else:
            message = (
                f'HarnessRun "{name}" is not among the given manifests: unless it is on the cluster, this '
                "run waits for it (WaitingForRunOutput); `validate --cluster` looks it up, `--strict` makes "
                "this an error"
            )
            found.append(Finding(doc.path, doc.kind, doc.name, field, message, ERROR if strict else WARNING))
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
            f"{doc.namespace}/{name}" for _, name in find_run_references(spec) if name != doc.name
        ]
        where[label] = doc
    try:
        compute_run_order(graph)
    except DependencyCycle as exc:
        first = where[exc.cycle[0]]
        return [Finding(first.path, first.kind, first.name, "spec.after", str(exc))]
    return []


def _run_findings(doc: Document, run: HarnessRun, catalog: Catalog) -> list[Finding]:
    """What the operator or the attempt would refuse in a run the API server takes: a variable its
    prompt would keep literally, an option its provider's CLI does not take."""
    problems = find_literal_variables(run.spec)
    for entry in compute_provider_chain(run.spec):
        definition = resolve_definition(catalog, doc.namespace, entry.provider)
        if definition is not None:
            problems += find_option_typos(entry, definition)
    return [Finding(doc.path, doc.kind, doc.name, field, message) for field, message in problems]


def output_schema_findings(doc: Document) -> list[Finding]:
    """A spec.outputSchema that is not a JSON Schema (the CRD takes any object): the operator would
    refuse the run as InvalidSpec."""
    spec = doc.obj.get("spec") or {}
    prefix = ""
    if doc.kind in ("HarnessSchedule", "HarnessTrigger"):
        spec, prefix = (spec.get("runTemplate") or {}).get("spec") or {}, "spec.runTemplate."
    problem = output_schema_problem(spec.get("outputSchema"))
    if problem is None:
        return []
    field, _, message = problem.partition(": ")
    return [Finding(doc.path, doc.kind, doc.name, prefix + field, message)]


def trigger_findings(doc: Document) -> list[Finding]:
    """A $(event.NAME) in a trigger's run or pipeline template that no delivery replaces: its runs would
    carry it as written (the receiver replaces only the event's parameters)."""
    spec = doc.obj.get("spec") or {}
    known = ", ".join(f"$(event.{n})" for n in EVENT_PARAMETERS)
    return [
        Finding(
            doc.path,
            doc.kind,
            doc.name,
            field,
            f"{text} is no event parameter, so every run would carry it as written; the parameters are "
            f"{known}",
        )
        for template in ("runTemplate", "pipelineTemplate")
        for field, text in find_unknown_parameters(
            (spec.get(template) or {}).get("spec") or {}, f"spec.{template}.spec"
        )
    ]


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


@dataclass(frozen=True)
class Known:
    """What the cross-reference checks know: the files' definitions, runs and Secrets, and how to look up
    the rest."""

    catalog: Catalog
    runs: set[tuple[str, str]]
    secrets: set[tuple[str, str]]
    strict: bool
    lookup: RunLookup | None
    config: OperatorConfig | None


def refusal_findings(doc: Document) -> list[Finding]:
    """What the API server (its schema and CEL rules, the chart's admission policy) or the operator's
    first checks would refuse in a manifest of one of our kinds."""
    schema = schema_findings(doc)
    taken = {f.field for f in schema}  # a field of the wrong shape gets no CEL message on top
    refused = schema + [f for f in cel_findings(doc) if f.field not in taken]
    if doc.kind == "HarnessRun":
        refused += with_findings(doc)
    if doc.kind in ("HarnessRun", "HarnessSchedule", "HarnessTrigger") and not refused:
        refused += output_schema_findings(doc)
    if doc.kind == "HarnessTrigger" and not refused:
        refused += trigger_findings(doc)
    if doc.kind == "HarnessSchedule" and not refused:
        refused += schedule_findings(doc)
    return refused


def run_findings(doc: Document, known: Known) -> list[Finding]:
    """A HarnessRun the API server takes: its providers, the runs it names, what its prompt and options
    get wrong, its warnings and what it will publish."""
    run = HarnessRun.model_validate(doc.obj)
    found = _provider_findings(doc, run, known.catalog)
    found += _reference_findings(doc, run, known.runs, known.strict, known.lookup)
    found += _run_findings(doc, run, known.catalog)
    found += [
        Finding(doc.path, doc.kind, doc.name, field, message, WARNING)
        for field, message in find_run_warnings(
            run, doc.namespace, known.catalog, known.secrets, known.config
        )
    ]
    definitions = [
        resolve_definition(known.catalog, doc.namespace, e.provider) for e in compute_provider_chain(run.spec)
    ]
    found += [
        Finding(doc.path, doc.kind, doc.name, field, message, WARNING if warn else NOTE)
        for field, message, warn in describe_publish(run, [d for d in definitions if d is not None])
    ]
    return found


def _step_run_findings(doc: Document, known: Known, pipeline_runs: set[tuple[str, str]]) -> list[Finding]:
    """A run a pipeline's step would create, checked as a HarnessRun of the files; the pipeline's other
    runs, whose outputs it reads, count as given."""
    return refusal_findings(doc) or run_findings(doc, replace(known, runs=known.runs | pipeline_runs))


def validate_documents(
    docs: Sequence[Document],
    builtins: Iterable[ClusterHarnessDefinition],
    *,
    strict: bool = False,
    lookup: RunLookup | None = None,
    config: OperatorConfig | None = None,
) -> list[Finding]:
    """All findings for a set of manifests, in document order. A run named but not given is a warning
    unless `strict`; `lookup` looks it up on the cluster instead. `config`, the operator's, says which
    vendors the model gateway routes."""
    known = Known(
        build_catalog(docs, builtins),
        {(d.namespace, d.name) for d in docs if d.kind == "HarnessRun"},
        {(d.namespace, d.name) for d in docs if d.kind == "Secret"},
        strict,
        lookup,
        config,
    )
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
        found += _name_findings(doc)
        refused = refusal_findings(doc)
        found += refused
        if refused:
            continue  # what the API server refuses gets no cross-reference checks or warnings on top
        if doc.kind == "HarnessRun":
            found += run_findings(doc, known)
        found += pipeline_findings(doc, lambda step, own: _step_run_findings(step, known, own))
    return found + _cycle_findings(docs)


def _name_findings(doc: Document) -> list[Finding]:
    if not doc.name:
        return [Finding(doc.path, doc.kind, doc.name, "metadata.name", "required field is missing")]
    if len(doc.name) > 253 or not re.fullmatch(DNS_SUBDOMAIN_RULE, doc.name):
        message = (
            "must be a DNS subdomain (lower-case letters, digits, '-' and '.', starting and ending with a "
            "letter or digit, at most 253 characters), as the API server requires"
        )
        return [Finding(doc.path, doc.kind, doc.name, "metadata.name", message)]
    return []
