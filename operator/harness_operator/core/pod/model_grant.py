"""What a routed attempt gets: its grant in the model gateway's namespace, its token, the routed variables
and options of its plan (pure).

An attempt is routed when the chart deploys the gateway with a key for the vendor its definition's
`modelRoute` names, and the run does not set the route's variables itself (a run that brings its own key
or endpoint keeps them, with a Warning Event). A routed attempt's definition is seen without any of its
credential grants (its vendor keys: another vendor's too) and, under `networkPolicy: provider`, without
its egress: the sandbox reaches the gateway and nothing else, and its token is good for its own attempt
only, from its start to its end: the grant in the gateway's namespace lists the attempts that have started
and not ended (each joins as the operator starts it and leaves as it ends), under the run's caps, which
bind all its attempts together.

The grant's and the key Secret's names hold no dot, while an egress grant's (`<namespace>.<run>`, in what
may be the same namespace) always does: the two kinds of grant can never take each other's name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence, Set
from typing import Any

from harness_operator.api.v1alpha1 import (
    MODEL_GATEWAY_TOKEN,
    MODEL_GATEWAY_URL,
    EnvVar,
    HarnessRun,
    Limits,
    ModelRoute,
)
from harness_operator.contract.model_access import (
    LABEL_MODEL_GRANT,
    MODEL_GRANT_KEY,
    ModelAttemptGrant,
    ModelGrant,
    build_model_token,
    token_sha256,
)
from harness_operator.contract.plan import AttemptPlan
from harness_operator.core.access.model_route import find_own_key, find_own_route_settings
from harness_operator.core.access.settings_merge import add_option, merge_each, merge_settings
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import label_value, run_labels
from harness_operator.core.objects.traced import build_attempt_traceparent
from harness_operator.core.pod.egress_grant import LABEL_RUN_NAMESPACE


def _run_digest(namespace: str, run_name: str) -> str:
    """128 bits of the run's namespace and name: distinct runs, distinct names (a namespace holds no `/`)."""
    return hashlib.sha256(f"{namespace}/{run_name}".encode()).hexdigest()[:32]


def model_key_secret_name(namespace: str, run_name: str) -> str:
    """The Secret in the gateway's namespace holding the runs' own keys, one data key per attempt."""
    return f"model-key-{namespace}-{_run_digest(namespace, run_name)}"


def model_key_field(attempt: int) -> str:
    return f"attempt-{attempt}"


def build_model_key_secret(
    run: HarnessRun, config: OperatorConfig, keys: Mapping[int, str]
) -> dict[str, Any] | None:
    """The runs' own keys, by attempt, for the gateway (None when no routed attempt brings one). In the
    gateway's namespace, like the grant, and deleted with it."""
    if not keys:
        return None
    ns, name = run.metadata["namespace"], run.metadata["name"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": model_key_secret_name(ns, name),
            "namespace": config.model_gateway_namespace,
            "labels": {**run_labels(name), LABEL_MODEL_GRANT: "true", LABEL_RUN_NAMESPACE: label_value(ns)},
        },
        "stringData": {model_key_field(i): key for i, key in sorted(keys.items())},
    }


def model_grant_name(namespace: str, run_name: str) -> str:
    """`model-<namespace>-<digest of namespace/run>`: no dot (an egress grant's name always has one, after
    its namespace), the namespace for whoever lists them, at most 102 characters."""
    return f"model-{namespace}-{_run_digest(namespace, run_name)}"


def model_base_url(config: OperatorConfig, vendor: str) -> str:
    return f"http://{config.model_gateway_service}:{config.model_gateway_port}/{vendor}"


def model_token(run: HarnessRun, config: OperatorConfig, attempt: int) -> str:
    grant = model_grant_name(run.metadata["namespace"], run.metadata["name"])
    return build_model_token(config.model_gateway_key, grant, run.metadata["uid"], attempt)


def model_env_key(attempt: int, name: str) -> str:
    """The plan Secret's key holding a routed variable whose value carries the attempt's token."""
    return f"model-env-{attempt}-{name}"


def expand(value: str, base_url: str, token: str) -> str:
    return value.replace(MODEL_GATEWAY_URL, base_url).replace(MODEL_GATEWAY_TOKEN, token)


