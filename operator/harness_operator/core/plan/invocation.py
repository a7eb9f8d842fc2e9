"""Definition + run options -> argv, stdin and env names, by Dagu's `harness.run` rules (pure)."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from harness_operator.api.v1alpha1 import (
    FlagStyle,
    HarnessDefinitionSpec,
    PromptMode,
    PromptPosition,
    StdinMode,
)

# Keys the executor consumes itself; they never become flags (Dagu's reservedKeys).
RESERVED_KEYS = frozenset({"provider", "fallback"})
# The kernel's MAX_ARG_STRLEN: the most one argv or environment string may take, its NUL included.
MAX_ARG_BYTES = 131072

# YAML 1.2 core-schema scalars that a string option turns into ("10" -> 10, "true" -> True).
_YAML_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_YAML_INT = re.compile(r"^[-+]?[0-9]+$")
_YAML_OCT = re.compile(r"^0o[0-7]+$")
_YAML_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_YAML_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


@dataclass(frozen=True)
class Invocation:
    """What to execute: argv[0] is the configured binary name; stdin None means closed."""

    binary: str
    args: list[str]
    stdin: str | None
    env_names: list[str]

    @property
    def argv(self) -> list[str]:
        return [self.binary, *self.args]


def coerce_scalar(value: str) -> Any:
    """A string that reads as a YAML boolean or number becomes that value; anything else stays."""
    text = value.strip()
    if not text:
        return value
    if text in _YAML_BOOL:
        return _YAML_BOOL[text]
    if _YAML_INT.match(text):
        return int(text)
    if _YAML_OCT.match(text):
        return int(text[2:], 8)
    if _YAML_HEX.match(text):
        return int(text[2:], 16)
    if _YAML_FLOAT.match(text):
        return float(text)
    return value


def normalize_value(value: Any) -> Any:
    """Coerce strings, recursively through lists and maps."""
    if isinstance(value, str):
        return coerce_scalar(value)
    if isinstance(value, list):
        return [normalize_value(item) for item in value]
    if isinstance(value, dict):
        return {key: normalize_value(item) for key, item in value.items()}
    return value


def normalize_keys(options: dict[str, Any], kebab: bool) -> dict[str, Any]:
    """With kebab-casing, '_' becomes '-' and the kebab spelling wins over the snake one."""
    if not kebab:
        return dict(options)
    out: dict[str, Any] = {}
    for key, value in options.items():
        kebab_key = key.replace("_", "-")
        if kebab_key in out and key != kebab_key:
            continue  # the kebab spelling of this key is already here and wins
        out[kebab_key] = value
    return out


def find_unknown_options(
    provider: str, definition: HarnessDefinitionSpec, options: dict[str, Any]
) -> list[tuple[str, str]]:
    """(key, why) of every option key the CLI does not accept (its definition's knownOptions), naming the
    nearest known one; none when the definition declares no list."""
    if definition.known_options is None:
        return []
    known = sorted(set(definition.known_options) | set(definition.option_flags))
    found = []
    for key in options:
        name = key.replace("_", "-") if definition.kebab_case_flags else key
        if key in RESERVED_KEYS or name in known:
            continue
        guess = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {guess[0]}?" if guess else "its knownOptions list what it takes"
        found.append(
            (
                key,
                f'provider "{provider}" has no option {flag_token(name, definition)}, so the CLI would '
                f"refuse it and the attempt fail; {hint}",
            )
        )
    return found


def merge_options(definition: HarnessDefinitionSpec, options: dict[str, Any]) -> dict[str, Any]:
    """The definition's defaults first, then the run's options key by key; values coerced."""
    kebab = definition.kebab_case_flags
    merged = normalize_keys(normalize_value(definition.defaults), kebab)
    merged.update(normalize_keys(normalize_value(options), kebab))
    return merged


def format_number(value: int | float) -> str:
    """Integers plainly; whole floats as integers (20.0 -> 20); other floats shortest, no exponent."""
    if isinstance(value, float):
        if value.is_integer():
            return str(int(value))
        return format(Decimal(repr(value)), "f")
    return str(value)


def format_item(value: Any) -> str | None:
    """One list element as a flag value; maps and nested lists have no flag form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return format_number(value)
    if isinstance(value, str):
        return value
    return None


def flag_token(key: str, definition: HarnessDefinitionSpec) -> str:
    """optionFlags verbatim, else '--key' or '-key' by flagStyle."""
    token = definition.option_flags.get(key, "")
    if token.strip():
        return token
    prefix = "-" if definition.flag_style == FlagStyle.single_dash else "--"
    return prefix + key


def build_flags(options: dict[str, Any], definition: HarnessDefinitionSpec) -> list[str]:
    """Options -> flag tokens, in key order; reserved keys skipped."""
    args: list[str] = []
    for key in sorted(k for k in options if k not in RESERVED_KEYS):
        value = options[key]
        flag = flag_token(key, definition)
        if isinstance(value, bool):
            if value:
                args.append(flag)
        elif isinstance(value, str):
            if value != "":
                args += [flag, value]
        elif isinstance(value, int | float):
            args += [flag, format_number(value)]
        elif isinstance(value, list):
            for item in value:
                text = format_item(item)
                if text is not None:
                    args += [flag, text]
        # maps and nulls have no flag form and are dropped
    return args


def join_prompt_and_stdin(prompt: str, stdin: str) -> str:
    """Prompt, a blank line, stdin; either half omitted when empty."""
    if not prompt:
        return stdin
    if not stdin:
        return prompt
    return f"{prompt}\n\n{stdin}"


def build_invocation(
    definition: HarnessDefinitionSpec,
    prompt: str,
    stdin: str | None = None,
    options: dict[str, Any] | None = None,
    env_names: list[str] | None = None,
    lead_args: list[str] | None = None,
) -> Invocation:
    """The argv, stdin and env names of one attempt; `lead_args` go right after prefixArgs."""
    if not definition.binary:
        raise ValueError("spec.binary is required for protocol cli")
    stdin_text = stdin or ""
    if definition.stdin_mode == StdinMode.fold:
        prompt, stdin_text = join_prompt_and_stdin(prompt, stdin_text), ""
    flags = build_flags(merge_options(definition, options or {}), definition)
    args = [*definition.prefix_args, *(lead_args or [])]
    piped: str | None = stdin_text or None
    if definition.prompt_mode == PromptMode.stdin:
        args += flags
        piped = join_prompt_and_stdin(prompt, stdin_text) or None
    else:
        prompt_args = (
            [prompt] if definition.prompt_mode == PromptMode.arg else [definition.prompt_flag or "", prompt]
        )
        if definition.prompt_position == PromptPosition.after_flags:
            args += flags + prompt_args
        else:
            args += prompt_args + flags
    names = [e.name for e in definition.env] + [c.env for c in definition.credentials] + list(env_names or [])
    return Invocation(binary=definition.binary, args=args, stdin=piped, env_names=sorted(set(names)))


def find_argument_problem(value: str) -> str | None:
    """Why `value` cannot be one command-line argument (or environment string), or None."""
    if "\x00" in value:
        return "contains a NUL byte, which no command-line argument or environment value can carry"
    size = len(value.encode("utf-8"))
    if size >= MAX_ARG_BYTES:
        return f"is {size} bytes; the kernel takes at most {MAX_ARG_BYTES - 1} bytes in one argument"
    return None


def prompt_argument(definition: HarnessDefinitionSpec, prompt: str, stdin: str | None) -> str | None:
    """The one argument that carries the prompt (with stdin when folded), or None for promptMode stdin."""
    if definition.prompt_mode == PromptMode.stdin:
        return None
    if definition.stdin_mode == StdinMode.fold:
        return join_prompt_and_stdin(prompt, stdin or "")
    return prompt


def option_strings(value: Any) -> list[str]:
    """The strings of an option value that can become argv elements (a scalar, or a list's items)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [item for item in value if isinstance(item, str)]
    return []
