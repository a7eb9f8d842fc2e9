"""The chart README's values table, generated from values.yaml and its `# --` comments (pure functions).

`python -m tests.chart_readme` (run by `make generate`) rewrites the table in the chart's README;
tests/unit/chart/test_chart_readme.py fails when the README drifts from values.yaml or a value is undocumented.
A `# --` comment (continued by the `#` lines right below it) documents the key under it; a documented
mapping documents its undocumented children too, as one row with the whole default.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "harness-operator"
BEGIN = "<!-- values-table:begin (generated from values.yaml by `make generate`; do not edit) -->"
END = "<!-- values-table:end -->"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_-]+):(?:\s|$)")
DOC = re.compile(r"^ *# -- ?(?P<text>.*)$")
MORE = re.compile(r"^ *#(?: (?P<text>.*))?$")
TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "object"}


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    description: str


def parse_docs(text: str) -> dict[str, str]:
    """Dotted key -> its `# --` description, in file order."""
    docs: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        if doc := DOC.match(line):
            pending = [doc["text"]]
            continue
        if pending is not None and (more := MORE.match(line)):
            pending.append(more["text"] or "")
            continue
        if key := KEY.match(line):
            indent = len(key["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key["key"]))
            if pending is not None:
                docs[".".join(k for _, k in stack)] = " ".join(pending).strip()
        pending = None
    return docs


def lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ValueError(f"`# --` comment on {path}, which is not a value in values.yaml")
        node = node[part]
    return node


def leaves(value: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every value that is not a non-empty mapping."""
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in leaves(v, f"{prefix}.{k}" if prefix else k)]
    return [prefix]


def undocumented(text: str) -> list[str]:
    """Values with no `# --` comment of their own or on a mapping above them."""
    docs = parse_docs(text)
    return [
        leaf
        for leaf in leaves(yaml.safe_load(text))
        if not any(leaf == d or leaf.startswith(d + ".") for d in docs)
    ]


def build_rows(text: str) -> list[Row]:
    values = yaml.safe_load(text)
    rows = []
    for path, description in parse_docs(text).items():
        value = lookup(values, path)
        default = json.dumps(value, sort_keys=True, separators=(", ", ": "))
        rows.append(Row(path, TYPES.get(type(value), "string"), default, description))
    return rows


def render_table(rows: list[Row]) -> str:
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    lines = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    lines += [f"| `{r.key}` | {r.type} | `{cell(r.default)}` | {cell(r.description)} |" for r in rows]
    return "\n".join(lines)


def with_table(readme: str, table: str) -> str:
    """The README with the text between the markers replaced by the table."""
    head, sep, rest = readme.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not sep or not sep2:
        raise ValueError(f"README lacks the markers {BEGIN!r} ... {END!r}")
    return f"{head}{BEGIN}\n{table}\n{END}{tail}"


def main() -> int:
    readme = CHART / "README.md"
    values = (CHART / "values.yaml").read_text()
    missing = undocumented(values)
    if missing:
        print(f"values without a `# --` comment: {', '.join(missing)}", file=sys.stderr)
        return 1
    text = readme.read_text()
    updated = with_table(text, render_table(build_rows(values)))
    if updated != text:
        readme.write_text(updated)
        print(f"wrote {readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
