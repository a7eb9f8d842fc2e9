"""One version source: the package's __version__ feeds the chart, the image tags and the catalog's images;
the agent pins of the images match what each catalog entry was verified against."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from harness_operator import __version__
from harness_operator.catalog import load_builtin_catalog
from harness_operator.core.config import OperatorConfig

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "harness-operator"


def agent_pins() -> dict[str, tuple[str, str, str]]:
    """name -> (kind, package, version) from sandbox-image/agents."""
    pins = {}
    for line in (ROOT / "sandbox-image" / "agents").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, kind, package, version, _exe = line.split()
            pins[name] = (kind, package, version)
    return pins


def test_version_is_semver() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", __version__)


def test_pyproject_reads_the_package_version() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text
    assert 'version = { attr = "harness_operator.__version__" }' in text


def test_chart_follows_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__
    assert chart["version"] == __version__
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["image"]["tag"] == "", "the operator image tag defaults to appVersion"
    assert values["sandboxImage"] == "", "the sandbox image defaults to <imageRegistry>/sandbox:<appVersion>"
    assert values["imageRegistry"] == "harness.local"


def test_operator_default_sandbox_image_is_the_versioned_one() -> None:
    assert OperatorConfig().sandbox_image == f"harness.local/sandbox:{__version__}"


def test_every_installable_builtin_names_its_versioned_image() -> None:
    pins = agent_pins()
    images = {d.metadata["name"]: d.spec.image for d in load_builtin_catalog()}
    verified = {
        d.metadata["name"]: d.metadata["annotations"]["agentharness.dev/verified-cli"]
        for d in load_builtin_catalog()
    }
    # Another mode of a pinned CLI (gemini-acp: `gemini --acp`) runs in that CLI's image.
    pinned_cli = {f"{package}@{version}": pin for pin, (_, package, version) in pins.items()}
    assert set(pins) <= set(images)
    for name, image in images.items():
        if name in pins:
            assert image == f"harness.local/sandbox-{name}:{__version__}", name
        elif verified[name] in pinned_cli:
            assert image == f"harness.local/sandbox-{pinned_cli[verified[name]]}:{__version__}", name
        else:
            assert image is None, f"{name} has no installable CLI, so no image of its own"


def test_image_pins_are_the_verified_versions() -> None:
    verified = {
        d.metadata["name"]: d.metadata["annotations"]["agentharness.dev/verified-cli"]
        for d in load_builtin_catalog()
    }
    for name, (kind, package, version) in agent_pins().items():
        expected = f"{package}@{version}" if kind == "npm" else f"{package}=={version}"
        assert verified[name] == expected, name


def test_catalog_cli_versions_are_the_image_pins() -> None:
    """status.attempts[].cliVersion falls back to the definition's cliVersion: it must be what the image has."""
    pins = agent_pins()
    # Another mode of a pinned CLI (gemini-acp) runs in that CLI's image, so it has that CLI's version.
    pinned_cli = {f"{package}@{version}": version for _, package, version in pins.values()}
    for definition in load_builtin_catalog():
        name = definition.metadata["name"]
        verified = definition.metadata["annotations"]["agentharness.dev/verified-cli"]
        if name in pins:
            assert definition.spec.cli_version == pins[name][2], name
        elif verified in pinned_cli:
            assert definition.spec.cli_version == pinned_cli[verified], name


def test_the_dockerfiles_gitleaks_is_the_one_sandbox_image_gitleaks_pins() -> None:
    """The public image the Dockerfile defaults to and the local build name one gitleaks version."""
    pin = re.search(r"^version=(v[0-9.]+)", (ROOT / "sandbox-image" / "gitleaks").read_text(), re.MULTILINE)
    default = re.search(
        r"^ARG GITLEAKS_IMAGE=\S+:(v[0-9.]+)$",
        (ROOT / "sandbox-image" / "Dockerfile").read_text(),
        re.MULTILINE,
    )
    assert pin and default and pin.group(1) == default.group(1)
