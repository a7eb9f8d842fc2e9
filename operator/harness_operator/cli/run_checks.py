"""What a HarnessRun's spec gets wrong beyond its schema, as (field, message) pairs: the runs it names,
variables left literal in its prompt, option and tool names its provider does not know, and the warnings
(pure)."""

from __future__ import annotations

import difflib
import re

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    AcpTransport,
    HarnessDefinitionSpec,
    HarnessRun,
    HarnessRunSpec,
    NetworkPolicyMode,
    ToolEnforcement,
)
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.access.model_route import compute_model_route, find_own_route_settings
from harness_operator.core.access.tool_policy import compute_tool_policy, compute_tool_policy_warning
from harness_operator.core.config import OperatorConfig
from harness_operator.core.plan.invocation import find_unknown_options, flag_token, merge_options
from harness_operator.core.plan.planning import PlanError, check_arguments
from harness_operator.core.plan.pricing import PRICE_TABLE, find_vendor, is_priced_by_table
from harness_operator.core.resolve.inputs import compute_dependencies
from harness_operator.core.resolve.resolution import (
    ChainEntry,
    DefinitionReader,
    compute_provider_chain,
    resolve_definition,
)

Problem = tuple[str, str]

# A `$(scope.name)` another tool substitutes (Tekton's params, a template's run.name) that a prompt
# keeps as it is: only `$(inputs.NAME)` is replaced there (the CEL rule checks those).
_VARIABLE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_-]*)\.([A-Za-z_][A-Za-z0-9_.-]{0,63})\)")

# The built-ins no image of ours ships (their ClusterHarnessDefinitions are not Ready: NoImage).
IMAGELESS_BUILTINS = [
    e.spec
    for e in load_builtin_catalog()
    if e.spec.image is None and e.spec.transport in (None, AcpTransport.stdio)
]


def find_run_references(spec: HarnessRunSpec) -> list[tuple[str, str]]:
    """(field, run name) for every other run this run names: spec.after, each runOutput, resumeFrom and
    workspace.from (the run waits for each to exist and succeed)."""
    found = [(f"{f}.name" if f.endswith(".runOutput") else f, name) for f, name in compute_dependencies(spec)]
    if spec.workspace and spec.workspace.from_:
        found.append(("spec.workspace.from.run", spec.workspace.from_.run))
    return found


def find_literal_variables(spec: HarnessRunSpec) -> list[Problem]:
    """A `$(x.y)` in spec.prompt or spec.stdin other than `$(inputs.NAME)`: it reaches the agent as it is."""
    names = [i.name for i in spec.inputs]
    found = []
    for field, text in (("spec.prompt", spec.prompt), ("spec.stdin", spec.stdin)):
        for match in _VARIABLE.finditer(text or ""):
            scope, variable = match.groups()
            name = variable.replace(".", "_")  # an input's name has no dots
            if scope == "inputs":
                continue
            declared = ", ".join(names) or "none"
            if name in names:
                fix = f"write `$(inputs.{name})`"
            else:
                fix = f"declare it, `inputs: [{{name: {name}, value: ...}}]`, and write `$(inputs.{name})`"
            found.append(
                (
                    field,
                    f"{match.group(0)} would reach the agent as it is: only $(inputs.NAME) is replaced, for "
                    f"the names spec.inputs declares ({declared}); {fix}",
                )
            )
    return found


def find_option_typos(entry: ChainEntry, definition: HarnessDefinitionSpec) -> list[Problem]:
    """Options of `with` the provider's CLI does not take: it would refuse them and the attempt fail."""
    known = sorted(set(definition.known_options or []) | set(definition.option_flags))
    found = []
    for key, _ in find_unknown_options(entry.provider, definition, entry.options):
        guess = difflib.get_close_matches(key.replace("_", "-"), known, n=1, cutoff=0.75)
        fix = f"did you mean `{guess[0]}`? Rename it" if guess else "its definition's knownOptions list them"
        found.append(
            (
                f"{entry.options_field}.{key}",
                f'provider "{entry.provider}" has no option {flag_token(key, definition)}, so the CLI would '
                f"refuse it and the attempt fail; {fix}",
            )
        )
    return found


def find_unknown_tools(
    spec: HarnessRunSpec, provider: str, definition: HarnessDefinitionSpec
) -> list[Problem]:
    """Names in spec.tools.allow and deny that are near, but not, a tool the definition names (its
    toolControls' denied tools, the run's MCP tools as the CLI calls them): a likely typo that denies or
    allows nothing. Names near none are left alone: a definition names only some of its CLI's tools."""
    controls, policy = definition.tool_controls, spec.tools
    if controls is None or policy is None:
        return []
    known = {
        t for part in (controls.no_edits, controls.no_shell, controls.no_network) if part for t in part.deny
    }
    if definition.mcp is not None:
        known |= {
            definition.mcp.tool_name.format(server=s.name, tool=t) for s in spec.mcp_servers for t in s.tools
        }
    found = []
    for label, names in (("allow", policy.allow or []), ("deny", policy.deny)):
        for index, name in enumerate(names):
            base = name.split("(", 1)[0].strip()
            if not base or "*" in base or base in known:
                continue
            folded = [k for k in known if k.lower() == base.lower()]
            guess = folded or difflib.get_close_matches(base, sorted(known), n=1, cutoff=0.75)
            if guess:
                effect = "allows" if label == "allow" else "denies"
                found.append(
                    (
                        f"spec.tools.{label}[{index}]",
                        f'provider "{provider}" names no tool {base!r}, so this {effect} nothing (tool names '
                        f"are case-sensitive); did you mean `{name.replace(base, guess[0], 1)}`? Its "
                        f"definition names {', '.join(sorted(known))}",
                    )
                )
    return found


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


