"""`harnessctl validate` (real subprocess) on a HarnessTrigger: its run template checked as a schedule's
(the schema, the CRD's CEL rules, its outputSchema), the $(event.NAME) it uses, its teams and its name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "forge-loop" / "gitea.yaml"


def example_trigger() -> dict[str, Any]:
    (trigger,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d and d["kind"] == "HarnessTrigger"]
    return dict(trigger)


def validate(tmp_path: Path, trigger: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "trigger.yaml"
    path.write_text(yaml.safe_dump(trigger))
    return subprocess.run(
        [sys.executable, "-m", "harness_operator.cli.main", "validate", str(path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_the_example_trigger_validates(tmp_path: Path) -> None:
    done = validate(tmp_path, example_trigger())
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_event_parameter_no_delivery_replaces_is_an_error(tmp_path: Path) -> None:
    trigger = example_trigger()
    template = trigger["spec"]["runTemplate"]["spec"]
    template["prompt"] = "Fix $(event.titel) of $(event.repository), branch $(run.name)"
    template["workspace"]["publish"]["pullRequest"]["title"] = "agent: $(event.Title)"
    done = validate(tmp_path, trigger)
    assert done.returncode != 0
    lines = done.stdout.splitlines()
    prefix = f"{tmp_path / 'trigger.yaml'}: HarnessTrigger/payments: "
    assert prefix + (
        "spec.runTemplate.spec.prompt: $(event.titel) is no event parameter, so every run would carry it as "
        "written; the parameters are $(event.repository), $(event.number), $(event.title)"
    ) in "\n".join(lines)
    assert any(
        "spec.runTemplate.spec.workspace.publish.pullRequest.title: $(event.Title)" in x for x in lines
    )
    assert not any("$(event.repository) is no" in x or "$(run.name)" in x for x in lines)


def test_the_run_templates_output_schema_is_checked_as_a_schedules(tmp_path: Path) -> None:
    trigger = example_trigger()
    trigger["spec"]["runTemplate"]["spec"]["outputSchema"] = {"type": "objekt"}
    done = validate(tmp_path, trigger)
    assert done.returncode != 0
    assert "HarnessTrigger/payments: spec.runTemplate.spec.outputSchema" in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            {"metadata": {"name": "p" * 64, "namespace": "team-a"}},
            "metadata.name: a HarnessTrigger's name is at most 63 characters",
        ),
        (
            {"authors": {"teams": ["platform"]}},
            "spec.authors.teams: on github and gitea a team is org/team",
        ),
    ],
)
def test_a_long_name_and_a_team_without_its_org_are_refused(
    tmp_path: Path, change: dict[str, Any], said: str
) -> None:
    trigger = example_trigger()
    if "metadata" in change:
        trigger["metadata"] = change["metadata"]
    else:
        trigger["spec"].update(change)
    done = validate(tmp_path, trigger)
    assert done.returncode != 0
    assert said in done.stdout, done.stdout


def test_teams_need_the_token_the_receiver_asks_with(tmp_path: Path) -> None:
    trigger = example_trigger()
    trigger["spec"]["authors"] = {"teams": ["acme/platform"]}
    assert validate(tmp_path, trigger).returncode == 0
    del trigger["spec"]["forge"]["tokenSecretRef"]
    done = validate(tmp_path, trigger)
    assert done.returncode != 0
    assert "spec.authors.teams needs spec.forge.tokenSecretRef" in done.stdout, done.stdout
