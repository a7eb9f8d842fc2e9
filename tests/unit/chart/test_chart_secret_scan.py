"""The chart's publishing.secretScan rendered by the real `helm` and read by the operator as it starts: on by
default, the platform's allowed findings reach the publisher's plan whole (commas, backslashes, quotes),
and the schema refuses an entry the operator could not read."""

from __future__ import annotations

from pathlib import Path

import yaml
from tests.unit.chart.test_chart_render import CHART, env_of, helm, pytestmark, render

from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.publish import build_secret_scan_plan

__all__ = ["pytestmark"]  # helm is needed (the module's skip)


def test_the_scan_is_on_by_default_and_allows_nothing() -> None:
    plan = build_secret_scan_plan(OperatorConfig.from_env(env_of(render())))
    assert plan is not None and plan.allow.model_dump() == {"paths": [], "rules": [], "fingerprints": []}
    assert (
        build_secret_scan_plan(OperatorConfig.from_env(env_of(render("publishing.secretScan.enabled=false"))))
        is None
    )


def test_allowed_findings_reach_the_publishers_plan_whole(tmp_path: Path) -> None:
    allow = {
        "paths": ["^tests/fixtures/", '(?:^|/)testdata/[a-z]{1,3}\\.(json|"yaml")$'],
        "rules": ["generic-api-key", "jwt"],
        "fingerprints": ["docs/a,b.md:github-pat:3"],
    }
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"publishing": {"secretScan": {"allow": allow}}}))
    result = helm(
        "template", "harness-operator", str(CHART), "--namespace", "harness-system", "-f", str(values)
    )
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]

    plan = build_secret_scan_plan(OperatorConfig.from_env(env_of(docs)))

    assert plan is not None and plan.allow.model_dump() == allow


def test_the_schema_refuses_a_fingerprint_without_its_line() -> None:
    result = helm(
        "template",
        "x",
        str(CHART),
        "--set",
        "publishing.secretScan.allow.fingerprints[0]=key.json:github-pat",
    )
    assert result.returncode != 0
    assert "fingerprints" in result.stderr
