"""The model gateway's side of an attempt's end: its token revoked, its meter read into its result; and of
the run's end: its meter read, what no attempt's shows counted (I/O; the decisions are
core/status/metered.py's)."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from collections.abc import Sequence

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import Attempt, HarnessRun, Usage
from harness_operator.contract.model_access import (
    MeteredUsage,
    build_meter_reader_token,
)
from harness_operator.controller.errors import MeterUnavailable, retries_of
from harness_operator.controller.grants import Grants
from harness_operator.controller.kube import Kube
from harness_operator.core.attempt import Attempt as DecidedAttempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.status.metered import (
    compute_unattributed,
    compute_usage_mismatch,
    is_meter_whole,
    with_metered,
    with_refused_key,
    with_reported,
)
from harness_operator.core.status.observed import ObservedAttempt

TIMEOUT_SECONDS = 5


class MeterReader:
    """An attempt's meter, from the gateway's admin port, with the operator's reader token."""

    def __init__(self, config: OperatorConfig) -> None:
        self.base = f"http://{config.model_gateway_service}:{config.model_gateway_admin_port}/meters"
        self.token = build_meter_reader_token(config.model_gateway_key) if config.model_gateway_key else ""

    def read(self, run_uid: str, attempt: int | None) -> MeteredUsage:
        """Attempt `attempt`'s meter; None: the run's (all its attempts together)."""
        path = f"{run_uid}/{attempt}" if attempt is not None else run_uid
        request = urllib.request.Request(
            f"{self.base}/{path}", headers={"Authorization": f"Bearer {self.token}"}
        )
        what = f"attempt {attempt}" if attempt is not None else "the run"
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
                return MeteredUsage.model_validate(json.load(response))
        except (OSError, ValueError) as exc:  # URLError is an OSError
            raise MeterUnavailable(f"the model gateway's meter of {what}: {exc}") from exc


class AttemptMetering:
    """Reads the model gateway's meters of a run's attempts and of the run; `grants` revokes first."""

    def __init__(
        self, kube: Kube, config: OperatorConfig, grants: Grants, reader: MeterReader | None = None
    ) -> None:
        self.kube, self.config, self.grants = kube, config, grants
        self.reader = reader or MeterReader(config)

    def meter(
        self,
        run: HarnessRun,
        decided: Sequence[DecidedAttempt],
        attempts: list[ObservedAttempt],
        retry: int = 0,
    ) -> list[ObservedAttempt]:
        """Each routed attempt that has ended, with the gateway's meter as its usage. Its token is
        revoked first, so nothing is spent after the reading; an attempt whose metered usage status
        already records keeps it, read once. A gateway that does not answer is asked again (a temporary
        error) as the meter retry policy says (errors.RETRY); then the sandbox's report counts, with a
        MeterLost Warning. A refused key's AuthFailed names the key's Secret (core/status/metered)."""
        recorded = {a.index: a for a in (run.status.attempts if run.status else [])}
        out = []
        for attempt in attempts:
            result = attempt.result
            target = decided[attempt.index - 1] if 1 <= attempt.index <= len(decided) else None
            if result is None or target is None or target.model_route is None:
                out.append(attempt)
                continue
            result = with_refused_key(result, run, target.model_route, self.config)
            prior = recorded.get(attempt.index)
            if prior is not None and prior.reported_usage is not None:
                kept = result.model_copy(
                    update={"usage": prior.usage, "reported_usage": prior.reported_usage}
                )
                out.append(dataclasses.replace(attempt, result=kept))
                continue
            self.grants.revoke_attempt(run, attempt.index)
            try:
                meter = self.reader.read(run.metadata["uid"], attempt.index)
            except MeterUnavailable as exc:
                if retry < retries_of("meter"):
                    raise
                self.kube.create_event(
                    {"metadata": run.metadata},
                    "Warning",
                    Reason.MeterLost,
                    f"attempt {attempt.index} ({attempt.provider}): {exc}, {retry} times: its usage is what "
                    "the sandbox reported",
                )
                out.append(dataclasses.replace(attempt, result=with_reported(result)))
                continue
            if not is_meter_whole(meter, attempt.start_time):
                self.kube.create_event(
                    {"metadata": run.metadata},
                    "Warning",
                    Reason.MeterLost,
                    f"attempt {attempt.index} ({attempt.provider}): the model gateway's store has kept "
                    f"meters only since {meter.store_since or 'now'}, after the attempt started: its usage "
                    "is what the sandbox reported",
                )
                out.append(dataclasses.replace(attempt, result=with_reported(result)))
                continue
            metered = with_metered(result, meter, run)
            mismatch = compute_usage_mismatch(result.usage, metered.usage) if metered.usage else None
            if mismatch:
                self.kube.create_event(
                    {"metadata": run.metadata},
                    "Warning",
                    Reason.UsageMismatch,
                    f"attempt {attempt.index} ({attempt.provider}): the sandbox's usage differs from the "
                    f"model gateway's meter, which counts: {mismatch}",
                )
            out.append(dataclasses.replace(attempt, result=metered))
        return out

    def meter_run(self, run: HarnessRun, attempts: Sequence[Attempt], retry: int) -> Usage | None:
        """At the run's end: what the gateway metered for it beyond its attempts' readings (`attempts`,
        as its status records them), to count in its usage and budget charge; None when nothing. A
        gateway that does not answer is asked again as the meter retry policy says; then a MeterLost
        Warning. The run's model grant goes first: no token of it spends after the reading."""
        self.grants.revoke_model(run.metadata["namespace"], run.metadata["name"])
        try:
            meter = self.reader.read(run.metadata["uid"], None)
        except MeterUnavailable as exc:
            if retry < retries_of("meter"):
                raise
            self.kube.create_event(
                {"metadata": run.metadata},
                "Warning",
                Reason.MeterLost,
                f"{exc}, {retry} times: spend no attempt's meter shows is not counted",
            )
            return None
        # An attempt read from its meter keeps the sandbox's word beside it (reportedUsage), priced or not:
        # a model without a price leaves its cost unknown, and its tokens are the meter's all the same.
        metered = [a.usage for a in attempts if a.usage and a.reported_usage is not None]
        rest = compute_unattributed(meter, metered)
        if rest is not None and rest.cost_usd:
            self.kube.create_event(
                {"metadata": run.metadata},
                "Warning",
                Reason.UsageMismatch,
                f"the model gateway metered {rest.cost_usd:.6f} USD for the run beyond its attempts' "
                "meters (through the token of an attempt that did not run, or after an attempt's reading): "
                "it counts in the run's usage",
            )
        return rest
