"""Invocation builder: one case per Dagu rule (prefix, prompt delivery, stdin, flags, defaults)."""

from typing import Any

import pytest

from harness_operator.api.v1alpha1 import HarnessDefinitionSpec
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.plan.invocation import build_invocation, coerce_scalar, find_unknown_options


def custom(**spec: Any) -> HarnessDefinitionSpec:
    return HarnessDefinitionSpec.model_validate({"binary": "agent", **spec})


# Dagu's CLI built-ins; the ACP adapters of the catalog are tested in tests/unit/runner/test_acp.py.
BUILTINS = {d.metadata["name"]: d.spec for d in load_builtin_catalog() if d.spec.protocol == "cli"}


def args(
    definition: HarnessDefinitionSpec, prompt: str = "P", stdin: str | None = None, **options: Any
) -> list[str]:
    return build_invocation(definition, prompt, stdin, options).args


@pytest.mark.parametrize(
    ("spec", "options", "expected"),
    [
        pytest.param({}, {}, ["P"], id="arg mode: the prompt is a positional argument"),
        pytest.param({"prefixArgs": ["exec", "--x"]}, {}, ["exec", "--x", "P"], id="prefix args come first"),
        pytest.param({"promptMode": "flag", "promptFlag": "-p"}, {}, ["-p", "P"], id="flag mode"),
        pytest.param({}, {"model": "m"}, ["P", "--model", "m"], id="beforeFlags is the default position"),
        pytest.param(
            {"promptPosition": "afterFlags"}, {"model": "m"}, ["--model", "m", "P"], id="afterFlags"
        ),
        pytest.param(
            {"promptMode": "flag", "promptFlag": "--message", "promptPosition": "afterFlags"},
            {"yes": True},
            ["--yes", "--message", "P"],
            id="flag mode after flags",
        ),
        pytest.param(
            {"promptMode": "stdin"}, {"model": "m"}, ["--model", "m"], id="stdin mode: no prompt in argv"
        ),
    ],
)
def test_prompt_delivery(spec: dict[str, Any], options: dict[str, Any], expected: list[str]) -> None:
    assert args(custom(**spec), **options) == expected


def test_argv0_is_the_configured_binary_name() -> None:
    inv = build_invocation(custom(binary="./bin/agent"), "P")
    assert inv.argv == ["./bin/agent", "P"]


@pytest.mark.parametrize(
    ("prompt", "stdin", "expected"),
    [
        ("P", "S", "P\n\nS"),
        ("P", "", "P"),
        ("P", None, "P"),
        ("", "S", "S"),
    ],
    ids=["prompt, blank line, stdin", "empty stdin omitted", "no stdin", "empty prompt omitted"],
)
def test_stdin_mode_joins_prompt_and_stdin(prompt: str, stdin: str | None, expected: str) -> None:
    inv = build_invocation(custom(promptMode="stdin"), prompt, stdin)
    assert inv.stdin == expected


def test_pipe_mode_pipes_stdin_unchanged() -> None:
    inv = build_invocation(custom(), "P", "line1\nline2")
    assert inv.args == ["P"]
    assert inv.stdin == "line1\nline2"


def test_no_stdin_means_closed() -> None:
    assert build_invocation(custom(), "P").stdin is None
    assert build_invocation(custom(), "P", "").stdin is None


def test_fold_joins_stdin_into_the_prompt() -> None:
    inv = build_invocation(custom(promptMode="flag", promptFlag="--message", stdinMode="fold"), "P", "S")
    assert inv.args == ["--message", "P\n\nS"]
    assert inv.stdin is None


@pytest.mark.parametrize("name", ["cursor", "aider", "goose", "droid", "deepseek"])
def test_builtins_that_fold_stdin(name: str) -> None:
    inv = build_invocation(BUILTINS[name], "P", "S")
    assert "P\n\nS" in inv.args
    assert inv.stdin is None


@pytest.mark.parametrize("name", ["claude", "codex", "gemini", "qwen", "opencode"])
def test_builtins_that_pipe_stdin(name: str) -> None:
    inv = build_invocation(BUILTINS[name], "P", "S")
    assert inv.stdin == "S"
    assert "P" in inv.args


def test_reserved_keys_never_become_flags() -> None:
    assert args(custom(), provider="x", fallback=[{"provider": "y"}], model="m") == ["P", "--model", "m"]


