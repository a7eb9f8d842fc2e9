"""validate_documents: cross-references, shadowing, warnings, and the spec-immutability transition rule."""

import pytest

from harness_operator.api.crd import crd_schema_for
from harness_operator.api.v1alpha1 import WITH_VALUES_MESSAGE, ClusterHarnessDefinition
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.manifests import parse_documents
from harness_operator.cli.validation import ERROR, WARNING, Finding, validate_documents
from harness_operator.core.objects.cel import check_rules

BUILTIN = ClusterHarnessDefinition.model_validate(
    {
        "metadata": {"name": "vendor"},
        "spec": {
            "binary": "vendor",
            "credentials": [{"env": "VENDOR_KEY", "secretKeyRef": {"name": "vendor-key", "key": "k"}}],
            "capabilities": {"usageReporting": True, "costReporting": True},
        },
    }
)


def run_doc(spec: str, extra: str = "") -> str:
    return f"""
apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {{name: r, namespace: ns}}
spec:
{spec}
---
{extra}
"""


def check(text: str) -> list[Finding]:
    return validate_documents(parse_documents(text, "f.yaml"), [BUILTIN])


def messages(findings: list[Finding], severity: str | None = None) -> list[str]:
    return [f"{f.field}: {f.message}" for f in findings if severity is None or f.severity == severity]


GOOD = "  provider: vendor\n  prompt: hi\n  workspace: {workingDir: /w}\n"
SECRET = "apiVersion: v1\nkind: Secret\nmetadata: {name: vendor-key, namespace: ns}\n"


def test_clean_run_has_no_findings() -> None:
    assert check(run_doc(GOOD, SECRET)) == []


def test_missing_working_dir_warns_like_dagu() -> None:
    found = check(run_doc("  provider: vendor\n  prompt: hi\n", SECRET))
    assert messages(found, WARNING) == [
        "spec.workspace.workingDir: not set; the agent runs in the sandbox's default directory"
    ]


def test_unrestricted_network_warns() -> None:
    found = check(run_doc(GOOD + "  sandbox: {networkPolicy: unrestricted}\n", SECRET))
    assert messages(found, WARNING) == [
        "spec.sandbox.networkPolicy: unrestricted: the agent may reach any address"
    ]


def test_egress_without_allowlist_warns() -> None:
    found = check(run_doc(GOOD + "  sandbox: {egress: [{host: a.example, ports: [443]}]}\n", SECRET))
    assert messages(found, WARNING) == [
        "spec.sandbox.egress: ignored unless spec.sandbox.networkPolicy is allowlist"
    ]


def test_cost_limit_on_provider_without_usage_warns() -> None:
    definition = """apiVersion: agentharness.dev/v1alpha1
kind: HarnessDefinition
metadata: {name: plain, namespace: ns}
spec: {binary: plain}
"""
    found = check(
        run_doc(
            "  provider: plain\n  prompt: hi\n  workspace: {workingDir: /w}\n  limits: {maxCostUSD: 1}\n",
            definition,
        )
    )
    assert len(messages(found, WARNING)) == 1
    assert (
        'provider "plain" reports no cost and neither its pricing nor the price table'
        in messages(found, WARNING)[0]
    )


@pytest.mark.parametrize(
    ("provider", "model", "warned"),
    [
        ("codex", "gpt-5.4", False),  # the pinned table prices it
        ("codex", "gpt-no-such-model", True),
        ("gemini", None, False),  # the CLI picks; the vendor's table prices what it reports
        ("qwen", "qwen3.7-max", True),  # no vendor, and the table does not know the model
    ],
)
def test_cost_limit_warns_only_where_the_price_table_cannot_price(provider, model, warned) -> None:
    with_ = f"  with: {{model: {model}}}\n" if model else ""
    text = run_doc(
        f"  provider: {provider}\n  prompt: hi\n  workspace: {{workingDir: /w}}\n  limits: {{maxCostUSD: 1}}\n"
        + with_
    )
    found = validate_documents(parse_documents(text, "f.yaml"), load_builtin_catalog())
    cost = [m for m in messages(found, WARNING) if "spec.limits.maxCostUSD" in m]
    assert bool(cost) == warned, cost
    if warned:
        assert f"knows model {model!r}" in cost[0] and "genai-prices 0.2.3" in cost[0]


