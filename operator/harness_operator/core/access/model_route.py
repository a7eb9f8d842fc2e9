"""Whether an attempt's model traffic goes through the model gateway, which holds the vendor's key (pure).

An attempt is routed when the chart deploys the gateway with a key for the vendor its definition's
`modelRoute` names, and the run does not set the route's variables itself (a run that brings its own key
or endpoint keeps them, with a Warning Event). model_grant.py builds what a routed attempt gets.
"""

from __future__ import annotations

from harness_operator.api.v1alpha1 import (
    MODEL_GATEWAY_TOKEN,
    CredentialGrant,
    HarnessDefinitionSpec,
    HarnessRun,
    ModelRoute,
)
from harness_operator.core.config import OperatorConfig


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
