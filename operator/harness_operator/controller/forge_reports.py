"""The reporting step: a trigger's run told on its forge while it works and when it ends, with the token
only this step holds (I/O; what is said and when is core/forge/report.py's).

Its own watch of the runs a trigger made (selected by label on the server) decides, per event, whether a
report is due (the run's stage differs from the one its annotation says was reported); due runs go on a
queue of their own with one worker, so the run's reconciles never wait on a forge. A report reads the run
again, its trigger and the token's Secret, writes the one comment (found by its id, else by its marker,
else created) and the commit status, then records the stage, the comment's id and the pull request's label
on the run. The same step reads the checks on the commit a run pushed to its pull request, once when the
run ends and again whenever the receiver marks the run (a delivery said they changed), and writes them to
status.changes.checks. A forge that fails is tried again with backoff a few times, then the stage is given
up with a Warning Event; a missing trigger or Secret is an Event at once. The token is in no log, Event or
status.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import structlog

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessTrigger
from harness_operator.contract.times import timestamp
from harness_operator.controller import metrics
from harness_operator.controller.due import DueQueue
from harness_operator.controller.errors import Temporary, classify
from harness_operator.controller.forge_client import ForgeClient, ForgeUnreachable
from harness_operator.controller.kube import Kube
from harness_operator.core.forge.checks import (
    build_checks_read_patch,
    compute_checks,
    compute_checks_due,
)
from harness_operator.core.forge.report import (
    ReportedRun,
    build_comment_body,
    build_commit_status,
    build_report_patch,
    build_reported_run,
    is_report_due,
)
from harness_operator.core.forge.report_calls import (
    ForgeCall,
    ForgeTarget,
    build_checks_calls,
    build_comment_call,
    build_find_comment_call,
    build_forge_target,
    build_status_call,
    build_whoami_call,
    describe_failure,
    pick_marked_comment,
    read_comment_id,
    read_login,
    read_marked_comments,
)
from harness_operator.core.forge.triggering import find_foreign_reason

log = structlog.get_logger("harness_operator")
RETRY_DELAYS = (5.0, 20.0, 60.0, 180.0)  # then the stage is given up: the next stage tries again
# What a checks' read needs of the reporting token, in each forge's words.
READS = {
    "github": "commit statuses and checks (a fine-grained token's Commit statuses and Checks: Read)",
    "gitea": "the repository (read:repository, which write:repository includes)",
    "gitlab": "the project's commit statuses (scope read_api, which api includes)",
}
Key = tuple[str, str]


@dataclass(frozen=True)
class ReportChange:
    """A trigger's run changed (or was `deleted`): whether a report of it is due now."""

    namespace: str
    name: str
    due: bool
    deleted: bool = False


class ReportFailed(Exception):
    """The forge refused or did not answer: worth trying again later."""


class ReportRefused(Exception):
    """Nothing to try again until someone fixes it (the trigger or its Secret is missing)."""


class TriggerGone(ReportRefused):
    """The run's trigger was deleted: a stage not reported is given up; checks are not read (nothing says
    where), silently, as for a trigger without a token (a run kept after its trigger is not a fault)."""


class ReportStore:
    """Which of the triggers' runs have a report due; the store of their watch."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due: dict[Key, bool] = {}

    def due(self) -> list[Key]:
        with self._lock:
            return [key for key, due in self._due.items() if due]

    def apply(self, kind: str, type_: str, obj: dict[str, Any]) -> ReportChange:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        report = build_reported_run(obj)
        due = type_ != "DELETED" and report is not None and _is_due(report, obj)
        with self._lock:
            if type_ == "DELETED":
                self._due.pop(key, None)
            else:
                self._due[key] = due
        return ReportChange(*key, due, type_ == "DELETED")

    def replace(
        self, kind: str, namespace: str | None, items: Iterable[dict[str, Any]]
    ) -> list[ReportChange]:
        with self._lock:
            for key in [k for k in self._due if namespace is None or k[0] == namespace]:
                del self._due[key]
        return [self.apply(kind, "ADDED", item) for item in items]


def _is_due(reported: ReportedRun, run: dict[str, Any]) -> bool:
    """A stage not reported yet, or checks not read yet for the run's commit or the receiver's mark."""
    return is_report_due(reported) or compute_checks_due(run) is not None


def _attempted(reported: ReportedRun, checks: str | None) -> str:
    """What one report tries: its stage, and the checks' read it is due (the unit given up together)."""
    return reported.stage if checks is None else f"{reported.stage} checks {checks}"


