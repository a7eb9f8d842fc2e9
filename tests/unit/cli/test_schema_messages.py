"""Twenty-odd newcomer mistakes through `validate_documents`: each message names the field, the mistake and
a fix, names no pydantic class nor uses its wording, and the fix it spells out, applied as written, clears
the finding."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.manifests import Document
from harness_operator.cli.validation import ERROR, Finding, validate_documents

CATALOG = list(load_builtin_catalog())
SECRET = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "anthropic-api-key", "namespace": "ns"}}


def run(**spec: Any) -> dict[str, Any]:
    base = {"provider": "claude", "prompt": "Fix the bug.", "workspace": {"workingDir": "/w"}}
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessRun",
        "metadata": {"name": "r", "namespace": "ns"},
        "spec": {**base, **spec},
    }


def without(key: str, manifest: dict[str, Any]) -> dict[str, Any]:
    del manifest["spec"][key]
    return manifest


def errors(manifest: dict[str, Any]) -> list[Finding]:
    docs = [Document("f.yaml", manifest), Document("f.yaml", SECRET)]
    return [f for f in validate_documents(docs, CATALOG) if f.severity == ERROR]


_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def locate(manifest: dict[str, Any], field: str) -> tuple[Any, Any]:
    """The container of the YAML path `field` (spec.fallback[0].with) and its last key or index."""
    parts: list[Any] = [int(i) if i else name for name, i in _PART.findall(field)]
    node: Any = manifest
    for part in parts[:-1]:
        node = node[part]
    return node, parts[-1]


def quoted(message: str, pattern: str) -> str:
    match = re.search(pattern, message)
    assert match, f"no fix of the form {pattern!r} in: {message}"
    return match.group(1)


# How each kind of suggestion is applied, read from the message alone.
def rename(manifest: dict[str, Any], finding: Finding) -> None:
    parent, key = locate(manifest, finding.field)
    parent[quoted(finding.message, r"did you mean `([^`]+)`")] = parent.pop(key)


def replace_value(manifest: dict[str, Any], finding: Finding) -> None:
    parent, key = locate(manifest, finding.field)
    parent[key] = quoted(finding.message, r"did you mean `([^`]+)`")


def write(manifest: dict[str, Any], finding: Finding) -> None:
    """`write \\`key: value\\`` sets key in the finding's container (a nested field moves there)."""
    parent, key = locate(manifest, finding.field)
    written = yaml.safe_load(quoted(finding.message, r"[Ww]rite `([^`]+)`"))
    if key not in written:
        del parent[key]
    for name, value in written.items():
        if isinstance(value, dict) and isinstance(parent.get(name), dict):
            parent[name].update(value)
        else:
            parent[name] = value


def write_in_place(manifest: dict[str, Any], finding: Finding) -> None:
    parent, key = locate(manifest, finding.field)
    parent[key] = yaml.safe_load(quoted(finding.message, r"write `([^`]+)` in its place"))


def declare_input(manifest: dict[str, Any], finding: Finding) -> None:
    declared = yaml.safe_load(quoted(finding.message, r"declare it, `([^`]+)`").replace("...", "'42'"))
    manifest["spec"].update(declared)
    literal = quoted(finding.message, r"^(\$\([^)]*\))")
    manifest["spec"]["prompt"] = manifest["spec"]["prompt"].replace(
        literal, quoted(finding.message, r"write `(\$\(inputs\.[^`]+)`")
    )


Fix = Callable[[dict[str, Any], Finding], None] | None