def merge_route_options(
    options: Mapping[str, Any], route: ModelRoute, config: OperatorConfig
) -> dict[str, Any]:
    """The run's options with the route's: a list appended to the run's, anything else replacing it."""
    base = model_base_url(config, route.vendor)
    out = dict(options)
    for key, value in route.options.items():
        add_option(out, key, _expand_url(value, base))
    return out


def _expand_url(value: Any, base: str) -> Any:
    if isinstance(value, str):
        return value.replace(MODEL_GATEWAY_URL, base)
    if isinstance(value, list):
        return [_expand_url(v, base) for v in value]
    return value


def with_model_route(plan: AttemptPlan, route: ModelRoute, config: OperatorConfig) -> AttemptPlan:
    """The plan of a routed attempt: the route's plain variables (the gateway's URL in them) as env (a
    JSON configuration merged over the plan's of the same name), those carrying the token as credentials
    the runner passes through and redacts, its home files (merged likewise), and the gateway's URL as its
    model destination (the runner waits for it, wherever the CLI reads it from)."""
    base = model_base_url(config, route.vendor)
    secret = {e.name for e in route.env if MODEL_GATEWAY_TOKEN in e.value}
    given = {e.name: e.value for e in plan.env}
    plain = [
        EnvVar(name=e.name, value=merge_settings(given.get(e.name), expand(e.value, base, "")))
        for e in route.env
        if e.name not in secret
    ]
    names = {e.name for e in route.env}
    env = [e for e in plan.env if e.name not in names] + plain
    return plan.model_copy(
        update={
            "env": sorted(env, key=lambda e: e.name),
            "credential_envs": sorted({*plan.credential_envs, *secret}),
            "optional_credential_envs": sorted(set(plan.optional_credential_envs) - secret),
            "home_files": merge_each(
                plan.home_files, {path: _expand_url(text, base) for path, text in route.home_files.items()}
            ),
            "model_destinations": [base],
        }
    )


def build_model_secrets(
    run: HarnessRun, attempts: Sequence[Attempt], config: OperatorConfig
) -> dict[str, str]:
    """Plan Secret entries: each routed variable that carries an attempt's token, expanded."""
    out = {}
    for attempt in attempts:
        route = attempt.model_route
        if route is None:
            continue
        token, base = model_token(run, config, attempt.index), model_base_url(config, route.vendor)
        for var in route.env:
            if MODEL_GATEWAY_TOKEN in var.value:
                out[model_env_key(attempt.index, var.name)] = expand(var.value, base, token)
    return out


def build_model_env(attempt: Attempt, secret: str) -> list[dict[str, Any]]:
    """The runner container's routed variables that carry the token, each from the plan Secret."""
    route = attempt.model_route
    if route is None:
        return []
    return [
        {
            "name": v.name,
            "valueFrom": {"secretKeyRef": {"name": secret, "key": model_env_key(attempt.index, v.name)}},
        }
        for v in route.env
        if MODEL_GATEWAY_TOKEN in v.value
    ]


def compute_model_caps(run: HarnessRun) -> tuple[float | None, int | None]:
    """(maxCostUSD, maxTokens) the gateway holds the run to, all its attempts together: the run's limits,
    its cost lowered to a budget's reservation (status.budget, recorded before its first Job), as its
    plans' limits are."""
    limits = run.spec.limits or Limits()
    reserved = run.status.budget.reserved_usd if run.status and run.status.budget else None
    costs = [c for c in (limits.max_cost_usd, reserved) if c is not None]
    return (min(costs) if costs else None), limits.max_tokens


def build_model_grant(
    run: HarnessRun,
    attempts: Sequence[Attempt],
    config: OperatorConfig,
    live: Set[int],
    with_own_keys: Set[int] = frozenset(),
) -> dict[str, Any] | None:
    """The gateway's grant for the run: its caps (compute_model_caps) and, per routed attempt in `live`
    (started, not ended), its token's hash, vendor, the definition's prices and, for the attempts in
    `with_own_keys`, where the run's own key is. None when none of them is routed."""
    ns, name = run.metadata["namespace"], run.metadata["name"]
    granted = {}
    for target in attempts:
        route = target.model_route
        if route is None or target.index not in live:
            continue
        own = target.index in with_own_keys and find_own_key(run, route) is not None
        granted[str(target.index)] = ModelAttemptGrant(
            token_sha256=token_sha256(model_token(run, config, target.index)),
            vendor=route.vendor,
            pricing=dict(target.definition.pricing) if target.namespaced else {},
            platform_pricing=None if target.namespaced else dict(target.definition.pricing),
            key_secret=model_key_secret_name(ns, name) if own else None,
            key_field=model_key_field(target.index) if own else None,
            trace_parent=build_attempt_traceparent(run.metadata.get("uid") or "", target.index, config),
        )
    if not granted:
        return None
    cost, tokens = compute_model_caps(run)
    grant = ModelGrant(
        namespace=ns,
        run=name,
        uid=run.metadata["uid"],
        max_cost_usd=cost,
        max_tokens=tokens,
        attempts=granted,
    )
    return build_model_grant_map(run, config, grant)