class ForgeReporter:
    """The duty: due runs reported on their forge, one at a time, by the leader only."""

    def __init__(
        self, kube: Kube, client: ForgeClient | None = None, delays: tuple[float, ...] = RETRY_DELAYS
    ) -> None:
        self.kube = kube
        self.client = client or ForgeClient()
        self.delays = delays
        self.store = ReportStore()
        self.queue = DueQueue("forge-reports")
        self._leading = threading.Event()
        self._lock = threading.Lock()
        self._tries: dict[Key, int] = {}
        self._given_up: dict[Key, str] = {}  # the stage given up on, per run: not tried again
        self._logins: dict[tuple[str, str], str] = {}  # (API root, sha256 of a token): the token's user

    def lead(self) -> None:
        """This replica leads: every run with a report due is reported."""
        self._leading.set()
        self.queue.start()
        for key in self.store.due():
            self._schedule(key)

    def stop(self) -> None:
        self._leading.clear()

    def changed(self, change: ReportChange) -> None:
        """A watch event of a trigger's run: report it if due (nothing here waits on a forge)."""
        if change.deleted:
            self._forget((change.namespace, change.name))
        elif change.due and self._leading.is_set():
            self._schedule((change.namespace, change.name))

    def _schedule(self, key: Key) -> None:
        self.queue.schedule(("report", *key), 0, partial(self.report, *key))

    def report(self, namespace: str, name: str) -> float | None:
        """Report the run if a report is due: None when done or given up, else seconds until it is tried
        again."""
        if not self._leading.is_set():
            return None
        key = (namespace, name)
        run: dict[str, Any] | None = None
        stage: str | None = None
        try:
            run = self.kube.fetch_run(namespace, name)
            reported = build_reported_run(run) if run is not None else None
            if run is None or reported is None or not _is_due(reported, run):
                return None
            checks = compute_checks_due(run)
            stage = _attempted(reported, checks)
            with self._lock:
                if self._given_up.get(key) == stage:
                    return None
            try:
                target, token = self._target(reported, run)
            except TriggerGone:
                if is_report_due(reported) or checks is None:
                    raise
                self.kube.patch_run_metadata(namespace, name, reported.uid, build_checks_read_patch(checks))
                return None
            if is_report_due(reported):
                comment_id = self._write(run, reported, target, token)
                self.kube.patch_run_metadata(
                    namespace, name, reported.uid, build_report_patch(reported, comment_id)
                )
            if checks is not None:
                self._read_checks(run, reported, checks, target, token)
        except ReportRefused as exc:
            self._give_up(key, run, stage, str(exc))
            return None
        except (ReportFailed, ForgeUnreachable) as exc:
            return self._failed(key, run, stage, str(exc))
        except Exception as exc:  # the API server's: the one classifier says whether to try again
            verdict = classify(exc, self._tries.get(key, 0))
            log.warning("Forge report not written", run=f"{namespace}/{name}", error=verdict.message)
            return self._failed(key, run, stage, verdict.message) if isinstance(verdict, Temporary) else None
        metrics.FORGE_REPORTS.labels(result="reported").inc()
        log.info("Reported on the forge", run=f"{namespace}/{name}", stage=stage)
        with self._lock:
            self._tries.pop(key, None)
            self._given_up.pop(key, None)
        return None

    def _target(self, reported: ReportedRun, run: dict[str, Any]) -> tuple[ForgeTarget, str | None]:
        """Where the run's trigger reports, and its token (None: the trigger names no token Secret); a run
        the trigger did not make, whatever its labels, is refused."""
        namespace = reported.namespace
        found = self.kube.fetch_trigger(namespace, reported.trigger)
        if found is None:
            raise TriggerGone(f"HarnessTrigger {namespace}/{reported.trigger} does not exist")
        try:
            # Its spec only: the status is the receiver's to write, and nothing here reads it.
            spec = {"metadata": found.get("metadata") or {}, "spec": found.get("spec") or {}}
            trigger = HarnessTrigger.model_validate(spec)
        except ValueError as exc:
            raise ReportRefused(
                f"HarnessTrigger {namespace}/{reported.trigger} does not parse: {exc}"
            ) from None
        foreign = find_foreign_reason(trigger, run["metadata"].get("annotations") or {})
        if foreign is not None:
            raise ReportRefused(f"HarnessTrigger {reported.trigger} reports only its own runs: {foreign}")
        target = build_forge_target(trigger)
        if target.token_secret is None:
            return target, None
        secret, key = target.token_secret
        token = self.kube.fetch_secret_key(namespace, secret, key)
        if not token:
            raise ReportRefused(
                f"the reporting token's Secret {namespace}/{secret} has no key {key!r} (spec.forge."
                f"tokenSecretRef of HarnessTrigger {reported.trigger}): create it with a token that may "
                "comment on issues and pull requests and set commit statuses"
            )
        return target, token.strip()

    def _write(
        self, run: dict[str, Any], reported: ReportedRun, target: ForgeTarget, token: str | None
    ) -> str | None:
        """The comment written (its id returned) and the commit status set, as the trigger asks."""
        if token is None:
            return reported.comment_id  # the trigger reports nothing: the stage is recorded all the same
        comment_id = reported.comment_id
        if target.comment:
            comment_id = self._write_comment(target, run, reported, token)
        status = build_commit_status(reported) if target.commit_status else None
        if status is not None:
            self._send(build_status_call(target, reported.repository, status, token))
        return comment_id

    def _read_checks(
        self, run: dict[str, Any], reported: ReportedRun, due: str, target: ForgeTarget, token: str | None
    ) -> None:
        """Read the checks of the commit the run pushed into status.changes.checks (with no token, nothing
        is read), then record what was read for."""
        sha = due.split("@")[0]
        if token is not None:
            answers = []
            for call in build_checks_calls(target, reported.repository, sha, token):
                status, answer = self.client.send(call)
                if not 200 <= status < 300:
                    raise ReportFailed(
                        f"{describe_failure(call, status, answer)}: the checks of {sha} are not read; the "
                        "reporting token (spec.forge.tokenSecretRef) must be allowed to read "
                        + READS[target.forge]
                    )
                answers.append(answer)
            try:
                checks = compute_checks(target.forge, answers, sha, timestamp(datetime.now(UTC)))
            except ValueError as exc:
                raise ReportFailed(f"the checks of {sha} cannot be read: {exc}") from None
            self.kube.patch_run_status(
                reported.namespace, reported.name, {"changes": {"checks": checks.to_api()}}
            )
        self.kube.patch_run_metadata(
            reported.namespace, reported.name, reported.uid, build_checks_read_patch(due)
        )

    def _write_comment(
        self, target: ForgeTarget, run: dict[str, Any], reported: ReportedRun, token: str
    ) -> str:
        """Edit the run's comment in place; the first time (or after it was deleted), find it by its marker
        (made before the operator stopped and forgot its id) or create it."""
        body = build_comment_body(reported)
        comment_id = reported.comment_id
        if comment_id is None:
            since = str(run["metadata"].get("creationTimestamp") or "")
            listed = self._send(build_find_comment_call(target, reported, since, token))
            marked = read_marked_comments(listed, reported.marker)
            login = self._login(target, token) if marked else None
            comment_id = pick_marked_comment(marked, login) if login else None
        if comment_id is not None:
            call = build_comment_call(target, reported, body, token, comment_id)
            status, answer = self.client.send(call)
            if 200 <= status < 300:
                return comment_id
            if status != 404:  # 404: deleted on the forge; a new one is made
                raise ReportFailed(describe_failure(call, status, answer))
        created = read_comment_id(self._send(build_comment_call(target, reported, body, token, None)))
        if created is None:
            raise ReportFailed("the forge created the comment without saying its id")
        return created

    def _login(self, target: ForgeTarget, token: str) -> str | None:
        """The token's user (asked once per forge and token): only its comments can be the run's. None
        when the token may not say (Gitea asks for read:user): a new comment is made rather than one
        taken on trust."""
        key = (target.api_url, hashlib.sha256(token.encode()).hexdigest())
        with self._lock:
            known = self._logins.get(key)
        if known is None:
            call = build_whoami_call(target, token)
            status, answer = self.client.send(call)
            if status in (401, 403):
                log.info(
                    "The reporting token may not say whose it is",
                    error=describe_failure(call, status, answer),
                )
                return None
            if not 200 <= status < 300:
                raise ReportFailed(describe_failure(call, status, answer))
            known = read_login(answer)
            if known is None:
                raise ReportFailed(f"{target.api_url}/user did not say whose the reporting token is")
            with self._lock:
                self._logins[key] = known
        return known

    def _send(self, call: ForgeCall) -> bytes:
        status, answer = self.client.send(call)
        if not 200 <= status < 300:
            raise ReportFailed(describe_failure(call, status, answer))
        return answer

    def _failed(self, key: Key, run: dict[str, Any] | None, stage: str | None, why: str) -> float | None:
        """A failed try: tried again after the next delay (the first failure is an Event already), or, the
        delays spent, given up."""
        with self._lock:
            tries = self._tries.get(key, 0)
            self._tries[key] = tries + 1
        if tries >= len(self.delays):
            self._give_up(key, run, stage, f"{why} (tried {tries + 1} times)")
            return None
        metrics.FORGE_REPORTS.labels(result="retried").inc()
        log.warning("Forge report failed; retrying", run=f"{key[0]}/{key[1]}", error=why)
        if tries == 0 and run is not None:
            self._event(run, f"{why}; trying again")
        return self.delays[tries]

    def _give_up(self, key: Key, run: dict[str, Any] | None, stage: str | None, why: str) -> None:
        metrics.FORGE_REPORTS.labels(result="failed").inc()
        log.warning("Forge report given up", run=f"{key[0]}/{key[1]}", error=why)
        with self._lock:
            self._tries.pop(key, None)
            if stage is not None:
                self._given_up[key] = stage
        if run is not None:
            self._event(run, f"the run's stage {stage or 'unknown'} is not reported on the forge: {why}")

    def _event(self, run: dict[str, Any], message: str) -> None:
        try:
            self.kube.create_event(
                {"metadata": run["metadata"]}, "Warning", Reason.ForgeReportFailed, message
            )
        except Exception as exc:  # an Event is best effort
            log.warning("Event not posted", run=run["metadata"].get("name"), error=str(exc))

    def _forget(self, key: Key) -> None:
        self.queue.forget(("report", *key))
        with self._lock:
            self._tries.pop(key, None)
            self._given_up.pop(key, None)
