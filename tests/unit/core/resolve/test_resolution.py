"""The one resolution seam (providers and value sources) over an in-memory reader: every outcome, with
the reason and message the operator, `harnessctl run` and `render` all give."""

from collections.abc import Mapping
from typing import Any

import pytest

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.resolve.resolution import (
    NotTheOutput,
    Rejection,
    Unreadable,
    Waiting,
    compute_provider_chain,
    resolve_inputs,
    resolve_targets,
    taken_secrets,
)

NS = "team"
CLAUDE = next(d for d in load_builtin_catalog() if d.metadata["name"] == "claude").spec
CLAUDE_RAW = {"spec": CLAUDE.model_dump(by_alias=True, exclude_none=True, mode="json")}
NAMESPACED = {"spec": {**CLAUDE_RAW["spec"], "binary": "my-claude"}}
SUCCEEDED = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}]}
FAILED = {"conditions": [{"type": "Succeeded", "status": "False", "reason": "ProviderFailed"}]}
RUNNING = {"conditions": [{"type": "Succeeded", "status": "Unknown", "reason": "Running"}]}
REFUSED = "Unreadable"  # a value in the tables below: the reader is refused


class MemoryReader:
    """resolution.Reader over dicts; REFUSED stands for a refusal (Unreadable)."""

    def __init__(
        self,
        definitions: Mapping[tuple[str | None, str], Any] | None = None,
        config_maps: Mapping[tuple[str, str], Any] | None = None,
        secrets: Mapping[tuple[str, str], Any] | None = None,
        runs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
    ) -> None:
        self.definitions = definitions or {(None, "claude"): CLAUDE_RAW}
        self.config_maps = config_maps or {}
        self.secrets = secrets or {}
        self.runs = runs or {}
        self.outputs = outputs or {}
        self.reads: list[str] = []

    @staticmethod
    def _answer(value: Any) -> Any:
        if value == REFUSED:
            raise Unreadable("the operator is not allowed")
        if isinstance(value, Exception):
            raise value
        return value

    def definition(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        self.reads.append(f"definition {namespace}/{name}")
        return self._answer(self.definitions.get((namespace, name)))

    def config_map_key(self, namespace: str, name: str, key: str) -> str | None:
        return self._answer(self.config_maps.get((name, key)))

    def secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return self._answer(self.secrets.get((name, key)))

    def run(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        status = self._answer(self.runs.get(name))
        if status is None:
            return None
        body = {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"provider": "claude", "prompt": "p"},
        }
        return {**body, "status": status}

    def run_output(self, run: Mapping[str, Any]) -> str | None:
        return self._answer(self.outputs.get(run["metadata"]["name"]))


def make_run(**spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {"metadata": {"name": "me", "namespace": NS}, "spec": {"provider": "claude", **spec}}
    )


def test_the_chain_is_the_primary_then_each_fallback_with_its_field() -> None:
    spec = make_run(prompt="p", fallback=[{"provider": "codex"}, {"provider": "gemini"}]).spec
    assert [(e.field, e.provider, e.options_field) for e in compute_provider_chain(spec)] == [
        ("spec.provider", "claude", "spec.with"),
        ("spec.fallback[0].provider", "codex", "spec.fallback[0].with"),
        ("spec.fallback[1].provider", "gemini", "spec.fallback[1].with"),
    ]


def test_a_namespaced_definition_shadows_the_cluster_one() -> None:
    reader = MemoryReader({(NS, "claude"): NAMESPACED, (None, "claude"): CLAUDE_RAW})
    [target] = resolve_targets(reader, make_run(prompt="p"))
    assert (target.index, target.provider, target.definition.binary) == (1, "claude", "my-claude")
    assert reader.reads == [f"definition {NS}/claude"]


def test_the_cluster_definition_when_no_namespaced_one() -> None:
    reader = MemoryReader({(None, "claude"): CLAUDE_RAW, (None, "codex"): CLAUDE_RAW})
    targets = resolve_targets(reader, make_run(prompt="p", fallback=[{"provider": "codex"}]))
    assert [(t.index, t.provider, t.definition.binary) for t in targets] == [
        (1, "claude", "claude"),
        (2, "codex", "claude"),
    ]
    assert reader.reads == [
        f"definition {NS}/claude",
        "definition None/claude",
        f"definition {NS}/codex",
        "definition None/codex",
    ]


@pytest.mark.parametrize(
    ("definitions", "fallback", "reason", "message"),
    [
        ({}, [], "UnknownProvider", 'unknown provider "claude"'),
        (
            {(None, "claude"): CLAUDE_RAW},
            [{"provider": "codex"}, {"provider": "nope"}],
            "UnknownProvider",
            'invalid fallback[0]: unknown provider "codex"',
        ),
        (
            {(NS, "claude"): {"spec": {"binary": ["not", "a", "string"]}}},
            [],
            "InvalidProvider",
            'provider "claude" is invalid: ',
        ),
    ],
    ids=["unknown primary", "the first unknown fallback is named", "a definition that does not parse"],
)
def test_providers_refused(
    definitions: dict[tuple[str | None, str], Any], fallback: list[dict[str, str]], reason: str, message: str
) -> None:
    reader = MemoryReader(definitions or {(None, "other"): CLAUDE_RAW})
    with pytest.raises(Rejection) as caught:
        resolve_targets(reader, make_run(prompt="p", fallback=fallback))
    assert caught.value.reason == reason
    assert caught.value.message.startswith(message)


SOURCES: dict[str, Any] = {
    "config_maps": {("cm", "k"): "from a ConfigMap"},
    "secrets": {("s", "k"): "from a Secret"},
    "runs": {"done": SUCCEEDED, "failed": FAILED, "busy": RUNNING},
    "outputs": {"done": "the plan"},
}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"prompt": "inline", "stdin": "data"}, ("inline", "data")),
        ({"promptFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}, ("from a ConfigMap", None)),
        (
            {"prompt": "p", "stdinFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            ("p", "from a Secret"),
        ),
        ({"promptFrom": {"runOutput": {"name": "done"}}}, ("the plan", None)),
        (
            {
                "prompt": "Do $(inputs.PLAN) with $(inputs.KEY) and $(inputs.LIT)",
                "stdin": "$(inputs.KEY)",
                "inputs": [
                    {"name": "PLAN", "runOutput": {"name": "done"}},
                    {"name": "KEY", "configMapKeyRef": {"name": "cm", "key": "k"}},
                    {"name": "LIT", "value": "$(inputs.PLAN)"},
                ],
                "after": ["done"],
            },
            ("Do the plan with from a ConfigMap and $(inputs.PLAN)", "from a ConfigMap"),
        ),
    ],
    ids=[
        "inline",
        "prompt from a ConfigMap key",
        "stdin from a Secret key",
        "prompt from a succeeded run's output",
        "inputs substituted in one pass, after runs succeeded",
    ],
)
def test_inputs_resolved(spec: dict[str, Any], expected: tuple[str, str | None]) -> None:
    assert resolve_inputs(MemoryReader(**SOURCES), make_run(**spec))[:2] == expected


def test_the_values_taken_from_secrets_are_named_for_redaction() -> None:
    """Every value read from a Secret (promptFrom, stdinFrom, an input) is listed, and only those."""
    secret = {"secretKeyRef": {"name": "s", "key": "k"}}
    spec = {
        "prompt": "Use $(inputs.KEY) and $(inputs.CM)",
        "stdinFrom": secret,
        "inputs": [{"name": "KEY", **secret}, {"name": "CM", "configMapKeyRef": {"name": "cm", "key": "k"}}],
    }
    resolved = resolve_inputs(MemoryReader(**SOURCES), make_run(**spec))
    assert resolved.prompt == "Use from a Secret and from a ConfigMap"
    assert resolved.secret_values == ["from a Secret", "from a Secret"]
    assert resolve_inputs(MemoryReader(**SOURCES), make_run(prompt="p")).secret_values == []
    from_secret = resolve_inputs(MemoryReader(**SOURCES), make_run(promptFrom=secret))
    assert from_secret.secret_values == ["from a Secret"]


def test_taken_secrets_names_the_first_field_of_each() -> None:
    spec = make_run(
        promptFrom={"secretKeyRef": {"name": "a", "key": "k"}},
        inputs=[
            {"name": "X", "secretKeyRef": {"name": "b", "key": "k"}},
            {"name": "Y", "secretKeyRef": {"name": "a", "key": "other"}},
            {"name": "Z", "configMapKeyRef": {"name": "c", "key": "k"}},
        ],
    ).spec
    assert taken_secrets(spec) == {"a": "spec.promptFrom.secretKeyRef", "b": "spec.inputs[0].secretKeyRef"}


@pytest.mark.parametrize(
    ("spec", "sources", "kind", "reason", "message"),
    [
        (
            {"prompt": "$(inputs.NOPE)"},
            {},
            Rejection,
            "UnknownInput",
            "spec.prompt references $(inputs.NOPE), which spec.inputs does not declare; add an input of that name or correct the reference",
        ),
        (
            {"promptFrom": {"configMapKeyRef": {"name": "cm", "key": "missing"}}},
            SOURCES,
            Rejection,
            "InputUnavailable",
            "spec.promptFrom: cannot read ConfigMap cm key missing",
        ),
        (
            {"prompt": "p", "stdinFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
            {"secrets": {("s", "k"): REFUSED}},
            Rejection,
            "InputUnavailable",
            "spec.stdinFrom: cannot read Secret s key k: the operator is not allowed",
        ),
        (
            {"prompt": "$(inputs.A)", "inputs": [{"name": "A", "runOutput": {"name": "absent"}}]},
            SOURCES,
            Waiting,
            "WaitingForRunOutput",
            'spec.inputs[0]: waiting for HarnessRun "absent" to exist',
        ),
        (
            {"promptFrom": {"runOutput": {"name": "busy"}}},
            SOURCES,
            Waiting,
            "WaitingForRunOutput",
            'spec.promptFrom: waiting for HarnessRun "busy" to succeed',
        ),
        (
            {"prompt": "p", "after": ["failed"]},
            SOURCES,
            Rejection,
            "RunOutputFailed",
            'spec.after[0]: HarnessRun "failed" did not succeed',
        ),
        (
            {"prompt": "p", "after": ["me"]},
            SOURCES,
            Rejection,
            "DependsOnItself",
            "spec.after[0]: names this run itself, which would wait forever",
        ),
        (
            {"promptFrom": {"runOutput": {"name": "done"}}},
            {"runs": {"done": SUCCEEDED}},
            Rejection,
            "InputUnavailable",
            'spec.promptFrom: cannot read the output of HarnessRun "done"',
        ),
        (
            {"promptFrom": {"runOutput": {"name": "done"}}},
            {"runs": {"done": SUCCEEDED}, "outputs": {"done": NotTheOutput("done-output")}},
            Rejection,
            "InputUnavailable",
            'spec.promptFrom: ConfigMap done-output is not the output of HarnessRun "done" (not owned by it, or not the text its status reports); it was not read',
        ),
        (
            {"promptFrom": {"runOutput": {"name": "done"}}},
            {"runs": {"done": REFUSED}},
            Rejection,
            "InputUnavailable",
            'spec.promptFrom: cannot read HarnessRun "done": the operator is not allowed',
        ),
        (
            {"promptFrom": {"runOutput": {"name": "done"}}},
            {"runs": {"done": SUCCEEDED}, "outputs": {"done": REFUSED}},
            Rejection,
            "InputUnavailable",
            "spec.promptFrom: cannot read ConfigMap done-output: the operator is not allowed",
        ),
    ],
    ids=[
        "unknown input reference",
        "missing ConfigMap key",
        "a refused Secret read names the refusal",
        "a run not there yet",
        "a run still running",
        "a run that failed",
        "a run that waits for itself",
        "a succeeded run without output",
        "an impostor output is not read",
        "a refused run read",
        "a refused output read",
    ],
)
def test_inputs_refused_or_waiting(
    spec: dict[str, Any], sources: dict[str, Any], kind: type[Exception], reason: str, message: str
) -> None:
    with pytest.raises(kind) as caught:
        resolve_inputs(MemoryReader(**sources), make_run(**spec))
    assert isinstance(caught.value, Rejection | Waiting)
    assert (caught.value.reason, caught.value.message) == (reason, message)


def test_an_unknown_reference_is_refused_before_any_read() -> None:
    reader = MemoryReader(runs={"x": REFUSED})
    with pytest.raises(Rejection) as caught:
        resolve_inputs(reader, make_run(prompt="$(inputs.NOPE)", after=["x"]))
    assert caught.value.reason == "UnknownInput"


def test_an_error_that_is_not_a_refusal_goes_back_to_the_caller() -> None:
    """A temporary API error is the handler's to retry, not a reason on the run."""
    reader = MemoryReader(runs={"x": ConnectionError("try again")})
    with pytest.raises(ConnectionError):
        resolve_inputs(reader, make_run(prompt="p", after=["x"]))


class SchemaReader(MemoryReader):
    """`review` succeeded with a spec.outputSchema and a JSON output; `done` has no schema."""

    def run(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        body = super().run(namespace, name)
        if body is not None and name == "review":
            body["spec"]["outputSchema"] = {"type": "object"}
        return body


def test_run_output_path_takes_one_field_of_a_validated_json_output() -> None:
    reader = SchemaReader(
        runs={"review": SUCCEEDED, "done": SUCCEEDED},
        outputs={
            "review": '```json\n{"verdict": "changes", "findings": [{"file": "a.py"}]}\n```',
            "done": "x",
        },
    )
    spec = {
        "prompt": "Verdict $(inputs.V) on $(inputs.F)",
        "inputs": [
            {"name": "V", "runOutput": {"name": "review", "path": "verdict"}},
            {"name": "F", "runOutput": {"name": "review", "path": "findings.0"}},
        ],
    }
    assert resolve_inputs(reader, make_run(**spec))[:2] == ('Verdict changes on {"file":"a.py"}', None)
    missing = {"promptFrom": {"runOutput": {"name": "review", "path": "score"}}}
    with pytest.raises(Rejection) as caught:
        resolve_inputs(reader, make_run(**missing))
    assert caught.value.reason == "InputUnavailable"
    assert caught.value.message == (
        "spec.promptFrom.runOutput.path: the output of HarnessRun \"review\" has no field 'score'; check the "
        "path against its spec.outputSchema"
    )
    unvalidated = {"promptFrom": {"runOutput": {"name": "done", "path": "verdict"}}}
    with pytest.raises(Rejection) as caught:
        resolve_inputs(reader, make_run(**unvalidated))
    assert caught.value.message.startswith(
        'spec.promptFrom.runOutput.path: HarnessRun "done" has no spec.outputSchema'
    )
