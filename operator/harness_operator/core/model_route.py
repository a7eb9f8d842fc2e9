"""Routing an attempt's model traffic through the model gateway, which holds the vendor's key (pure).

An attempt is routed when the chart deploys the gateway with a key for the vendor its definition's
`modelRoute` names, and the run does not set the route's variables itself (a run that brings its own key
or endpoint keeps them, with a Warning Event). A routed attempt's definition is seen without any of its
credential grants (its vendor keys: another vendor's too) and, under `networkPolicy: provider`, without
its egress: the sandbox reaches the gateway and nothing else, and its token is good for its own attempt
only (the grant in the gateway's namespace, rewritten without the attempt once it has ended).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from harness_operator.api.v1alpha1 import (
    MODEL_GATEWAY_TOKEN,
    MODEL_GATEWAY_URL,
    CredentialGrant,
    EnvVar,
    HarnessDefinitionSpec,
    HarnessRun,
    ModelRoute,
    NetworkPolicyMode,
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
from harness_operator.core.config import OperatorConfig
from harness_operator.core.egress import LABEL_RUN_NAMESPACE, build_peer_rule
from harness_operator.core.invocation import add_option
from harness_operator.core.naming import fit_name, label_value, run_labels
from harness_operator.core.resolution import AttemptTarget
from harness_operator.core.settings_merge import merge_each, merge_settings

MAX_GRANT_NAME = 200  # the token carries it: short enough for every CLI's key field


def compute_model_route(
    run: HarnessRun, definition: HarnessDefinitionSpec, config: OperatorConfig
) -> ModelRoute | None:
    """The route of an attempt with this definition, or None when it is not routed."""
    route = definition.model_route
    if route is None or not config.model_gateway_service or route.vendor not in config.model_gateway_vendors:
        return None
    return None if find_own_route_settings(run, route) else route


def find_own_route_settings(run: HarnessRun, route: ModelRoute) -> list[str]:
    """The route's variables the run sets itself, sorted: in its env (its own endpoint), or as a
    credential that is not the token's (a run's own key, granted where the token goes, is routed: the
    gateway holds it, `find_own_key`)."""
    names = {e.name for e in route.env}
    own = {e.name for e in run.spec.env} | {c.env for c in run.spec.credentials} - token_envs(route)
    return sorted(names & own)


def token_envs(route: ModelRoute) -> set[str]:
    return {e.name for e in route.env if MODEL_GATEWAY_TOKEN in e.value}


def find_own_key(run: HarnessRun, route: ModelRoute) -> CredentialGrant | None:
    """The run's own vendor key: its grant of a variable the route puts the token in. The gateway
    holds it for the attempt (the admission policy checked that the run's author may read it)."""
    return next((c for c in run.spec.credentials if c.env in token_envs(route)), None)


def model_key_secret_name(namespace: str, run_name: str) -> str:
    """The Secret in the gateway's namespace holding the runs' own keys, one data key per attempt."""
    return fit_name(f"model-key.{namespace}.{run_name}", "", MAX_GRANT_NAME)


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


def route_targets(
    run: HarnessRun, targets: Sequence[AttemptTarget], config: OperatorConfig
) -> list[AttemptTarget]:
    """The targets as a routed attempt sees its definition: without its credential grants (vendor keys,
    which the gateway holds) and under `provider` mode without egress of its own (the gateway's rule is
    added to the policy)."""
    out = []
    for target in targets:
        route = compute_model_route(run, target.definition, config)
        if route is None:
            out.append(target)
            continue
        update: dict[str, Any] = {"credentials": []}
        mode = run.spec.sandbox.network_policy if run.spec.sandbox else NetworkPolicyMode.provider
        if mode == NetworkPolicyMode.provider:
            update["egress"] = []
        out.append(replace(target, definition=target.definition.model_copy(update=update)))
    return out


def model_grant_name(namespace: str, run_name: str) -> str:
    return fit_name(f"model.{namespace}.{run_name}", "", MAX_GRANT_NAME)


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
    the runner passes through and redacts, its home files (merged likewise)."""
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
        }
    )


def build_model_secrets(
    run: HarnessRun, targets: Sequence[AttemptTarget], config: OperatorConfig
) -> dict[str, str]:
    """Plan Secret entries: each routed variable that carries an attempt's token, expanded."""
    out = {}
    for target in targets:
        route = compute_model_route(run, target.definition, config)
        if route is None:
            continue
        token, base = model_token(run, config, target.index), model_base_url(config, route.vendor)
        for var in route.env:
            if MODEL_GATEWAY_TOKEN in var.value:
                out[model_env_key(target.index, var.name)] = expand(var.value, base, token)
    return out


def build_model_env(
    run: HarnessRun, target: AttemptTarget, config: OperatorConfig, secret: str
) -> list[dict[str, Any]]:
    """The runner container's routed variables that carry the token, each from the plan Secret."""
    route = compute_model_route(run, target.definition, config)
    if route is None:
        return []
    return [
        {
            "name": v.name,
            "valueFrom": {"secretKeyRef": {"name": secret, "key": model_env_key(target.index, v.name)}},
        }
        for v in route.env
        if MODEL_GATEWAY_TOKEN in v.value
    ]


def build_model_grant(
    run: HarnessRun,
    targets: Sequence[AttemptTarget],
    plans: Sequence[Mapping[str, Any]],
    config: OperatorConfig,
    with_own_keys: frozenset[int] = frozenset(),
) -> dict[str, Any] | None:
    """The gateway's grant for the run: per routed attempt, its token's hash, vendor, caps (the plan's,
    a budget's reservation included), the definition's prices and, for the attempts in `with_own_keys`,
    where the run's own key is. None when no attempt is routed."""
    ns, name = run.metadata["namespace"], run.metadata["name"]
    attempts = {}
    for target, planned in zip(targets, plans, strict=True):
        plan = AttemptPlan.model_validate(planned)
        route = compute_model_route(run, target.definition, config)
        if route is None:
            continue
        own = find_own_key(run, route) if target.index in with_own_keys else None
        attempts[str(target.index)] = ModelAttemptGrant(
            token_sha256=token_sha256(model_token(run, config, target.index)),
            vendor=route.vendor,
            max_cost_usd=plan.limits.max_cost_usd,
            max_tokens=plan.limits.max_tokens,
            pricing=dict(target.definition.pricing) if target.namespaced else {},
            platform_pricing=None if target.namespaced else dict(target.definition.pricing),
            key_secret=model_key_secret_name(ns, name) if own else None,
            key_field=model_key_field(target.index) if own else None,
        )
    if not attempts:
        return None
    grant = ModelGrant(namespace=ns, run=name, uid=run.metadata["uid"], attempts=attempts)
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


def without_attempts(grant: ModelGrant, ended: set[int]) -> ModelGrant:
    """The grant with the ended attempts taken out: their tokens are refused from then on."""
    return grant.model_copy(
        update={"attempts": {k: v for k, v in grant.attempts.items() if int(k) not in ended}}
    )


def build_gateway_peer_rule(config: OperatorConfig) -> dict[str, Any]:
    """NetworkPolicy egress to the model gateway's pods, on its vendors' port only."""
    return build_peer_rule(
        config.model_gateway_namespace, config.model_gateway_pod_labels, config.model_gateway_port
    )


def compute_key_warning(run: HarnessRun, target: AttemptTarget, config: OperatorConfig) -> str | None:
    """Why an attempt that holds credentials is not routed, while a model gateway runs; None otherwise."""
    if not config.model_gateway_service or compute_model_route(run, target.definition, config) is not None:
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
