"""`harnessctl render`: the objects the operator would create for each run (pure).

Nothing secret is read: credentials appear only as secretKeyRefs, and a prompt or stdin taken from a
ConfigMap, Secret or another run (directly or as an input) shows as a placeholder naming its source.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from harness_operator.api.v1alpha1 import ClusterHarnessDefinition, HarnessRun, RunInput, ValueSource
from harness_operator.config import OperatorConfig
from harness_operator.desired import (
    AttemptTarget,
    build_job,
    build_network_policy,
    build_plan_secret,
    build_plans,
    build_workspace_claim,
)
from harness_operator.inputs import InputReferenceError, substitute_inputs
from harness_operator.manifests import Document
from harness_operator.runner.plan import PlanError
from harness_operator.validation import build_catalog

UID_PLACEHOLDER = "<uid assigned by the API server>"


def describe_source(source: ValueSource | RunInput) -> str:
    """What the operator reads at run time, for a source render cannot read."""
    if isinstance(source, RunInput) and source.value is not None:
        return source.value
    if source.config_map_key_ref:
        return f"<ConfigMap {source.config_map_key_ref.name} key {source.config_map_key_ref.key}>"
    if source.secret_key_ref:
        return f"<Secret {source.secret_key_ref.name} key {source.secret_key_ref.key}>"
    assert source.run_output is not None
    return f"<output of HarnessRun {source.run_output.name}>"


def build_rendered_objects(
    docs: Sequence[Document],
    builtins: Iterable[ClusterHarnessDefinition],
    config: OperatorConfig,
    now: datetime,
) -> tuple[list[dict[str, Any]], list[str]]:
    """(objects, problems): every child of every HarnessRun in `docs`, in the order the operator applies
    them; a run whose provider is unknown is listed as a problem instead."""
    catalog = build_catalog(docs, builtins)
    objects: list[dict[str, Any]] = []
    problems: list[str] = []
    for doc in docs:
        if doc.kind != "HarnessRun" or doc.error:
            continue
        raw = {
            **doc.obj,
            "metadata": {**doc.obj.get("metadata", {}), "namespace": doc.namespace, "uid": UID_PLACEHOLDER},
        }
        run = HarnessRun.model_validate(raw)
        spec = run.spec
        chain = [spec.provider] + [fb.provider for fb in spec.fallback]
        targets = []
        for index, provider in enumerate(chain, start=1):
            definition = catalog.resolve(doc.namespace, provider)
            if definition is None:
                problems.append(f'{doc.path}: HarnessRun/{doc.name}: unknown provider "{provider}"')
                break
            targets.append(AttemptTarget(index, provider, definition))
        if len(targets) != len(chain):
            continue
        values = {item.name: describe_source(item) for item in spec.inputs}
        try:
            inline_prompt = None if spec.prompt is None else substitute_inputs(spec.prompt, values)
            inline_stdin = None if spec.stdin is None else substitute_inputs(spec.stdin, values)
        except InputReferenceError as exc:
            problems.append(f"{doc.path}: HarnessRun/{doc.name}: UnknownInput: {exc}")
            continue
        prompt = inline_prompt if inline_prompt is not None else describe_source(spec.prompt_from)  # type: ignore[arg-type]
        stdin = inline_stdin if spec.stdin_from is None else describe_source(spec.stdin_from)
        try:
            plans = build_plans(run, targets, prompt, stdin, now)
        except PlanError as exc:
            problems.append(f"{doc.path}: HarnessRun/{doc.name}: {exc.reason}: {exc.message}")
            continue
        objects.append(build_plan_secret(run, plans))
        claim = build_workspace_claim(run, targets[0].provider)
        if claim is not None:
            objects.append(claim)
        for target in targets:
            objects.append(build_network_policy(run, target, config))
            objects.append(build_job(run, target, config))
    return objects, problems
