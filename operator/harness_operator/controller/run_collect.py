"""Collecting a run's results (I/O): the successful attempt's output from its log into the output
ConfigMap, checked against spec.outputSchema, and its change from its publishing container into the
changes ConfigMap."""

from __future__ import annotations

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import ChangesStatus, HarnessRun
from harness_operator.contract.changes import parse_report
from harness_operator.contract.frame import FrameError, decode_frame
from harness_operator.contract.structured_output import OutputChecked, OutputMismatch, validate_output
from harness_operator.controller.errors import LogNotComplete, retries_of
from harness_operator.controller.kube import Kube
from harness_operator.controller.run_start import create_child
from harness_operator.controller.workers import Workers
from harness_operator.core.objects.naming import PUBLISH_CONTAINER, output_config_map_name
from harness_operator.core.pod.publish import compute_changes, lost_publish
from harness_operator.core.pod.run_data import build_changes_config_map, build_output_config_map
from harness_operator.core.status.observed import ObservedAttempt


class RunCollector:
    """Reads an attempt's log on the cluster its pod ran on (`workers`; `kube`: this one's), and keeps
    what it finds in this cluster."""

    def __init__(self, kube: Kube, workers: Workers) -> None:
        self.kube, self.workers = kube, workers

    def collect_output(
        self, run: HarnessRun, attempts: list[ObservedAttempt], retry: int = 0
    ) -> tuple[bytes | None, str | None, tuple[str, str] | None]:
        """The successful attempt's output from its log, checked, kept in the output ConfigMap, and
        (OutputInvalid, message) when it does not match spec.outputSchema. The log may lag the
        container's recorded end (the runtime copies it apart): it is read again, as the log retry policy
        says (errors.RETRY), with the classifier's backoff, before the attempt is left without its output."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        last = attempts[-1] if attempts else None
        if last is None or not last.succeeded or last.pod_name is None:
            return None, None, None
        expected = last.result.output.sha256 if last.result and last.result.output else None
        log = self._kube_of(last).fetch_pod_log(ns, last.pod_name) or ""
        decoded = decode_frame(log, expected)
        if isinstance(decoded, FrameError) and retry < retries_of("log"):
            raise LogNotComplete(
                f"the output of attempt {last.index} is not in its log yet: {decoded.message}"
            )
        if isinstance(decoded, FrameError):
            message = f"the output of attempt {last.index} cannot be read from its log: {decoded.message}"
            self.kube.create_event({"metadata": run.metadata}, "Warning", Reason.OutputUnavailable, message)
            invalid = (Reason.OutputInvalid, message) if run.spec.output_schema is not None else None
            return None, None, invalid
        # What the ConfigMap holds is the output the status describes (its sha256 is checked by readers).
        text = decoded.decode("utf-8", "replace")
        checked = validate_output(run.spec.output_schema, text) if run.spec.output_schema else None
        value = checked.json if isinstance(checked, OutputChecked) else None
        create_child(self.kube, run, build_output_config_map(run, text, value))
        invalid = (Reason.OutputInvalid, checked.message) if isinstance(checked, OutputMismatch) else None
        return text.encode("utf-8"), output_config_map_name(name), invalid

    def collect_changes(
        self, run: HarnessRun, attempts: list[ObservedAttempt], retry: int = 0
    ) -> tuple[ChangesStatus | None, tuple[str, str] | None]:
        """The successful attempt's change as its publishing container reported it (termination message),
        its patch from that container's log, checked, kept in the changes ConfigMap; and the run's
        failure when publishing failed. The log is read again as the output's is."""
        ns, name = run.metadata["namespace"], run.metadata["name"]
        last = attempts[-1] if attempts else None
        if last is None or not last.succeeded or last.publisher is None or last.pod_name is None:
            return None, None
        report = parse_report(str(last.publisher.get("message") or ""))
        if report is None:
            return None, lost_publish(last.publisher)
        kept = False
        if report.patch_sha256:
            log = self._kube_of(last).fetch_pod_log(ns, last.pod_name, PUBLISH_CONTAINER) or ""
            decoded = decode_frame(log, report.patch_sha256)
            if isinstance(decoded, FrameError) and retry < retries_of("log"):
                raise LogNotComplete(
                    f"the patch of attempt {last.index} is not in its log yet: {decoded.message}"
                )
            if isinstance(decoded, FrameError):
                message = f"the patch of attempt {last.index} cannot be read from its log: {decoded.message}"
                self.kube.create_event(
                    {"metadata": run.metadata}, "Warning", Reason.OutputUnavailable, message
                )
            else:
                create_child(self.kube, run, build_changes_config_map(run, decoded))
                kept = True
        return compute_changes(report, kept, name)

    def _kube_of(self, attempt: ObservedAttempt) -> Kube:
        """The client of the cluster the attempt's pod ran on."""
        return self.workers.kube_of(attempt.cluster, self.kube)
