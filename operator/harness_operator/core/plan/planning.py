"""Planning: an AttemptPlan from a run and its definition (pure), Dagu's invocation rules applied."""

from __future__ import annotations

import json
from typing import Any

from harness_operator.api.reasons import Reason, ReasonedError
from harness_operator.api.v1alpha1 import (
    AcpTransport,
    EnvVar,
    HarnessDefinitionSpec,
    HarnessRun,
    Limits,
    OutputFormat,
    Protocol,
    SchemaForm,
    StdinMode,
)
from harness_operator.contract.plan import (
    ACP_CA_BUNDLE_ENV,
    ACP_HEADER_ENV,
    OUTPUT_SCHEMA_HOME_FILE,
    REPROMPT_TEXT,
    AcpHeaderPlan,
    AcpSessionPlan,
    AttemptPlan,
    home_path_arg,
)
from harness_operator.core.access.credentials import merge_grants
from harness_operator.core.access.mcp import (
    build_acp_mcp_servers,
    build_mcp_arguments,
    build_mcp_env,
    build_mcp_home_files,
    build_mcp_tool_names,
    compute_raw_json_variables,
)
from harness_operator.core.access.settings_merge import merge_each
from harness_operator.core.access.tool_policy import (
    allow_listed_tools,
    build_tool_env,
    build_tool_options,
    build_tool_rules,
)
from harness_operator.core.attempt import Attempt
from harness_operator.core.plan.invocation import (
    MAX_ARG_BYTES,
    Invocation,
    build_flags,
    build_invocation,
    find_argument_problem,
    flag_token,
    join_prompt_and_stdin,
    merge_options,
    option_strings,
    prompt_argument,
)
from harness_operator.core.plan.resumption import Continuation
from harness_operator.core.resolve.retry import build_positions, retry_number

# Option keys that carry a native per-run budget (claude-stream-json definitions only).
BUDGET_KEYS = ("max-budget-usd", "max_budget_usd")


def plan_options(
    run: HarnessRun, definition: HarnessDefinitionSpec, options: dict[str, Any]
) -> dict[str, Any]:
    """The run's options plus native limit flags: Claude's `--max-budget-usd` for maxCostUSD, which a
    budget option of the run or the definition may tighten, never loosen (maxCostUSD is the
    operator's cap: a budget's reservation becomes it).

    Only for claude-stream-json definitions that report cost themselves: Qwen Code speaks the same
    format but has no budget flag (docs/cli-help/qwen-*.txt), so it would reject the option."""
    out = dict(options)
    limits = run.spec.limits
    if (
        limits is not None
        and limits.max_cost_usd is not None
        and definition.output.format == OutputFormat.claude_stream_json
        and definition.capabilities.cost_reporting
    ):
        given = [out.pop(key, None) for key in BUDGET_KEYS] + [
            definition.defaults.get(k) for k in BUDGET_KEYS
        ]
        out["max-budget-usd"] = min([limits.max_cost_usd, *(v for v in map(_usd, given) if v is not None)])
    return out


def _usd(value: Any) -> float | None:
    """A budget option's value as a non-negative number, else None (it is then not a tighter cap)."""
    if isinstance(value, bool):
        return None
    try:
        usd = float(value)
    except (TypeError, ValueError):
        return None
    return usd if usd >= 0 and usd == usd else None  # NaN is not a cap


def build_acp_session(run: HarnessRun, attempt: Attempt, prompt: str, stdin: str | None) -> AcpSessionPlan:
    """The ACP half of a plan: the prompt with stdin after a blank line, the endpoint and its headers, the
    tool policy and the MCP servers behind their gates."""
    definition, tools = attempt.definition, attempt.tool_policy
    headers = [
        AcpHeaderPlan(
            name=h.name,
            value=h.value,
            credential_env=ACP_HEADER_ENV.format(index=i) if h.value_from is not None else None,
        )
        for i, h in enumerate(definition.headers)
    ]
    servers, mcp_tools = build_acp_mcp_servers(attempt.mcp_servers, definition, tools.deny if tools else [])
    return AcpSessionPlan(
        transport=definition.transport or AcpTransport.stdio,
        prompt=join_prompt_and_stdin(prompt, stdin or ""),
        url=definition.url,
        cwd=definition.cwd,
        headers=headers,
        ca_bundle_env=ACP_CA_BUNDLE_ENV if definition.ca_bundle_secret_ref is not None else None,
        bearer_subprotocol=bool(definition.bearer_subprotocol),
        permission=run.spec.acp_permission,
        tools=tools,
        mcp_servers=servers,
        mcp_tools=mcp_tools,
    )


