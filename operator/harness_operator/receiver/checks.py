"""The receiver's part in a pull request's checks: a verified delivery saying a commit's checks changed
marks the trigger's runs that pushed that commit, so the operator's reporting step reads them from the
forge (I/O; what is read and marked is core/forge/checks.py's). The delivery's body is not believed for
the state: it only says when to look."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from harness_operator.core.forge.checks import (
    ANNOTATION_CHECKS_CHANGED,
    parse_checks_changed,
    select_runs_to_nudge,
)
from harness_operator.core.forge.events import delivery_key
from harness_operator.core.objects.naming import LABEL_TRIGGER, label_value
from harness_operator.receiver.kube import ReceiverKube

Call = Callable[..., Awaitable[Any]]


async def mark_checks_changed(
    call: Call,
    kube: ReceiverKube,
    namespace: str,
    trigger: str,
    repositories: Sequence[str],
    forge: str,
    headers: Mapping[str, str],
    body: bytes,
) -> list[str]:
    """The names of the trigger's runs marked (annotation checks-changed) because the delivery says the
    checks of the commit they pushed changed; [] for any other delivery or repository."""
    changed = parse_checks_changed(forge, headers, body, delivery_key(body))
    if changed is None or changed.repository.casefold() not in {r.casefold() for r in repositories}:
        return []
    selector = f"{LABEL_TRIGGER}={label_value(trigger)}"
    listed = await call("listing the trigger's runs", kube.list_runs, namespace, selector)
    marked = []
    for name, uid in select_runs_to_nudge(listed, changed):
        mark = {ANNOTATION_CHECKS_CHANGED: changed.nudge}
        await call("marking a run's checks changed", kube.patch_run_annotations, namespace, name, uid, mark)
        marked.append(name)
    return marked
