"""The gateways' grants of a run (I/O; the grants are core/pod/egress_grant.py's and
core/pod/model_grant.py's): the egress grant written before its first Job, an attempt let into the model
gateway's as it starts and taken out as it ends, both deleted with the run; a name another run's grant
holds is never written over."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.model_access import LABEL_MODEL_GRANT, MODEL_GRANT_KEY
from harness_operator.controller.kube import Kube
from harness_operator.core.access.model_route import find_own_key
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.egress_grant import (
    GRANT_KEY,
    LABEL_GRANT,
    build_egress_grant,
    build_proxy_urls,
    grant_name,
)
from harness_operator.core.pod.model_grant import (
    build_model_grant,
    build_model_grant_map,
    build_model_key_secret,
    build_model_secrets,
    compute_live_attempts,
    find_grant_conflict,
    model_grant_name,
    model_key_secret_name,
    read_model_grant,
    without_attempts,
)
from harness_operator.core.resolve.resolution import RunFailure


class Grants:
    def __init__(self, kube: Kube, config: OperatorConfig) -> None:
        self.kube, self.config = kube, config

    def write(self, run: HarnessRun, attempts: Sequence[Attempt]) -> dict[str, str]:
        """Write the run's egress grant (before its first Job: the gateway must know its credentials
        first) and return the credentials its plan Secret holds: the proxy URLs and the routed variables.
        No model token is live yet: each attempt's joins the model grant as it starts (`admit`)."""
        grant = build_egress_grant(run, attempts, self.config)
        if grant is not None:
            meta = grant["metadata"]
            found = self.kube.fetch_config_map(meta["namespace"], meta["name"])
            self._write(run, grant, LABEL_GRANT, GRANT_KEY, found)
        return {
            **build_proxy_urls(run, attempts, self.config),
            **build_model_secrets(run, attempts, self.config),
        }

    def admit(self, run: HarnessRun, attempts: Sequence[Attempt], index: int) -> None:
        """Let attempt `index` into the run's model grant, before its Job: its token is live from then
        on, never before (an attempt that has not started spends nothing). `run` carries its budget's
        reservation (status.budget): the grant's caps are the run's, for all its attempts together. The
        live attempts' own keys (the run's grant of the token's variable) are copied for the gateway
        first; a required one that is missing fails the run, as the runner would."""
        if attempts[index - 1].model_route is None:
            return
        found = self._fetch_model_grant(run)
        live = compute_live_attempts(run, read_model_grant(found), index)
        keys = self._own_keys(run, [a for a in attempts if a.index in live])
        key_secret = build_model_key_secret(run, self.config, keys)
        if key_secret is not None:
            self.kube.apply_key_secret(key_secret)
        grant = build_model_grant(run, attempts, self.config, live, frozenset(keys))
        if grant is not None:
            self._write(run, grant, LABEL_MODEL_GRANT, MODEL_GRANT_KEY, found)

    def _own_keys(self, run: HarnessRun, attempts: Sequence[Attempt]) -> dict[int, str]:
        keys = {}
        for target in attempts:
            route = target.model_route
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
        """Take the attempt out of the run's model grant: the gateway refuses its token from then on. A
        grant of another run (a deleted one's of the same name) is left alone."""
        found = self._fetch_model_grant(run)
        grant = read_model_grant(found)
        if grant is None or grant.uid != run.metadata["uid"] or str(index) not in grant.attempts:
            return
        body = build_model_grant_map(run, self.config, without_attempts(grant, {index}))
        self._write(run, body, LABEL_MODEL_GRANT, MODEL_GRANT_KEY, found)

    def _fetch_model_grant(self, run: HarnessRun) -> dict[str, Any] | None:
        name = model_grant_name(run.metadata["namespace"], run.metadata["name"])
        return self.kube.fetch_config_map(self.config.model_gateway_namespace, name)

    def _write(
        self,
        run: HarnessRun,
        grant: dict[str, Any],
        label: str,
        key: str,
        found: Mapping[str, Any] | None,
    ) -> None:
        """Create the grant, or replace the one its name holds if that is this run's (or a deleted run's
        of the same namespace and name) and unchanged since it was read (`found`, None: there was none);
        another run's grant, or an object
        that is no grant, fails the run (ChildConflict). A write that lost a race is retried (409)."""
        meta = grant["metadata"]
        conflict = find_grant_conflict(found, label, key, run)
        if conflict is not None:
            raise RunFailure(Reason.ChildConflict, f"{conflict}: it is left as it is and this run stops")
        version = ((found or {}).get("metadata") or {}).get("resourceVersion")
        body = {**grant, "metadata": {**meta, **({"resourceVersion": version} if version else {})}}
        if self.kube.write_config_map(body) is None:
            raise ApiException(status=409, reason=f"grant {meta['name']} changed while it was written")

    def revoke_run(self, namespace: str, name: str) -> None:
        """Delete the run's grants (of the gateways that are on): its credentials open nothing more."""
        if self.config.egress_gateway_service:
            self.kube.delete_grant(self.config.egress_gateway_namespace, grant_name(namespace, name))
        if self.config.model_gateway_service:
            self.revoke_model(namespace, name)

    def revoke_model(self, namespace: str, name: str) -> None:
        """Delete the run's model grant and its own keys: none of its tokens is live any more."""
        self.kube.delete_grant(self.config.model_gateway_namespace, model_grant_name(namespace, name))
        self.kube.delete_secret(self.config.model_gateway_namespace, model_key_secret_name(namespace, name))
