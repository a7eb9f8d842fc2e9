"""The verification examples of examples/release (docs/release.md): Kyverno's ClusterPolicy and the
policy-controller's ClusterImagePolicy admit only the harness images the release key signed, with SLSA
provenance of the release's build type, and Flux's OCIRepository verifies the released chart with the same key;
each is valid YAML of the right kind, names the key's Secret and no registry but the example one."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import yaml
from release.artifacts import IMAGE_BUILD_TYPE, SLSA_PROVENANCE

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "release"
KEY_SECRET = "harness-cosign-pub"
REGISTRY = "registry.example.com/harness"
# Every image sandbox-image/build makes, as a release pushes it (by digest).
IMAGES = ["sandbox", "harness-operator", "harness-gateway", "harness-store"] + [
    f"sandbox-{line.split()[0]}"
    for line in (ROOT / "sandbox-image" / "agents").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]
PINNED = [f"{REGISTRY}/{name}@sha256:{'0' * 64}" for name in IMAGES]


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]


def test_kyverno_admits_only_images_the_release_key_signed_with_its_provenance() -> None:
    [policy] = documents("kyverno-clusterpolicy.yaml")
    assert (policy["apiVersion"], policy["kind"]) == ("kyverno.io/v1", "ClusterPolicy")
    [rule] = policy["spec"]["rules"]
    assert rule["match"]["any"][0]["resources"]["kinds"] == ["Pod"]
    [verify] = rule["verifyImages"]
    assert verify["failureAction"] == "Enforce" and verify["required"] and verify["verifyDigest"]
    assert all(pattern.startswith(f"{REGISTRY}/") for pattern in verify["imageReferences"])
    assert all(any(fnmatch.fnmatchcase(i, p) for p in verify["imageReferences"]) for i in PINNED)
    assert not any(fnmatch.fnmatchcase(f"{REGISTRY}-other/sandbox:1", p) for p in verify["imageReferences"])
    [attestation] = verify["attestations"]
    for attestors in (verify["attestors"], attestation["attestors"]):
        [entry] = attestors[0]["entries"]
        assert entry["keys"]["secret"] == {"name": KEY_SECRET, "namespace": "kyverno"}
        assert entry["keys"]["rekor"] == {"ignoreTlog": True} and entry["keys"]["ctlog"] == {
            "ignoreSCT": True
        }
    assert attestation["type"] == SLSA_PROVENANCE
    [condition] = attestation["conditions"][0]["all"]
    assert condition == {
        "key": "{{ buildDefinition.buildType }}",
        "operator": "Equals",
        "value": IMAGE_BUILD_TYPE,
    }


def test_the_policy_controller_admits_only_images_the_release_key_signed_with_its_provenance() -> None:
    [policy] = documents("policy-controller-clusterimagepolicy.yaml")
    assert (policy["apiVersion"], policy["kind"]) == ("policy.sigstore.dev/v1beta1", "ClusterImagePolicy")
    assert policy["spec"]["mode"] == "enforce"
    globs = [image["glob"] for image in policy["spec"]["images"]]
    assert all(glob.startswith(f"{REGISTRY}/") for glob in globs)
    assert all(any(fnmatch.fnmatchcase(i.split("@")[0], g) for g in globs) for i in PINNED)
    [authority] = policy["spec"]["authorities"]
    assert authority["key"] == {"secretRef": {"name": KEY_SECRET}}
    assert "ctlog" not in authority  # no transparency log: the policy-controller then checks none
    [attestation] = authority["attestations"]
    assert attestation["predicateType"] == SLSA_PROVENANCE
    assert attestation["policy"]["type"] == "cue" and IMAGE_BUILD_TYPE in attestation["policy"]["data"]


def test_flux_installs_the_chart_only_once_the_release_key_verifies_it() -> None:
    secret, repository, release = documents("flux-chart.yaml")
    assert (secret["kind"], secret["metadata"]["name"]) == ("Secret", KEY_SECRET)
    assert "BEGIN PUBLIC KEY" in secret["stringData"]["cosign.pub"]
    assert (repository["apiVersion"], repository["kind"]) == ("source.toolkit.fluxcd.io/v1", "OCIRepository")
    chart = yaml.safe_load((ROOT / "charts" / "harness-operator" / "Chart.yaml").read_text())
    assert repository["spec"]["url"] == f"oci://{REGISTRY}/charts/{chart['name']}"
    assert repository["spec"]["ref"] == {"tag": chart["version"]}
    assert repository["spec"]["verify"] == {"provider": "cosign", "secretRef": {"name": KEY_SECRET}}
    assert (
        repository["spec"]["layerSelector"]["mediaType"]
        == "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
    )
    assert (release["apiVersion"], release["kind"]) == ("helm.toolkit.fluxcd.io/v2", "HelmRelease")
    assert release["spec"]["chartRef"] == {"kind": "OCIRepository", "name": repository["metadata"]["name"]}
    assert {d["metadata"]["namespace"] for d in (secret, repository, release)} == {"flux-system"}
