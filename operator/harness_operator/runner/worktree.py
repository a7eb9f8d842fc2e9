"""The agent's working directory read as the bytes it wrote (I/O, for runner/publish.py).

git reads nothing of the working tree here but the list of untracked paths that `.gitignore` does not
exclude (`git ls-files --others`, run by the caller in a process that holds no credential: it reads no
file's content and runs nothing). Every file is read by this module itself, with lstat and O_NOFOLLOW,
so no filter, attribute, encoding or configuration of the workspace's applies, and what is committed and
checked for credentials is exactly the bytes the agent wrote.

Nested repositories are never descended into: a gitlink of the base is published as the base recorded it
while its folder is empty or gone; a submodule the agent wrote into, replaced or added, and any path
through a folder that holds a `.git` (or a `.git` in any case), refuses the change.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

GITLINK = "160000"
SYMLINK = "120000"
EXECUTABLE = "100755"
REGULAR = "100644"
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class NestedRepository(Exception):
    """The change touches a nested repository (a submodule, or a folder holding `.git`)."""


@dataclass(frozen=True)
class Entry:
    """One path of the change's tree: `data` holds new bytes, or None when `object_id` is the base's."""

    mode: str
    path: bytes
    object_id: str | None = None
    data: bytes | None = None


def parse_tree(listing: bytes) -> dict[bytes, tuple[str, str]]:
    """path -> (mode, object id) from `git ls-tree -r -z --full-tree`."""
    tree: dict[bytes, tuple[str, str]] = {}
    for record in listing.split(b"\0"):
        if not record:
            continue
        meta, _, path = record.partition(b"\t")
        mode, _kind, object_id = meta.decode("ascii").split(" ")
        tree[path] = (mode, object_id)
    return tree


def blob_id(data: bytes, id_length: int) -> str:
    """git's object id of a blob of `data`, in the repository's hash (40 hex digits: SHA-1, 64: SHA-256)."""
    digest = hashlib.sha1 if id_length == 40 else hashlib.sha256
    return digest(b"blob %d\0" % len(data) + data).hexdigest()


def is_git_name(component: bytes) -> bool:
    return component.lower() == b".git"


class WorkTree:
    """Reads paths under `root` without following a link on the way and without entering a repository."""

    def __init__(self, root: str) -> None:
        self.root = os.fsencode(root)
        self._dirs: dict[bytes, bool] = {}

    def full(self, path: bytes) -> bytes:
        return os.path.join(self.root, path)

    def is_plain_dir(self, folder: bytes) -> bool:
        """Whether `folder` (relative, b"" for the root) and each folder above it is a real directory,
        not a link; a folder holding `.git` (a nested repository) raises NestedRepository."""
        if folder in self._dirs:
            return self._dirs[folder]
        plain = not folder or self.is_plain_dir(os.path.dirname(folder))
        if plain and folder:
            try:
                plain = stat.S_ISDIR(os.lstat(self.full(folder)).st_mode)
            except OSError:
                plain = False
            if plain and any(is_git_name(name) for name in os.listdir(self.full(folder))):
                shown = folder.decode("utf-8", "replace")
                raise NestedRepository(
                    f"{shown} is a nested repository (it holds .git): the change is not taken from it; "
                    "leave nested repositories out of the working directory"
                )
        self._dirs[folder] = plain
        return plain

    def read(self, path: bytes) -> tuple[str, bytes] | None:
        """(mode, bytes) of a file or link at `path`, or None when nothing publishable is there."""
        if any(is_git_name(part) for part in path.split(b"/")):
            shown = path.decode("utf-8", "replace")
            raise NestedRepository(f"{shown} is inside a .git folder, which is never published")
        if not self.is_plain_dir(os.path.dirname(path)):
            return None
        full = self.full(path)
        try:
            info = os.lstat(full)
        except OSError:
            return None
        if stat.S_ISLNK(info.st_mode):
            return SYMLINK, os.readlink(full)
        if not stat.S_ISREG(info.st_mode):
            return None
        fd = os.open(full, _READ_FLAGS)
        with os.fdopen(fd, "rb") as file:
            data = file.read()
        return (EXECUTABLE if info.st_mode & stat.S_IXUSR else REGULAR), data

    def check_gitlink(self, path: bytes) -> None:
        """A submodule's folder must still be empty (or gone): what the agent put there is not taken."""
        shown = path.decode("utf-8", "replace")
        full = self.full(path)
        try:
            info = os.lstat(full)
        except OSError:
            return
        if not self.is_plain_dir(os.path.dirname(path)):
            return
        if not stat.S_ISDIR(info.st_mode) or os.listdir(full):
            raise NestedRepository(
                f"the agent changed the submodule {shown}: submodules are published as the base recorded "
                "them, so a change inside one (or replacing one) is not taken"
            )


def take_entries(
    root: str, base_tree: dict[bytes, tuple[str, str]], untracked: list[bytes]
) -> Iterator[Entry]:
    """Every path of the change's tree, in the base's order and then the untracked paths': a base path
    whose bytes are unchanged keeps the base's object, a changed or new one carries its bytes."""
    tree = WorkTree(root)
    id_length = len(next(iter(base_tree.values()))[1]) if base_tree else 40
    for path, (mode, object_id) in base_tree.items():
        if mode == GITLINK:
            tree.check_gitlink(path)
            yield Entry(mode, path, object_id=object_id)
            continue
        found = tree.read(path)
        if found is None:
            continue
        new_mode, data = found
        if new_mode == mode and blob_id(data, id_length) == object_id:
            yield Entry(mode, path, object_id=object_id)
        else:
            yield Entry(new_mode, path, data=data)
    for path in untracked:
        if path.endswith(b"/"):  # git lists a nested repository it did not enter as its folder
            raise NestedRepository(
                f"the agent made a nested repository at {path.decode('utf-8', 'replace').rstrip('/')}: "
                "it is not published; leave nested repositories out of the working directory"
            )
        found = tree.read(path)
        if found is not None:
            yield Entry(found[0], path, data=found[1])


def quote_path(path: bytes) -> bytes:
    """A path as git fast-import reads it: C-style quoted, so any byte but NUL is kept."""
    out = bytearray(b'"')
    for byte in path:
        if byte in (0x22, 0x5C):
            out += b"\\" + bytes([byte])
        elif byte < 0x20 or byte == 0x7F:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')


def fast_import_commit(
    ref: str, base: str, who: bytes, message: bytes, entries: Iterator[Entry]
) -> Iterator[bytes]:
    """The `git fast-import` stream of one commit on `base` whose tree is exactly `entries`."""
    yield b"commit %s\ncommitter %s now\ndata %d\n%s\nfrom %s\ndeleteall\n" % (
        ref.encode(),
        who,
        len(message),
        message,
        base.encode(),
    )
    for entry in entries:
        if entry.data is None:
            yield b"M %s %s %s\n" % (
                entry.mode.encode(),
                (entry.object_id or "").encode(),
                quote_path(entry.path),
            )
        else:
            yield b"M %s inline %s\ndata %d\n" % (
                entry.mode.encode(),
                quote_path(entry.path),
                len(entry.data),
            )
            yield entry.data
            yield b"\n"
    yield b"\n"