def credential_advice(
    run: HarnessRun,
    namespace: str,
    entry: ChainEntry,
    definition: HarnessDefinitionSpec,
    secrets: set[tuple[str, str]],
    config: OperatorConfig | None,
) -> str | None:
    """What to do when no Secret here and no grant of the run provides the provider's credentials. A
    vendor the model gateway routes needs no key in the team's namespace: with the operator's
    configuration (`config`) that is known; without it the advice names both cases."""
    granted = {c.env for c in run.spec.credentials}
    missing = [
        c
        for c in definition.credentials
        if c.env not in granted and (namespace, c.secret_key_ref.name) not in secrets
    ]
    if not definition.credentials or len(missing) < len(definition.credentials):
        return None
    route = definition.model_route
    if config is not None and compute_model_route(run, definition, config) is not None:
        return None
    keys = ", ".join(f"{c.env} (Secret {c.secret_key_ref.name}, key {c.secret_key_ref.key})" for c in missing)
    create = f"create that Secret in namespace {namespace} or add a spec.credentials grant"
    if route is None:
        return f'provider "{entry.provider}" reads {keys}; no Secret given here provides it: {create}'
    own = find_own_route_settings(run, route)
    if config is not None and own:
        return (
            f'provider "{entry.provider}" is not routed through the model gateway because the run sets '
            f"{', '.join(own)} itself, so it reads {keys}: {create}, or drop those settings"
        )
    if config is not None:
        return (
            f'provider "{entry.provider}" reads {keys}, and this operator does not route {route.vendor} '
            f"through the model gateway (modelGateway.vendors.{route.vendor} is not set): ask the platform "
            f"team to set it, or {create}"
        )
    return (
        f'provider "{entry.provider}" needs no key in this namespace when the platform routes {route.vendor} '
        f"through the model gateway (the chart's modelGateway.vendors.{route.vendor}; give --operator to "
        f"check); otherwise it reads {keys}, which no Secret given here provides: {create}"
    )


def _cost_problem(run: HarnessRun, entry: ChainEntry, definition: HarnessDefinitionSpec) -> str | None:
    caps = definition.capabilities
    model = merge_options(definition, entry.options).get("model")
    if isinstance(model, str) and model:
        table_knows = is_priced_by_table(definition, model)
    else:  # the CLI picks its model: the runner prices it if the vendor's table has it
        table_knows = find_vendor(definition, None) is not None
    can_cost = caps.cost_reporting or (caps.usage_reporting and (bool(definition.pricing) or table_knows))
    if run.spec.limits is None or run.spec.limits.max_cost_usd is None or can_cost:
        return None
    return (
        f'provider "{entry.provider}" reports no cost and neither its pricing nor the price table '
        f"({PRICE_TABLE}) knows model {model or '(the CLI default)'!r}, so the cost limit cannot be "
        "enforced; request a model the table prices, or add pricing (and usageReporting) to its definition"
    )


def find_run_warnings(
    run: HarnessRun,
    namespace: str,
    reader: DefinitionReader,
    secrets: set[tuple[str, str]],
    config: OperatorConfig | None,
) -> list[Problem]:
    """What would not stop the run but likely not do what its author meant."""
    spec, sandbox = run.spec, run.spec.sandbox
    found = []
    if not (spec.workspace and spec.workspace.working_dir):
        found.append(
            ("spec.workspace.workingDir", "not set; the agent runs in the sandbox's default directory")
        )
    if sandbox and sandbox.network_policy == NetworkPolicyMode.unrestricted:
        found.append(("spec.sandbox.networkPolicy", "unrestricted: the agent may reach any address"))
    if sandbox and sandbox.egress and sandbox.network_policy != NetworkPolicyMode.allowlist:
        found.append(("spec.sandbox.egress", "ignored unless spec.sandbox.networkPolicy is allowlist"))
    for index, entry in enumerate(compute_provider_chain(spec), start=1):
        definition = resolve_definition(reader, namespace, entry.provider)
        if definition is None:
            continue
        if definition in IMAGELESS_BUILTINS and not (sandbox and sandbox.image):
            found.append(
                (
                    entry.field,
                    f"no sandbox image ships {definition.binary}: the built-in {entry.provider} is a recipe; "
                    "the run ends BinaryNotFound unless spec.sandbox.image names an image with the CLI",
                )
            )
        problem = _argument_problem(run, definition, entry)
        if problem is not None:
            where = "spec.prompt" if problem.reason == Reason.PromptTooLarge else entry.field
            found.append((where, problem.message))
        policy = compute_tool_policy(spec.tools, definition)
        unheld = compute_tool_policy_warning(policy, index, entry.provider, definition)
        if unheld is not None and policy is not None and policy.enforcement == ToolEnforcement.advisory:
            found.append(("spec.tools", unheld))  # a strict one is an error (the provider's check)
        found += find_unknown_tools(spec, entry.provider, definition)
        cost = _cost_problem(run, entry, definition)
        if cost is not None:
            found.append(("spec.limits.maxCostUSD", cost))
        advice = credential_advice(run, namespace, entry, definition, secrets, config)
        if advice is not None:
            found.append((entry.field, advice))
    return found
