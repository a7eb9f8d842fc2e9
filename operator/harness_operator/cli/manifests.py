"""Read multi-document YAML manifests from files and folders, and what a check finds in one (file I/O
only)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from harness_operator.core.objects.naming import ANNOTATION_AUTHOR, ANNOTATION_CANCELLED_BY, APPROVAL_PREFIX


@dataclass(frozen=True)
class Document:
    """One YAML document and where it came from; `error` is set when it could not be read."""

    path: str
    obj: dict[str, Any]
    error: str | None = None

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name", ""))

    @property
    def namespace(self) -> str:
        return str((self.obj.get("metadata") or {}).get("namespace") or "default")


ERROR = "error"
WARNING = "warning"
NOTE = "note"  # what the run will do, worth knowing before it does


@dataclass(frozen=True)
class Finding:
    """One problem in one manifest."""

    path: str
    kind: str
    name: str
    field: str
    message: str
    severity: str = ERROR

    def render(self) -> str:
        label = {WARNING: "warning: ", NOTE: "note: "}.get(self.severity, "")
        return (
            f"{self.path}: {self.kind or '?'}/{self.name or '?'}: {self.field or '-'}: {label}{self.message}"
        )


def manifest_files(paths: list[str]) -> list[Path]:
    """The YAML files named, folders expanded recursively, in a stable order (`-` kept: stdin)."""
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if raw == "-":
            files.append(path)
        elif path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix in {".yaml", ".yml"} and p.is_file())
        else:
            files.append(path)
    return files


def parse_documents(text: str, path: str) -> list[Document]:
    """Every non-empty document of one YAML text; a syntax error becomes one errored Document."""
    try:
        loaded = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        return [Document(path, {}, f"not valid YAML: {exc}".replace("\n", " "))]
    docs = []
    for item in loaded:
        if isinstance(item, dict) and item.get("kind") == "List" and isinstance(item.get("items"), list):
            docs += [Document(path, i if isinstance(i, dict) else {}) for i in item["items"]]
        elif isinstance(item, dict):
            docs.append(Document(path, item))
        else:
            docs.append(Document(path, {}, "a manifest must be a YAML mapping with apiVersion and kind"))
    return docs


def load_documents(paths: list[str], stdin: IO[str] | None = None) -> list[Document]:
    """Every document in the given files and folders; `-` is the documents on `stdin`, as kubectl reads
    `-f -`."""
    docs: list[Document] = []
    for file in manifest_files(paths):
        if str(file) == "-":
            docs += parse_documents((stdin or sys.stdin).read(), "<stdin>")
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            docs.append(Document(str(file), {}, f"cannot read: {exc.strerror}"))
            continue
        docs += parse_documents(text, str(file))
    return docs


def build_rerun(run: Mapping[str, Any], author: str) -> dict[str, Any]:
    """A new run with the spec of `run` (not cancelled), its labels and annotations but kubectl's, kopf's,
    the old run's approval and who cancelled it, named `<run>-xxxxx` by the API server, recording `author`
    (the caller)."""
    metadata = run.get("metadata") or {}
    own = ("kubectl.kubernetes.io/", "kopf.zalando.org/", APPROVAL_PREFIX)
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        if not k.startswith(own) and k != ANNOTATION_CANCELLED_BY
    }
    annotations[ANNOTATION_AUTHOR] = author
    spec = {k: v for k, v in (run.get("spec") or {}).items() if k != "cancel"}
    new_metadata: dict[str, Any] = {
        "generateName": f"{metadata['name'][:57]}-",
        "namespace": metadata["namespace"],
    }
    if metadata.get("labels"):
        new_metadata["labels"] = dict(metadata["labels"])
    new_metadata["annotations"] = annotations
    return {"apiVersion": run["apiVersion"], "kind": run["kind"], "metadata": new_metadata, "spec": spec}
