"""A run's audit records written as its status is (I/O): one JSON line per decision on the operator's
log (logger harness.audit), for a log pipeline to keep; built by core/status/audit.py. Tenants reach
neither the operator's log nor its status subresource."""

from __future__ import annotations

import structlog

from harness_operator.api.v1alpha1 import HarnessRun, HarnessRunStatus
from harness_operator.core.status.audit import AUDIT, build_audit_records

audit_log = structlog.get_logger("harness.audit")


def write_audit(run: HarnessRun, before: HarnessRunStatus | None, after: HarnessRunStatus) -> None:
    """Log the records of what the write from `before` to `after` decided."""
    for record in build_audit_records(run, before, after):
        audit_log.info(AUDIT, **record)
