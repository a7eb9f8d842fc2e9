"""The trigger receiver's HTTP server: forges' webhook deliveries in, runs created as each trigger's
ServiceAccount; probes and metrics on the admin port (I/O).

Per delivery to POST /hooks/<namespace>/<trigger>: the trigger read, the body read up to its bound, the
webhook Secret read and the signature checked before anything else of the body is believed; then the event
parsed, the runs whose checks it says changed marked (receiver/checks.py), the trigger's runs listed,
core/forge/triggering's decision applied as the trigger's ServiceAccount, and the delivery counted, posted
as an Event on the trigger and kept in its status.lastDelivery. Stateless: replicas work side by side (a
delivery names its run, so two replicas' creates of it make one run).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import structlog
import urllib3
from aiohttp import web
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from pydantic import ValidationError

from harness_operator.api.v1alpha1 import HarnessTrigger
from harness_operator.core.forge.events import ForgeEvent, Ignored, parse_event
from harness_operator.core.forge.report_calls import compute_api_root
from harness_operator.core.forge.signatures import verify_delivery
from harness_operator.core.forge.triggering import (
    PIPELINE,
    TeamAnswer,
    TriggerDecision,
    build_trigger_run,
    decide_delivery,
    find_teams_to_ask,
)
from harness_operator.core.objects.naming import LABEL_TRIGGER, label_value
from harness_operator.receiver.checks import mark_checks_changed
from harness_operator.receiver.deliveries import (
    Outcome,
    api_message,
    build_answer,
    build_bad_signature,
    build_decided,
    build_duplicate,
    build_event_name,
    build_ignored,
    build_last_delivery,
    build_not_created,
    build_secret_unreadable,
    build_too_large,
    build_unavailable,
    build_unreadable,
    forge_event_name,
    is_hook_path,
    is_json_document,
    with_checks_marked,
)
from harness_operator.receiver.kube import ReceiverKube
from harness_operator.receiver.teams import TeamChecker, TeamQuestion, build_team_counter

DEFAULT_MAX_DELIVERY_BYTES = 1024 * 1024  # GitHub's issue payloads are tens of KiB; Gitea's a few
READ_CHUNK = 64 * 1024
# What a call to the API server may fail with besides an answer: refused, reset, timed out.
UNREACHABLE = (urllib3.exceptions.HTTPError, OSError)
log = structlog.get_logger("harness_trigger_receiver")
T = TypeVar("T")


def build_delivery_counter(registry: CollectorRegistry) -> Counter:
    """Deliveries by trigger and result (RESULTS); only existing triggers' names become labels."""
    return Counter(
        "harness_trigger_deliveries",
        "Webhook deliveries to HarnessTriggers by namespace, trigger and result.",
        ["namespace", "trigger", "result"],
        registry=registry,
    )


