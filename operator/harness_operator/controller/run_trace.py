"""A traced run's spans sent on as its status is written (I/O): the operator's (core/status/trace.py),
and the runner's, which end its attempt's log (contract/runner_spans.py: one bounded tail read of an
attempt that has just ended, taken as the sandbox's word under the attempt's span). A span that cannot
be built, read or sent is logged and dropped: tracing never holds a run back."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import structlog

from harness_operator.api.v1alpha1 import Attempt, HarnessRun, HarnessRunStatus
from harness_operator.contract.runner_spans import TAIL_BYTES, TAIL_LINES, build_span_records, find_spans_line
from harness_operator.contract.times import parse_time
from harness_operator.contract.tracing import SpanRecord
from harness_operator.controller.kube import Kube
from harness_operator.controller.workers import Workers
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.traced import compute_run_trace_id
from harness_operator.core.status.observed import PodStep
from harness_operator.core.status.trace import build_run_spans, compute_newly_ended
from harness_operator.telemetry import Traces

log = structlog.get_logger("harness_operator")
SECOND = 1_000_000_000


class RunTracing:
    """The run's trace id for its status, and its spans for `traces` (None: tracing is off); the
    runner's are read from the attempt's cluster (`workers`; `kube`: this one)."""

    def __init__(
        self,
        traces: Traces | None,
        config: OperatorConfig,
        clock: Callable[[], datetime],
        kube: Kube,
        workers: Workers,
    ) -> None:
        self.traces, self.config, self.clock = traces, config, clock
        self.kube, self.workers = kube, workers

    def with_trace_id(self, run: HarnessRun, status: HarnessRunStatus) -> HarnessRunStatus:
        """`status` naming the run's trace when it is traced."""
        trace_id = None if self.traces is None else compute_run_trace_id(run.metadata["uid"], self.config)
        return status if trace_id is None else status.model_copy(update={"trace_id": trace_id})

    def record(
        self,
        run: HarnessRun,
        before: HarnessRunStatus | None,
        after: HarnessRunStatus,
        steps: Mapping[int, Sequence[PodStep]],
    ) -> None:
        """Send the spans the write from `before` to `after` completed."""
        if self.traces is None or after.trace_id is None:
            return
        try:
            content = self.config.tracing_record_content
            spans = build_run_spans(run, before, after, steps, self.clock(), content)
            for attempt in compute_newly_ended(before, after):
                spans += self._runner_spans(run, attempt, steps.get(attempt.index, ()))
            if spans:
                self.traces.export(after.trace_id, spans)
        except Exception as exc:  # a span is worth less than the run's progress
            log.warning("Exporting the run's spans failed", run=run.metadata["name"], error=repr(exc))

    def _runner_spans(self, run: HarnessRun, attempt: Attempt, steps: Sequence[PodStep]) -> list[SpanRecord]:
        """The spans the attempt's runner wrote last in its log, within when its container ran (whole
        seconds: the start floored, the end a second on); none without the kubelet's record of it."""
        runner = next((step for step in steps if step.name == "runner"), None)
        if runner is None or attempt.pod_name is None:
            return []
        started, finished = parse_time(runner.start), parse_time(runner.end)
        if started is None or finished is None:
            return []
        kube = self.workers.kube_of(attempt.cluster, self.kube)
        tail = kube.fetch_pod_log_tail(run.metadata["namespace"], attempt.pod_name, TAIL_LINES, TAIL_BYTES)
        window = (int(started.timestamp()) * SECOND, (int(finished.timestamp()) + 1) * SECOND)
        return build_span_records(find_spans_line(tail or ""), run.metadata["uid"], attempt.index, window)