MISTAKES: list[tuple[str, dict[str, Any], str, list[str], Fix]] = [
    (
        "misspelt field",
        without("prompt", run(promt="Fix it.")),
        "spec.promt",
        ["unknown field 'promt'", "did you mean `prompt`"],
        rename,
    ),
    (
        "singular limits",
        run(limit={"maxTurns": 3}),
        "spec.limit",
        ["unknown field 'limit'", "`limits`"],
        rename,
    ),
    ("plural retry", run(retries={"limit": 2}), "spec.retries", ["unknown field", "`retry`"], rename),
    (
        "nested misspelt",
        run(limits={"timeout": 60}),
        "spec.limits.timeout",
        ["unknown field 'timeout'", "`timeoutSeconds`"],
        rename,
    ),
    (
        "field at the wrong level",
        run(turns=5),
        "spec.turns",
        ["unknown field 'turns'", "spec.limits.maxTurns"],
        write,
    ),
    (
        "credential's secret",
        run(credentials=[{"env": "K", "secretKeyRef": {"name": "s", "key": "k"}, "secrett": 1}]),
        "spec.credentials[0].secrett",
        ["unknown field", "`secret"],
        None,
    ),
    (
        "enum case",
        run(sandbox={"networkPolicy": "allowList"}),
        "spec.sandbox.networkPolicy",
        ["'allowList' is not one of", "allowlist"],
        replace_value,
    ),
    (
        "enum typo",
        run(tools={"enforcement": "strct"}),
        "spec.tools.enforcement",
        ["'strct' is not one of strict, advisory"],
        replace_value,
    ),
    (
        "enum far off",
        run(acpPermission="ask"),
        "spec.acpPermission",
        ["'ask' is not one of deny, allow", "write one of them"],
        None,
    ),
    (
        "fallback as a string",
        run(fallback="codex"),
        "spec.fallback",
        ["a list is expected", "the string 'codex'"],
        write,
    ),
    (
        "fallback as a list of names",
        run(fallback=["codex"]),
        "spec.fallback[0]",
        ["an object is expected"],
        write_in_place,
    ),
    (
        "after as a string",
        run(after="plan"),
        "spec.after",
        ["a list is expected"],
        None,
    ),  # plan is named, not given: a warning once fixed
    ("env as a map", run(env={"LOG": "debug"}), "spec.env", ["a list is expected", "the mapping"], write),
    (
        "prompt as a list",
        run(prompt=["Fix", "it"]),
        "spec.prompt",
        ["a string is expected", "`prompt: |`"],
        None,
    ),
    (
        "a number for a string",
        run(inputs=[{"name": "n", "value": 5}], prompt="$(inputs.n)"),
        "spec.inputs[0].value",
        ["a string is expected", "quote it"],
        write,
    ),
    (
        "duration for seconds",
        run(limits={"timeoutSeconds": "30m"}),
        "spec.limits.timeoutSeconds",
        ["not a duration", "for 30m"],
        write,
    ),
    (
        "words for a number",
        run(limits={"maxTurns": "ten"}),
        "spec.limits.maxTurns",
        ["a whole number is expected", "'ten'"],
        None,
    ),
    (
        "dollars with a sign",
        run(limits={"maxCostUSD": "$5"}),
        "spec.limits.maxCostUSD",
        ["a number is expected", "'$5'"],
        write,
    ),
    (
        "negative budget",
        run(limits={"maxCostUSD": -1}),
        "spec.limits.maxCostUSD",
        ["must be more than 0, not -1"],
        None,
    ),
    ("zero turns", run(limits={"maxTurns": 0}), "spec.limits.maxTurns", ["must be at least 1, not 0"], None),
    ("too many retries", run(retry={"limit": 9}), "spec.retry.limit", ["must be at most 5, not 9"], None),
    ("yes for a boolean", run(cancel="maybe"), "spec.cancel", ["true or false is expected"], None),
    (
        "missing prompt",
        without("prompt", run()),
        "spec.prompt",
        ["spec.prompt is required", "spec.promptFrom"],
        None,
    ),
    (
        "missing provider",
        without("provider", run()),
        "spec.provider",
        ["required field is missing", "add `provider:`", "HarnessDefinition"],
        None,
    ),
    (
        "with typo",
        run(**{"with": {"modle": "opus"}}),
        "spec.with.modle",
        ["has no option --modle", "fail", "did you mean `model`"],
        rename,
    ),
    (
        "fallback with typo",
        run(fallback=[{"provider": "codex", "with": {"modle": "o3"}}]),
        "spec.fallback[0].with.modle",
        ["has no option", "`model`"],
        rename,
    ),
    (
        "Tekton's params",
        run(prompt="Fix issue $(params.issue)."),
        "spec.prompt",
        ["$(params.issue) would reach the agent as it is", "(none)"],
        declare_input,
    ),
    (
        "declared but scoped wrong",
        run(prompt="Fix $(params.issue).", inputs=[{"name": "issue", "value": "1"}]),
        "spec.prompt",
        ["declares (issue)", "write `$(inputs.issue)`"],
        None,
    ),
    ("run itself", run(resumeFrom={"run": "r"}), "spec.resumeFrom.run", ["names this run itself"], None),
]


@pytest.mark.parametrize(
    ("manifest", "field", "words", "fix"), [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES]
)
def test_a_newcomer_mistake_gets_the_field_the_mistake_and_a_fix_that_works(
    manifest: dict[str, Any], field: str, words: list[str], fix: Fix
) -> None:
    found = errors(manifest)
    mine = [f for f in found if f.field == field]
    assert mine, [f"{f.field}: {f.message}" for f in found]
    message = mine[0].message
    for word in words:
        assert word in message, message
    assert not re.search(
        r"Input should|instance of|[a-z]+_[a-z]+ error|\b[A-Z][a-z]+[A-Z]\w*(Spec|Provider|Policy|Grant)\b",
        message,
    ), message
    if fix is not None:
        fix(manifest, mine[0])
        assert [f"{f.field}: {f.message}" for f in errors(manifest)] == [], manifest["spec"]


def test_the_table_holds_twenty_mistakes_with_ten_mechanical_fixes() -> None:
    assert len(MISTAKES) >= 20 and sum(1 for m in MISTAKES if m[4] is not None) >= 10


def test_the_old_fix_for_a_fallback_string_would_still_be_wrong() -> None:
    """`[codex]`, what validate used to advise, is refused: the working shape is a list of providers."""
    wrong = errors(run(fallback=["codex"]))
    assert [f.field for f in wrong] == ["spec.fallback[0]"]
    assert errors(run(fallback=[{"provider": "codex"}])) == []