def build_model_grant_map(run: HarnessRun, config: OperatorConfig, grant: ModelGrant) -> dict[str, Any]:
    ns, name = run.metadata["namespace"], run.metadata["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": model_grant_name(ns, name),
            "namespace": config.model_gateway_namespace,
            "labels": {**run_labels(name), LABEL_MODEL_GRANT: "true", LABEL_RUN_NAMESPACE: label_value(ns)},
        },
        "data": {MODEL_GRANT_KEY: grant.to_json()},
    }


def read_model_grant(config_map: Mapping[str, Any] | None) -> ModelGrant | None:
    """The model grant a ConfigMap holds, or None when it holds none (absent, not one, unreadable)."""
    if config_map is None:
        return None
    labels = (config_map.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_MODEL_GRANT) != "true":
        return None
    try:
        return ModelGrant.model_validate_json((config_map.get("data") or {}).get(MODEL_GRANT_KEY, ""))
    except ValueError:
        return None


def compute_live_attempts(run: HarnessRun, stored: ModelGrant | None, starting: int | None) -> set[int]:
    """The attempts live in the run's grant once attempt `starting` (None: none) joins it: those the
    stored grant lists, if it is this run's (its UID: a deleted run of the same name left it), and
    `starting`."""
    kept = set()
    if stored is not None and stored.uid == run.metadata["uid"]:
        kept = {int(k) for k in stored.attempts if k.isdigit()}
    return kept | ({starting} if starting is not None else set())


def find_grant_conflict(found: Mapping[str, Any] | None, label: str, key: str, run: HarnessRun) -> str | None:
    """Why the object holding a grant's name must not be replaced by this run's grant, or None when it
    may: absent, this run's, or the grant of a deleted run of the same namespace and name (a name holds one
    run at a time). Anything else is another run's grant or not a grant: never replaced."""
    if found is None:
        return None
    meta = found.get("metadata") or {}
    name = meta.get("name", "")
    ns, run_name = run.metadata["namespace"], run.metadata["name"]
    if ((meta.get("labels") or {}).get(label)) != "true":
        return f"ConfigMap {name} of the gateway's namespace is not a grant"
    try:
        held = json.loads((found.get("data") or {}).get(key, ""))
    except ValueError:
        held = None
    if not isinstance(held, dict) or (held.get("namespace"), held.get("run")) != (ns, run_name):
        owner = f"{held.get('namespace')}/{held.get('run')}" if isinstance(held, dict) else "no run"
        return f"grant {name} of the gateway's namespace is run {owner}'s, not {ns}/{run_name}'s"
    return None


def without_attempts(grant: ModelGrant, ended: set[int]) -> ModelGrant:
    """The grant with the ended attempts taken out: their tokens are refused from then on."""
    return grant.model_copy(
        update={"attempts": {k: v for k, v in grant.attempts.items() if int(k) not in ended}}
    )


def compute_key_warning(run: HarnessRun, target: Attempt, config: OperatorConfig) -> str | None:
    """Why an attempt that holds credentials is not routed, while a model gateway runs; None otherwise."""
    if not config.model_gateway_service or target.model_route is not None:
        return None
    granted = sorted({c.env for c in target.definition.credentials} | {c.env for c in run.spec.credentials})
    if not granted:
        return None
    route = target.definition.model_route
    if route is None:
        why = "its CLI cannot be routed (the definition has no modelRoute)"
    elif route.vendor not in config.model_gateway_vendors:
        why = f"the model gateway holds no {route.vendor} key (the chart's modelGateway.vendors)"
    else:
        why = f"the run sets {', '.join(find_own_route_settings(run, route))} itself"
    return (
        f"attempt {target.index} ({target.provider}) is not routed through the model gateway: {why}; "
        f"{', '.join(granted)} reach the sandbox and its usage is the sandbox's own report"
    )
