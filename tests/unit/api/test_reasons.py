"""Reasons are one StrEnum: the README's table is its table, the code writes its members, never a
literal, and every member is written somewhere."""

import ast
import re
from pathlib import Path

from harness_operator.api.reasons import REASONS, Reason, render_reasons_table

ROOT = Path(__file__).resolve().parents[3]
SOURCE = ROOT / "operator" / "harness_operator"
REASON_CALLS = {"Rejection", "Waiting", "RunFailure", "PlanError", "Permanent", "fail", "SetupError"}
CAMEL = re.compile(r"^[A-Z][A-Za-z]*[a-z][A-Za-z]*$")


def strings(expr: ast.AST) -> set[str]:
    """CamelCase string constants anywhere in an expression (both branches of `a if c else b` too)."""
    return {
        n.value
        for n in ast.walk(expr)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and CAMEL.match(n.value)
    }


def names(target: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}


def reasons_in_code() -> set[str]:
    """Every literal the code puts where a reason goes: rejections, stops, setup failures, status writes."""
    found: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if func in REASON_CALLS and node.args:
                    found |= strings(node.args[0])
                if func == "set_condition" and len(node.args) >= 4:
                    found |= strings(node.args[3])
                if func == "EventSpec" and len(node.args) >= 2:
                    found |= strings(node.args[1])
                if func == "create_event" and len(node.args) >= 3:
                    found |= strings(node.args[2])
            elif isinstance(node, ast.Compare) and "reason" in (
                getattr(node.left, "id", None),
                getattr(node.left, "attr", None),
            ):
                for comparator in node.comparators:
                    found |= strings(comparator)
            elif isinstance(node, ast.Assign) and {"reason", "stopped"} & set().union(
                *map(names, node.targets)
            ):
                value = node.value.elts[0] if isinstance(node.value, ast.Tuple) else node.value
                found |= strings(value)
            elif (
                isinstance(node, ast.Return)
                and isinstance(node.value, ast.Tuple)
                and len(node.value.elts) == 2
            ):
                found |= strings(node.value.elts[0])  # (reason, message) pairs
            elif isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "reason":
                        found |= strings(value)
    return found


def test_readme_table_is_the_code_table() -> None:
    assert render_reasons_table() in (ROOT / "README.md").read_text()


def test_the_table_has_every_reason_once() -> None:
    assert list(REASONS) == list(Reason)


def test_the_code_writes_reasons_as_members_not_literals() -> None:
    """Where a reason is written (a rejection, a stop, a status write, an Event), the code names a
    Reason member: a CamelCase string there is a reason the enum does not hold, or a copy of one."""
    assert reasons_in_code() == set()


def test_every_reason_is_written_somewhere() -> None:
    sources = "\n".join(p.read_text() for p in SOURCE.rglob("*.py") if p.name != "reasons.py")
    assert [r for r in Reason if f"Reason.{r.name}" not in sources] == []
