"""What the trigger receiver answers and records for one delivery: the HTTP answer, the counter's result,
the trigger's Event and status.lastDelivery (pure)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from harness_operator.contract.times import timestamp
from harness_operator.core.forge.triggering import TriggerDecision

# The counter's closed set of results (harness_trigger_deliveries_total{result}).
RESULTS = ("created", "duplicate", "skipped", "ignored", "refused", "bad_signature", "error")
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
OBJECT_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
# The headers naming a delivery's event, the most precise first (Gitea's type tells issue_label from
# issues).
EVENT_HEADERS = {
    "github": ("x-github-event",),
    "gitea": ("x-gitea-event-type", "x-gitea-event"),
    "gitlab": ("x-gitlab-event",),
}
EVENT_NAME_MAX = 64


@dataclass(frozen=True)
class Outcome:
    """One delivery's end: `result` for the counter, `status` for the forge, `reason` (one sentence) for
    both the answer and the trigger's Event."""

    result: str
    status: int
    reason: str
    event_type: str
    event_reason: str
    run: str | None = None
    # A request nobody verified (bad signature, too large) is not the forge's delivery: it is counted
    # and its Event posted once a minute, but status.lastDelivery keeps the forge's last.
    verified: bool = True


def is_hook_path(namespace: str, name: str) -> bool:
    """Whether /hooks/<namespace>/<name> can name a trigger (else 404 without asking the API server)."""
    return bool(NAMESPACE.fullmatch(namespace) and OBJECT_NAME.fullmatch(name))


def forge_event_name(forge: str, headers: Mapping[str, str]) -> str:
    """The forge's own name for the delivery (issue_label, issue_comment, Note Hook...), cut short."""
    given = {k.lower(): v.strip() for k, v in headers.items()}
    found = next((given[h] for h in EVENT_HEADERS.get(forge, ()) if given.get(h)), "")
    return found[:EVENT_NAME_MAX] or "unknown"


def is_json_document(body: bytes) -> bool:
    """Deliveries are JSON (GitHub's form-encoded kind is refused: choose application/json)."""
    try:
        return isinstance(json.loads(body), dict)
    except ValueError:
        return False


def build_decided(decision: TriggerDecision, run: str | None) -> Outcome:
    """The outcome of what core/forge/triggering decided, once its run (if any) is created."""
    if decision.result == "created":
        return Outcome("created", 202, decision.reason, "Normal", "RunCreated", run)
    if decision.result == "refused":
        return Outcome("refused", 200, decision.reason, "Warning", "DeliveryRefused")
    if decision.result == "error":  # the author's teams could not be asked: the forge may redeliver
        return Outcome("error", 503, decision.reason, "Warning", "TeamsNotChecked")
    if decision.result == "duplicate":
        return Outcome("duplicate", 200, decision.reason, "Normal", "DeliverySkipped")
    if decision.result == "skipped":
        return Outcome("skipped", 200, decision.reason, "Normal", "DeliverySkipped")
    return Outcome("ignored", 200, decision.reason, "Normal", "DeliveryIgnored")


def build_duplicate(run: str) -> Outcome:
    """The run's name is the delivery's (its body's hash): taken means this delivery started it already."""
    return Outcome(
        "duplicate",
        200,
        f"this delivery was received before and started run {run}: nothing new started",
        "Normal",
        "DeliverySkipped",
        run,
    )


def with_checks_marked(outcome: Outcome, marked: list[str]) -> Outcome:
    """The outcome saying which runs' checks the delivery marked to be read again (kept short)."""
    if not marked:
        return outcome
    names = ", ".join(marked[:3]) + (f" and {len(marked) - 3} more" if len(marked) > 3 else "")
    return replace(outcome, reason=f"{outcome.reason}; the checks of run {names} will be read again")


def build_ignored(reason: str) -> Outcome:
    return Outcome("ignored", 200, reason, "Normal", "DeliveryIgnored")


def build_bad_signature(forge: str) -> Outcome:
    how = {
        "github": "its X-Hub-Signature-256 is not the HMAC-SHA256 of the body with the webhook's secret",
        "gitea": "its X-Gitea-Signature is not the HMAC-SHA256 of the body with the webhook's secret",
        "gitlab": "its X-Gitlab-Token is not the webhook's secret token",
    }.get(forge, "it carries no signature this receiver checks")
    return Outcome(
        "bad_signature",
        401,
        f"a delivery was refused: {how}; the forge's webhook secret must be the value in "
        "spec.forge.webhookSecretRef",
        "Warning",
        "BadSignature",
        verified=False,
    )


def build_too_large(limit: int) -> Outcome:
    return Outcome(
        "error",
        413,
        f"a delivery larger than {limit} bytes was refused unread (the receiver's maxDeliveryBytes)",
        "Warning",
        "DeliveryRefused",
        verified=False,
    )


def build_unreadable() -> Outcome:
    return Outcome(
        "error",
        400,
        "a signed delivery is not a JSON document: set the webhook's content type to application/json",
        "Warning",
        "DeliveryRefused",
    )


def build_secret_unreadable(namespace: str, name: str, key: str, why: str) -> Outcome:
    """The webhook Secret cannot be read: nothing is verified, so nothing starts."""
    return Outcome(
        "error",
        503,
        f"the webhook secret {namespace}/{name} key {key} cannot be read ({why}): create it, and grant the "
        "trigger receiver's ServiceAccount `get` on it with a Role in this namespace",
        "Warning",
        "WebhookSecretUnreadable",
        verified=False,
    )


def build_not_created(run: str, code: int, message: str) -> Outcome:
    """The API server refused to make the run as the trigger's ServiceAccount (RBAC, admission, schema):
    its own message says why (a ServiceAccount not granted is `forbidden`)."""
    return Outcome(
        "error",
        422,
        f"run {run} was not created: the API server answered {code}: {message}",
        "Warning",
        "RunNotCreated",
        run,
    )


def build_unavailable(what: str) -> Outcome:
    return Outcome(
        "error",
        503,
        f"the API server did not answer while {what}: redeliver the delivery later",
        "Warning",
        "DeliveryFailed",
    )


def api_message(body: str | None, fallback: str) -> str:
    """The message of the API server's Status object, else `fallback`."""
    try:
        parsed = json.loads(body or "")
    except ValueError:
        return fallback
    message = parsed.get("message") if isinstance(parsed, dict) else None
    return str(message) if message else fallback


def build_answer(outcome: Outcome) -> dict[str, Any]:
    """The JSON the forge shows in its delivery log: never the body, never a secret."""
    answer: dict[str, Any] = {"result": outcome.result, "reason": outcome.reason}
    if outcome.run:
        answer["run"] = outcome.run
    return answer


def build_last_delivery(outcome: Outcome, event: str, now: datetime) -> dict[str, Any]:
    """status.lastDelivery for a verified delivery."""
    return {
        "time": timestamp(now),
        "event": event,
        "result": outcome.result,
        "reason": outcome.reason,
        "run": outcome.run,
    }


def build_event_name(trigger: str, outcome: Outcome, now: datetime) -> str | None:
    """A fixed name for the Event of an unverified request, one per trigger, reason and minute (a flood
    of forged requests posts one Event a minute, and is counted whole); None: one Event per delivery."""
    if outcome.verified:
        return None
    minute = int(now.timestamp()) // 60
    return f"{trigger[:200].rstrip('-.')}.{outcome.event_reason.lower()}.{minute}"
