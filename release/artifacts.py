"""The documents of a release (release/release writes them): each image's SLSA provenance, the chart's
values naming every image by digest, and the release's manifest. Builders pure; the command line below
reads the repository's pins and writes files. Standard library only: it runs on the system python3."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
SLSA_PROVENANCE = "https://slsa.dev/provenance/v1"
# Ours: what a build of this type takes (externalParameters) and how the builder runs it.
IMAGE_BUILD_TYPE = "https://agentharness.dev/release/image-build/v1"
CHART_BUILD_TYPE = "https://agentharness.dev/release/chart-package/v1"
SERVICE_TARGETS = {"harness-operator": "operator", "harness-gateway": "gateway", "harness-store": "store"}
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def build_image_parameters(image: str, agents: str, dockerfile: str, gitleaks: str) -> dict[str, Any]:
    """The Dockerfile target, build arguments and pins that make `image` (a name under the registry:
    harness-operator, sandbox, sandbox-claude, ...), from sandbox-image/agents, the Dockerfile's ARG
    defaults and sandbox-image/gitleaks, as sandbox-image/build passes them."""
    pins = dict(re.findall(r"^ARG (NODE_VERSION|NPM_VERSION)=(\S+)$", dockerfile, re.MULTILINE))
    found = re.search(r"^version=(\S+)", gitleaks, re.MULTILINE)
    pins["GITLEAKS_VERSION"] = found.group(1) if found else ""
    if image in SERVICE_TARGETS:
        return {"target": SERVICE_TARGETS[image], "buildArgs": {}, "pins": pins}
    if image == "sandbox":
        return {"target": "sandbox", "buildArgs": {}, "pins": pins}
    for line in agents.splitlines():
        fields = line.split()
        if len(fields) == 5 and not fields[0].startswith("#") and f"sandbox-{fields[0]}" == image:
            _, kind, package, version, executable = fields
            args = {
                "AGENT_KIND": kind,
                "AGENT_PACKAGE": package,
                "AGENT_VERSION": version,
                "AGENT_EXECUTABLE": executable,
            }
            return {"target": f"agent-{kind}", "buildArgs": args, "pins": {**pins, package: version}}
    raise ValueError(f"no image {image!r} in sandbox-image/build's set")


def build_provenance(
    subject: str,
    digest: str,
    build_type: str,
    external: dict[str, Any],
    dependencies: list[dict[str, Any]],
    builder: dict[str, Any],
    started: str,
    finished: str,
) -> dict[str, Any]:
    """An in-toto Statement whose predicate is SLSA provenance v1 for the artifact `subject@digest`."""
    if not DIGEST.match(digest):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": subject, "digest": {"sha256": digest.removeprefix("sha256:")}}],
        "predicateType": SLSA_PROVENANCE,
        "predicate": {
            "buildDefinition": {
                "buildType": build_type,
                "externalParameters": external,
                "resolvedDependencies": dependencies,
            },
            "runDetails": {
                "builder": builder,
                "metadata": {
                    "invocationId": f"{subject}@{digest}",
                    "startedOn": started,
                    "finishedOn": finished,
                },
            },
        },
    }


def build_release_values(registry: str, digests: dict[str, str]) -> str:
    """The chart values of a release (YAML): its registry and every image's digest."""
    for name, digest in digests.items():
        if not DIGEST.match(digest):
            raise ValueError(f"{name}: not a sha256 digest: {digest!r}")
    lines = [
        "# The images of this release, by digest (make release wrote it; docs/release.md).",
        f"imageRegistry: {registry}",
        "imageDigests:" if digests else "imageDigests: {}",
    ]
    lines += [f"  {name}: {digest}" for name, digest in sorted(digests.items())]
    return "\n".join(lines) + "\n"


def build_chart_values(values: str, registry: str, digests: dict[str, str]) -> str:
    """The chart's values.yaml with a release's registry and digests in place of the defaults (comments
    kept), so the chart pushed and signed names the images it was released with."""
    registry_line, digests_block = build_release_values(registry, digests).split("\n", 1)[1].split("\n", 1)
    values = _replace_line(values, r"^imageRegistry: .*\n", registry_line + "\n")
    return _replace_line(values, r"^imageDigests: \{\}\n", digests_block)


def _replace_line(text: str, pattern: str, new: str) -> str:
    replaced, count = re.subn(pattern, lambda _: new, text, flags=re.MULTILINE)
    if count != 1:
        raise ValueError(f"values.yaml has {count} lines matching {pattern!r}, expected one")
    return replaced


