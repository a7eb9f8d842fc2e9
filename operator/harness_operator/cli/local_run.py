"""`harnessctl run`: execute the HarnessRuns and HarnessPipelines in manifest files on this machine, no
cluster (I/O).

Same plan builder, same executor as the pod. Definitions come from the files or the built-in catalog;
`secretKeyRef` resolves from Secret manifests in the files, else from the grant's own variable in
this environment (said on stderr). Output to stdout; progress and the agent's stderr to stderr; when
stdout is a terminal, also the live view of `harnessctl logs` (turns, tool calls, text, usage).
"""

from __future__ import annotations

import base64
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import yaml

from harness_operator.api.reasons import Reason, ReasonedError
from harness_operator.api.v1alpha1 import (
    HarnessDefinitionSpec,
    HarnessPipelineStatus,
    HarnessRun,
    HarnessRunStatus,
    Usage,
)
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.local_pipeline import run_pipeline
from harness_operator.cli.manifests import Document, load_documents
from harness_operator.cli.validation import ERROR, Catalog, build_catalog, validate_documents
from harness_operator.contract.events import Event, render_event
from harness_operator.contract.plan import AttemptPlan
from harness_operator.contract.result import fallback_line
from harness_operator.contract.structured_output import OutputMismatch, output_schema_problem, validate_output
from harness_operator.core.access.credentials import merge_grants
from harness_operator.core.attempt import decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.plan.plans import build_attempt_plans
from harness_operator.core.resolve.inputs import compute_dependencies, compute_run_order
from harness_operator.core.resolve.resolution import Rejection, resolve_inputs, resolve_targets
from harness_operator.core.resolve.retry import (
    backoff_seconds,
    build_positions,
    compute_next_index,
    retry_line,
    retry_number,
)
from harness_operator.core.status.observed import FINISHED, Observed, ObservedAttempt
from harness_operator.core.status.status import compute_status
from harness_operator.runner.executor import AttemptResult, execute

# `harnessctl run` runs the agents on this machine: no gateway, no network policy to wait for.
LOCAL_CONFIG = OperatorConfig()

Key = tuple[str, str]


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def collect_secrets(docs: list[Document]) -> dict[Key, dict[str, str]]:
    """Secret manifests' values: `data` (base64) then `stringData` (wins, as the API server does)."""
    out: dict[Key, dict[str, str]] = {}
    for doc in docs:
        if doc.kind != "Secret" or doc.error:
            continue
        values: dict[str, str] = {}
        for key, raw in (doc.obj.get("data") or {}).items():
            try:
                values[str(key)] = base64.b64decode(str(raw)).decode("utf-8")
            except ValueError:
                say(f"harness: {doc.path}: Secret {doc.name}: data.{key} is not valid base64; ignored")
        values.update({str(k): str(v) for k, v in (doc.obj.get("stringData") or {}).items()})
        out[(doc.namespace, doc.name)] = values
    return out


def collect_config_maps(docs: list[Document]) -> dict[Key, dict[str, str]]:
    return {
        (d.namespace, d.name): {str(k): str(v) for k, v in (d.obj.get("data") or {}).items()}
        for d in docs
        if d.kind == "ConfigMap" and not d.error
    }


