"""The publisher of an approved change (I/O): the one container of a run's publish pod.

    python3 -I -m harness_operator.runner.publish_kept [termination-log]

No agent ran in this pod and no workspace is mounted: the publisher fetches the kept change's base from
the origin, makes the change's commit again from the kept patch (runner/kept_change.py: the patch's
sha256 and the resulting tree must be the approved ones), and pushes it and opens the pull request as
the attempt's publisher would have (runner/publish.push_and_open). What happened is the termination
message (ChangesReport); the exit code is 0 unless the publisher itself broke.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import (
    BODY_OUTPUT_CHARS,
    CLONE_TOKEN_ENV,
    KEPT_OUTPUT_FILE,
    KEPT_PATCH_FILE,
    PUBLISH_DIR,
    PUBLISH_PLAN_ENV,
    PUBLISH_TOKEN_ENV,
    ChangesReport,
    PublishPlan,
)
from harness_operator.runner.kept_change import rebuild_kept
from harness_operator.runner.publish import DEFAULT_TERMINATION_LOG, finish, push_and_open
from harness_operator.runner.publish_git import Git, PublishError, last_lines
from harness_operator.runner.redact import Redactor


def read_kept(path: str, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit + 1)
    except OSError as exc:
        raise PublishError(
            Reason.KeptChangeMismatch,
            f"the kept patch cannot be read ({exc.strerror}): the run's changes ConfigMap was deleted; "
            "nothing is pushed",
        ) from None


def read_output(path: str) -> str:
    """The run's output for the pull request's body ($(output)); empty when the run kept none."""
    try:
        with open(path, "rb") as handle:
            return handle.read(BODY_OUTPUT_CHARS * 4).decode("utf-8", "replace")[:BODY_OUTPUT_CHARS]
    except OSError:
        return ""


def publish_kept(
    plan: PublishPlan,
    environ: Mapping[str, str],
    patch_file: str = KEPT_PATCH_FILE,
    output_file: str = KEPT_OUTPUT_FILE,
    state: Path = Path(PUBLISH_DIR),
) -> ChangesReport:
    """Make the kept change's commit again and publish it; every failure is a report, never a raise."""
    kept = plan.kept
    token = environ.get(PUBLISH_TOKEN_ENV) or ""
    redactor = Redactor([v for v in (token, environ.get(CLONE_TOKEN_ENV)) if v])
    report = ChangesReport(base=kept.base if kept else None)
    try:
        if kept is None or plan.branch is None:
            raise PublishError(Reason.PublishLost, "the publish plan names no kept change or no branch")
        git = Git(
            state,
            "/",
            token or environ.get(CLONE_TOKEN_ENV, ""),
            redactor,
            time.monotonic() + plan.timeout_seconds,
        )
        patch = read_kept(patch_file, plan.patch_limit)
        try:
            git.init()
            git.remote_run("fetch", "-q", "--no-tags", "--depth=1", plan.url, kept.base)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise PublishError(
                Reason.PushRejected, f"fetching the change's base from the origin failed: {last_lines(exc)}"
            ) from None
        commit = rebuild_kept(git, plan, kept, patch)
        return push_and_open(
            git, plan, report, kept.base, commit, read_output(output_file), environ, redactor
        )
    except PublishError as exc:
        return report.model_copy(update={"reason": exc.reason, "message": redactor.text(exc.message)})


def main(argv: list[str] | None = None) -> int:
    termination_log = (argv or sys.argv[1:] or [DEFAULT_TERMINATION_LOG])[0]
    plan = PublishPlan.model_validate_json(os.environ[PUBLISH_PLAN_ENV])
    report = publish_kept(plan, os.environ)
    finish(report, "published" if report.reason is None else report.reason, termination_log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
