"""The platform team's values file (charts/harness-operator/examples/platform-values.yaml) the README's quick
start installs with: the real `helm` takes it under the chart's schema, the model gateway gets the vendor's
key from the Secret it names and, once `upstream` is set, sends that vendor's traffic there; the README
shows the file as it is."""

from __future__ import annotations

import re
from typing import Any

import yaml
from tests.unit.chart.test_chart_render import CHART, ROOT, helm, one, pytestmark  # noqa: F401

VALUES = CHART / "examples" / "platform-values.yaml"


def render_with(values: dict[str, Any], tmp_path: Any) -> list[dict[str, Any]]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm(
        "template", "harness-operator", str(CHART), "--namespace", "harness-system", "-f", str(path)
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def gateway_env(docs: list[dict[str, Any]]) -> dict[str, Any]:
    container = one(docs, "Deployment", model=True)["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_the_values_file_installs_the_images_of_its_registry_and_the_key_at_the_gateway() -> None:
    result = helm("lint", "--strict", str(CHART), "-f", str(VALUES))
    assert result.returncode == 0, result.stdout + result.stderr
    result = helm(
        "template", "harness-operator", str(CHART), "--namespace", "harness-system", "-f", str(VALUES)
    )
    assert result.returncode == 0, result.stderr
    docs = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    operator = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert operator["image"].startswith("registry.example.com/harness/harness-operator:")
    env = gateway_env(docs)
    assert env["HARNESS_KEY_ANTHROPIC"] == {"secretKeyRef": {"name": "anthropic-api-key", "key": "api-key"}}
    assert "HARNESS_UPSTREAM_ANTHROPIC" not in env, "the public API unless upstream is set"


def test_the_commented_upstream_sends_the_vendor_to_a_self_hosted_endpoint(tmp_path: Any) -> None:
    text = VALUES.read_text()
    commented = re.search(r"# (upstream: \S+)", text)
    assert commented, "the values file shows how to set upstream"
    values = yaml.safe_load(text.replace(commented.group(0), commented.group(1)))
    env = gateway_env(render_with(values, tmp_path))
    assert env["HARNESS_UPSTREAM_ANTHROPIC"] == "https://llm-proxy.example.internal/anthropic"


def test_a_mistyped_vendor_field_is_refused_naming_it(tmp_path: Any) -> None:
    values = yaml.safe_load(VALUES.read_text())
    values["modelGateway"]["vendors"]["anthropic"]["upstrem"] = "https://llm-proxy.example.internal"
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm("template", "harness-operator", str(CHART), "-f", str(path))
    assert result.returncode != 0 and "upstrem" in result.stderr, result.stderr


def test_the_readme_shows_the_values_file_and_installs_with_it() -> None:
    readme = (ROOT / "README.md").read_text()
    step = readme[readme.index("### 1. Install with a values file") : readme.index("### 2. ")]
    block = re.search(r"```yaml\n(.*?)```", step, re.S)
    assert block, "step 1 shows the values"
    shown = yaml.safe_load(block.group(1))
    assert shown == yaml.safe_load(VALUES.read_text()), "the README's values are the file's"
    quick_start = readme[readme.index("## Quick start on a real cluster") :]
    first_block = re.search(r"```sh\n(.*?)```", quick_start, re.S)
    assert first_block and f"-f {VALUES.relative_to(ROOT)}" in first_block.group(1)
    assert "--set" not in first_block.group(1), "an upgrade repeats no --set"