def test_cost_limit_is_fine_with_pricing_and_usage() -> None:
    definition = """apiVersion: agentharness.dev/v1alpha1
kind: HarnessDefinition
metadata: {name: priced, namespace: ns}
spec:
  binary: priced
  capabilities: {usageReporting: true}
  pricing: {m: {input: 3, output: 15}}
"""
    found = check(
        run_doc(
            "  provider: priced\n  prompt: hi\n  workspace: {workingDir: /w}\n  limits: {maxCostUSD: 1}\n",
            definition,
        )
    )
    assert found == []


def test_ungranted_credential_warns_and_a_run_grant_silences_it() -> None:
    found = check(run_doc(GOOD))
    assert messages(found, WARNING) == [
        'spec.provider: provider "vendor" reads VENDOR_KEY (Secret vendor-key, key k); no Secret given here '
        "provides it: create that Secret in namespace ns or add a spec.credentials grant"
    ]
    granted = GOOD + "  credentials: [{env: VENDOR_KEY, secretKeyRef: {name: mine, key: k}}]\n"
    assert check(run_doc(granted)) == []


def test_namespaced_definition_shadows_cluster_one() -> None:
    definition = """apiVersion: agentharness.dev/v1alpha1
kind: HarnessDefinition
metadata: {name: vendor, namespace: ns}
spec: {binary: mine}
"""
    # The namespaced one has no credentials, so the builtin's credential warning disappears.
    assert check(run_doc(GOOD, definition)) == []


def test_definition_in_other_namespace_does_not_resolve() -> None:
    definition = """apiVersion: agentharness.dev/v1alpha1
kind: HarnessDefinition
metadata: {name: local, namespace: elsewhere}
spec: {binary: mine}
"""
    found = check(run_doc("  provider: local\n  prompt: hi\n  workspace: {workingDir: /w}\n", definition))
    assert messages(found) == ['spec.provider: unknown provider "local"; known here: vendor']


def test_run_output_in_same_files_resolves() -> None:
    other = (
        "apiVersion: agentharness.dev/v1alpha1\nkind: HarnessRun\nmetadata: {name: first, namespace: ns}\n"
        "spec: {provider: vendor, prompt: x, workspace: {workingDir: /w}}\n"
    )
    text = run_doc(
        "  provider: vendor\n  promptFrom: {runOutput: {name: first}}\n  workspace: {workingDir: /w}\n",
        other + "---\n" + SECRET,
    )
    assert check(text) == []


def test_wrong_api_version() -> None:
    found = check("apiVersion: agentharness.dev/v1\nkind: HarnessRun\nmetadata: {name: x}\nspec: {}\n")
    assert messages(found) == ["apiVersion: must be agentharness.dev/v1alpha1, not 'agentharness.dev/v1'"]


def test_other_kinds_are_ignored() -> None:
    assert check("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n") == []


def test_spec_is_immutable_except_cancel() -> None:
    schema = crd_schema_for("HarnessRun")
    old = {"spec": {"provider": "a", "prompt": "p"}}
    assert check_rules(schema, {"spec": {"provider": "a", "prompt": "p", "cancel": True}}, old) == []
    changed = check_rules(schema, {"spec": {"provider": "b", "prompt": "p"}}, old)
    assert [v.message for v in changed] == [
        "spec is immutable after creation except spec.cancel; create a new HarnessRun instead"
    ]
    added = check_rules(schema, {"spec": {"provider": "a", "prompt": "p", "with": {"model": "m"}}}, old)
    assert len(added) == 1


INLINE_LIMIT = (
    "spec.prompt: spec.prompt and spec.stdin together must be at most 131072 bytes, what kubectl apply can "
    "carry; put larger input in a ConfigMap and use spec.promptFrom or spec.stdinFrom"
)


def test_prompt_and_stdin_together_fit_what_kubectl_apply_carries() -> None:
    at_limit = f"  provider: vendor\n  prompt: {'p' * 100000}\n  stdin: {'s' * 31072}\n  workspace: {{workingDir: /w}}\n"
    assert check(run_doc(at_limit, SECRET)) == []
    over = at_limit.replace("s" * 31072, "s" * 31073)
    assert messages(check(run_doc(over, SECRET))) == [INLINE_LIMIT]


def test_the_inline_limit_counts_utf8_bytes() -> None:
    """Two bytes per 'é': kubectl's annotation holds bytes, whatever the CRD's maxLength counts."""
    spec = f"  provider: vendor\n  prompt: {'é' * 65537}\n  workspace: {{workingDir: /w}}\n"
    assert messages(check(run_doc(spec, SECRET))) == [INLINE_LIMIT]


