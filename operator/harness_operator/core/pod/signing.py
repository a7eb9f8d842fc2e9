"""Signing a run's pushed commit with the platform's SSH key (publishing.signing) (pure).

Whether the run signs (the platform's default, a run's `publish.sign` within what the platform allows),
the publisher's signing plan and the one variable that hands it the key: only the publishing container
gets it, from the Secret of the run's namespace the operator's configuration names. A run or a provider
definition that names that Secret for anything else is refused, so the key never reaches an agent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.changes import SIGNING_KEY_ENV, SigningPlan
from harness_operator.core.attempt import Attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.publish import publish_branch
from harness_operator.core.resolve.resolution import Rejection

SIGN_FIELD = "spec.workspace.publish.sign"


def is_signed(run: HarnessRun, config: OperatorConfig) -> bool:
    """Whether the commit the run pushes is signed: its publish.sign, else the platform's default."""
    workspace = run.spec.workspace
    publish = workspace.publish if workspace else None
    if publish is None or publish_branch(run) is None or not config.signing_secret_name:
        return False
    return config.signing_enabled if publish.sign is None else publish.sign


def build_signing_plan(run: HarnessRun, config: OperatorConfig) -> SigningPlan | None:
    """The publisher's signing plan, or None when the run's commit is not signed."""
    if not is_signed(run, config):
        return None
    return SigningPlan(
        source=f'Secret "{config.signing_secret_name}" key "{config.signing_secret_key}" of the run\'s '
        "namespace (the operator's publishing.signing)",
        name=config.signing_committer_name or None,
        email=config.signing_committer_email or None,
    )


def build_signing_env(config: OperatorConfig) -> dict[str, Any]:
    """The publishing container's variable holding the key (a missing Secret or key keeps the pod from
    starting, CreateContainerConfigError, which the run's status shows with the kubelet's words)."""
    ref = {"name": config.signing_secret_name, "key": config.signing_secret_key}
    return {"name": SIGNING_KEY_ENV, "valueFrom": {"secretKeyRef": ref}}


def check_signing(run: HarnessRun, attempts: Sequence[Attempt], config: OperatorConfig) -> None:
    """Rejection (InvalidSpec) when the run asks to sign without a key or a push, opts out where the
    platform does not allow it, or when it or a provider definition names the signing Secret."""
    workspace = run.spec.workspace
    publish = workspace.publish if workspace else None
    sign = publish.sign if publish else None
    if sign is True and not config.signing_secret_name:
        raise Rejection(
            Reason.InvalidSpec,
            f"{SIGN_FIELD}: true, but the platform configures no signing key (the operator's "
            "publishing.signing.secretName): unset sign, or ask the platform's team for one",
        )
    if sign is True and publish_branch(run) is None:
        raise Rejection(
            Reason.InvalidSpec,
            f"{SIGN_FIELD}: true signs the commit the run pushes, and it pushes none: set "
            "spec.workspace.publish.branch or pullRequest, or unset sign",
        )
    if sign is False and config.signing_enabled and not config.signing_allow_unsigned:
        raise Rejection(
            Reason.InvalidSpec,
            f"{SIGN_FIELD}: false, but the platform signs every pushed commit (publishing.signing.enabled) "
            "and allows no unsigned one (publishing.signing.allowUnsigned): unset sign",
        )
    if not config.signing_secret_name:
        return
    documents = [("spec", run.spec.model_dump(by_alias=True, exclude_none=True))]
    documents += [
        (
            f"the provider definition of attempt {a.index} ({a.provider})",
            a.definition.model_dump(by_alias=True),
        )
        for a in attempts
    ]
    for where, document in documents:
        found = find_secret_reference(document, config.signing_secret_name, where)
        if found is not None:
            raise Rejection(
                Reason.InvalidSpec,
                f'{found} names Secret "{config.signing_secret_name}", which holds the platform\'s commit '
                "signing key: only the publisher reads it; name another Secret",
            )


def find_secret_reference(document: Any, secret: str, path: str) -> str | None:
    """The first field (a path) of `document` that refers to Secret `secret`: an object under a field
    whose name says secret (secretKeyRef, credentialsSecretRef, ...) with that `name`."""
    if isinstance(document, dict):
        for field, value in document.items():
            where = f"{path}.{field}"
            if isinstance(value, dict) and "secret" in field.lower() and value.get("name") == secret:
                return where
            found = find_secret_reference(value, secret, where)
            if found is not None:
                return found
    elif isinstance(document, list):
        for index, item in enumerate(document):
            found = find_secret_reference(item, secret, f"{path}[{index}]")
            if found is not None:
                return found
    return None
