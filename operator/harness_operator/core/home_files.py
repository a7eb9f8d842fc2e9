"""Files written into the agent's home before it starts, from several sources (pure): a CLI that reads
its endpoint, its MCP servers and its tool settings from one settings file gets one file holding all."""

from __future__ import annotations

import json
from typing import Any


def _merged(base: Any, added: Any) -> Any:
    """`added` over `base`: objects key by key, anything else replaced."""
    if isinstance(base, dict) and isinstance(added, dict):
        return {**base, **{k: _merged(base.get(k), v) for k, v in added.items()}}
    return added


def merge_home_files(base: dict[str, str], added: dict[str, str]) -> dict[str, str]:
    """`added` over `base`, path by path; where both hold a JSON object at a path, one object with both,
    `added`'s value winning where they hold the same key."""
    out = dict(base)
    for path, text in added.items():
        try:
            old, new = json.loads(out[path]), json.loads(text)
        except (KeyError, ValueError):
            out[path] = text
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            out[path] = json.dumps(_merged(old, new), sort_keys=True)
        else:
            out[path] = text
    return out