def test_an_arg_prompt_over_the_kernel_limit_warns_and_a_stdin_provider_does_not() -> None:
    prompt = "x" * 131_072  # what kubectl apply carries, one byte over what one argument holds
    stdin_provider = (
        "apiVersion: agentharness.dev/v1alpha1\nkind: HarnessDefinition\n"
        "metadata: {name: piped, namespace: ns}\nspec: {binary: piped, promptMode: stdin}\n"
    )
    found = check(
        run_doc(f"  provider: vendor\n  prompt: {prompt}\n  workspace: {{workingDir: /w}}\n", SECRET)
    )
    [warning] = [f for f in found if f.severity == WARNING]
    assert warning.field == "spec.prompt"
    assert "is 131072 bytes" in warning.message and "promptMode: stdin" in warning.message
    piped = f"  provider: piped\n  prompt: {prompt}\n  workspace: {{workingDir: /w}}\n"
    assert check(run_doc(piped, stdin_provider)) == []


def test_a_huge_with_value_is_refused_naming_the_map() -> None:
    found = check(run_doc(GOOD + f"  with: {{context: {'y' * 140_000}}}\n", SECRET))
    assert [(f.field, f.message) for f in found if f.severity == ERROR] == [
        ("spec.with", WITH_VALUES_MESSAGE)
    ]


def acp_definition_messages(spec: dict[str, object]) -> list[str]:
    schema = crd_schema_for("HarnessDefinition")
    return [v.message for v in check_rules(schema, {"spec": spec}, None)]


def test_acp_definitions_refuse_cli_and_local_fields() -> None:
    stdio = {"protocol": "acp", "binary": "claude-code-acp"}
    remote = {
        "protocol": "acp",
        "transport": "websocket",
        "url": "wss://agent.internal:8443/acp",
        "cwd": "/w",
    }
    assert acp_definition_messages(stdio) == []
    assert acp_definition_messages(remote) == []
    assert acp_definition_messages({**remote, "transport": "http", "url": "https://10.88.0.1/acp"}) == []
    assert acp_definition_messages({**stdio, "promptMode": "stdin"}) == [
        "spec.promptMode, promptFlag, promptPosition and stdinMode apply only to protocol cli; an ACP prompt is sent as a message, with the run's stdin after a blank line"
    ]
    local = "acp over websocket or http needs spec.cwd (the session's absolute directory on the agent host) and starts nothing: remove binary, prefixArgs, flagStyle and optionFlags"
    assert acp_definition_messages({**remote, "binary": "x"}) == [local]
    assert acp_definition_messages({k: v for k, v in remote.items() if k != "cwd"}) == [local]
    assert acp_definition_messages({**remote, "url": "https://agent.internal/acp"}) == [
        "spec.url must be ws:// or wss:// for transport websocket, http:// or https:// for http"
    ]
    assert acp_definition_messages({**stdio, "headers": [{"name": "X", "value": "v"}]}) == [
        "spec.url, headers and caBundleSecretRef apply only to acp over websocket or http"
    ]
    assert acp_definition_messages(
        {**remote, "transport": "http", "url": "http://h/a", "bearerSubprotocol": True}
    ) == ["spec.bearerSubprotocol applies only to transport websocket"]


def test_a_native_schema_option_is_declared_by_structured_output_and_only_for_a_cli() -> None:
    option = {"flag": "--json-schema"}
    declared = {"structuredOutput": True}
    both = "spec.outputSchemaOption is how the CLI takes a JSON Schema: set it exactly when spec.capabilities.structuredOutput is true"
    assert (
        acp_definition_messages({"binary": "c", "outputSchemaOption": option, "capabilities": declared}) == []
    )
    assert acp_definition_messages({"binary": "c", "outputSchemaOption": option}) == [both]
    assert acp_definition_messages({"binary": "c", "capabilities": declared}) == [both]
    assert acp_definition_messages(
        {"protocol": "acp", "binary": "a", "outputSchemaOption": option, "capabilities": declared}
    ) == ["spec.outputSchemaOption applies only to protocol cli"]


