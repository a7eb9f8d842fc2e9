"""A traced run's spans sent on as its status is written (I/O): the operator's (core/status/trace.py),
and the runner's as its attempt's log ends with them. A span that cannot be built or sent is logged and
dropped: tracing never holds a run back."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

import structlog

from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunStatus
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.traced import compute_run_trace_id
from harness_operator.core.status.observed import PodStep
from harness_operator.core.status.trace import build_run_spans
from harness_operator.telemetry import Traces

log = structlog.get_logger("harness_operator")


class RunTracing:
    """The run's trace id for its status, and its spans for `traces` (None: tracing is off)."""

    def __init__(self, traces: Traces | None, config: OperatorConfig, clock: Callable[[], datetime]) -> None:
        self.traces, self.config, self.clock = traces, config, clock

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
            spans = build_run_spans(run, before, after, steps, self.clock())
            if spans:
                self.traces.export(after.trace_id, spans)
        except Exception as exc:  # a span is worth less than the run's progress
            log.warning("Exporting the run's spans failed", run=run.metadata["name"], error=repr(exc))
