"""The release tier: release/release pushes a release of two images (the operator and sandbox-claude) and the
chart to the test registry (tests/cluster/registry), signed with a key generated for the session; the tests
then verify it as a platform would.

Runs with HARNESS_RELEASE=1 (`make release-test`): it starts the registry, builds cosign, syft and helm from
the Go module proxy on first use (release/tools) and the two images (sandbox-image/build, under local tags of
their own so the images the test cluster loads stay as they are). The test cluster itself is not used.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PASSWORD = "release-test"  # the generated keys' password: they exist for this session only


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.release)


@dataclass(frozen=True)
class Release:
    """A release made for the session: its folder, its manifest and the tools that check it."""

    dir: Path
    manifest: dict[str, Any]
    cosign: str
    helm: str
    other_key: Path  # a key pair the release did not sign with

    @property
    def public_key(self) -> Path:
        return self.dir / "cosign.pub"

    def artifact(self, kind: str, name: str) -> dict[str, Any]:
        [found] = [a for a in self.manifest["artifacts"] if (a["kind"], a["name"]) == (kind, name)]
        return found

    def verify(self, ref: str, key: Path | None = None) -> subprocess.CompletedProcess[str]:
        """`cosign verify` as a platform runs it: the release's public key (or `key`), no transparency log."""
        return self._cosign("verify", "--key", str(key or self.public_key), "--insecure-ignore-tlog", ref)

    def verify_attestation(
        self, predicate_type: str, ref: str, key: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        key_args = ("--key", str(key or self.public_key), "--insecure-ignore-tlog")
        return self._cosign("verify-attestation", *key_args, "--type", predicate_type, ref)

    def _cosign(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.cosign, *args, "--allow-http-registry"], capture_output=True, text=True, timeout=300
        )


def tool(name: str) -> str:
    return subprocess.run(
        [str(ROOT / "release" / "tools"), name], capture_output=True, text=True, check=True, timeout=1800
    ).stdout.strip()


def generate_key_pair(cosign: str, where: Path) -> Path:
    where.mkdir()
    env = {**os.environ, "COSIGN_PASSWORD": PASSWORD}
    subprocess.run([cosign, "generate-key-pair"], cwd=where, env=env, capture_output=True, check=True)
    return where / "cosign.key"


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    if os.environ.get("HARNESS_RELEASE") != "1":
        pytest.skip("set HARNESS_RELEASE=1 (make release-test): it builds images and the release tools")
    address = subprocess.run(
        [str(ROOT / "tests" / "cluster" / "registry"), "start"], capture_output=True, text=True, check=True
    ).stdout.strip()
    cosign, helm = tool("cosign"), tool("helm")
    keys = tmp_path_factory.mktemp("keys")
    key = generate_key_pair(cosign, keys / "release")
    other = generate_key_pair(cosign, keys / "other")
    out = tmp_path_factory.mktemp("dist")
    env = {
        **os.environ,
        "REGISTRY": f"{address}/harness-release-test",
        "COSIGN_KEY": str(key),
        "COSIGN_PASSWORD": PASSWORD,
        "RELEASE_IMAGES": "operator,claude",
        "RELEASE_DIR": str(out),
        "LOCAL_REGISTRY": "harness-release-test.local",
    }
    made = subprocess.run(
        [str(ROOT / "release" / "release")], env=env, capture_output=True, text=True, timeout=3600
    )
    assert made.returncode == 0, made.stderr[-4000:]
    manifest_path = Path(made.stdout.strip().splitlines()[-1])
    manifest = json.loads(manifest_path.read_text())
    return Release(manifest_path.parent, manifest, cosign, helm, other.with_suffix(".pub"))