def test_keys_sorted_by_key_name_not_by_token() -> None:
    definition = custom(optionFlags={"alpha": "-z", "zulu": "-a"})
    assert args(definition, zulu="1", alpha="2") == ["P", "-z", "2", "-a", "1"]


def test_option_flags_are_verbatim_and_ignore_single_dash() -> None:
    definition = custom(flagStyle="singleDash", optionFlags={"model": "--model-name"})
    assert args(definition, model="m", verbose=True) == ["P", "--model-name", "m", "-verbose"]


def test_blank_option_flag_token_falls_back_to_the_key() -> None:
    assert args(custom(optionFlags={"model": "  "}), model="m") == ["P", "--model", "m"]


def test_single_dash_style() -> None:
    assert args(custom(flagStyle="singleDash"), model="m") == ["P", "-model", "m"]


def test_kebab_casing_only_when_declared() -> None:
    assert args(custom(), max_turns=3) == ["P", "--max_turns", "3"]
    assert args(custom(kebabCaseFlags=True), max_turns=3) == ["P", "--max-turns", "3"]
    claude = args(BUILTINS["claude"], max_turns=3)
    assert claude[claude.index("--max-turns") + 1] == "3"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, ["--f"]),
        (False, []),
        ("", []),
        ("text", ["--f", "text"]),
        (3, ["--f", "3"]),
        (20.0, ["--f", "20"]),
        (0.5, ["--f", "0.5"]),
        (1e-07, ["--f", "0.0000001"]),
        (0.1 + 0.2, ["--f", "0.30000000000000004"]),
        (["a", "b"], ["--f", "a", "--f", "b"]),
        ([1, 2.0, True], ["--f", "1", "--f", "2", "--f", "true"]),
        ({"nested": 1}, []),
        (None, []),
    ],
    ids=[
        "true is a bare flag",
        "false omitted",
        "empty string omitted",
        "string",
        "integer",
        "whole float printed as integer",
        "float shortest",
        "small float without exponent",
        "float round-trip shortest",
        "list repeats the flag",
        "list items formatted",
        "map dropped",
        "null dropped",
    ],
)
def test_value_rendering(value: Any, expected: list[str]) -> None:
    assert args(custom(), f=value)[1:] == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("10", 10),
        ("-3", -3),
        ("2.5", 2.5),
        ("1e3", 1000.0),
        ("0x10", 16),
        ("0o17", 15),
        ("true", True),
        ("False", False),
        ("yes", "yes"),
        ("on", "on"),
        ("1.2.3", "1.2.3"),
        (" 7 ", 7),
        ("", ""),
        ("claude-sonnet-4", "claude-sonnet-4"),
    ],
)
def test_yaml_scalar_coercion(text: str, expected: Any) -> None:
    result = coerce_scalar(text)
    assert result == expected
    assert type(result) is type(expected)


def test_string_numbers_and_booleans_become_values() -> None:
    assert args(custom(), turns="10", verbose="true", quiet="false", ratio="20.0") == [
        "P",
        "--ratio",
        "20",
        "--turns",
        "10",
        "--verbose",
    ]


def test_string_list_items_are_coerced() -> None:
    assert args(custom(), n=["1.0", "x"]) == ["P", "--n", "1", "--n", "x"]


def test_definition_defaults_apply_first() -> None:
    definition = custom(defaults={"model": "default", "verbose": True})
    assert args(definition) == ["P", "--model", "default", "--verbose"]
    assert args(definition, model="mine") == ["P", "--model", "mine", "--verbose"]


def test_run_false_removes_a_default_flag() -> None:
    assert "--skip-git-repo-check" in args(BUILTINS["codex"])
    assert "--skip-git-repo-check" not in args(BUILTINS["codex"], skip_git_repo_check=False)


def test_kebab_and_snake_spellings_are_one_key_and_kebab_wins() -> None:
    definition = custom(kebabCaseFlags=True)
    assert args(definition, **{"max_turns": 1, "max-turns": 2}) == ["P", "--max-turns", "2"]
    assert args(definition, **{"max-turns": 2, "max_turns": 1}) == ["P", "--max-turns", "2"]


