"""Signing a run's pushed commit (core/pod/signing.py): who signs (the platform's default, a run's
publish.sign within what the platform allows), the key only in the publisher's container, runs and
definitions naming the signing Secret refused, the report's signature in status.changes, the settings."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from tests.unit.core.pod.test_publish import (
    CONFIG,
    DEFINITION,
    TARGET,
    URL,
    containers,
    make_run,
    secret_refs,
)

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessDefinitionSpec, HarnessRun
from harness_operator.contract.changes import (
    PUBLISH_PLAN_ENV,
    SIGNING_KEY_ENV,
    ChangesReport,
    PublishPlan,
    parse_report,
)
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import PUBLISH_CONTAINER
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.publish import compute_changes
from harness_operator.core.pod.signing import check_signing, is_signed
from harness_operator.core.resolve.resolution import AttemptTarget, Rejection

SIGNING = replace(
    CONFIG,
    signing_secret_name="harness-signing",
    signing_enabled=True,
    signing_committer_name="Harness Bot",
    signing_committer_email="bot@example.invalid",
)
WRITE = {"name": "write", "key": "token"}


def run_with(sign: bool | None = None, push: bool = True, **spec: Any) -> HarnessRun:
    publish: dict[str, Any] = {"credentialsSecretRef": WRITE} if push else {}
    if push:
        publish["pullRequest"] = {"title": "$(run.name)"}
    if sign is not None:
        publish["sign"] = sign
    workspace = {"git": {"url": URL, "ref": "main"}, "publish": publish}
    run = make_run(workspace)
    return HarnessRun.model_validate(
        {**run.to_api(), "spec": {**run.spec.model_dump(by_alias=True, exclude_none=True), **spec}}
    )


def publisher_of(run: HarnessRun, config: OperatorConfig) -> tuple[dict[str, Any], PublishPlan]:
    job = build_job(run, decide_attempt(run, TARGET, config), config)
    by_name = containers(job)
    publisher = by_name[PUBLISH_CONTAINER]
    env = {e["name"]: e for e in publisher["env"]}
    plan = PublishPlan.model_validate_json(env[PUBLISH_PLAN_ENV]["value"].replace("$$", "$"))
    for name, container in by_name.items():
        if name != PUBLISH_CONTAINER:
            assert "harness-signing" not in secret_refs(container), name
            assert SIGNING_KEY_ENV not in {e["name"] for e in container.get("env", [])}, name
    return publisher, plan


def test_only_the_publisher_gets_the_key_and_its_plan_says_who_signs() -> None:
    publisher, plan = publisher_of(run_with(), SIGNING)

    [key] = [e for e in publisher["env"] if e["name"] == SIGNING_KEY_ENV]
    assert key["valueFrom"] == {"secretKeyRef": {"name": "harness-signing", "key": "ssh-privatekey"}}
    assert plan.sign is not None
    assert (plan.sign.name, plan.sign.email) == ("Harness Bot", "bot@example.invalid")
    assert '"harness-signing"' in plan.sign.source and "publishing.signing" in plan.sign.source
    # The key is not a granted credential the change is searched for (the agent never had it).
    assert SIGNING_KEY_ENV not in plan.secret_envs
    # The volumes are the publisher's own as before: the key travels as its variable only.
    assert {m["name"] for m in publisher["volumeMounts"]} == {"workspace", "publish", "verdict"}


def test_no_committer_configured_keeps_the_commits_own() -> None:
    config = replace(SIGNING, signing_committer_name="", signing_committer_email="")
    _, plan = publisher_of(run_with(), config)
    assert plan.sign is not None and (plan.sign.name, plan.sign.email) == (None, None)


@pytest.mark.parametrize(
    ("config", "sign", "push", "signed"),
    [
        (CONFIG, None, True, False),  # no key configured: nothing is signed
        (SIGNING, None, True, True),  # the platform signs by default
        (SIGNING, True, True, True),
        (replace(SIGNING, signing_allow_unsigned=True), False, True, False),
        (replace(SIGNING, signing_enabled=False), None, True, False),  # a key, off by default
        (replace(SIGNING, signing_enabled=False), True, True, True),  # ... on for the run that asks
        (replace(SIGNING, signing_enabled=False), False, True, False),
        (SIGNING, None, False, False),  # nothing pushed: nothing to sign
    ],
)
def test_who_signs(config: OperatorConfig, sign: bool | None, push: bool, signed: bool) -> None:
    run = run_with(sign, push)
    check_signing(run, [decide_attempt(run, TARGET, config)], config)
    assert is_signed(run, config) is signed
    if push:
        publisher, plan = publisher_of(run, config)
        assert (plan.sign is not None) is signed
        assert (SIGNING_KEY_ENV in {e["name"] for e in publisher["env"]}) is signed


@pytest.mark.parametrize(
    ("config", "sign", "push", "said"),
    [
        (CONFIG, True, True, "the platform configures no signing key (the operator's publishing.signing."),
        (SIGNING, True, False, "it pushes none: set spec.workspace.publish.branch or pullRequest"),
        (SIGNING, False, True, "allows no unsigned one (publishing.signing.allowUnsigned): unset sign"),
    ],
)
def test_a_run_cannot_sign_without_a_key_or_loosen_the_platform(
    config: OperatorConfig, sign: bool, push: bool, said: str
) -> None:
    run = run_with(sign, push)
    with pytest.raises(Rejection) as refused:
        check_signing(run, [decide_attempt(run, TARGET, config)], config)
    assert refused.value.reason == Reason.InvalidSpec
    assert refused.value.message.startswith(f"spec.workspace.publish.sign: {str(sign).lower()}")
    assert said in refused.value.message


SIGNING_REF = {"name": "harness-signing", "key": "ssh-privatekey"}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"credentials": [{"env": "K", "secretKeyRef": SIGNING_REF}]}, "spec.credentials[0].secretKeyRef"),
        ({"promptFrom": {"secretKeyRef": SIGNING_REF}, "prompt": None}, "spec.promptFrom.secretKeyRef"),
        ({"inputs": [{"name": "k", "secretKeyRef": SIGNING_REF}]}, "spec.inputs[0].secretKeyRef"),
    ],
)
def test_a_run_naming_the_signing_secret_is_refused(spec: dict[str, Any], field: str) -> None:
    run = run_with(**spec)
    with pytest.raises(Rejection) as refused:
        check_signing(run, [decide_attempt(run, TARGET, SIGNING)], SIGNING)
    assert refused.value.reason == Reason.InvalidSpec
    assert refused.value.message.startswith(f'{field} names Secret "harness-signing"')
    assert "only the publisher reads it; name another Secret" in refused.value.message
    # Without a signing Secret configured, the same run is nobody's business here.
    check_signing(run, [decide_attempt(run, TARGET, CONFIG)], CONFIG)


def test_the_publish_credential_may_not_be_the_signing_secret() -> None:
    run = run_with()
    api = run.to_api()
    api["spec"]["workspace"]["publish"]["credentialsSecretRef"] = {"name": "harness-signing", "key": "token"}
    run = HarnessRun.model_validate(api)
    with pytest.raises(Rejection) as refused:
        check_signing(run, [decide_attempt(run, TARGET, SIGNING)], SIGNING)
    assert refused.value.message.startswith("spec.workspace.publish.credentialsSecretRef names")


def test_a_provider_definition_naming_the_signing_secret_is_refused() -> None:
    """A namespaced HarnessDefinition is a tenant's: its grants would hand the key to the agent."""
    definition = HarnessDefinitionSpec.model_validate(
        {
            **DEFINITION.model_dump(by_alias=True, exclude_none=True),
            "credentials": [{"env": "SIGN", "secretKeyRef": SIGNING_REF}],
        }
    )
    target = AttemptTarget(index=1, provider="mine", definition=definition, position=1)
    run = run_with()
    with pytest.raises(Rejection) as refused:
        check_signing(run, [decide_attempt(run, target, SIGNING)], SIGNING)
    assert refused.value.message.startswith(
        'the provider definition of attempt 1 (mine).credentials[0].secretKeyRef names Secret "harness-signing"'
    )


