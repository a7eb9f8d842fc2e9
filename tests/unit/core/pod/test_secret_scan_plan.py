"""The publisher's secret scan as the platform sets it (chart publishing.secretScan -> HARNESS_SECRET_SCAN*
-> OperatorConfig -> the publisher's plan in the attempt's Job): on by default, allowed findings passed
through whole (commas in regexes too), bad entries refused at startup naming the value to fix; a run has
no say."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from tests.unit.core.pod.test_publish import TARGET, make_run

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.changes import PUBLISH_PLAN_ENV, PublishPlan
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import PUBLISH_CONTAINER
from harness_operator.core.pod.job import build_job


def publisher_plan(config: OperatorConfig) -> PublishPlan:
    run = make_run()
    pod = build_job(run, decide_attempt(run, TARGET, config), config)["spec"]["template"]["spec"]
    [publisher] = [c for c in pod["initContainers"] if c["name"] == PUBLISH_CONTAINER]
    env = {e["name"]: e for e in publisher["env"]}
    return PublishPlan.model_validate_json(env[PUBLISH_PLAN_ENV]["value"].replace("$$", "$"))


def test_the_scan_is_on_by_default_with_nothing_allowed() -> None:
    plan = publisher_plan(OperatorConfig())
    assert plan.secret_scan is not None
    assert plan.secret_scan.allow.model_dump() == {"paths": [], "rules": [], "fingerprints": []}


def test_the_platform_turns_it_off_or_allows_findings_one_a_line() -> None:
    off = OperatorConfig.from_env({"HARNESS_SECRET_SCAN": "false"})
    assert publisher_plan(off).secret_scan is None
    config = OperatorConfig.from_env(
        {
            "HARNESS_SECRET_SCAN_ALLOW_PATHS": "^tests/fixtures/\n\n(?:^|/)testdata/[a-z]{1,3}\\.json$\n",
            "HARNESS_SECRET_SCAN_ALLOW_RULES": "generic-api-key\njwt",
            "HARNESS_SECRET_SCAN_ALLOW_FINGERPRINTS": "docs/a,b.md:github-pat:3",
        }
    )
    scan = publisher_plan(config).secret_scan
    assert scan is not None
    assert scan.allow.paths == ["^tests/fixtures/", "(?:^|/)testdata/[a-z]{1,3}\\.json$"]
    assert scan.allow.rules == ["generic-api-key", "jwt"]
    assert scan.allow.fingerprints == ["docs/a,b.md:github-pat:3"]


@pytest.mark.parametrize(
    ("env", "said"),
    [
        (
            {"HARNESS_SECRET_SCAN_ALLOW_PATHS": "tests/(fixtures"},
            "HARNESS_SECRET_SCAN_ALLOW_PATHS (publishing.secretScan.allow.paths): 'tests/(fixtures' is not a "
            "regular expression",
        ),
        (
            {"HARNESS_SECRET_SCAN_ALLOW_FINGERPRINTS": "tests/key.json:github-pat"},
            "HARNESS_SECRET_SCAN_ALLOW_FINGERPRINTS (publishing.secretScan.allow.fingerprints): "
            "'tests/key.json:github-pat' is not a fingerprint PATH:RULE:LINE",
        ),
    ],
)
def test_a_bad_allow_entry_stops_the_operator_naming_the_value(env: dict[str, str], said: str) -> None:
    with pytest.raises(ValueError) as raised:
        OperatorConfig.from_env(env)
    assert said in str(raised.value)


def test_a_run_cannot_turn_the_scan_off() -> None:
    spec = make_run().to_api()
    spec["spec"]["workspace"]["publish"]["secretScan"] = {"enabled": False}
    with pytest.raises(ValidationError, match="secretScan"):
        HarnessRun.model_validate(spec)