class Unavailable(Exception):
    """The API server did not answer (or answered 5xx) while the receiver did `what`."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


@dataclass
class Receiver:
    kube: ReceiverKube
    max_delivery_bytes: int = DEFAULT_MAX_DELIVERY_BYTES
    namespaces: tuple[str, ...] = ()  # the release's watchNamespaces; empty: every namespace
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.deliveries = build_delivery_counter(self.registry)
        self.teams = TeamChecker(build_team_counter(self.registry))

    async def _call(self, what: str, call: Callable[..., T], *args: Any) -> T:
        """A blocking API call in a worker thread; no answer or a 5xx is Unavailable, other answers raise."""
        try:
            return await asyncio.to_thread(call, *args)
        except ApiException as exc:
            if exc.status is None or exc.status >= 500:
                raise Unavailable(what) from exc
            raise
        except UNREACHABLE as exc:
            raise Unavailable(what) from exc

    # --- the forges' side -------------------------------------------------------------------------

    async def hook(self, request: web.Request) -> web.Response:
        namespace, name = request.match_info["namespace"], request.match_info["trigger"]
        unknown = web.json_response(
            {"result": "unknown", "reason": f"no HarnessTrigger {name} in namespace {namespace}"}, status=404
        )
        if not is_hook_path(namespace, name) or (self.namespaces and namespace not in self.namespaces):
            return unknown
        try:
            raw = await self._call("reading the trigger", self.kube.fetch_trigger, namespace, name)
        except (Unavailable, ApiException) as exc:
            # Not counted: the trigger's name is a label only once it is known to exist.
            log.warning("Trigger not read", trigger=f"{namespace}/{name}", error=str(exc))
            return web.json_response(build_answer(build_unavailable("reading the trigger")), status=503)
        if raw is None:
            return unknown
        try:
            trigger = HarnessTrigger.model_validate(raw)
        except ValidationError as exc:  # the CRD's schema keeps these out; an old object is refused
            outcome = Outcome("error", 500, f"the trigger cannot be read: {exc}", "Warning", "DeliveryFailed")
        else:
            try:
                outcome = await self._deliver(request, namespace, trigger)
            except Unavailable as exc:
                outcome = build_unavailable(exc.what)
            except Exception:  # a bug here still answers, counts and records the delivery
                log.exception("Delivery failed", trigger=f"{namespace}/{name}")
                outcome = Outcome(
                    "error",
                    500,
                    "the receiver failed on this delivery (see its log)",
                    "Warning",
                    "DeliveryFailed",
                )
        forge = str(((raw.get("spec") or {}).get("forge") or {}).get("type") or "")
        await self._record(raw, outcome, forge_event_name(forge, request.headers))
        return web.json_response(build_answer(outcome), status=outcome.status)

    async def _deliver(self, request: web.Request, namespace: str, trigger: HarnessTrigger) -> Outcome:
        forge = trigger.spec.forge
        forge_type = str(forge.type)  # the models keep enums' values
        body = await _read_body(request, self.max_delivery_bytes)
        if body is None:
            return build_too_large(self.max_delivery_bytes)
        ref = forge.webhook_secret_ref
        try:
            secret = await self._call(
                "reading the webhook secret", self.kube.fetch_secret_key, namespace, ref.name, ref.key
            )
        except ApiException as exc:
            return build_secret_unreadable(
                namespace, ref.name, ref.key, api_message(exc.body, str(exc.reason))
            )
        if not secret:
            return build_secret_unreadable(
                namespace, ref.name, ref.key, "no such Secret, or no such key in it"
            )
        if not verify_delivery(forge_type, request.headers, body, secret):
            return build_bad_signature(forge_type)
        if not is_json_document(body):
            return build_unreadable()
        marked = await self._mark_checks(namespace, trigger, request.headers, body)
        return with_checks_marked(await self._decide(namespace, trigger, request.headers, body), marked)

    async def _mark_checks(
        self, namespace: str, trigger: HarnessTrigger, headers: Mapping[str, str], body: bytes
    ) -> list[str]:
        """Mark the runs whose checks the delivery says changed (best effort: the next delivery, or the
        run's end, has them read all the same)."""
        name = str(trigger.metadata["name"])
        try:
            return await mark_checks_changed(
                self._call,
                self.kube,
                namespace,
                name,
                trigger.spec.repositories,
                str(trigger.spec.forge.type),
                headers,
                body,
            )
        except (Unavailable, ApiException) as exc:
            log.warning("Runs' checks not marked changed", trigger=f"{namespace}/{name}", error=str(exc))
            return []

    async def _decide(
        self, namespace: str, trigger: HarnessTrigger, headers: Mapping[str, str], body: bytes
    ) -> Outcome:
        """The run the delivery starts, if any, as core/forge/triggering decides."""
        event = parse_event(str(trigger.spec.forge.type), headers, body)
        if isinstance(event, Ignored):
            return build_ignored(event.reason)
        teams = find_teams_to_ask(trigger, event)
        answer = await self._ask_teams(namespace, trigger, event, teams) if teams else None
        name = str(trigger.metadata["name"])
        selector = f"{LABEL_TRIGGER}={label_value(name)}"
        listed = [
            build_trigger_run(r)
            for r in await self._call("listing the trigger's runs", self.kube.list_runs, namespace, selector)
        ]
        if trigger.spec.pipeline_template is not None:
            pipelines = await self._call(
                "listing the trigger's pipelines", self.kube.list_runs, namespace, selector, PIPELINE
            )
            listed += [build_trigger_run(p, PIPELINE) for p in pipelines]
        decision = decide_delivery(trigger, event, listed, answer)
        if decision.create is None:
            return build_decided(decision, None)
        return await self._apply(namespace, trigger.spec.service_account_name, decision)

    async def _ask_teams(
        self, namespace: str, trigger: HarnessTrigger, event: ForgeEvent, teams: tuple[str, ...]
    ) -> TeamAnswer:
        """Ask the forge whether the author is in `teams`, with the trigger's token (fail closed)."""
        forge, ref = trigger.spec.forge, trigger.spec.forge.token_secret_ref
        if ref is None:  # the CRD requires it with teams; an object older than that rule asks nothing
            return TeamAnswer(failed="spec.forge.tokenSecretRef is not set")
        where = f"the token Secret {namespace}/{ref.name} key {ref.key}"
        try:
            token = await self._call(
                "reading the token", self.kube.fetch_secret_key, namespace, ref.name, ref.key
            )
        except ApiException as exc:
            why = api_message(exc.body, str(exc.reason))
            return TeamAnswer(failed=f"{where} cannot be read ({why}): grant the receiver get on it")
        if not token or not token.strip():
            return TeamAnswer(failed=f"{where} does not exist or is empty")
        api_root = compute_api_root(str(forge.type), forge.url, forge.api_url)
        question = TeamQuestion(
            str(forge.type), api_root, token.decode("utf-8", "replace").strip(), event.author, event.author_id
        )
        return await self.teams.check(question, teams)

    async def _apply(self, namespace: str, account: str, decision: TriggerDecision) -> Outcome:
        """Delete (Replace) and create as the trigger's ServiceAccount: its RBAC and admission decide."""
        assert decision.create is not None
        run = {**decision.create, "metadata": {**decision.create["metadata"], "namespace": namespace}}
        run_name = str(run["metadata"]["name"])
        try:
            for kind, old in decision.delete:
                await self._call("deleting a run", self.kube.delete_as, account, namespace, kind, old)
            await self._call("creating the run", self.kube.create_as, account, run)
        except ApiException as exc:
            if exc.status == 409:
                return build_duplicate(run_name)
            return build_not_created(run_name, exc.status or 0, api_message(exc.body, str(exc.reason)))
        return build_decided(decision, run_name)

    async def _record(self, trigger: dict[str, Any], outcome: Outcome, event: str) -> None:
        """Count the delivery, post its Event, keep it in status.lastDelivery: each best-effort (the
        forge's answer does not wait on a slow API server twice)."""
        meta = trigger["metadata"]
        namespace, name = str(meta["namespace"]), str(meta["name"])
        self.deliveries.labels(namespace, name, outcome.result).inc()
        log.info(
            "Delivery",
            trigger=f"{namespace}/{name}",
            forge_event=event,
            result=outcome.result,
            run=outcome.run,
            reason=outcome.reason,
        )
        now = self.clock()
        try:
            await self._call(
                "posting the Event",
                self.kube.create_event,
                trigger,
                outcome.event_type,
                outcome.event_reason,
                outcome.reason,
                build_event_name(name, outcome, now),
            )
            if outcome.verified:
                last = build_last_delivery(outcome, event, now)
                await self._call(
                    "writing the status",
                    self.kube.patch_trigger_status,
                    namespace,
                    name,
                    {"lastDelivery": last},
                )
        except (Unavailable, ApiException) as exc:
            log.warning("Delivery not recorded", trigger=f"{namespace}/{name}", error=str(exc))

    # --- the admin side ---------------------------------------------------------------------------

    async def ready(self, request: web.Request) -> web.Response:
        try:
            await self._call("checking readiness", self.kube.ready, next(iter(self.namespaces), None))
        except (Unavailable, ApiException) as exc:
            return web.Response(text=f"not ready: {exc}\n", status=503)
        return web.Response(text="ok\n")

    async def alive(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _read_body(request: web.Request, limit: int) -> bytes | None:
    """The body, up to `limit` bytes; None (refused) for a longer one, before more of it is held."""
    if request.content_length is not None and request.content_length > limit:
        return None
    body = bytearray()
    async for chunk in request.content.iter_chunked(READ_CHUNK):
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def build_apps(receiver: Receiver) -> tuple[web.Application, web.Application]:
    """The forges' app (hooks) and the admin app (probes, metrics), served on two ports."""
    hooks = web.Application(client_max_size=receiver.max_delivery_bytes)
    hooks.router.add_post("/hooks/{namespace}/{trigger}", receiver.hook)
    admin = web.Application()
    admin.router.add_get("/readyz", receiver.ready)
    admin.router.add_get("/healthz", receiver.alive)
    admin.router.add_get("/metrics", receiver.metrics)
    return hooks, admin
