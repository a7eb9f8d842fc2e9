"""The gateways' grants of a run (I/O; the grants are core/egress.py's and core/model_route.py's): written
before its first Job, an ended attempt's taken out of the model gateway's, deleted with the run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.model_access import MODEL_GRANT_KEY, ModelGrant
from harness_operator.controller.kube import Kube
from harness_operator.core.config import OperatorConfig
from harness_operator.core.egress import build_egress_grant, build_proxy_urls, grant_name
from harness_operator.core.model_route import (
    build_model_grant,
    build_model_grant_map,
    build_model_key_secret,
    build_model_secrets,
    compute_model_route,
    find_own_key,
    model_grant_name,
    model_key_secret_name,
    without_attempts,
)
from harness_operator.core.resolution import AttemptTarget, RunFailure


class Grants:
    def __init__(self, kube: Kube, config: OperatorConfig) -> None:
        self.kube, self.config = kube, config

    def write(
        self, run: HarnessRun, targets: Sequence[AttemptTarget], plans: Sequence[Mapping[str, Any]]
    ) -> dict[str, str]:
        """Write the run's grants (before its Job: the gateways must know its credentials first) and
        return the credentials its plan Secret holds: the proxy URLs and the routed variables. A routed
        attempt's own key (the run's grant of the token's variable) is copied for the gateway first; a
        required one that is missing fails the run, as the runner would."""
        keys = self._own_keys(run, targets)
        key_secret = build_model_key_secret(run, self.config, keys)
        if key_secret is not None:
            self.kube.apply_key_secret(key_secret)
        for grant in (
            build_egress_grant(run, targets, self.config),
            build_model_grant(run, targets, plans, self.config, frozenset(keys)),
        ):
            if grant is not None:
                self.kube.apply_grant(grant)
        return {
            **build_proxy_urls(run, targets, self.config),
            **build_model_secrets(run, targets, self.config),
        }

    def _own_keys(self, run: HarnessRun, targets: Sequence[AttemptTarget]) -> dict[int, str]:
        keys = {}
        for target in targets:
            route = compute_model_route(run, target.definition, self.config)
            own = find_own_key(run, route) if route is not None else None
            if own is None:
                continue
            ref = own.secret_key_ref
            value = self.kube.fetch_secret_key(run.metadata["namespace"], ref.name, ref.key)
            if value is not None:
                keys[target.index] = value
            elif not own.optional:
                raise RunFailure(
                    Reason.CredentialsMissing,
                    f"spec.credentials: {own.env}: Secret {ref.name} has no key {ref.key}; the model gateway "
                    f"needs it to reach the vendor for attempt {target.index}",
                )
        return keys

    def revoke_attempt(self, run: HarnessRun, index: int) -> None:
        """Take the attempt out of the run's model grant: the gateway refuses its token from then on."""
        ns = self.config.model_gateway_namespace
        name = model_grant_name(run.metadata["namespace"], run.metadata["name"])
        found = self.kube.fetch_config_map(ns, name)
        if found is None:
            return
        grant = ModelGrant.model_validate_json((found.get("data") or {}).get(MODEL_GRANT_KEY, "{}"))
        if str(index) in grant.attempts:
            self.kube.apply_grant(build_model_grant_map(run, self.config, without_attempts(grant, {index})))

    def revoke_run(self, namespace: str, name: str) -> None:
        """Delete the run's grants (of the gateways that are on): its credentials open nothing more."""
        if self.config.egress_gateway_service:
            self.kube.delete_grant(self.config.egress_gateway_namespace, grant_name(namespace, name))
        if self.config.model_gateway_service:
            self.kube.delete_grant(self.config.model_gateway_namespace, model_grant_name(namespace, name))
            self.kube.delete_secret(
                self.config.model_gateway_namespace, model_key_secret_name(namespace, name)
            )
