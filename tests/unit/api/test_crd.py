"""Generated CRDs: committed files match the models, and each has the shape kubectl users rely on."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from harness_operator.api.crd import build_crds, render_crd_yaml

ROOT = Path(__file__).resolve().parents[3]
CRDS = build_crds()


@pytest.mark.parametrize("name", sorted(CRDS))
def test_committed_crd_matches_the_models(name: str) -> None:
    committed = (ROOT / "crds" / name).read_text(encoding="utf-8")
    assert committed == render_crd_yaml(CRDS[name]), f"crds/{name} drifted: run `make generate`"


def test_no_stray_files_in_crds() -> None:
    assert sorted(p.name for p in (ROOT / "crds").glob("*.yaml")) == sorted(CRDS)


def walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for key, child in node.get("properties", {}).items():
        out += walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        out += walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += walk(node["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("name", sorted(CRDS))
def test_schema_is_structural(name: str) -> None:
    schema = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema):
        assert not {"$ref", "anyOf", "allOf", "title", "$defs"} & set(node), path
        typed = (
            "type" in node
            or node.get("x-kubernetes-int-or-string")
            or node.get("x-kubernetes-preserve-unknown-fields")
        )
        assert typed, f"{path} has no type"


@pytest.mark.parametrize("name", sorted(CRDS))
def test_every_spec_field_is_described(name: str) -> None:
    schema = CRDS[name]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema["properties"]["spec"], ".spec"):
        if path.endswith(("[]", "{}")):
            continue
        assert node.get("description"), f"{path} has no description (kubectl explain shows nothing)"


def test_names_short_names_and_category() -> None:
    names = {c["spec"]["names"]["kind"]: c["spec"]["names"] for c in CRDS.values()}
    assert names["HarnessRun"]["shortNames"] == ["hrun"]
    assert names["HarnessDefinition"]["shortNames"] == ["hdef"]
    assert names["ClusterHarnessDefinition"]["shortNames"] == ["chdef"]
    assert names["HarnessBudget"]["shortNames"] == ["hbudget"]
    assert names["HarnessSchedule"]["shortNames"] == ["hsched"]
    assert names["HarnessTrigger"]["shortNames"] == ["htrigger"]
    assert names["HarnessPipeline"]["shortNames"] == ["hpipe"]
    assert all(n["categories"] == ["harness"] for n in names.values())
    scopes = {c["spec"]["names"]["kind"]: c["spec"]["scope"] for c in CRDS.values()}
    assert scopes == {
        "HarnessRun": "Namespaced",
        "HarnessDefinition": "Namespaced",
        "ClusterHarnessDefinition": "Cluster",
        "HarnessBudget": "Namespaced",
        "HarnessSchedule": "Namespaced",
        "HarnessTrigger": "Namespaced",
        "HarnessPipeline": "Namespaced",
    }


def test_schedule_has_status_subresource_and_cronjob_like_columns() -> None:
    version = CRDS["agentharness.dev_harnessschedules.yaml"]["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Schedule", "Timezone", "Suspend", "Ready", "Last Schedule", "Next", "Age"]
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Active", "Policy"]


def test_trigger_has_status_subresource_and_columns() -> None:
    version = CRDS["agentharness.dev_harnesstriggers.yaml"]["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Forge", "Repositories", "Last Delivery", "Age"]
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == ["Last Run", "Policy"]


def test_run_has_status_subresource_and_printer_columns() -> None:
    version = CRDS["agentharness.dev_harnessruns.yaml"]["spec"]["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Provider", "Ran", "Phase", "Reason", "Cost", "Age"]
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority") == 1]
    assert wide == [
        "Exit",
        "Turns",
        "Tokens",
        "Charged",
        "Duration",
        "Tool",
        "Files",
        "Branch",
        "PR",
        "Checks",
        "Approval",
        "Approver",
    ]
    # Cost moves while the run is in flight: it reads the progress, which ends as the run's total.
    cost = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Cost")
    assert cost["jsonPath"] == ".status.progress.costUSD"
    # What its budgets charged it: its reservation when its cost stayed unknown (Cost then empty).
    charged = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Charged")
    assert charged["jsonPath"] == ".status.budget.charge.amountUSD"


def test_cel_rules_are_in_the_crd() -> None:
    text = yaml.safe_dump(CRDS["agentharness.dev_harnessruns.yaml"])
    assert "with.binary is not supported" in text
    assert "spec is immutable after creation except spec.cancel" in text
    assert "oldSelf" in text


def test_status_schema_carries_no_defaults() -> None:
    schema = CRDS["agentharness.dev_harnessruns.yaml"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(schema["properties"]["status"], ".status"):
        assert "default" not in node, path
