"""An attempt's meter as the operator reads it (controller/metering.py): a routed attempt that ended has
its token revoked, then the gateway's meter as its usage (the sandbox's report kept beside it, a
difference warned of); a meter read before is kept, not read again; a gateway that stays silent, or a
store that lost the meter, leaves the sandbox's report counting with a MeterLost Warning."""

from typing import Any

import pytest
from tests.unit.controller.test_grants import CLAUDE, GATEWAYS, ApiServer, live, make_run, targets

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import CostSource, HarnessDefinitionSpec, HarnessRun
from harness_operator.contract.model_access import MeteredUsage
from harness_operator.contract.result import ResultDocument
from harness_operator.controller.errors import MeterUnavailable, retries_of
from harness_operator.controller.grants import Grants
from harness_operator.controller.metering import AttemptMetering
from harness_operator.core.status.observed import FINISHED, ObservedAttempt

STARTED = "2026-12-01T08:00:00Z"
WHOLE = MeteredUsage(
    requests=2, input_tokens=100, output_tokens=10, cost_usd=0.5, store_since="2026-12-01T00:00:00Z"
)


class Reader:
    """The gateway's meters by attempt; None: it does not answer."""

    def __init__(self, meter: MeteredUsage | None) -> None:
        self.meter = meter
        self.reads: list[int | None] = []

    def read(self, run_uid: str, attempt: int | None) -> MeteredUsage:
        self.reads.append(attempt)
        if self.meter is None:
            raise MeterUnavailable(f"the model gateway's meter of attempt {attempt}: refused")
        return self.meter


def ended(index: int = 1, **usage: Any) -> ObservedAttempt:
    result = ResultDocument.model_validate(
        {
            "attempt": index,
            "provider": "p",
            "exitCode": 0,
            "usage": usage or {"inputTokens": 100, "outputTokens": 10},
        }
    )
    return ObservedAttempt(index, "p", f"review-a{index}", None, FINISHED, start_time=STARTED, result=result)


def metering(api: ApiServer, reader: Reader) -> AttemptMetering:
    return AttemptMetering(api, GATEWAYS, Grants(api, GATEWAYS), reader)  # type: ignore[arg-type]


def started(api: ApiServer) -> HarnessRun:
    """A routed run whose attempt 1 is live in the model grant."""
    run = make_run()
    Grants(api, GATEWAYS).admit(run, targets(run), 1)  # type: ignore[arg-type]
    assert live(api, run) == [1]
    return run


def test_an_ended_attempt_is_revoked_then_metered() -> None:
    api, reader = ApiServer(), Reader(WHOLE)
    run = started(api)
    [attempt] = metering(api, reader).meter(run, targets(run), [ended()])
    assert live(api, run) == []  # its token opens nothing any more
    assert reader.reads == [1]
    assert attempt.result is not None and attempt.result.usage is not None
    assert (attempt.result.usage.cost_usd, attempt.result.usage.cost_source) == (0.5, CostSource.metered)
    assert attempt.result.reported_usage is not None and attempt.result.reported_usage.input_tokens == 100
    assert api.events == []


def test_a_sandbox_that_reports_other_figures_is_warned_of() -> None:
    api = ApiServer()
    run = started(api)
    metering(api, Reader(WHOLE)).meter(run, targets(run), [ended(inputTokens=5, outputTokens=1)])
    assert [r for r, _ in api.events] == [Reason.UsageMismatch]


def test_an_attempt_metered_before_is_not_read_again_and_an_unrouted_one_never() -> None:
    api, reader = ApiServer(), Reader(WHOLE)
    recorded = {"attempts": [{"index": 1, "provider": "p", "usage": {"costUSD": 0.4}, "reportedUsage": {}}]}
    run = HarnessRun.model_validate({**make_run().to_api(), "status": recorded})
    plain = HarnessDefinitionSpec.model_validate({"binary": "tool"})
    [first, second] = metering(api, reader).meter(run, targets(run, CLAUDE, plain), [ended(1), ended(2)])
    assert reader.reads == []
    assert first.result is not None and first.result.usage is not None and first.result.usage.cost_usd == 0.4
    assert second == ended(2)


def test_a_silent_gateway_is_asked_again_then_the_sandboxs_report_counts() -> None:
    api = ApiServer()
    run = started(api)
    with pytest.raises(MeterUnavailable):
        metering(api, Reader(None)).meter(run, targets(run), [ended()], retries_of("meter") - 1)
    [attempt] = metering(api, Reader(None)).meter(run, targets(run), [ended()], retries_of("meter"))
    assert attempt.result is not None and attempt.result.reported_usage is not None
    assert [r for r, _ in api.events] == [Reason.MeterLost]
    assert api.events[0][1].endswith("7 times: its usage is what the sandbox reported")


def test_a_meter_the_store_lost_leaves_the_sandboxs_report_counting() -> None:
    api = ApiServer()
    run = started(api)
    lost = WHOLE.model_copy(update={"store_since": "2026-12-01T09:00:00Z"})  # the store restarted since
    [attempt] = metering(api, Reader(lost)).meter(run, targets(run), [ended()])
    assert attempt.result is not None and attempt.result.usage is not None
    assert attempt.result.usage.input_tokens == 100 and attempt.result.reported_usage is not None
    assert [r for r, _ in api.events] == [Reason.MeterLost]