def test_the_signature_reaches_status_changes() -> None:
    report = ChangesReport(
        base="a" * 40, commit="b" * 40, branch="harness/fix-1", signed=True, signing_key="SHA256:abc"
    )
    parsed = parse_report(report.render())  # the termination message the operator reads
    assert parsed is not None
    changes, failure = compute_changes(parsed, False, "fix-1")
    assert failure is None and changes is not None
    assert changes.to_api()["signed"] is True and changes.to_api()["signingKey"] == "SHA256:abc"
    unsigned, _ = compute_changes(ChangesReport(base="a" * 40, commit="b" * 40), False, "fix-1")
    assert unsigned is not None and "signed" not in unsigned.to_api()
    failed = ChangesReport(base="a" * 40, reason=Reason.SigningFailed, message="the key is empty")
    _, failure = compute_changes(failed, False, "fix-1")
    assert failure == (Reason.SigningFailed, "the key is empty")


def test_the_settings_are_read_from_the_environment_and_checked() -> None:
    config = OperatorConfig.from_env(
        {
            "HARNESS_SIGNING_SECRET_NAME": "sign",
            "HARNESS_SIGNING_SECRET_KEY": "key",
            "HARNESS_SIGNING_ENABLED": "true",
            "HARNESS_SIGNING_ALLOW_UNSIGNED": "false",
            "HARNESS_SIGNING_COMMITTER_NAME": "Bot",
            "HARNESS_SIGNING_COMMITTER_EMAIL": "bot@example.invalid",
        }
    )
    assert (config.signing_secret_name, config.signing_secret_key) == ("sign", "key")
    assert config.signing_enabled and not config.signing_allow_unsigned
    with pytest.raises(ValueError, match="HARNESS_SIGNING_SECRET_NAME must name the Secret"):
        OperatorConfig.from_env({"HARNESS_SIGNING_ENABLED": "true"})
