"""One JSON configuration from several sources: merged key by key, in order."""

from __future__ import annotations

import json

from harness_operator.core.access.settings_merge import merge_each, merge_settings


def test_json_objects_at_one_path_merge_key_by_key_and_the_added_value_wins() -> None:
    base = {
        ".gemini/settings.json": '{"mcpServers": {"docs": {"httpUrl": "u"}}, "tools": {"exclude": ["a"]}}'
    }
    added = {
        ".gemini/settings.json": '{"security": {"auth": {"selectedType": "k"}}, "tools": {"exclude": ["b"]}}'
    }
    merged = json.loads(merge_each(base, added)[".gemini/settings.json"])
    assert merged == {
        "mcpServers": {"docs": {"httpUrl": "u"}},
        "security": {"auth": {"selectedType": "k"}},
        "tools": {"exclude": ["b"]},  # a list is a value: replaced, not joined
    }


def test_other_paths_and_files_that_are_not_json_objects_are_replaced_whole() -> None:
    base = {"a.json": "[1]", "b.txt": "old", "c.json": '{"x": 1}'}
    added = {"a.json": '{"y": 2}', "b.txt": "new", "d.json": "{}"}
    assert merge_each(base, added) == {
        "a.json": '{"y": 2}',
        "b.txt": "new",
        "c.json": '{"x": 1}',
        "d.json": "{}",
    }
    assert merge_each({}, {}) == {}


def test_keys_keep_their_order_a_merged_one_in_place_a_new_one_last() -> None:
    base = '{"permission": {"*": "deny", "read": "allow"}, "mcp": {}}'
    added = '{"permission": {"docs_echo": "allow", "*": "allow"}, "provider": {}}'
    merged = merge_settings(base, added)
    assert merged == (
        '{"permission": {"*": "allow", "read": "allow", "docs_echo": "allow"}, "mcp": {}, "provider": {}}'
    )
    assert merge_settings(None, '{"a": 1}') == '{"a": 1}' and merge_settings("x", "[2]") == "[2]"
