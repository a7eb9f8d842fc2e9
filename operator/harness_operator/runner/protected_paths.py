"""The publish policy on the taken change (I/O, for runner/publish.py): the protected paths it touches
(refused, or held for a person's approval), the symbolic links it points out of the repository, and its
edits of `.gitmodules`.

Every path is read from the publisher's own repository (the commit fast-import made and its base), never
from the working tree, and a link's target is read as the bytes stored, never followed.
"""

from __future__ import annotations

import posixpath
from fnmatch import fnmatchcase

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import ProtectedPathAction, ProtectedPathRule
from harness_operator.runner.publish_git import Git, PublishError
from harness_operator.runner.worktree import SYMLINK, parse_tree

# The report keeps this many paths awaiting approval, each cut to PATH_CHARS (it must fit in 4 KiB).
APPROVAL_PATHS = 10
PATH_CHARS = 200
# Links followed through other links before a target is taken as a loop (Linux's MAXSYMLINKS).
MAX_LINKS = 40
GITMODULES = ".gitmodules"


def matches(path: str, pattern: str) -> bool:
    """Whether a repository path falls under a rule's path, case ignored (a forge or a checkout on a
    case-insensitive file system reads `.GitHub/` as `.github/`): "dir/" is the folder and all below it,
    a pattern without "/" names a file or folder at any depth, any other is the whole path; fnmatch's
    "*", "?" and "[...]" apply ("*" crosses "/")."""
    path, pattern = path.casefold(), pattern.casefold()
    if pattern.endswith("/"):
        return fnmatchcase(path, pattern + "*")
    if "/" not in pattern:
        return any(fnmatchcase(part, pattern) for part in path.split("/"))
    return fnmatchcase(path, pattern)


def strictest_rule(path: str, rules: list[ProtectedPathRule]) -> ProtectedPathRule | None:
    """The rule a path falls under, a Refuse one before any RequireApproval; None when none."""
    found = [rule for rule in rules if matches(path, rule.path)]
    refused = [rule for rule in found if rule.action == ProtectedPathAction.refuse]
    return next(iter(refused or found), None)


def changed_paths(git: Git, base: str, commit: str) -> list[str]:
    """Every path the change adds, edits or removes; a rename counts as both of its paths."""
    names = git.run("diff", "--name-only", "-z", "--no-renames", base, commit).split(b"\0")
    return [name.decode("utf-8", "replace") for name in names if name]


def check_protected_paths(git: Git, base: str, commit: str, rules: list[ProtectedPathRule]) -> list[str]:
    """The paths the change touches that need a person's approval; PublishError
    (ChangeTouchesProtectedPath) naming the path and the rule when one is refused."""
    waiting: list[str] = []
    for path in changed_paths(git, base, commit):
        rule = strictest_rule(path, rules)
        if rule is None:
            continue
        if rule.action == ProtectedPathAction.refuse:
            raise PublishError(
                Reason.ChangeTouchesProtectedPath,
                f'the change touches {path}, protected by the rule "{rule.path}" (Refuse): it is not pushed '
                "or opened (its patch is kept); leave the path out of the change, or ask the platform to "
                "set the rule's action to RequireApproval so that a person approves such a change",
            )
        waiting.append(path[:PATH_CHARS])
    return waiting[:APPROVAL_PATHS]


def read_links(git: Git, treeish: str) -> dict[str, tuple[str, str]]:
    """path -> (object id, target) of every symbolic link in the tree, the target as stored."""
    tree = parse_tree(git.run("ls-tree", "-r", "-z", "--full-tree", treeish))
    ids = {path.decode("utf-8", "replace"): oid for path, (mode, oid) in tree.items() if mode == SYMLINK}
    if not ids:
        return {}
    out = git.run("cat-file", "--batch", stdin=b"".join(f"{oid}\n".encode() for oid in ids.values()))
    targets: dict[str, str] = {}
    for oid in ids.values():  # --batch answers in order: "<oid> blob <size>\n<bytes>\n"
        head, _, out = out.partition(b"\n")
        size = int(head.split()[2])
        targets[oid], out = out[:size].decode("utf-8", "replace"), out[size + 1 :]
    return {path: (oid, targets[oid]) for path, oid in ids.items()}


def links_out(path: str, links: dict[str, str]) -> bool:
    """Whether the link at `path` resolves outside the repository: an absolute target, or ".." past the
    root, following the tree's other links on the way (a loop is not out of the tree)."""
    folder = [part for part in posixpath.dirname(path).split("/") if part]
    pending = links[path].split("/")
    if links[path].startswith("/"):
        return True
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not folder:
                return True
            folder.pop()
            continue
        here = "/".join([*folder, part])
        if here in links and hops < MAX_LINKS:
            hops += 1
            if links[here].startswith("/"):
                return True
            pending = links[here].split("/") + pending
            continue
        folder.append(part)
    return False


def check_links(git: Git, base: str, commit: str) -> None:
    """PublishError (ChangeLinksOutOfTree) when a link of the change's tree resolves outside the
    repository, but for a link the base holds unchanged that already did; (ChangeTouchesSubmodule) when
    the change edits `.gitmodules`, which says where a submodule is fetched from."""
    if any(path.casefold() == GITMODULES for path in changed_paths(git, base, commit)):
        raise PublishError(
            Reason.ChangeTouchesSubmodule,
            f"the change edits {GITMODULES}, which says where submodules are fetched from: nothing is kept, "
            "pushed or opened; leave submodules as the base records them",
        )
    now = read_links(git, commit)
    if not now:
        return
    before = read_links(git, base)
    now_targets = {path: target for path, (_, target) in now.items()}
    before_targets = {path: target for path, (_, target) in before.items()}
    for path, (oid, target) in sorted(now.items()):
        if not links_out(path, now_targets):
            continue
        if path in before and before[path][0] == oid and links_out(path, before_targets):
            continue  # the repository's own link, left alone
        raise PublishError(
            Reason.ChangeLinksOutOfTree,
            f"the change makes {path} a link to {target[:PATH_CHARS]}, outside the repository: nothing is "
            "kept, pushed or opened; link within the repository, or copy the file in",
        )