def merge_plain_env(run: HarnessRun, definition: HarnessDefinitionSpec) -> dict[str, str]:
    """The definition's plain env, then the run's; the run's wins for the same name."""
    plain = {e.name: e.value for e in definition.env}
    plain.update({e.name: e.value for e in run.spec.env})
    return plain


class PlanError(ReasonedError):
    """The run cannot be planned for a provider: no exec could pass its arguments (Accepted=False)."""


def _prompt_error(
    definition: HarnessDefinitionSpec, provider: str, text: str, folded: bool, problem: str
) -> PlanError:
    what = "the prompt with stdin folded in (stdinMode: fold)" if folded else "the prompt"
    if "\x00" in text:
        return PlanError(Reason.InvalidArgument, f"{what} {problem} (provider {provider!r})")
    fix = (
        "use a provider definition with promptMode: stdin, or stdinMode: pipe so that spec.stdin is piped"
        if folded
        else "use a provider definition with promptMode: stdin (the prompt is piped), or keep spec.prompt "
        "short and pass the long text as spec.stdin/stdinFrom, which stdinMode: pipe pipes to the CLI "
        "(stdinMode: fold would put it back into the prompt argument)"
    )
    return PlanError(
        Reason.PromptTooLarge,
        f"{what} is {len(text.encode('utf-8'))} bytes and provider {provider!r} passes it as one "
        f"command-line argument (promptMode: {definition.prompt_mode}), but the kernel takes at most "
        f"{MAX_ARG_BYTES - 1} bytes in one argument; {fix}",
    )


def check_arguments(
    run: HarnessRun,
    definition: HarnessDefinitionSpec,
    provider: str,
    options_field: str,
    options: dict[str, Any],
    prompt: str,
    stdin: str | None,
) -> None:
    """Refuse, naming the field, what no exec can carry: an argument over the kernel's limit or with a
    NUL byte (prompt, `with` values, the definition's fixed arguments) and a NUL in an env value."""
    # An ACP prompt travels in a message, not in an argument.
    text = prompt_argument(definition, prompt, stdin) if definition.protocol == Protocol.cli else None
    if text is not None and (problem := find_argument_problem(text)):
        folded = definition.stdin_mode == StdinMode.fold and bool(stdin)
        raise _prompt_error(definition, provider, text, folded, problem)
    sources = [(f"{options_field}.{k}", k, v) for k, v in options.items()]
    sources += [(f"defaults.{k} of provider {provider!r}", k, v) for k, v in definition.defaults.items()]
    for where, key, value in sources:
        if problem := find_argument_problem(flag_token(key, definition)):
            raise PlanError(Reason.InvalidArgument, f"{where}: the option's flag {problem}")
        for item in option_strings(value):
            if problem := find_argument_problem(item):
                raise PlanError(Reason.InvalidArgument, f"{where}: the value {problem}")
    fixed = [(f"prefixArgs[{i}]", a) for i, a in enumerate(definition.prefix_args)]
    fixed += [("promptFlag", definition.prompt_flag or "")]
    for where, item in fixed:
        if problem := find_argument_problem(item):
            raise PlanError(Reason.InvalidArgument, f"{where} of provider {provider!r} {problem}")
    run_env = {e.name for e in run.spec.env}
    for name, value in merge_plain_env(run, definition).items():
        if "\x00" in name + value:
            where = "spec.env" if name in run_env else f"env of provider {provider!r}"
            raise PlanError(Reason.InvalidArgument, f"{where}: {name!r} contains a NUL byte")


