"""A CLI's session files as one archive (a gzip'd tar of paths under the agent's home): packed after the
agent's exit, redacted by the runner, restored before a continuing attempt (I/O on the home only).

What the archive holds is the agent's to write, so unpacking trusts none of it: only regular files and
folders, each under one of the definition's session paths, none through a link, none executable."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
from collections.abc import Iterable, Sequence

from harness_operator.api.sizes import SESSION_ARCHIVE_MAX_BYTES
from harness_operator.runner.redact import Redactor

# What the session files may take unpacked: a session larger than this is not kept.
SESSION_FILES_MAX_BYTES = 16 * SESSION_ARCHIVE_MAX_BYTES
_MTIME = 0  # fixed times: the same files make the same archive


class SessionTooLarge(Exception):
    """The session's files are over the limit: none is kept."""


def _within(relative: str, paths: Sequence[str]) -> bool:
    norm = os.path.normpath(relative)
    if norm.startswith(("/", "..")) or norm == ".":
        return False
    return any(norm == os.path.normpath(p) or norm.startswith(os.path.normpath(p) + "/") for p in paths)


def _files(home: str, paths: Sequence[str]) -> list[str]:
    """The regular files under the session paths, relative to the home, sorted; links are not followed."""
    found = []
    for path in paths:
        top = os.path.join(home, path)
        if os.path.islink(top):
            continue
        if os.path.isfile(top):
            found.append(os.path.normpath(path))
            continue
        for folder, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(folder, d)))
            for name in names:
                full = os.path.join(folder, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    found.append(os.path.relpath(full, home))
    return sorted(set(found))


def pack_session(home: str, paths: Sequence[str]) -> bytes | None:
    """The session files as an archive; None when there are none; SessionTooLarge when they, or the
    archive, are over the limits."""
    files = _files(home, paths)
    if not files:
        return None
    total = sum(os.path.getsize(os.path.join(home, f)) for f in files)
    if total > SESSION_FILES_MAX_BYTES:
        raise SessionTooLarge(f"the session's files take {total} bytes, more than {SESSION_FILES_MAX_BYTES}")
    return _archive((f, _read(os.path.join(home, f))) for f in files)


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _archive(entries: Iterable[tuple[str, bytes]]) -> bytes:
    buffer = io.BytesIO()
    # gzip's header takes the time too unless given one: the same files, the same archive
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=6, mtime=_MTIME) as packed_stream,
        tarfile.open(fileobj=packed_stream, mode="w") as tar,
    ):
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), _MTIME, 0o600
            tar.addfile(info, io.BytesIO(data))
    packed = buffer.getvalue()
    if len(packed) > SESSION_ARCHIVE_MAX_BYTES:
        raise SessionTooLarge(
            f"the session's archive takes {len(packed)} bytes, more than {SESSION_ARCHIVE_MAX_BYTES}"
        )
    return packed


def _members(data: bytes) -> list[tuple[str, bytes]]:
    """The archive's regular files (name, content), within the unpacked size limit."""
    out, total = [], 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar:
            if not member.isfile():
                continue
            total += member.size
            if total > SESSION_FILES_MAX_BYTES:
                raise SessionTooLarge(f"the session's files take more than {SESSION_FILES_MAX_BYTES} bytes")
            extracted = tar.extractfile(member)
            out.append((member.name, extracted.read() if extracted else b""))
    return out


def redact_session(data: bytes, redactor: Redactor) -> bytes:
    """The archive with every secret the attempt was given cut out of its files."""
    if not redactor:
        return data
    return _archive((name, redactor.bytes(content)) for name, content in _members(data))


def unpack_session(home: str, data: bytes, paths: Sequence[str]) -> list[str]:
    """The archive's files written under `home`, each only where a session path allows and no link
    leads; the names written. ValueError names the first file refused."""
    home = os.path.realpath(home)
    written = []
    for name, content in _members(data):
        if not _within(name, paths):
            raise ValueError(f"{name!r} is not under the session paths {', '.join(paths)}")
        target = os.path.join(home, os.path.normpath(name))
        parent = os.path.dirname(target)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        if os.path.realpath(parent) != parent or os.path.islink(target):
            raise ValueError(f"{name!r} leads through a link")
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(content)
        written.append(name)
    return written
