"""Collecting a run's results (controller/run_collect.py) from pod logs a fake API server serves: the
successful attempt's output kept in the output ConfigMap, checked against spec.outputSchema; a log that
lags is read again before the output is given up with an Event; the published change's patch kept in
the changes ConfigMap, a publisher without a report failing the run; a worker's pod read on its worker."""

import hashlib
from typing import Any

import pytest

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.frame import encode_frame
from harness_operator.contract.result import ResultDocument
from harness_operator.controller.errors import LogNotComplete, retries_of
from harness_operator.controller.run_collect import RunCollector
from harness_operator.controller.workers import Worker, Workers
from harness_operator.core.status.observed import FINISHED, ObservedAttempt

OUTPUT = b'{"verdict": "ok"}'
PATCH = b"diff --git a/x b/x\n"


class LogApi:
    """Pod logs by container (None: the runner's), the objects created and the Events posted."""

    def __init__(self, logs: dict[str | None, str]) -> None:
        self.logs = logs
        self.created: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str]] = []

    def fetch_pod_log(self, namespace: str, pod: str, container: str | None = None) -> str | None:
        return self.logs.get(container)

    def create(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        self.created[f"{obj['kind']} {obj['metadata']['name']}"] = obj
        return None

    def create_event(self, body: Any, type_: str, reason: str, message: str, *args: Any) -> None:
        self.events.append((reason, message))


def make_run(**spec: Any) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "ns", "uid": "run-uid"},
            "spec": {"provider": "claude", "prompt": "p", **spec},
        }
    )


def succeeded(publisher: dict[str, Any] | None = None, cluster: str | None = None) -> ObservedAttempt:
    output = {"sha256": hashlib.sha256(OUTPUT).hexdigest(), "bytes": len(OUTPUT)}
    result = ResultDocument.model_validate(
        {"attempt": 1, "provider": "claude", "exitCode": 0, "output": output}
    )
    return ObservedAttempt(
        1, "claude", "r-a1", "r-a1-x", FINISHED, result=result, publisher=publisher, cluster=cluster
    )


def collector(api: LogApi, workers: Workers | None = None) -> RunCollector:
    return RunCollector(api, workers or Workers())  # type: ignore[arg-type]


def test_the_output_is_kept_in_its_config_map() -> None:
    api = LogApi({None: "agent says hi\n" + encode_frame(OUTPUT)})
    output, name, invalid = collector(api).collect_output(make_run(), [succeeded()])
    assert (output, name, invalid) == (OUTPUT, "r-output", None)
    assert list(api.created) == ["ConfigMap r-output"]


def test_an_output_that_does_not_match_the_schema_is_invalid() -> None:
    api = LogApi({None: encode_frame(OUTPUT)})
    schema = {"type": "object", "required": ["score"]}
    _, name, invalid = collector(api).collect_output(make_run(outputSchema=schema), [succeeded()])
    assert name == "r-output" and invalid is not None and invalid[0] == Reason.OutputInvalid


def test_a_log_that_lags_is_read_again_then_the_output_is_given_up() -> None:
    api = LogApi({None: "no frame yet\n"})
    with pytest.raises(LogNotComplete):
        collector(api).collect_output(make_run(), [succeeded()], retries_of("log") - 1)
    assert collector(api).collect_output(make_run(), [succeeded()], retries_of("log")) == (None, None, None)
    assert [r for r, _ in api.events] == [Reason.OutputUnavailable] and api.created == {}


def test_the_published_patch_is_kept_and_a_publisher_without_a_report_fails_the_run() -> None:
    digest = hashlib.sha256(PATCH).hexdigest()
    report = f'{{"commit": "abc", "files": 1, "patchSHA256": "{digest}"}}'
    api = LogApi({"publish": encode_frame(PATCH)})
    publisher = {"exitCode": 0, "message": report}
    changes, failed = collector(api).collect_changes(make_run(), [succeeded(publisher)])
    assert failed is None and changes is not None and changes.patch_sha256 == digest
    assert list(api.created) == ["ConfigMap r-changes"]
    changes, failed = collector(api).collect_changes(make_run(), [succeeded({"exitCode": 137})])
    assert changes is None and failed is not None and failed[0] == Reason.PublishLost


def test_an_attempt_on_a_worker_has_its_log_read_there_and_kept_here() -> None:
    here, there = LogApi({}), LogApi({None: encode_frame(OUTPUT)})
    workers = Workers([Worker("worker-1", there)])  # type: ignore[arg-type]
    output, _, _ = collector(here, workers).collect_output(make_run(), [succeeded(cluster="worker-1")])
    assert output == OUTPUT and list(here.created) == ["ConfigMap r-output"] and there.created == {}