def test_a_session_is_resumed_by_arguments_for_a_cli_and_by_session_load_for_a_local_acp_agent() -> None:
    declared = {"sessionResume": True}
    cli = {"binary": "c", "capabilities": declared}
    acp = {"protocol": "acp", "binary": "a", "capabilities": declared}
    remote = {
        "protocol": "acp",
        "transport": "websocket",
        "url": "wss://a/acp",
        "cwd": "/w",
        "capabilities": declared,
    }
    by_args = {"paths": [".c"], "resumeArgs": ["--resume", "$(HARNESS_SESSION_ID)"]}
    by_load = {"paths": [".c"]}
    no_args = "spec.session.resumeArgs is how a protocol cli CLI continues a session: set it"
    acp_only = (
        "an ACP agent continues a session with session/load, from its files in the sandbox's home: "
        "spec.session takes no resumeArgs, and only transport stdio"
    )
    assert acp_definition_messages({**cli, "session": by_args}) == []
    assert acp_definition_messages({**cli, "session": by_load}) == [no_args]
    assert acp_definition_messages({**acp, "session": by_load}) == []
    assert acp_definition_messages({**acp, "session": by_args}) == [acp_only]
    assert acp_definition_messages({**remote, "session": by_load}) == [acp_only]
    assert acp_definition_messages({**cli, "session": {**by_args, "resumeArgs": ["--resume"]}}) == [
        "spec.session.resumeArgs must name the session, as $(HARNESS_SESSION_ID)"
    ]


def test_an_acp_agent_takes_mcp_servers_in_its_session_and_a_cli_in_its_configuration() -> None:
    acp = {"protocol": "acp", "binary": "a"}
    cli = {"binary": "c"}
    gated = {"format": "acp", "toolName": "{tool} ({server} MCP Server)"}
    flagged = {"flag": "--mcp-config", "toolName": "mcp__{server}__{tool}"}
    per_protocol = (
        "spec.mcp.format is acp exactly for protocol acp: an ACP agent takes its servers in the session"
    )
    shape = "set file for the settings format, env for opencode, nothing for acp, flag for the others"
    assert acp_definition_messages({**acp, "mcp": gated}) == []
    assert acp_definition_messages({**cli, "mcp": flagged}) == []
    assert acp_definition_messages({**acp, "mcp": flagged}) == [per_protocol]
    assert acp_definition_messages({**cli, "mcp": gated}) == [per_protocol]
    assert acp_definition_messages({**acp, "mcp": {**gated, "flag": "--x"}}) == [shape]
    remote = {"protocol": "acp", "transport": "websocket", "url": "wss://a/acp", "cwd": "/w"}
    assert acp_definition_messages({**remote, "mcp": gated}) == [
        "spec.mcp applies to a local ACP agent (transport stdio) only: it starts each server's gate from the "
        "sandbox image"
    ]
    assert acp_definition_messages({**acp, "mcp": {**gated, "toolName": "{server}"}}) == [
        "toolName must name {server} and {tool}"
    ]


def test_output_reprompts_need_an_output_schema() -> None:
    schema = crd_schema_for("HarnessRun")
    spec = {"provider": "p", "prompt": "x", "outputReprompts": 1}
    assert [v.message for v in check_rules(schema, {"spec": spec}, None)] == [
        "spec.outputReprompts needs spec.outputSchema: only an answer to a schema is asked again"
    ]
    assert check_rules(schema, {"spec": {**spec, "outputSchema": {"type": "object"}}}, None) == []


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ("metadata: {name: r}\nspec: {provider: vendor}\n", "apiVersion and kind"),
        ("apiVersion: agentharness.dev/v1alpha1\nmetadata: {name: r}\n", "kind"),
        ("kind: HarnessRun\nmetadata: {name: r}\n", "apiVersion"),
    ],
)
def test_a_document_without_api_version_or_kind_is_an_error(document: str, field: str) -> None:
    assert messages(check(document), ERROR) == [
        f"{field}: required: the API server refuses a manifest without it"
    ]


@pytest.mark.parametrize("name", ["Upper", "under_score", "-dash", "x" * 254])
def test_a_name_the_api_server_refuses_is_an_error(name: str) -> None:
    found = check(run_doc(GOOD, SECRET).replace("name: r,", f"name: {name!r},", 1))
    assert [f.field for f in found if f.severity == ERROR] == ["metadata.name"]
    assert "must be a DNS subdomain" in messages(found, ERROR)[0]


