"""One JSON configuration from several sources (pure): a CLI that reads its endpoint, its MCP servers and
its tool rules from one settings file, or one variable, gets one holding all. Keys keep their order (a
merged key stays in place, a new one goes last), as OpenCode merges its own: its rules are ordered."""

from __future__ import annotations

import json
from typing import Any


def _merged(base: Any, added: Any) -> Any:
    """`added` over `base`: objects key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(added, dict):
        return {**base, **{k: _merged(base.get(k), v) for k, v in added.items()}}
    return added


def merge_settings(base: str | None, added: str) -> str:
    """`added` over `base` where both are JSON objects, `added`'s value winning where they hold the same
    key; `added` alone otherwise."""
    try:
        old, new = json.loads(base or ""), json.loads(added)
    except ValueError:
        return added
    if isinstance(old, dict) and isinstance(new, dict):
        return json.dumps(_merged(old, new))
    return added


def merge_each(base: dict[str, str], added: dict[str, str]) -> dict[str, str]:
    """`added` over `base` key by key (home files by path, variables by name), each value merged
    (merge_settings)."""
    return {**base, **{key: merge_settings(base.get(key), text) for key, text in added.items()}}


def add_option(options: dict[str, Any], key: str, value: Any) -> None:
    """Add an option the operator sets to an attempt's: a list is appended to a list, anything else
    replaces what is there (a model route's `config`, a tool policy's controls)."""
    current = options.get(key)
    options[key] = [*current, *value] if isinstance(current, list) and isinstance(value, list) else value
