"""The message of a routed attempt whose key the vendor refused: whose key it was and where it is fixed
(pure).

Behind the model gateway the team holds no vendor key: a 401 the CLI reports is the platform's key (or
the run's own, which the gateway holds for it), and the CLI's own words ("Invalid API key · Fix external
API key") would send the team after a key it does not have. Neither is retried: AuthFailed is not
transient (core/resolve/retry.py), and the gateway's answer stops the CLI's own retries.
"""

from __future__ import annotations

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun, ModelRoute
from harness_operator.contract.result import ResultDocument
from harness_operator.core.access.model_route import find_own_key
from harness_operator.core.config import OperatorConfig


def with_refused_key(
    result: ResultDocument, run: HarnessRun, route: ModelRoute, config: OperatorConfig
) -> ResultDocument:
    """The result of a routed attempt, its AuthFailed message naming the refused key's Secret."""
    if result.reason != Reason.AuthFailed:
        return result
    own = find_own_key(run, route)
    if own is not None:
        where = f"{run.metadata['namespace']}/{own.secret_key_ref.name}"
        message = (
            f"the vendor ({route.vendor}) refused the run's own key, Secret {where} key "
            f"{own.secret_key_ref.key} (spec.credentials {own.env}), which the model gateway sent for it: "
            "put a valid key there"
        )
    else:
        name = config.model_gateway_key_secrets.get(route.vendor)
        where = f"Secret {config.model_gateway_namespace}/{name}" if name else "its Secret"
        message = (
            f"the vendor ({route.vendor}) refused the platform's key, which the model gateway holds for "
            f"every routed run, not this run's: the platform team replaces it in {where} (the chart's "
            f"modelGateway.vendors.{route.vendor}.secretName); a retry will not help"
        )
    return result.model_copy(update={"message": message})
