"""The Helm chart: its copies of the CRDs and catalog match the source, and values.yaml fits its schema."""

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from harness_operator.api.crd import build_crds, render_crd_yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "harness-operator"
CATALOG = ROOT / "operator" / "harness_operator" / "catalog"


@pytest.mark.parametrize("name", sorted(build_crds()))
def test_chart_crds_match_the_models(name: str) -> None:
    assert (CHART / "crds" / name).read_text() == render_crd_yaml(build_crds()[name]), "run `make generate`"


def test_chart_catalog_matches_the_package() -> None:
    source = {p.name: p.read_text() for p in CATALOG.glob("*.yaml")}
    copied = {p.name: p.read_text() for p in (CHART / "catalog").glob("*.yaml")}
    assert copied == source, "run `make generate`"
    assert len(source) == 15


def schema() -> dict:
    return json.loads((CHART / "values.schema.json").read_text())


def test_default_values_fit_the_schema() -> None:
    jsonschema.validate(yaml.safe_load((CHART / "values.yaml").read_text()), schema())


@pytest.mark.parametrize(
    ("patch", "path"),
    [
        ({"maxRunsPerNamespace": 0}, ["maxRunsPerNamespace"]),
        ({"image": {"repository": "x", "pullPolicy": "Sometimes"}}, ["image", "pullPolicy"]),
        ({"unknownKey": 1}, []),
        ({"catalog": {"enabled": "yes"}}, ["catalog", "enabled"]),
        ({"replicaCount": 2}, ["replicaCount"]),
        ({"imagePullSecrets": ["registry"]}, ["imagePullSecrets", 0]),
        ({"sandboxImagePullSecrets": [{"name": ""}]}, ["sandboxImagePullSecrets", 0, "name"]),
        ({"podLabels": {"tier": 1}}, ["podLabels", "tier"]),
        ({"metrics": {"serviceMonitor": {"interval": "soon"}}}, ["metrics", "serviceMonitor", "interval"]),
    ],
)
def test_bad_values_are_refused(patch: dict, path: list[str]) -> None:
    values = {**yaml.safe_load((CHART / "values.yaml").read_text()), **patch}
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(values, schema())
    assert list(caught.value.absolute_path) == path
