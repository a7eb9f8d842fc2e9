"""Signing the commit the publisher pushes with the platform's SSH key (I/O).

The taken change's commit (made by `git fast-import`, which cannot sign) is made again by `git
commit-tree -S`: the same tree, parent, message, author and dates, the platform's signer as committer
when it names one (the identity a forge matches with the key's owner). git signs under the publisher's
own settings only (gpg.format=ssh, gpg.ssh.program=ssh-keygen, user.signingKey: the key written to a
file of the publisher's own volume, mode 0600, removed once signed), never the workspace's. Used where a
commit is pushed: the attempt's publisher and the publishing of a kept change after its approval.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import SIGNING_KEY_ENV, SigningPlan
from harness_operator.runner.publish_git import Git, PublishError, last_lines
from harness_operator.runner.redact import Redactor

# A commit header's identity: `Name <email> 1700000000 +0000`.
IDENTITY = re.compile(rb"^(.*) <(.*)> (\d+ [+-]\d{4})$")
SIGNATURE_HEADER = b"\ngpgsig -----BEGIN SSH SIGNATURE-----"
# Lines of the key shorter than this are its armour (BEGIN/END), not key material.
KEY_LINE_CHARS = 16
FIX = "the Secret must hold an unencrypted OpenSSH private key (ssh-keygen -t ed25519 -N '' -f key)"


@dataclass(frozen=True)
class Signature:
    """The signed commit and the SHA256 fingerprint of the key that signed it."""

    commit: str
    key: str


def compute_fingerprint(public_key: str) -> str:
    """`SHA256:...` of an OpenSSH public key line, as ssh-keygen -l prints it (pure)."""
    blob = base64.b64decode(public_key.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode("ascii").rstrip("=")


def sign_commit(git: Git, commit: str, sign: SigningPlan, environ: Mapping[str, str]) -> Signature:
    """`commit` made again, signed with the key in SIGNING_KEY_ENV; PublishError(SigningFailed) when the
    key is missing or unusable or git cannot sign, with a message that holds no key material."""
    key = environ.get(SIGNING_KEY_ENV, "").replace("\r\n", "\n").strip()
    lines = [line for line in key.splitlines() if len(line) >= KEY_LINE_CHARS]
    redactor = Redactor([key, *lines])
    if not key:
        raise PublishError(
            Reason.SigningFailed, f"the signing key ({sign.source}) is empty: nothing is pushed; {FIX}"
        )
    key_file = write_key(Path(git.state), key)
    try:
        public = derive_public_key(key_file, Path(git.state), git.deadline)
        signed = remake_commit(git, commit, key_file, sign)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, ValueError) as exc:
        said = last_lines(exc) if isinstance(exc, subprocess.SubprocessError) else str(exc)
        raise PublishError(
            Reason.SigningFailed,
            redactor.text(
                f"signing the commit with the key in {sign.source} failed: {said}; nothing is pushed; {FIX}"
            ),
        ) from None
    finally:
        key_file.unlink(missing_ok=True)
    return Signature(signed, compute_fingerprint(public))


def write_key(state: Path, key: str) -> Path:
    """The key in a file only this user reads (ssh-keygen refuses one others may read)."""
    folder = state / "signing"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / "key"
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(key + "\n")
    return path


def derive_public_key(key_file: Path, state: Path, deadline: float) -> str:
    """The key's public half; an encrypted key (no passphrase given) or not a key fails here."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(state / "home"), "LANG": "C"}
    done = subprocess.run(
        ["ssh-keygen", "-y", "-P", "", "-f", str(key_file)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=max(deadline - time.monotonic(), 0.001),
        check=False,
    )
    if done.returncode != 0 or len(done.stdout.split()) < 2:
        raise subprocess.CalledProcessError(done.returncode, ["ssh-keygen", "-y"], stderr=done.stderr)
    return done.stdout.strip()


def remake_commit(git: Git, commit: str, key_file: Path, sign: SigningPlan) -> str:
    """`git commit-tree -S` of `commit`'s tree, parents, message and author, at its own dates, committed
    by the signer when the plan names one."""
    raw = git.run("cat-file", "commit", commit)
    head, _, message = raw.partition(b"\n\n")
    tree, parents, author, committer = "", [], None, None
    for line in head.split(b"\n"):
        field, _, value = line.partition(b" ")
        if field == b"tree":
            tree = value.decode("ascii")
        elif field == b"parent":
            parents += ["-p", value.decode("ascii")]
        elif field in (b"author", b"committer"):
            match = IDENTITY.match(value)
            if match is None:
                raise ValueError(f"the commit's {field.decode()} line cannot be read")
            if field == b"author":
                author = match
            else:
                committer = match
    if not tree or author is None or committer is None:
        raise ValueError(f"commit {commit} has no tree, author or committer")
    env = with_settings(
        git.local,
        [("gpg.format", "ssh"), ("gpg.ssh.program", "ssh-keygen"), ("user.signingKey", str(key_file))],
    )
    env |= {
        "GIT_AUTHOR_NAME": author[1].decode("utf-8", "replace"),
        "GIT_AUTHOR_EMAIL": author[2].decode("utf-8", "replace"),
        "GIT_AUTHOR_DATE": "@" + author[3].decode("ascii"),
        "GIT_COMMITTER_NAME": sign.name or committer[1].decode("utf-8", "replace"),
        "GIT_COMMITTER_EMAIL": sign.email or committer[2].decode("utf-8", "replace"),
        "GIT_COMMITTER_DATE": "@" + committer[3].decode("ascii"),
    }
    signed = git.run("commit-tree", "-S", tree, *parents, stdin=message, env=env).decode("ascii").strip()
    if SIGNATURE_HEADER not in git.run("cat-file", "commit", signed):
        raise ValueError("git made the commit without an SSH signature")
    return signed


def with_settings(env: Mapping[str, str], settings: list[tuple[str, str]]) -> dict[str, str]:
    """`env` (git's GIT_CONFIG_* settings) with `settings` added after its own."""
    out = dict(env)
    count = int(out.get("GIT_CONFIG_COUNT", "0"))
    for i, (key, value) in enumerate(settings, start=count):
        out[f"GIT_CONFIG_KEY_{i}"] = key
        out[f"GIT_CONFIG_VALUE_{i}"] = value
    out["GIT_CONFIG_COUNT"] = str(count + len(settings))
    return out
