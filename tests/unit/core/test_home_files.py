"""merge_home_files: one settings file from several sources."""

from __future__ import annotations

import json

from harness_operator.core.home_files import merge_home_files


def test_json_objects_at_one_path_merge_key_by_key_and_the_added_value_wins() -> None:
    base = {
        ".gemini/settings.json": '{"mcpServers": {"docs": {"httpUrl": "u"}}, "tools": {"exclude": ["a"]}}'
    }
    added = {
        ".gemini/settings.json": '{"security": {"auth": {"selectedType": "k"}}, "tools": {"exclude": ["b"]}}'
    }
    merged = json.loads(merge_home_files(base, added)[".gemini/settings.json"])
    assert merged == {
        "mcpServers": {"docs": {"httpUrl": "u"}},
        "security": {"auth": {"selectedType": "k"}},
        "tools": {"exclude": ["b"]},  # a list is a value: replaced, not joined
    }


def test_other_paths_and_files_that_are_not_json_objects_are_replaced_whole() -> None:
    base = {"a.json": "[1]", "b.txt": "old", "c.json": '{"x": 1}'}
    added = {"a.json": '{"y": 2}', "b.txt": "new", "d.json": "{}"}
    assert merge_home_files(base, added) == {
        "a.json": '{"y": 2}',
        "b.txt": "new",
        "c.json": '{"x": 1}',
        "d.json": "{}",
    }
    assert merge_home_files({}, {}) == {}
