"""`harnessctl render`: the objects the operator would create for each run, and the runs each pipeline
creates first (pure).

Nothing secret is read: credentials appear only as secretKeyRefs, and a prompt or stdin taken from a
ConfigMap, Secret or another run (directly or as an input) shows as a placeholder naming its source.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from harness_operator.api.v1alpha1 import (
    ClusterHarnessDefinition,
    HarnessPipeline,
    HarnessRun,
    RunInput,
    ValueSource,
)
from harness_operator.cli.manifests import Document
from harness_operator.cli.validation import build_catalog
from harness_operator.core.attempt import decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pipeline.decide import decide_pipeline
from harness_operator.core.pipeline.graph import build_order, count_combinations
from harness_operator.core.plan.planning import PlanError
from harness_operator.core.plan.plans import build_plans
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.network_policy import build_network_policy
from harness_operator.core.pod.run_data import build_plan_secret
from harness_operator.core.pod.workspace import build_workspace_claim
from harness_operator.core.queue.kueue import resolve_queue
from harness_operator.core.resolve.resolution import (
    Rejection,
    check_references,
    compose_inputs,
    resolve_targets,
)

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


OPERATOR_CONTAINER = "operator"  # the chart's Deployment names its container so
SECRET_PLACEHOLDER = "<from a Secret>"


def read_operator_env(docs: Sequence[Document]) -> dict[str, str]:
    """The environment of the operator container in the first Deployment of `docs` that has one (the
    chart as `helm template` renders it, or `kubectl get deployment -o yaml` of an installed one); a
    value the Deployment reads from a Secret or a field stands as SECRET_PLACEHOLDER. Empty: none found."""
    for doc in docs:
        if doc.kind != "Deployment" or doc.error:
            continue
        containers = (((doc.obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers")
        for container in containers or []:
            if container.get("name") == OPERATOR_CONTAINER:
                return {
                    e["name"]: str(e["value"]) if "value" in e else SECRET_PLACEHOLDER
                    for e in container.get("env") or []
                }
    return {}


def build_rendered_objects(
    docs: Sequence[Document],
    builtins: Iterable[ClusterHarnessDefinition],
    config: OperatorConfig,
    now: datetime,
) -> tuple[list[dict[str, Any]], list[str]]:
    """(objects, problems): every child of every HarnessRun in `docs`, in the order the operator applies
    them; a run the operator would refuse (unknown provider or input, no way to pass its arguments) is
    listed as a problem instead."""
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
        try:
            attempts = decide_attempts(run, resolve_targets(catalog, run), config)
            check_references(run.spec)
            prompt, stdin = compose_inputs(run.spec, lambda _, source: describe_source(source))
            plans = build_plans(run, attempts, prompt, stdin, now, config)
        except (Rejection, PlanError) as exc:
            problems.append(f"{doc.path}: HarnessRun/{doc.name}: {exc.reason}: {exc.message}")
            continue
        objects.append(build_plan_secret(run, plans))
        claim = build_workspace_claim(run, attempts[0].provider)
        if claim is not None:
            objects.append(claim)
        for attempt in attempts:
            objects.append(build_network_policy(run, attempt, config))
            objects.append(
                build_job(run, attempt, config, queue=resolve_queue(run, config.kueue_default_queue, False))
            )
    return objects, problems


def build_pipeline_wave(doc: Document, now: datetime) -> tuple[list[dict[str, Any]], list[str]]:
    """(runs, notes): the HarnessRuns a new pipeline creates at once, as the operator decides them (every
    combination of each step that runs after none), and one note for each later step, in the steps'
    order."""
    raw = {
        **doc.obj,
        "metadata": {**doc.obj.get("metadata", {}), "namespace": doc.namespace, "uid": UID_PLACEHOLDER},
    }
    pipeline = HarnessPipeline.model_validate(raw)
    runs = [run for _, run in decide_pipeline(pipeline, [], now).create]
    steps = {s.name: s for s in pipeline.spec.steps}
    notes = []
    for name in build_order(pipeline.spec):
        step = steps[name]
        if not step.after:
            continue
        count = count_combinations(step.matrix)
        what = "its run is" if count == 1 else f"its {count} runs are"
        ends = f"step {step.after[0]} ends" if len(step.after) == 1 else f"steps {', '.join(step.after)} end"
        notes.append(f"HarnessPipeline {doc.namespace}/{doc.name}: step {name}: {what} created when {ends}")
    return runs, notes
