"""A release verified as a platform verifies it: cosign verify of every image and the chart with the release's
public key (and not with another key), the SBOM of the claude image naming the pinned Claude Code, the
provenance about each artifact's digest, the chart naming every image by digest, and an image changed under
the same tag failing verification while the release's values still name what was signed."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.release.conftest import ROOT, Release

ARTIFACTS = [("image", "harness-operator"), ("image", "sandbox-claude"), ("chart", "harness-operator")]


def agent_pin(name: str) -> tuple[str, str]:
    """sandbox-image/agents' package and version of an agent."""
    for line in (ROOT / "sandbox-image" / "agents").read_text().splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return fields[2], fields[3]
    raise AssertionError(f"no agent {name}")


def statements(output: str) -> list[dict[str, Any]]:
    """The in-toto statements of `cosign verify-attestation`'s output (one DSSE envelope a line)."""
    found = []
    for line in output.splitlines():
        if line.startswith("{"):
            found.append(json.loads(base64.b64decode(json.loads(line)["payload"])))
    return found


def registry_digest(repository: str, tag: str) -> str:
    """What the registry serves for a tag now (plain HTTP: the test registry is on loopback)."""
    host, _, name = repository.partition("/")
    request = urllib.request.Request(f"http://{host}/v2/{name}/manifests/{tag}", method="HEAD")
    request.add_header("Accept", "application/vnd.docker.distribution.manifest.v2+json")
    request.add_header("Accept", "application/vnd.oci.image.manifest.v1+json")
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(response.headers["Docker-Content-Digest"])


@pytest.mark.parametrize(("kind", "name"), ARTIFACTS)
def test_each_artifact_verifies_with_the_release_key_and_not_with_another(
    release: Release, kind: str, name: str
) -> None:
    artifact = release.artifact(kind, name)
    verified = release.verify(artifact["ref"])
    assert verified.returncode == 0, verified.stderr
    [claim] = json.loads(verified.stdout)
    assert claim["critical"]["image"]["docker-manifest-digest"] == artifact["digest"]
    assert claim["optional"]["release"] == release.manifest["version"]

    refused = release.verify(artifact["ref"], key=release.other_key)
    assert refused.returncode != 0
    assert "no matching signatures" in refused.stderr, refused.stderr
    refused = release.verify_attestation("slsaprovenance1", artifact["ref"], key=release.other_key)
    assert refused.returncode != 0


def test_the_claude_images_sbom_lists_the_pinned_claude_code(release: Release) -> None:
    package, version = agent_pin("claude")
    artifact = release.artifact("image", "sandbox-claude")
    attested = release.verify_attestation("spdxjson", artifact["ref"])
    assert attested.returncode == 0, attested.stderr
    [statement] = statements(attested.stdout)
    assert statement["predicateType"] == "https://spdx.dev/Document"
    assert statement["subject"][0]["digest"]["sha256"] == artifact["digest"].removeprefix("sha256:")
    sbom = statement["predicate"]
    assert sbom["spdxVersion"] == "SPDX-2.3" and "Tool: syft-1.57.2" in sbom["creationInfo"]["creators"]
    found = {p["name"]: p.get("versionInfo") for p in sbom["packages"]}
    assert found[package] == version, f"{package} in the SBOM: {found.get(package)}"
    # The SBOM attested is the one the release kept beside release.json.
    kept = json.loads((release.dir / artifact["files"]["sbom"]["path"]).read_text())
    assert kept == sbom


