"""The chart's imageDigests (what a release's values set): every image the chart renders, the operator's,
the gateways', the default sandbox and each catalog entry's, is named by digest when its digest is given,
by tag otherwise, and the schema refuses a digest that is not one."""

from __future__ import annotations

import hashlib
from typing import Any

import yaml
from tests.unit.chart.test_chart_render import CHART, helm, pytestmark  # noqa: F401

REGISTRY = "registry.example.com/harness"


def digest_of(name: str) -> str:
    return "sha256:" + hashlib.sha256(name.encode()).hexdigest()


def release_values(registry: str, digests: dict[str, str]) -> str:
    return yaml.safe_dump({"imageRegistry": registry, "imageDigests": digests})


def images(docs: list[dict[str, Any]]) -> set[str]:
    """Every image reference the rendered chart names: containers, the operator's sandbox setting, catalog."""
    found: set[str] = set()
    for doc in docs:
        if doc["kind"] == "ClusterHarnessDefinition" and doc["spec"].get("image"):
            found.add(doc["spec"]["image"])
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("containers", []) + pod.get("initContainers", []):
            found.add(container["image"])
            found |= {e["value"] for e in container.get("env", []) if e["name"] == "HARNESS_SANDBOX_IMAGE"}
    return found


def render(tmp_path: Any, values: str) -> list[dict[str, Any]]:
    path = tmp_path / "values.yaml"
    path.write_text(values)
    result = helm("template", "r", str(CHART), "-f", str(path), "--set", "triggerReceiver.enabled=true")
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_without_digests_every_image_is_named_by_the_charts_tag(tmp_path: Any) -> None:
    found = images(render(tmp_path, f"imageRegistry: {REGISTRY}\n"))
    assert found and all(image.startswith(f"{REGISTRY}/") and image.endswith(":0.1.0") for image in found)


def test_a_release_names_every_image_by_digest(tmp_path: Any) -> None:
    plain = images(render(tmp_path, f"imageRegistry: {REGISTRY}\n"))
    names = {image.removeprefix(f"{REGISTRY}/").removesuffix(":0.1.0") for image in plain}
    assert {"harness-operator", "harness-gateway", "harness-store", "sandbox", "sandbox-claude"} <= names
    digests = {name: digest_of(name) for name in names}
    pinned = images(render(tmp_path, release_values(REGISTRY, digests)))
    assert pinned == {f"{REGISTRY}/{name}@{digest}" for name, digest in digests.items()}


def test_an_image_without_a_digest_keeps_its_tag_and_an_explicit_repository_takes_the_digest(
    tmp_path: Any,
) -> None:
    values = release_values(REGISTRY, {"harness-operator": digest_of("operator")})
    values += "image: {repository: mirror.example.com/ops/harness-operator, tag: ignored}\n"
    found = images(render(tmp_path, values))
    assert f"mirror.example.com/ops/harness-operator@{digest_of('operator')}" in found
    assert f"{REGISTRY}/sandbox:0.1.0" in found and f"{REGISTRY}/sandbox-claude:0.1.0" in found


def test_an_explicit_sandbox_image_is_used_as_written(tmp_path: Any) -> None:
    values = release_values(REGISTRY, {"sandbox": digest_of("sandbox")})
    values += "sandboxImage: registry.example.com/custom/sandbox:7\n"
    assert "registry.example.com/custom/sandbox:7" in images(render(tmp_path, values))


def test_the_schema_refuses_a_digest_that_is_not_one_and_a_name_the_chart_has_not() -> None:
    for setting, message in (
        ("imageDigests.sandbox=latest", "/imageDigests/sandbox"),
        (f"imageDigests.operator={digest_of('x')}", "invalid propertyName 'operator'"),
    ):
        result = helm("template", "r", str(CHART), "--set", setting)
        assert result.returncode != 0 and message in result.stderr, result.stderr
