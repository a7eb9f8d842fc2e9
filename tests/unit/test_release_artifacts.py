"""release/artifacts.py, the documents of a release: each image's build parameters from the repository's pins,
its SLSA provenance statement, the values naming every image by digest and the chart's values filled in."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from release import artifacts

ROOT = Path(__file__).resolve().parents[2]
PINS = {
    "agents": (ROOT / "sandbox-image" / "agents").read_text(),
    "dockerfile": (ROOT / "sandbox-image" / "Dockerfile").read_text(),
    "gitleaks": (ROOT / "sandbox-image" / "gitleaks").read_text(),
}
DIGEST = "sha256:" + hashlib.sha256(b"image").hexdigest()


def agent_pin(name: str) -> tuple[str, str]:
    for line in PINS["agents"].splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return fields[2], fields[3]
    raise AssertionError(name)


def test_an_agent_image_is_built_from_its_kinds_target_with_the_pinned_cli() -> None:
    package, version = agent_pin("claude")
    parameters = artifacts.build_image_parameters("sandbox-claude", **PINS)
    assert parameters["target"] == "agent-npm"
    assert parameters["buildArgs"]["AGENT_PACKAGE"] == package == "@anthropic-ai/claude-code"
    assert parameters["buildArgs"]["AGENT_VERSION"] == version
    assert parameters["pins"][package] == version
    assert parameters["pins"]["NODE_VERSION"] and parameters["pins"]["GITLEAKS_VERSION"].startswith("v8.")
    assert artifacts.build_image_parameters("sandbox-aider", **PINS)["target"] == "agent-pip"


@pytest.mark.parametrize(
    ("image", "target"),
    [
        ("harness-operator", "operator"),
        ("harness-gateway", "gateway"),
        ("harness-store", "store"),
        ("sandbox", "sandbox"),
    ],
)
def test_the_service_images_and_the_sandbox_name_their_target(image: str, target: str) -> None:
    parameters = artifacts.build_image_parameters(image, **PINS)
    assert (parameters["target"], parameters["buildArgs"]) == (target, {})


def test_an_image_the_build_does_not_make_is_refused() -> None:
    with pytest.raises(ValueError, match="sandbox-nothing"):
        artifacts.build_image_parameters("sandbox-nothing", **PINS)


def test_the_provenance_is_an_in_toto_statement_of_slsa_v1_about_the_digest() -> None:
    statement = artifacts.build_provenance(
        "registry.example.com/harness/sandbox",
        DIGEST,
        artifacts.IMAGE_BUILD_TYPE,
        {"commit": "abc"},
        [{"uri": "git+https://git.example.com/harness", "digest": {"gitCommit": "abc"}}],
        {"id": "https://builder.example.com"},
        "2026-01-01T00:00:00Z",
        "2026-01-01T00:10:00Z",
    )
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [
        {"name": "registry.example.com/harness/sandbox", "digest": {"sha256": DIGEST.removeprefix("sha256:")}}
    ]
    definition, run = statement["predicate"]["buildDefinition"], statement["predicate"]["runDetails"]
    assert definition["buildType"].startswith("https://") and definition["externalParameters"] == {
        "commit": "abc"
    }
    assert run["builder"]["id"] == "https://builder.example.com"
    assert run["metadata"]["startedOn"] < run["metadata"]["finishedOn"]
    with pytest.raises(ValueError, match="not a sha256 digest"):
        artifacts.build_provenance("r/x", "latest", "t", {}, [], {}, "a", "b")


def test_the_release_values_name_the_registry_and_every_digest() -> None:
    values = yaml.safe_load(
        artifacts.build_release_values("registry.example.com/harness", {"sandbox": DIGEST})
    )
    assert values == {"imageRegistry": "registry.example.com/harness", "imageDigests": {"sandbox": DIGEST}}
    assert yaml.safe_load(artifacts.build_release_values("r.example.com/h", {}))["imageDigests"] == {}
    with pytest.raises(ValueError, match="sandbox"):
        artifacts.build_release_values("r.example.com/h", {"sandbox": "sha256:short"})


def test_the_charts_values_are_filled_in_and_keep_everything_else() -> None:
    chart_values = (ROOT / "charts" / "harness-operator" / "values.yaml").read_text()
    filled = artifacts.build_chart_values(chart_values, "registry.example.com/harness", {"sandbox": DIGEST})
    before, after = yaml.safe_load(chart_values), yaml.safe_load(filled)
    assert after["imageRegistry"] == "registry.example.com/harness"
    assert after["imageDigests"] == {"sandbox": DIGEST}
    assert {k: v for k, v in after.items() if not k.startswith("image")} == {
        k: v for k, v in before.items() if not k.startswith("image")
    }
    assert filled.count("\n#") == chart_values.count("\n#")
    with pytest.raises(ValueError, match="imageDigests"):
        artifacts.build_chart_values("imageRegistry: x\n", "r.example.com/h", {})


def test_the_manifest_lists_every_artifact_with_its_files_and_their_hashes(tmp_path: Path) -> None:
    (tmp_path / "sbom").mkdir()
    (tmp_path / "sbom" / "sandbox.spdx.json").write_text("{}")
    lines = f"image sandbox registry.example.com/harness/sandbox {DIGEST} sbom=sbom/sandbox.spdx.json\n"
    command = [sys.executable, str(ROOT / "release" / "artifacts.py"), "manifest", "--version", "0.1.0"]
    command += ["--commit", "abc", "--registry", "registry.example.com/harness", "--dir", str(tmp_path)]
    out = subprocess.run(
        [*command, "--tool", "cosign=v3.1.3", "--public-key", "cosign.pub"],
        input=lines,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    manifest = json.loads(out)
    assert manifest["tools"] == {"cosign": "v3.1.3"} and manifest["publicKey"] == "cosign.pub"
    [image] = manifest["artifacts"]
    assert image["ref"] == f"registry.example.com/harness/sandbox@{DIGEST}"
    assert image["files"]["sbom"] == {
        "path": "sbom/sandbox.spdx.json",
        "sha256": "sha256:" + hashlib.sha256(b"{}").hexdigest(),
    }
