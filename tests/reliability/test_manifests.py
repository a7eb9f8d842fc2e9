"""Hypothesis-generated HarnessRuns and HarnessDefinitions, through the API server and through
`harnessctl validate` offline: each is refused with a message naming the field, or accepted and handled
by the operator (a run ends, a definition gets its Ready condition), and the operator logs no traceback.
The examples are derandomized and bounded, so the test takes about a minute and never flakes."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.client.rest import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.cli import main as cli

from ..integration.conftest import Api, wait_until
from ..integration.operator_env import OperatorProcess, definition_body
from .checks import log_problems

TEST_IMAGE = "the test image"  # replaced by the real tag, which is known only once the fixture ran
RUN_EXAMPLES = 40
DEFINITION_EXAMPLES = 20
_names = itertools.count()

words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=24)
names = st.one_of(
    st.sampled_from(["fake", "missing"]), st.from_regex(r"[a-zA-Z0-9._-]{0,12}", fullmatch=True)
)
seconds = st.one_of(st.none(), st.integers(min_value=-5, max_value=400_000_000))

# Mostly-valid runs, so that many are accepted and must be handled, beside the wild ones below.
tame_run_specs = st.fixed_dictionaries(
    {
        "provider": st.sampled_from(["fake", "missing"]),
        "prompt": st.from_regex(r"[a-z ]{1,20}", fullmatch=True),
    },
    optional={
        "fallback": st.lists(
            st.fixed_dictionaries({"provider": st.sampled_from(["fake", "missing"])}), max_size=2
        ),
        "limits": st.fixed_dictionaries({"timeoutSeconds": st.integers(1, 30)}),
        "ttlSecondsAfterFinished": st.integers(0, 3600),
        "cancel": st.booleans(),
        "with": st.dictionaries(
            st.sampled_from(["model", "verbose"]), st.one_of(st.booleans(), st.integers(0, 3))
        ),
    },
)
wild_run_specs = st.fixed_dictionaries(
    {"provider": names},
    optional={
        "prompt": st.one_of(words, st.just("fix $(inputs.goal)"), st.just("a\x00b")),
        "promptFrom": st.fixed_dictionaries(
            {"configMapKeyRef": st.fixed_dictionaries({"name": names, "key": names})}
        ),
        "stdin": words,
        "fallback": st.lists(st.fixed_dictionaries({"provider": names}), max_size=3),
        "with": st.dictionaries(
            st.from_regex(r"[a-z][a-zA-Z-]{0,8}", fullmatch=True),
            st.one_of(st.booleans(), st.integers(-3, 3), words, st.lists(words, max_size=2)),
            max_size=3,
        ),
        "limits": st.fixed_dictionaries(
            {},
            optional={
                "timeoutSeconds": st.integers(-2, 30),
                "maxTurns": st.integers(-1, 5),
                "maxCostUSD": st.floats(-1, 5, allow_nan=False),
            },
        ),
        "env": st.lists(st.fixed_dictionaries({"name": words, "value": words}), max_size=2),
        "inputs": st.lists(
            st.fixed_dictionaries({"name": st.sampled_from(["goal", "x", "1bad"]), "value": words}),
            max_size=2,
        ),
        "ttlSecondsAfterFinished": seconds,
        "cancel": st.booleans(),
        "unknownField": st.integers(-(2**63), 2**63 - 1),  # beyond: decision 329
    },
)
run_specs = st.one_of(tame_run_specs, wild_run_specs)
definition_specs = st.fixed_dictionaries(
    {},
    optional={
        "binary": words,
        "promptMode": st.sampled_from(["arg", "stdin", "flag", "file", "telepathy"]),
        "promptFlag": words,
        "output": st.fixed_dictionaries(
            {"format": st.sampled_from(["text", "claude-stream-json", "codex-jsonl", "xml"])}
        ),
        "env": st.lists(st.fixed_dictionaries({"name": words, "value": words}), max_size=2),
        "prefixArgs": st.lists(words, max_size=3),
        "image": st.one_of(st.just(TEST_IMAGE), words),
    },
)


def validate_offline(doc: dict[str, Any], folder: Path) -> tuple[int, list[str]]:
    """`harnessctl validate` on one manifest: its exit code and the lines it printed."""
    path = folder / "doc.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["validate", str(path)])
    return code, out.getvalue().splitlines()


def submit(api: Api, doc: dict[str, Any]) -> tuple[int, str] | None:
    """Create through the API server; None when accepted, else the status code and the server's message
    (422 from the schema and CEL rules, 403 from the chart's admission policies)."""
    try:
        api.create(doc)
    except ApiException as exc:
        assert exc.status in (400, 403, 422), (exc.status, exc.body)
        return exc.status, str(json.loads(exc.body).get("message", ""))
    return None


def names_a_field(message: str) -> bool:
    return any(part in message for part in ("spec.", "spec:", "spec[", "metadata.", "metadata:", ".spec"))


def test_generated_manifests(
    api: Api, images: dict[str, str], start_operator: Callable[..., OperatorProcess], tmp_path: Path
) -> None:
    operator = start_operator(HARNESS_MAX_RUNS_PER_NAMESPACE="10")
    api.create(definition_body("fake", images["test"], "ok"))
    accepted: dict[str, list[str]] = {"runs": [], "definitions": []}
    disagreements: list[str] = []

    def check(doc: dict[str, Any], bucket: str) -> None:
        if doc["spec"].get("image") == TEST_IMAGE:
            doc["spec"]["image"] = images["test"]
        code, lines = validate_offline(doc, tmp_path)
        refused = submit(api, doc)
        errors = [line for line in lines if ": warning: " not in line]
        if refused is not None:
            status, message = refused
            assert names_a_field(message), f"the API server's refusal names no field: {message}"
            # validate knows the CRDs, not this cluster's admission policies (403): only those must agree.
            if code == 0 and status != 403:
                disagreements.append(
                    f"API server refused, validate accepted: {refused}\n{yaml.safe_dump(doc)}"
                )
        else:
            accepted[bucket].append(doc["metadata"]["name"])
        for line in errors:
            assert ": spec" in line or ": metadata" in line, f"validate's finding names no field: {line}"

    @settings(
        max_examples=RUN_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(run_specs)
    def runs(spec: dict[str, Any]) -> None:
        doc = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "HarnessRun",
            "metadata": {"name": f"r{next(_names)}"},
            "spec": spec,
        }
        check(doc, "runs")

    @settings(
        max_examples=DEFINITION_EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(definition_specs)
    def definitions(spec: dict[str, Any]) -> None:
        doc = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "HarnessDefinition",
            "metadata": {"name": f"d{next(_names)}"},
            "spec": spec,
        }
        check(doc, "definitions")

    runs()
    definitions()
    assert disagreements == []

    def handled() -> list[str]:
        pending = []
        for name in accepted["runs"]:
            if api.condition(name, "Succeeded").get("status") not in ("True", "False"):
                pending.append(name)
        for name in accepted["definitions"]:
            body = api.custom.get_namespaced_custom_object(GROUP, VERSION, api.ns, "harnessdefinitions", name)
            if not (body.get("status") or {}).get("conditions"):
                pending.append(name)
        return pending

    wait_until(
        lambda: not handled(),
        timeout=180,
        what="every accepted manifest handled",
        diagnose=lambda: str(handled()),
    )
    print(
        f"\nmeasured: {sum(map(len, accepted.values()))} of {RUN_EXAMPLES + DEFINITION_EXAMPLES} accepted: {accepted}"
    )
    assert accepted["runs"] and len(accepted["runs"]) < RUN_EXAMPLES  # both outcomes were exercised
    assert log_problems(operator.log_path.read_text()) == []