def build_manifest(
    version: str,
    commit: str,
    registry: str,
    public_key: str | None,
    tools: dict[str, str],
    artifacts: list[dict[str, Any]],
) -> dict[str, Any]:
    """release.json: every artifact of the release with its digest and the files that go with it; the public
    key's file (none for a keyless release)."""
    return {
        "version": version,
        "commit": commit,
        "registry": registry,
        "publicKey": public_key,
        "tools": tools,
        "artifacts": artifacts,
    }


def sha256_file(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _pairs(items: list[str]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in items)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    image = commands.add_parser("image-provenance", help="an image's provenance statement (stdout)")
    chart = commands.add_parser("chart-provenance", help="the chart's provenance statement (stdout)")
    for sub in (image, chart):
        sub.add_argument("--name", required=True, help="image name under the registry, or the chart's")
        sub.add_argument("--ref", required=True, help="the artifact's repository (REGISTRY/NAME)")
        sub.add_argument("--digest", required=True)
        sub.add_argument("--commit", required=True)
        sub.add_argument("--source", required=True, help="the repository's URI (git+https://...)")
        sub.add_argument("--started", required=True)
        sub.add_argument("--finished", required=True)
        sub.add_argument("--builder-id", required=True)
        sub.add_argument("--tool", action="append", default=[], help="NAME=VERSION of a tool that built it")
        sub.add_argument("--base", action="append", default=[], help="NAME=sha256:... of an input image")
    values = commands.add_parser("values", help="release-values.yaml (stdout)")
    filled = commands.add_parser("chart-values", help="the chart's values.yaml filled in (stdin to stdout)")
    for sub in (values, filled):
        sub.add_argument("--registry", required=True)
        sub.add_argument("--digest", action="append", default=[], help="NAME=sha256:...")
    manifest = commands.add_parser(
        "manifest",
        help="release.json (stdout) from lines `KIND NAME REPOSITORY DIGEST [ROLE=FILE...]` on stdin",
    )
    manifest.add_argument("--version", required=True)
    manifest.add_argument("--commit", required=True)
    manifest.add_argument("--registry", required=True)
    manifest.add_argument("--public-key", help="the public key's file in the release folder (keyless: none)")
    manifest.add_argument("--tool", action="append", default=[], help="NAME=VERSION")
    manifest.add_argument("--dir", required=True, type=Path, help="the release folder the files are in")
    args = parser.parse_args(argv)

    if args.command in ("image-provenance", "chart-provenance"):
        source = {"uri": args.source, "digest": {"gitCommit": args.commit}}
        inputs = [
            {"name": n, "digest": {"sha256": d.removeprefix("sha256:")}} for n, d in _pairs(args.base).items()
        ]
        if args.command == "image-provenance":
            parameters = build_image_parameters(
                args.name,
                (ROOT / "sandbox-image" / "agents").read_text(),
                (ROOT / "sandbox-image" / "Dockerfile").read_text(),
                (ROOT / "sandbox-image" / "gitleaks").read_text(),
            )
            external = {"commit": args.commit, "dockerfile": "sandbox-image/Dockerfile", **parameters}
            build_type = IMAGE_BUILD_TYPE
        else:
            external = {"commit": args.commit, "chart": f"charts/{args.name}"}
            build_type = CHART_BUILD_TYPE
        builder = {"id": args.builder_id, "version": _pairs(args.tool)}
        statement = build_provenance(
            args.ref,
            args.digest,
            build_type,
            external,
            [source, *inputs],
            builder,
            args.started,
            args.finished,
        )
        json.dump(statement, sys.stdout, indent=2)
        print()
    elif args.command == "values":
        sys.stdout.write(build_release_values(args.registry, _pairs(args.digest)))
    elif args.command == "chart-values":
        sys.stdout.write(build_chart_values(sys.stdin.read(), args.registry, _pairs(args.digest)))
    else:
        artifacts = []
        for line in sys.stdin.read().splitlines():
            kind, name, ref, digest, *files = line.split()
            documents = _pairs(files)
            artifacts.append(
                {
                    "kind": kind,
                    "name": name,
                    "ref": f"{ref}@{digest}",
                    "digest": digest,
                    "files": {
                        role: {"path": f, "sha256": sha256_file(args.dir / f)}
                        for role, f in documents.items()
                    },
                }
            )
        json.dump(
            build_manifest(
                args.version, args.commit, args.registry, args.public_key, _pairs(args.tool), artifacts
            ),
            sys.stdout,
            indent=2,
        )
        print()


if __name__ == "__main__":
    main()