@pytest.mark.parametrize(
    ("field", "message"),
    [
        (
            "  fallback: codex\n",
            "spec.fallback: a list is expected, not the string 'codex': write `fallback: [{provider: codex}]`",
        ),
        (
            "  limits: {timeoutSeconds: 1h30m}\n",
            "spec.limits.timeoutSeconds: a whole number of seconds is expected, not a duration: write "
            "`timeoutSeconds: 5400` for 1h30m",
        ),
        (
            "  limits: {timeoutSeconds: soon}\n",
            "spec.limits.timeoutSeconds: a whole number is expected, not the string 'soon'",
        ),
        ("  cancel: maybe\n", "spec.cancel: true or false is expected, not the string 'maybe'"),
    ],
)
def test_a_value_of_the_wrong_shape_says_what_to_write(field: str, message: str) -> None:
    assert messages(check(run_doc(GOOD + field, SECRET)), ERROR) == [message]


def _catalog_check(spec: str) -> list[Finding]:
    return validate_documents(parse_documents(run_doc(spec), "f.yaml"), load_builtin_catalog())


def test_a_strict_tool_policy_a_provider_cannot_hold_is_an_error_naming_the_parts() -> None:
    found = _catalog_check(
        "  provider: aider\n  prompt: hi\n  workspace: {workingDir: /w}\n  tools: {shell: false}\n"
    )
    assert messages(found, ERROR) == [
        'spec.tools: provider "aider" cannot enforce spec.tools.shell: false: its definition\'s toolControls '
        "say no option of its CLI holds it; use a provider that can, drop those parts, or set "
        "spec.tools.enforcement: advisory to run without them"
    ]


def test_an_advisory_tool_policy_warns_and_claude_holds_it_all() -> None:
    policy = "  tools: {enforcement: advisory, shell: false}\n"
    found = _catalog_check("  provider: aider\n  prompt: hi\n  workspace: {workingDir: /w}\n" + policy)
    assert messages(found, ERROR) == []
    assert [m for m in messages(found, WARNING) if m.startswith("spec.tools")] == [
        'spec.tools: attempt 1: provider "aider" cannot enforce spec.tools.shell: false: its definition\'s '
        "toolControls say no option of its CLI holds it; it runs without them (advisory)"
    ]
    found = _catalog_check("  provider: claude\n  prompt: hi\n  workspace: {workingDir: /w}\n" + policy)
    assert not [m for m in messages(found) if m.startswith("spec.tools")]


def test_an_option_that_loosens_the_tool_policy_is_an_error_on_its_field() -> None:
    found = _catalog_check(
        "  provider: claude\n  prompt: hi\n  workspace: {workingDir: /w}\n  tools: {deny: [Bash]}\n"
        "  with: {permission-mode: bypassPermissions}\n"
    )
    assert messages(found, ERROR) == [
        'spec.with.permission-mode: provider "claude" enforces the tool policy with this option, so the run '
        "may not set it; say what the agent may use in spec.tools instead"
    ]


def test_resume_from_names_a_run_of_the_given_manifests_and_never_itself() -> None:
    found = check(run_doc(GOOD + "  resumeFrom: {run: r}\n", SECRET))
    assert messages(found, ERROR) == [
        "spec.resumeFrom.run: names this run itself, which would wait for itself forever: name another run"
    ]


def test_an_mcp_server_needs_exactly_one_of_url_and_command() -> None:
    found = _catalog_check(
        "  provider: claude\n  prompt: hi\n  workspace: {workingDir: /w}\n"
        "  mcpServers: [{name: docs, tools: [search]}]\n"
    )
    assert any("set exactly one of url or command" in m for m in messages(found, ERROR)), found
    found = _catalog_check(
        "  provider: aider\n  prompt: hi\n  workspace: {workingDir: /w}\n"
        "  mcpServers: [{name: docs, url: 'https://mcp.internal/mcp', tools: [search]}]\n"
    )
    assert messages(found, ERROR) == [
        'spec.mcpServers: provider "aider" takes no MCP servers (its definition has no spec.mcp); use a provider '
        "that does (claude, codex, copilot, gemini, opencode, qwen and their ACP adapters), or drop them"
    ]
    found = _catalog_check(
        "  provider: codex\n  prompt: hi\n  workspace: {workingDir: /w}\n"
        "  mcpServers: [{name: docs, url: 'https://mcp.internal/mcp', tools: [search],\n"
        "    headers: [{name: X-Auth, value: 'Token $(DOCS_TOKEN)'}]}]\n"
    )
    assert [m for m in messages(found, ERROR) if "X-Auth" in m], found