@pytest.mark.parametrize(("kind", "name"), ARTIFACTS)
def test_the_provenance_is_about_the_artifacts_digest_and_names_the_commit(
    release: Release, kind: str, name: str
) -> None:
    artifact = release.artifact(kind, name)
    attested = release.verify_attestation("slsaprovenance1", artifact["ref"])
    assert attested.returncode == 0, attested.stderr
    [statement] = statements(attested.stdout)
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    assert statement["subject"] == [
        {
            "name": artifact["ref"].split("@")[0],
            "digest": {"sha256": artifact["digest"].removeprefix("sha256:")},
        }
    ]
    definition = statement["predicate"]["buildDefinition"]
    assert definition["externalParameters"]["commit"] == release.manifest["commit"]
    assert definition["resolvedDependencies"][0]["digest"] == {"gitCommit": release.manifest["commit"]}
    assert statement["predicate"]["runDetails"]["builder"]["version"]["cosign"] == "v3.1.3"
    kept = json.loads((release.dir / artifact["files"]["provenance"]["path"]).read_text())
    assert (kept["subject"], kept["predicate"]) == (statement["subject"], statement["predicate"])
    if name == "sandbox-claude":
        package, version = agent_pin("claude")
        assert definition["externalParameters"]["target"] == "agent-npm"
        assert definition["externalParameters"]["buildArgs"]["AGENT_VERSION"] == version
        assert definition["externalParameters"]["pins"][package] == version


def test_the_released_chart_is_the_package_kept_and_names_every_image_by_its_digest(
    release: Release, tmp_path: Path
) -> None:
    chart = release.artifact("chart", "harness-operator")
    source = f"oci://{chart['ref'].split('@')[0]}"
    pull = [release.helm, "pull", source, "--version", release.manifest["version"], "--plain-http"]
    pulled = subprocess.run([*pull, "-d", str(tmp_path)], capture_output=True, text=True)
    assert pulled.returncode == 0, pulled.stderr
    [package] = tmp_path.glob("*.tgz")
    assert "sha256:" + hashlib.sha256(package.read_bytes()).hexdigest() == chart["files"]["package"]["sha256"]
    rendered = subprocess.run([release.helm, "template", "r", str(package)], capture_output=True, text=True)
    assert rendered.returncode == 0, rendered.stderr
    docs = [d for d in yaml.safe_load_all(rendered.stdout) if d]
    operator = release.artifact("image", "harness-operator")
    claude = release.artifact("image", "sandbox-claude")
    deployments = [
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "r-harness-operator"
    ]
    assert deployments[0]["spec"]["template"]["spec"]["containers"][0]["image"] == operator["ref"]
    [definition] = [
        d for d in docs if d["kind"] == "ClusterHarnessDefinition" and d["metadata"]["name"] == "claude"
    ]
    assert definition["spec"]["image"] == claude["ref"]
    values = yaml.safe_load((release.dir / "release-values.yaml").read_text())
    assert values["imageDigests"] == {
        "harness-operator": operator["digest"],
        "sandbox-claude": claude["digest"],
    }


def test_an_image_changed_under_the_same_tag_fails_verification_by_tag(
    release: Release, tmp_path: Path
) -> None:
    image = release.artifact("image", "harness-operator")
    repository = image["ref"].split("@")[0]
    tag = f"{repository}:{release.manifest['version']}"
    before = release.verify(tag)
    assert before.returncode == 0, before.stderr

    (tmp_path / "Dockerfile").write_text(f"FROM {image['ref']}\nCOPY tampered /etc/tampered\n")
    (tmp_path / "tampered").write_text("a layer the release did not build\n")
    env = {"DOCKER_BUILDKIT": "0", "PATH": "/usr/local/bin:/usr/bin:/bin"}
    for command in (["build", "-q", "--network", "host", "-t", tag, str(tmp_path)], ["push", "-q", tag]):
        done = subprocess.run(["docker", *command], capture_output=True, text=True, env=env, timeout=600)
        assert done.returncode == 0, done.stderr
    assert registry_digest(repository, release.manifest["version"]) != image["digest"]

    after = release.verify(tag)
    assert after.returncode != 0
    assert "no signatures found" in after.stderr, after.stderr
    # What the release named is untouched: its values still pin the digest signed, which still verifies.
    values = yaml.safe_load((release.dir / "release-values.yaml").read_text())
    assert values["imageDigests"]["harness-operator"] == image["digest"]
    assert release.verify(image["ref"]).returncode == 0
