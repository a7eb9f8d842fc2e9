"""What validate finds in a run beyond its schema: runs named across files, the vendor key's advice with
and without the operator's configuration, tool-name typos, variables a prompt keeps literally."""

from __future__ import annotations

from typing import Any

import pytest

from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.manifests import Document
from harness_operator.cli.validation import ERROR, WARNING, Finding, validate_documents
from harness_operator.core.config import OperatorConfig

CATALOG = list(load_builtin_catalog())


def run(name: str = "r", **spec: Any) -> dict[str, Any]:
    base = {"provider": "claude", "prompt": "Fix the bug.", "workspace": {"workingDir": "/w"}}
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessRun",
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {**base, **spec},
    }


def check(*manifests: dict[str, Any], **options: Any) -> list[Finding]:
    return validate_documents([Document("f.yaml", m) for m in manifests], CATALOG, **options)


def about(found: list[Finding], prefix: str) -> list[tuple[str, str, str]]:
    return [(f.field, f.severity, f.message) for f in found if f.field.startswith(prefix)]


GIT = {"workingDir": "/w", "git": {"url": "https://github.com/acme/shop"}}
REFERENCES = [
    ("spec.after[0]", {"after": ["plan"]}),
    ("spec.promptFrom.runOutput.name", {"prompt": None, "promptFrom": {"runOutput": {"name": "plan"}}}),
    ("spec.stdinFrom.runOutput.name", {"stdinFrom": {"runOutput": {"name": "plan"}}}),
    (
        "spec.inputs[0].runOutput.name",
        {"prompt": "Do $(inputs.p)", "inputs": [{"name": "p", "runOutput": {"name": "plan"}}]},
    ),
    ("spec.resumeFrom.run", {"resumeFrom": {"run": "plan"}}),
    ("spec.workspace.from.run", {"workspace": {**GIT, "from": {"run": "plan"}}}),
]


def referring(spec: dict[str, Any]) -> dict[str, Any]:
    manifest = run(**spec)
    manifest["spec"] = {k: v for k, v in manifest["spec"].items() if v is not None}
    return manifest


@pytest.mark.parametrize(("field", "spec"), REFERENCES, ids=[r[0] for r in REFERENCES])
def test_a_run_named_in_another_file_is_a_warning_an_error_with_strict_and_none_when_given(
    field: str, spec: dict[str, Any]
) -> None:
    manifest = referring(spec)
    [(where, severity, message)] = about(check(manifest), field)
    assert (where, severity) == (field, WARNING)
    assert 'HarnessRun "plan" is not among the given manifests' in message
    assert "--cluster" in message and "--strict" in message
    assert [s for _, s, _ in about(check(manifest, strict=True), field)] == [ERROR]
    assert about(check(manifest, run("plan"), strict=True), field) == []


@pytest.mark.parametrize(("field", "spec"), REFERENCES, ids=[r[0] for r in REFERENCES])
def test_with_a_cluster_lookup_a_missing_run_is_an_error_and_a_present_one_is_fine(
    field: str, spec: dict[str, Any]
) -> None:
    asked: list[tuple[str | None, str]] = []
    on_cluster = {"plan"}

    def lookup(namespace: str | None, name: str) -> bool:
        asked.append((namespace, name))
        return name in on_cluster

    manifest = referring(spec)
    assert about(check(manifest, lookup=lookup), field) == []
    assert asked == [("ns", "plan")]
    on_cluster.clear()
    [(_, severity, message)] = about(check(manifest, lookup=lookup), field)
    assert severity == ERROR
    assert message.startswith('HarnessRun "plan" is neither among the given manifests nor on the cluster')


def test_a_cycle_through_workspace_from_is_found() -> None:
    first = run("a", workspace={**GIT, "from": {"run": "b"}})
    second = run("b", after=["a"])
    assert [f.message for f in check(first, second) if f.severity == ERROR] == [
        "dependency cycle: ns/a -> ns/b -> ns/a"
    ]


ROUTED = OperatorConfig(
    model_gateway_service="model-gateway.harness-system.svc",
    model_gateway_vendors=("anthropic",),
    model_gateway_key="k",
    model_gateway_namespace="harness-system",
)


def test_a_routed_vendor_is_never_told_to_create_a_key() -> None:
    assert about(check(run(), config=ROUTED), "spec.provider") == []


