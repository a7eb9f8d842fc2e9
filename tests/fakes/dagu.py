"""Dagu round trips: import the DAGs of tests/fixtures/dagu, expand a pipeline into the runs it creates, make
every provider they use run the fake agent as if it were that CLI (it echoes its argv and stdin), and compare
with what Dagu executes (expected.yaml) in an order Dagu could run."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

from harness_operator.api.v1alpha1 import HarnessPipeline
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.dagu_import import dns_name, import_dagu, is_harness_step
from harness_operator.core.pipeline.graph import build_order
from harness_operator.core.pipeline.runs import StepRun, build_step_runs

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


def _run_names(name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """(the fixture DAG, Dagu step -> the run its harness step becomes: `<dag>-<step>`)."""
    dag = yaml.safe_load((FIXTURES / name).read_text())
    steps = dag.get("steps") or []
    labels = [str(s.get("id") or s.get("name")) for s in steps]
    runs = {
        label: f"{dns_name(Path(name).stem)}-{dns_name(label)}"
        for label, step in zip(labels, steps, strict=True)
        if is_harness_step(step, dag)
    }
    return dag, runs


def output_variables(name: str) -> dict[str, str]:
    """Dagu output variable -> the run whose output it is, from the fixture DAG's `output: NAME`."""
    dag, runs = _run_names(name)
    return {
        s["output"]: runs[str(s.get("id") or s.get("name"))]
        for s in dag.get("steps") or []
        if str(s.get("id") or s.get("name")) in runs and isinstance(s.get("output"), str)
    }


def dagu_dependencies(name: str) -> dict[str, set[str]]:
    """Run -> the runs Dagu finishes before it starts: a chain DAG's steps before it, a graph DAG's
    `depends:` (through steps that are not harness steps), read from the fixture DAG."""
    dag, runs = _run_names(name)
    labels = [str(s.get("id") or s.get("name")) for s in dag.get("steps") or []]
    chain = dag.get("type", "chain") == "chain"
    direct: dict[str, list[str]] = {}
    for index, (label, step) in enumerate(zip(labels, dag.get("steps") or [], strict=True)):
        depends = step.get("depends") or []
        direct[label] = (
            labels[index - 1 : index] if chain else [depends] if isinstance(depends, str) else depends
        )
    found: dict[str, set[str]] = {}
    for label, run in runs.items():
        seen: set[str] = set()
        todo = list(direct[label])
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo += direct[current]
        found[run] = {runs[s] for s in seen if s in runs}
    return found


def pipeline_runs(pipeline: dict[str, Any]) -> list[dict[str, Any]]:
    """The runs a HarnessPipeline creates (core/pipeline/runs.py), step by step in its build_order, each
    step's runs succeeded before the next; each run made to wait (spec.after) for the runs of the steps
    it is after but does not read, as the pipeline waits for them, so that all can be applied at once.
    Without the pipeline's owner reference (no pipeline object exists)."""
    model = HarnessPipeline.model_validate(
        {**pipeline, "metadata": {**pipeline["metadata"], "namespace": "default", "uid": "imported"}}
    )
    steps = {s.name: s for s in model.spec.steps}
    fanned = {s.name for s in model.spec.steps if s.matrix is not None}
    done: dict[str, list[StepRun]] = {}
    made: list[dict[str, Any]] = []
    for step in build_order(model.spec):
        for index, run in enumerate(build_step_runs(model, steps[step], done, fanned)):
            spec, name = run["spec"], run["metadata"]["name"]
            reads = {i["runOutput"]["name"] for i in spec.get("inputs", []) if "runOutput" in i}
            after = [r.name for a in steps[step].after for r in done[a] if r.name not in reads]
            if after:
                spec["after"] = after
            made.append({**manifests_header("HarnessRun", name), "spec": spec})
            ended = StepRun(
                name=name,
                uid="",
                step=step,
                index=index,
                matrix={},
                finished=True,
                succeeded=True,
                cancelled=False,
                phase="Succeeded",
                provider=spec["provider"],
                cost_usd=None,
            )
            done.setdefault(step, []).append(ended)
    return made


def imported_runs(name: str) -> list[dict[str, Any]]:
    """The definitions and runs of one fixture DAG as they run (expand_runs)."""
    return expand_runs(import_fixture(name))


def expand_runs(manifests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The definitions and runs of imported manifests as they run: a HarnessRun as imported; a pipeline's
    runs, or those of the pipeline or the run a schedule creates, as pipeline_runs makes them."""
    out: list[dict[str, Any]] = []
    for manifest in manifests:
        if manifest["kind"] == "HarnessSchedule":
            spec = manifest["spec"]
            kind, template = (
                ("HarnessPipeline", spec["pipelineTemplate"])
                if "pipelineTemplate" in spec
                else ("HarnessRun", spec["runTemplate"])
            )
            manifest = {**manifests_header(kind, manifest["metadata"]["name"]), "spec": template["spec"]}
        out += pipeline_runs(manifest) if manifest["kind"] == "HarnessPipeline" else [manifest]
    return out


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
