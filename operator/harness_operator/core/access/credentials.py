"""The credentials an attempt is granted: its definition's, its ACP connection's Secrets, the run's (pure)."""

from __future__ import annotations

from harness_operator.api.v1alpha1 import CredentialGrant, HarnessDefinitionSpec, HarnessRun, Protocol
from harness_operator.contract.plan import ACP_CA_BUNDLE_ENV, ACP_HEADER_ENV


def merge_grants(run: HarnessRun, definition: HarnessDefinitionSpec) -> dict[str, CredentialGrant]:
    """The definition's credential grants, its ACP connection's secrets, then the run's grants; the
    run's wins for the same variable."""
    grants = {c.env: c for c in definition.credentials}
    grants.update(acp_grants(definition))
    grants.update({c.env: c for c in run.spec.credentials})
    return grants


def acp_grants(definition: HarnessDefinitionSpec) -> dict[str, CredentialGrant]:
    """The Secrets an ACP connection reads (header values, the CA bundle), as credential grants."""
    if definition.protocol != Protocol.acp:
        return {}
    grants = {}
    for index, header in enumerate(definition.headers):
        if header.value_from is not None:
            env = ACP_HEADER_ENV.format(index=index)
            grants[env] = CredentialGrant(env=env, secret_key_ref=header.value_from.secret_key_ref)
    if definition.ca_bundle_secret_ref is not None:
        grants[ACP_CA_BUNDLE_ENV] = CredentialGrant(
            env=ACP_CA_BUNDLE_ENV, secret_key_ref=definition.ca_bundle_secret_ref
        )
    return grants