class FileReader:
    """resolution.Reader over the files given to `harnessctl run` and the runs finished so far."""

    def __init__(self, docs: list[Document], catalog: Catalog) -> None:
        self.catalog = catalog
        self.secrets = collect_secrets(docs)
        self.config_maps = collect_config_maps(docs)
        self.runs: dict[Key, dict[str, Any]] = {}
        self.outputs: dict[Key, bytes] = {}

    def definition(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return self.catalog.definition(namespace, name)

    def config_map_key(self, namespace: str, name: str, key: str) -> str | None:
        return self.config_maps.get((namespace, name), {}).get(key)

    def secret_key(self, namespace: str, name: str, key: str) -> str | None:
        return self.secrets.get((namespace, name), {}).get(key)

    def run(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.runs.get((namespace, name))

    def run_output(self, run: Mapping[str, Any]) -> str | None:
        output = self.outputs.get((run["metadata"]["namespace"], run["metadata"]["name"]))
        return None if output is None else output.decode("utf-8", "replace")


class LocalRunner:
    """Runs one file set's HarnessRuns in order; later runs may read earlier runs' output."""

    def __init__(
        self,
        docs: list[Document],
        catalog: Catalog,
        cancel: threading.Event,
        view: Callable[[Event], None] | None = None,
    ) -> None:
        self.view = view
        self.cancel = cancel
        self.files = FileReader(docs, catalog)

    def credentials_for(
        self, run: HarnessRun, namespace: str, definition: HarnessDefinitionSpec
    ) -> dict[str, str]:
        values: dict[str, str] = {}
        for name, grant in sorted(merge_grants(run, definition).items()):
            ref = grant.secret_key_ref
            secret = self.files.secrets.get((namespace, ref.name), {})
            if ref.key in secret:
                values[name] = secret[ref.key]
            elif name in os.environ:
                values[name] = os.environ[name]
                say(
                    f"harness: {name}: Secret {namespace}/{ref.name} key {ref.key} is not in the given "
                    f"files; using ${name} from this environment"
                )
            elif not grant.optional:
                say(
                    f"harness: {name}: Secret {namespace}/{ref.name} key {ref.key} is not in the given files "
                    f"and ${name} is not set"
                )
        return values

    def run(self, doc: Document) -> tuple[HarnessRunStatus, int]:
        obj = {**doc.obj, "metadata": {**doc.obj.get("metadata", {}), "namespace": doc.namespace}}
        run = HarnessRun.model_validate(obj)
        label = f"{doc.namespace}/{doc.name}"
        try:
            if problem := output_schema_problem(run.spec.output_schema):
                raise Rejection(Reason.InvalidSpec, problem)
            if run.spec.resume_from is not None:
                raise Rejection(
                    Reason.InvalidSpec,
                    "spec.resumeFrom: harnessctl run keeps no session between runs (the earlier run's "
                    "session lives in its pod's log); run it on a cluster, or drop resumeFrom",
                )
            # The operator's plan path, with no gateway on this machine (OperatorConfig's defaults).
            decided = decide_attempts(run, resolve_targets(self.files, run), LOCAL_CONFIG)
            prompt, stdin, secret_values = resolve_inputs(self.files, run)
            definitions = {a.provider: a.definition for a in decided}
            now = datetime.now(UTC)
            plans = build_attempt_plans(run, decided, prompt, stdin, now, LOCAL_CONFIG, None, secret_values)
        except ReasonedError as exc:  # the seam's Rejection or Waiting, or a PlanError
            say(f"harness: HarnessRun {label}: {exc.message}")
            return rejected(run, exc.reason, exc.message), 1
        except ValueError as exc:
            say(f"harness: HarnessRun {label}: {exc}")
            return rejected(run, Reason.InvalidSpec, str(exc)), 1
        results: list[AttemptResult] = []
        positions = build_positions(run.spec)
        index: int | None = 1
        while index is not None:
            plan = plans[index - 1]
            say(f"harness: HarnessRun {label}: attempt {plan.attempt}/{plan.total_attempts}: {plan.provider}")
            if definitions[plan.provider].model_route is not None:
                say(
                    f"harness: {plan.provider}: no model gateway on this machine: the CLI uses your key "
                    "directly and its usage is what it reports (in a cluster the gateway holds the key and "
                    "meters it)"
                )
            credentials = self.credentials_for(run, doc.namespace, definitions[plan.provider])
            result = execute(plan, credentials, cancel=self.cancel, on_event=self.view)
            results.append(result)
            index = None
            if not result.succeeded:
                index = compute_next_index(
                    positions, plan.attempt, run.spec.retry, result.reason, result.exit_code
                )
            if index is not None and not self._announce(run, plan, result, plans[index - 1], positions):
                break  # cancelled while a retry waited
        last = results[-1]
        output = last.output if last.succeeded else None
        invalid = None
        if output is not None and run.spec.output_schema is not None:
            checked = validate_output(run.spec.output_schema, output.decode("utf-8", "replace"))
            if isinstance(checked, OutputMismatch):
                invalid = (Reason.OutputInvalid, checked.message)
        if output is not None:
            self.files.outputs[(doc.namespace, doc.name)] = output
        attempts = [
            ObservedAttempt(
                r.attempt, r.provider, state=FINISHED, start_time=r.start_time, result=r.to_result()
            )
            for r in results
        ]
        observed = Observed(
            [p.provider for p in plans],
            attempts,
            output=output,
            positions=positions,
            output_invalid=invalid,
            cancelled=self.cancel.is_set(),
        )
        status = compute_status(run, observed, datetime.now(UTC))
        self.files.runs[(doc.namespace, doc.name)] = {**obj, "status": status.to_api()}
        say(summary_line(label, status))
        return status, 1 if invalid else last.exit_code

    def _announce(
        self,
        run: HarnessRun,
        failed: AttemptPlan,
        result: AttemptResult,
        following: AttemptPlan,
        positions: list[int],
    ) -> bool:
        """Say which attempt follows the failed one (Dagu's fallback line, or a retry's) and wait out a
        retry's backoff; False when a cancel came meanwhile."""
        nth = retry_number(positions, following.attempt)
        if nth == 0:
            total = failed.total_attempts
            say(fallback_line(failed.attempt, total, failed.provider, following.provider, following.attempt))
            return True
        limit = run.spec.retry.limit if run.spec.retry else 0
        delay = backoff_seconds(run.spec.retry, nth)
        line = retry_line(
            failed.attempt,
            failed.total_attempts,
            failed.provider,
            result.reason,
            nth,
            limit,
            following.attempt,
        )
        say(f"harness: {line} in {delay}s")
        return not self.cancel.wait(delay)


def build_run_order(runs: list[Document]) -> list[Document]:
    """The runs in file order, except that the runs one waits for (spec.after, runOutput) come first;
    `validate` has refused cycles already."""
    by_label = {f"{d.namespace}/{d.name}": d for d in runs}
    graph = {
        label: [
            f"{doc.namespace}/{name}"
            for _, name in compute_dependencies(HarnessRun.model_validate(doc.obj).spec)
        ]
        for label, doc in by_label.items()
    }
    return [by_label[label] for label in compute_run_order(graph)]


def show_event(event: Event) -> None:
    """The live view on stderr (stdout carries the output)."""
    line = render_event(event)
    if line is not None:
        say(line)


def rejected(run: HarnessRun, reason: str, message: str) -> HarnessRunStatus:
    """The status of a run that could not start (Accepted=False), as the operator writes it."""
    return compute_status(run, Observed([], rejected=(reason, message)), datetime.now(UTC))


def describe_usage(usage: Usage | None) -> str:
    """tokens and cost for humans; unknown figures say so, never 0."""
    if usage is None:
        return "usage unknown"

    def n(value: int | None) -> str:
        return "?" if value is None else str(value)

    tokens = (
        f"tokens in {n(usage.input_tokens)}, out {n(usage.output_tokens)}, "
        f"cache read {n(usage.cache_read_tokens)}, cache write {n(usage.cache_write_tokens)}"
    )
    cost = "cost unknown" if usage.cost_usd is None else f"cost ${usage.cost_usd:.6f}"
    return f"{tokens}; {cost} (costSource: {usage.cost_source})"


def summary_line(label: str, status: HarnessRunStatus) -> str:
    return (
        f"harness: HarnessRun {label}: {status.phase} ({status.reason}, exit {status.exit_code}); "
        f"{describe_usage(status.usage)}"
    )


def render_statuses(statuses: list[tuple[str, HarnessRunStatus | HarnessPipelineStatus]]) -> str:
    """One YAML document per object run, each its `status` as the CR would hold it, under a comment naming
    it (`HarnessRun NS/NAME`, `HarnessPipeline NS/NAME`)."""
    parts = []
    for label, status in statuses:
        body = yaml.safe_dump(
            status.model_dump(by_alias=True, exclude_none=True, mode="json"), sort_keys=False
        )
        parts.append(f"# {label}\n{body}")
    return "---\n".join(parts)


@contextmanager
def cancel_on_signals(cancel: threading.Event) -> Iterator[None]:
    """Ctrl-C or SIGTERM cancel the run: the agent's group gets SIGTERM, then SIGKILL after the grace."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        cancel.set()

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_paths(paths: list[str], status_file: str | None) -> int:
    """Validate the files, then run each HarnessRun in order, then each HarnessPipeline; the exit code is
    the (failed) run's."""
    docs = load_documents(paths)
    if not docs:
        say(f"harnessctl: no manifests found in {' '.join(paths)}")
        return 1
    builtins = load_builtin_catalog()
    findings = validate_documents(docs, builtins)
    for finding in findings:
        say(finding.render())
    errors = [f for f in findings if f.severity == ERROR]
    if errors:
        say(f"harnessctl: {len(errors)} errors in the manifests; nothing was run")
        return 1
    runs = build_run_order([d for d in docs if d.kind == "HarnessRun"])
    todo = runs + [d for d in docs if d.kind == "HarnessPipeline"]
    if not todo:
        say(f"harnessctl: no HarnessRun or HarnessPipeline in {' '.join(paths)}")
        return 1
    cancel = threading.Event()
    runner = LocalRunner(
        docs, build_catalog(docs, builtins), cancel, show_event if sys.stdout.isatty() else None
    )
    statuses: list[tuple[str, HarnessRunStatus | HarnessPipelineStatus]] = []
    code = 0
    with cancel_on_signals(cancel):
        for index, doc in enumerate(todo):
            label = f"{doc.namespace}/{doc.name}"
            if doc.kind == "HarnessPipeline":
                outcome = run_pipeline(doc, runner.run, runner.files.outputs, cancel)
                statuses += [(f"HarnessRun {name}", status) for name, status in outcome.runs]
                statuses.append((f"HarnessPipeline {label}", outcome.status))
                outputs, code = outcome.outputs, outcome.code
            else:
                status, code = runner.run(doc)
                statuses.append((f"HarnessRun {label}", status))
                output = runner.files.outputs.get((doc.namespace, doc.name))
                outputs = [output] if code == 0 and output is not None else []
            for output in outputs:
                write_output(output)
            if code != 0:
                left = Counter(d.kind for d in todo[index + 1 :])
                if left:
                    counts = ", ".join(f"{n} remaining {kind}(s)" for kind, n in left.items())
                    say(f"harness: {counts} not run after a failure")
                break
    if status_file:
        with open(status_file, "w", encoding="utf-8") as fh:
            fh.write(render_statuses(statuses))
    return code


def write_output(output: bytes) -> None:
    sys.stdout.buffer.write(output)
    if output and not output.endswith(b"\n") and sys.stdout.isatty():
        sys.stdout.buffer.write(b"\n")
    sys.stdout.flush()