def test_env_names_from_definition_and_run() -> None:
    definition = custom(
        env=[{"name": "BASE_URL", "value": "x"}],
        credentials=[{"env": "API_KEY", "secretKeyRef": {"name": "s", "key": "k"}}],
    )
    inv = build_invocation(definition, "P", env_names=["EXTRA"])
    assert inv.env_names == ["API_KEY", "BASE_URL", "EXTRA"]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("claude", ["claude", "-p", "P"]),
        ("codex", ["codex", "exec", "P"]),
        ("copilot", ["copilot", "-p", "P"]),
        ("opencode", ["opencode", "run", "P"]),
        ("pi", ["pi", "-p", "P"]),
        ("gemini", ["gemini", "-p", "P"]),
        ("cursor", ["cursor-agent", "-p", "P"]),
        ("cline", ["cline", "P"]),
        ("aider", ["aider", "--message", "P"]),
        ("qwen", ["qwen", "-p", "P"]),
        ("goose", ["goose", "run", "--text", "P"]),
        ("kiro", ["kiro-cli", "chat", "--no-interactive", "P"]),
        ("droid", ["droid", "exec", "P"]),
        ("amp", ["amp", "-x", "P"]),
        ("deepseek", ["dsh", "--profile", "headless", "P"]),
    ],
)
def test_builtin_catalog_matches_dagu(name: str, expected: list[str]) -> None:
    without_defaults = BUILTINS[name].model_copy(update={"defaults": {}})
    assert build_invocation(without_defaults, "P").argv == expected


@pytest.mark.parametrize(
    ("name", "default_flags"),
    [("codex", ["--skip-git-repo-check"]), ("cursor", ["--output-format", "text"]), ("goose", ["--quiet"])],
)
def test_builtin_keeps_dagus_defaults(name: str, default_flags: list[str]) -> None:
    argv = build_invocation(BUILTINS[name], "P").argv
    start = argv.index(default_flags[0])
    assert argv[start : start + len(default_flags)] == default_flags


def test_catalog_has_the_fifteen_dagu_builtins() -> None:
    assert sorted(BUILTINS) == sorted(
        [
            "claude",
            "codex",
            "copilot",
            "opencode",
            "pi",
            "gemini",
            "cursor",
            "cline",
            "aider",
            "qwen",
            "goose",
            "kiro",
            "droid",
            "amp",
            "deepseek",
        ]
    )
    assert all(spec.kebab_case_flags for spec in BUILTINS.values())


@pytest.mark.parametrize(
    ("spec", "options", "unknown"),
    [
        pytest.param({}, {"modle": "x"}, [], id="no knownOptions: nothing is judged"),
        pytest.param(
            {"knownOptions": ["model"]}, {"model": "x", "provider": "p"}, [], id="known and reserved"
        ),
        pytest.param(
            {"knownOptions": ["max-turns"], "kebabCaseFlags": True}, {"max_turns": 3}, [], id="kebab-cased"
        ),
        pytest.param(
            {"knownOptions": ["max-turns"]},
            {"max_turns": 3},
            ["max_turns"],
            id="no kebab-casing: snake differs",
        ),
        pytest.param(
            {"knownOptions": [], "optionFlags": {"yes": "-y"}}, {"yes": True}, [], id="optionFlags are known"
        ),
        pytest.param({"knownOptions": ["model"]}, {"modle": "x"}, ["modle"], id="a typo"),
    ],
)
def test_unknown_options_are_the_keys_outside_known_options(
    spec: dict[str, Any], options: dict[str, Any], unknown: list[str]
) -> None:
    assert [key for key, _ in find_unknown_options("p", custom(**spec), options)] == unknown


def test_an_unknown_option_names_its_flag_and_the_nearest_known_one() -> None:
    [(key, why)] = find_unknown_options("claude", BUILTINS["claude"], {"max_turn": 20})
    assert key == "max_turn"
    assert why == (
        'provider "claude" has no option --max-turn, so the CLI would refuse it and the attempt fail; '
        "did you mean max-turns?"
    )


@pytest.mark.parametrize("name", sorted(n for n, d in BUILTINS.items() if d.known_options is not None))
def test_a_builtins_defaults_are_among_its_known_options(name: str) -> None:
    definition = BUILTINS[name]
    assert find_unknown_options(name, definition, definition.defaults) == []
