"""Dagu round trips: import the DAGs of tests/fixtures/dagu, make every provider they use run the fake agent
as if it were that CLI (it echoes its argv and stdin), and compare with what Dagu executes (expected.yaml)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.dagu_import import dns_name, import_dagu

FIXTURES = Path(__file__).parents[1] / "fixtures" / "dagu"
DAGS = sorted(p.name for p in FIXTURES.glob("*.yaml") if p.name != "expected.yaml")
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def import_fixture(name: str) -> list[dict[str, Any]]:
    """The manifests `harnessctl import-dagu` makes of one fixture DAG (which Dagu accepts)."""
    path = FIXTURES / name
    result = import_dagu(yaml.safe_load(path.read_text()), dns_name(path.stem))
    assert result.errors == [], result.errors
    return result.manifests


def expected(name: str) -> dict[str, dict[str, Any]]:
    """Run name -> {"attempts": [argv, ...], "stdin": text} as Dagu executes the fixture's steps."""
    table: dict[str, dict[str, dict[str, Any]]] = yaml.safe_load((FIXTURES / "expected.yaml").read_text())
    return table[name]


def output_variables(manifests: list[dict[str, Any]]) -> dict[str, str]:
    """Dagu output variable -> the run whose output it is, from the runs' runOutput inputs."""
    return {
        item["name"]: item["runOutput"]["name"]
        for m in manifests
        if m["kind"] == "HarnessRun"
        for item in m["spec"].get("inputs", [])
        if "runOutput" in item
    }


def expand(text: str, variables: dict[str, str], outputs: dict[str, str]) -> str:
    """`text` with each ${NAME} replaced by the output of the run that NAME stands for."""
    return _PLACEHOLDER.sub(lambda m: outputs[variables[m.group(1)]], text)


def _as_fake(spec: dict[str, Any], launcher: str, image: str | None) -> dict[str, Any]:
    """The same invocation (prompt delivery, flags, stdin) with the fake agent behind the CLI's name:
    `sh -c 'LAUNCHER "$0" "$@"' BINARY PREFIX...` hands the fake BINARY as its first argument."""
    out = {
        key: value
        for key, value in spec.items()
        if key
        in (
            "promptMode",
            "promptFlag",
            "promptPosition",
            "flagStyle",
            "optionFlags",
            "kebabCaseFlags",
            "stdinMode",
        )
    }
    out["binary"] = "/bin/sh"
    out["prefixArgs"] = ["-c", f'exec {launcher} "$0" "$@"', spec["binary"], *spec.get("prefixArgs", [])]
    out["env"] = [{"name": "FAKE_MODE", "value": "echo-argv"}]
    out["output"] = {"format": "text"}
    if image:
        out["image"] = image
    return out


def with_fake_providers(
    manifests: list[dict[str, Any]], launcher: str, image: str | None = None
) -> list[dict[str, Any]]:
    """The manifests with every provider the runs use swapped for the fake: the imported definitions
    rewritten, the built-ins shadowed by a HarnessDefinition of the same name (without the catalog's
    `defaults`, which are this project's additions, not Dagu's)."""
    builtins = {d.metadata["name"]: d.spec.to_api() for d in load_builtin_catalog()}
    out = copy.deepcopy(manifests)
    defined = {m["metadata"]["name"]: m for m in out if m["kind"] == "HarnessDefinition"}
    used = {
        name
        for m in out
        if m["kind"] == "HarnessRun"
        for name in [m["spec"]["provider"], *(f["provider"] for f in m["spec"].get("fallback", []))]
    }
    for name in sorted(used):
        if name in defined:
            defined[name]["spec"] = _as_fake(defined[name]["spec"], launcher, image)
        else:
            spec = _as_fake(builtins[name], launcher, image)
            out.insert(0, {**manifests_header("HarnessDefinition", name), "spec": spec})
    return out


def manifests_header(kind: str, name: str) -> dict[str, Any]:
    return {"apiVersion": "agentharness.dev/v1alpha1", "kind": kind, "metadata": {"name": name}}


def echoed(output: str) -> tuple[list[str], str]:
    """(argv, stdin) the fake agent received, from its output."""
    doc = json.loads(output)
    return doc["argv"], doc["stdin"]