def test_without_the_operator_the_advice_names_the_gateway_first_and_the_secret_otherwise() -> None:
    [(_, severity, message)] = about(check(run()), "spec.provider")
    assert severity == WARNING
    assert message.startswith(
        'provider "claude" needs no key in this namespace when the platform routes anthropic through the '
        "model gateway (the chart's modelGateway.vendors.anthropic; give --operator to check); otherwise"
    )
    assert "Secret anthropic-api-key, key api-key" in message


def test_a_run_that_sets_the_route_itself_is_told_why_it_needs_the_key() -> None:
    own = run(env=[{"name": "ANTHROPIC_BASE_URL", "value": "https://proxy.internal"}])
    [(_, _, message)] = about(check(own, config=ROUTED), "spec.provider")
    assert message.startswith(
        'provider "claude" is not routed through the model gateway because the run sets ANTHROPIC_BASE_URL'
    )


def test_an_operator_that_routes_another_vendor_asks_for_the_key_or_the_route() -> None:
    config = OperatorConfig(**{**ROUTED.__dict__, "model_gateway_vendors": ("openai",)})
    [(_, _, message)] = about(check(run(), config=config), "spec.provider")
    assert "this operator does not route anthropic through the model gateway" in message
    assert "modelGateway.vendors.anthropic" in message and "create that Secret in namespace ns" in message
    # the fallback codex is routed (openai): no advice on it
    assert about(check(run(fallback=[{"provider": "codex"}]), config=config), "spec.fallback") == []


@pytest.mark.parametrize(
    ("provider", "tools", "field", "guess"),
    [
        ("claude", {"deny": ["bash"]}, "spec.tools.deny[0]", "Bash"),
        ("claude", {"deny": ["Read", "WebFetch", "Wirte"]}, "spec.tools.deny[2]", "Write"),
        (
            "claude",
            {"allow": ["Bash(git status:*)", "Bsh(git diff:*)"]},
            "spec.tools.allow[1]",
            "Bash(git diff:*)",
        ),
        ("gemini", {"deny": ["run_shell_comand"]}, "spec.tools.deny[0]", "run_shell_command"),
        ("opencode", {"deny": ["WebFetch"]}, "spec.tools.deny[0]", "webfetch"),
    ],
)
def test_a_tool_name_near_one_the_definition_names_gets_did_you_mean(
    provider: str, tools: dict[str, Any], field: str, guess: str
) -> None:
    found = about(check(run(provider=provider, tools=tools)), "spec.tools")
    assert [(f, s) for f, s, _ in found] == [(field, WARNING)], found
    assert f"did you mean `{guess}`?" in found[0][2] and "Its definition names" in found[0][2]
    fixed = dict(tools)
    key, index = field.split(".")[2].split("[")
    fixed[key] = [guess if i == int(index[:-1]) else n for i, n in enumerate(tools[key])]
    assert about(check(run(provider=provider, tools=fixed)), "spec.tools") == []


def test_tool_names_the_definition_does_not_list_and_mcp_tools_are_left_alone() -> None:
    tools = {"allow": ["Read", "Glob", "TodoWrite", "mcp__docs__search"], "deny": ["Task"]}
    docs = {"name": "docs", "url": "https://mcp.internal/mcp", "tools": ["search"]}
    assert about(check(run(tools=tools, mcpServers=[docs])), "spec.tools") == []


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("Fix $(params.issue).", "$(params.issue)"),
        ("Branch $(run.name) please", "$(run.name)"),
        ("Use $(context.taskRun.name)", "$(context.taskRun.name)"),
    ],
)
def test_a_variable_no_one_replaces_is_an_error_in_prompt_and_stdin(text: str, literal: str) -> None:
    for field, spec in (("spec.prompt", {"prompt": text}), ("spec.stdin", {"stdin": text})):
        [(where, severity, message)] = about(check(run(**spec)), field)
        assert (where, severity) == (field, ERROR)
        assert message.startswith(f"{literal} would reach the agent as it is")


def test_shell_text_in_a_prompt_is_not_a_variable() -> None:
    prompt = "Run `echo $(date)` and $(git rev-parse HEAD); then $(inputs.plan)"
    assert (
        check(run(prompt=prompt, inputs=[{"name": "plan", "value": "p"}]), strict=True, config=ROUTED) == []
    )
