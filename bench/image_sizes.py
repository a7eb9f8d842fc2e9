"""What each released image weighs and what fills it: its size compressed in the registry (what a node pulls)
and uncompressed (what it stores), its packages by kind from the release's SBOM, its largest folders (`du`
inside the image) and the bytes no run needs that a smaller image could drop (documentation, caches, source
maps, type declarations, tests, the npm that only installs). Markdown on stdout; bench/image-sizes.md holds
the last output.

    python bench/image_sizes.py dist/release/0.1.0/release.json > bench/image-sizes.md

It reads the registry over plain HTTP (the test registry, tests/cluster/registry) and runs each image once
with Docker (`--network none`, as root so that `du` reads every folder)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

MANIFEST_TYPES = (
    "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
)
# Bytes in an image that no run reads, by what they are: `find` arguments over the image's file system.
CANDIDATES = {
    "npm's download cache (HOME=/home/sandbox at install)": r"/home/sandbox/.npm /root/.npm -maxdepth 0",
    "*.md, README*, CHANGELOG* under /opt and /usr/lib": (
        r"/opt /usr/lib \( -name '*.md' -o -name '*.markdown' -o -name 'CHANGELOG*' -o -name 'README*' \)"
    ),
    "JavaScript source maps (*.map)": r"/opt -name '*.map'",
    "TypeScript declarations (*.d.ts)": r"/opt \( -name '*.d.ts' -o -name '*.d.mts' -o -name '*.d.cts' \)",
    "test and example folders in node_modules": (
        r"/opt -path '*/node_modules/*' -type d "
        r"\( -name test -o -name tests -o -name __tests__ -o -name example -o -name examples \) -prune"
    ),
    "npm itself (installs; never runs)": r"/opt/node/lib/node_modules/npm -maxdepth 0",
    "Python bytecode (__pycache__)": r"/ -xdev -type d -name __pycache__ -prune",
    "pip, setuptools, wheel in the venv": (
        r"/opt/agent/venv/lib -maxdepth 3 -type d \( -name pip -o -name setuptools -o -name wheel \)"
    ),
    "/usr/share/{doc,man,info,locale}": (
        r"/usr/share -maxdepth 1 \( -name doc -o -name man -o -name info -o -name locale \)"
    ),
    "perl modules": r"/usr/share/perl /usr/lib/x86_64-linux-gnu/perl -maxdepth 0",
}


def registry_size(ref: str) -> int:
    """Bytes a pull transfers: the manifest's layers and config, as the registry stores them (compressed)."""
    repository, digest = ref.split("@")
    host, _, name = repository.partition("/")
    request = urllib.request.Request(f"http://{host}/v2/{name}/manifests/{digest}")
    request.add_header("Accept", MANIFEST_TYPES)
    with urllib.request.urlopen(request, timeout=60) as response:
        manifest = json.load(response)
    return int(manifest["config"]["size"]) + sum(int(layer["size"]) for layer in manifest["layers"])


def in_image(ref: str, script: str) -> str:
    return subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--user",
            "0",
            "--entrypoint",
            "sh",
            ref,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout


def folders(ref: str, depth: int = 3, top: int = 5) -> list[tuple[str, int]]:
    """The largest folders `depth` levels down, in bytes."""
    out = in_image(ref, f"du -x -k -d {depth} / 2>/dev/null || true")
    sizes = [(path, int(kb) * 1024) for kb, path in (line.split("\t", 1) for line in out.splitlines())]
    return sorted((s for s in sizes if s[0].count("/") == depth), key=lambda s: -s[1])[:top]


def largest_packages(ref: str, top: int = 4) -> list[tuple[str, int]]:
    """The largest installed packages: an agent's npm packages (scoped ones by name) or its venv's, and the
    harness's own Python dependencies."""
    globs = [
        "/opt/agent/lib/node_modules/[!@]*",
        "/opt/agent/lib/node_modules/@*/*",
        "/opt/agent/venv/lib/python3*/site-packages/*",
        "/opt/harness/lib/*",
    ]
    out = in_image(ref, f"du -k -s {' '.join(globs)} 2>/dev/null || true")
    sizes = [(path, int(kb) * 1024) for kb, path in (line.split("\t", 1) for line in out.splitlines())]
    return sorted(sizes, key=lambda s: -s[1])[:top]


def candidates(ref: str) -> dict[str, int]:
    """Bytes of each candidate, each counted once (`du` of the paths `find` names)."""
    script = "; ".join(
        f"printf '%s\\t' {i}; find {predicate} -print0 2>/dev/null | du -c -k -s --files0-from=- 2>/dev/null "
        "| tail -n 1 | cut -f1"
        for i, predicate in enumerate(CANDIDATES.values())
    )
    found = dict(line.split("\t") for line in in_image(ref, script).splitlines() if "\t" in line)
    return {what: int(found.get(str(i)) or 0) * 1024 for i, what in enumerate(CANDIDATES)}


def packages(sbom: dict[str, Any]) -> Counter[str]:
    """The SBOM's packages by kind (npm, pypi, deb, golang, ...), from their package URLs."""
    kinds: Counter[str] = Counter()
    for package in sbom["packages"]:
        purls = [
            r["referenceLocator"] for r in package.get("externalRefs", []) if r["referenceType"] == "purl"
        ]
        if purls and not purls[0].startswith("pkg:oci/"):
            kinds[purls[0].removeprefix("pkg:").split("/")[0]] += 1
    return kinds


def mb(size: int) -> str:
    return f"{size / 1e6:,.0f} MB" if size >= 1e6 else f"{size / 1e3:,.0f} kB"


def main(manifest_path: Path) -> None:
    manifest = json.loads(manifest_path.read_text())
    images = [a for a in manifest["artifacts"] if a["kind"] == "image"]
    print(f"Release {manifest['version']} (commit {manifest['commit'][:12]}), {len(images)} images.\n")
    print(
        "| image | compressed (pulled) | uncompressed (stored) | packages in the SBOM | largest folders "
        "| largest packages |"
    )
    print("|---|---|---|---|---|---|")
    cuts: dict[str, dict[str, int]] = {}
    for image in images:
        ref = image["ref"]
        inspect = ["docker", "image", "inspect", "-f", "{{.Size}}", ref]
        stored = int(subprocess.run(inspect, capture_output=True, text=True, check=True).stdout)
        sbom = json.loads((manifest_path.parent / image["files"]["sbom"]["path"]).read_text())
        kinds = ", ".join(f"{kind} {count}" for kind, count in packages(sbom).most_common())
        largest = "<br>".join(f"`{path}` {mb(size)}" for path, size in folders(ref))
        heaviest = "<br>".join(f"`{Path(path).name}` {mb(size)}" for path, size in largest_packages(ref))
        sizes = f"{mb(registry_size(ref))} | {mb(stored)}"
        print(f"| `{image['name']}` | {sizes} | {kinds} | {largest} | {heaviest} |")
        cuts[image["name"]] = candidates(ref)
    print("\nBytes no run needs, per image (uncompressed; each counted once; nothing is cut yet):\n")
    names = list(cuts)
    print("| what | " + " | ".join(f"`{n}`" for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for what in CANDIDATES:
        print(f"| {what} | " + " | ".join(mb(cuts[n][what]) if cuts[n][what] else "-" for n in names) + " |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