def build_plan(
    run: HarnessRun,
    attempt: Attempt,
    options: dict[str, Any],
    prompt: str,
    stdin: str | None,
    resume: Continuation | None = None,
) -> AttemptPlan:
    """The plan of `attempt` of `run`, invoked with `options` (its own, and its model route's); `resume`,
    how it continues an earlier session."""
    spec, definition = run.spec, attempt.definition
    attempt_index, provider_name = attempt.index, attempt.provider
    positions = build_positions(spec)
    check_arguments(run, definition, provider_name, attempt.options_field, options, prompt, stdin)
    policy = attempt.tool_policy
    all_options = build_tool_options(policy, definition, plan_options(run, definition, options))
    acp: AcpSessionPlan | None = None
    if definition.protocol == Protocol.acp:
        # Never a CLI invocation: an ACP adapter started as one exits 0 when its stdin closes.
        acp = build_acp_session(run, attempt, prompt, stdin)
        if resume is not None:
            acp = acp.model_copy(update={"load_session": resume.session_id})
        home_files: dict[str, str] = {}
        config_env: dict[str, str] = {}
        raw_json: list[str] = []
        reprompt: Invocation | None = None
        binary = definition.binary or ""
        args = [*definition.prefix_args, *build_flags(merge_options(definition, all_options), definition)]
        piped = None
        if acp.transport != AcpTransport.stdio:
            binary, args = "", []
    else:
        schema_lead, home_files = schema_arguments(run, definition)
        servers = attempt.mcp_servers
        mcp_tools = build_mcp_tool_names(servers, definition)
        rules_lead, rules_home = build_tool_rules(policy, definition, mcp_tools)
        home_files = merge_each(home_files, {**build_mcp_home_files(servers, definition), **rules_home})
        config_env = merge_each(
            build_mcp_env(servers, definition), build_tool_env(policy, definition, mcp_tools)
        )
        raw_json = compute_raw_json_variables(servers, definition)
        lead = [*build_mcp_arguments(servers, definition), *rules_lead, *schema_lead]
        all_options = allow_listed_tools(all_options, definition, mcp_tools)
        resume_args = resume.args if resume else []
        invocation = build_invocation(definition, prompt, stdin, all_options, lead_args=[*resume_args, *lead])
        binary, args, piped = invocation.binary, invocation.args, invocation.stdin
        reprompt = build_reprompt(run, definition, prompt, stdin, all_options, lead, resume_args)
    grants = merge_grants(run, definition)
    plain = merge_each(merge_plain_env(run, definition), config_env)
    model = merge_options(definition, all_options).get("model")
    metadata = run.metadata or {}
    return AttemptPlan(
        run_name=str(metadata.get("name", "")),
        run_namespace=str(metadata.get("namespace") or "default"),
        attempt=attempt_index,
        total_attempts=len(positions),
        retry=retry_number(positions, attempt_index),
        provider=provider_name,
        binary=binary,
        args=args,
        stdin=piped,
        env=[EnvVar(name=k, value=v) for k, v in sorted(plain.items()) if k not in grants],
        credential_envs=sorted(grants),
        optional_credential_envs=sorted(k for k, g in grants.items() if g.optional),
        raw_json_envs=[name for name in raw_json if name in grants],
        output_format=definition.output.format,
        pricing=dict(definition.pricing),
        cli_version=definition.cli_version,
        model_hint=model if isinstance(model, str) and model else None,
        limits=spec.limits or Limits(),
        working_dir=spec.workspace.working_dir if spec.workspace else None,
        home_files=home_files,
        output_schema=spec.output_schema if reprompt is not None else None,
        output_reprompts=spec.output_reprompts if reprompt is not None else 0,
        reprompt_args=reprompt.args if reprompt is not None else [],
        reprompt_stdin=reprompt.stdin if reprompt is not None else None,
        acp=acp,
        session_paths=list(definition.session.paths) if definition.session and binary else [],
        session_sha256=resume.sha256 if resume else None,
        session_usage_cumulative=bool(resume and definition.session and definition.session.cumulative_usage),
    )


def schema_arguments(run: HarnessRun, definition: HarnessDefinitionSpec) -> tuple[list[str], dict[str, str]]:
    """The arguments (after prefixArgs) that pass spec.outputSchema to a CLI that takes one
    (outputSchemaOption), and the home file that holds it in the file form; none otherwise."""
    option, schema = definition.output_schema_option, run.spec.output_schema
    if option is None or schema is None:
        return [], {}
    text = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    if option.form == SchemaForm.file:
        return [option.flag, home_path_arg(OUTPUT_SCHEMA_HOME_FILE)], {OUTPUT_SCHEMA_HOME_FILE: text}
    return [option.flag, text], {}


def build_reprompt(
    run: HarnessRun,
    definition: HarnessDefinitionSpec,
    prompt: str,
    stdin: str | None,
    options: dict[str, Any],
    lead: list[str],
    resume_args: list[str] | None = None,
) -> Invocation | None:
    """The invocation of a re-prompt (spec.outputReprompts), REPROMPT_TEXT standing for the correction:
    the CLI's continueArgs and the correction alone where it can continue its session, else the run's
    prompt and stdin again with the correction after the prompt (continuing the earlier session again,
    when the attempt did). None when the run asks for none."""
    if run.spec.output_schema is None or run.spec.output_reprompts == 0:
        return None
    if definition.continue_args:
        lead = [*definition.continue_args, *lead]
        return build_invocation(definition, REPROMPT_TEXT, None, options, lead_args=lead)
    lead = [*(resume_args or []), *lead]
    return build_invocation(definition, f"{prompt}\n\n{REPROMPT_TEXT}", stdin, options, lead_args=lead)


def with_output_limit(plan: AttemptPlan, limit: int) -> AttemptPlan:
    """The plan with maxOutputBytes set to `limit` unless the run set its own."""
    if plan.limits.max_output_bytes is not None:
        return plan
    return plan.model_copy(update={"limits": plan.limits.model_copy(update={"max_output_bytes": limit})})
