"""The publisher signs the commit it pushes (runner/signing.py) with real git and ssh-keygen: the pushed
commit verifies with `git verify-commit` against an allowed_signers file holding the platform's public key
and with no other; a missing, encrypted or broken key fails the publish (SigningFailed) with nothing
pushed and no key material in the report; the workspace's git configuration takes no part."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.unit.runner.test_publish import TOKEN, VENDOR_KEY, Pod, git

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import SIGNING_KEY_ENV, ChangesReport, PublishPlan, parse_report
from harness_operator.runner.publish import publish
from harness_operator.runner.signing import compute_fingerprint

SIGNER = {"name": "Harness Bot", "email": "bot@example.invalid", "source": "Secret harness-signing"}


class Key:
    """An SSH key pair made by ssh-keygen, as a platform makes the Secret's key."""

    def __init__(self, folder: Path, kind: str = "ed25519", passphrase: str = "") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / "id"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", kind, "-N", passphrase, "-C", "harness", "-f", str(self.path)],
            check=True,
            capture_output=True,
        )
        self.private = self.path.read_text()
        self.public = self.path.with_suffix(".pub").read_text().strip()

    def fingerprint(self) -> str:
        """What `ssh-keygen -l` prints for it."""
        done = subprocess.run(
            ["ssh-keygen", "-l", "-E", "sha256", "-f", str(self.path.with_suffix(".pub"))],
            check=True,
            capture_output=True,
            text=True,
        )
        return done.stdout.split()[1]


@pytest.fixture(scope="module")
def key(tmp_path_factory: pytest.TempPathFactory) -> Key:
    return Key(tmp_path_factory.mktemp("key"))


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path).commit_and_clone()


def signed_plan(pod: Pod) -> PublishPlan:
    return pod.plan(sign=SIGNER)


def run_publisher(pod: Pod, plan: PublishPlan, key_text: str | None) -> ChangesReport:
    """The publisher with its container's variables: the write token, a granted key, the signing key."""
    environ = {"HARNESS_PUBLISH_TOKEN": TOKEN, "ANTHROPIC_API_KEY": VENDOR_KEY}
    if key_text is not None:
        environ[SIGNING_KEY_ENV] = key_text
    report = publish(plan, environ, str(pod.verdict), str(pod.tmp / "base"), pod.state)
    # What the operator reads back is the termination message.
    parsed = parse_report(report.render())
    assert parsed is not None
    return parsed


def verify(pod: Pod, commit: str, public_keys: list[str]) -> subprocess.CompletedProcess[str]:
    """`git verify-commit` in a clone of the origin, as the forge's documentation tells a reviewer to do:
    an allowed_signers file with the platform's public key for the committer's email."""
    signers = pod.tmp / "allowed_signers"
    signers.write_text("".join(f"{SIGNER['email']} {public}\n" for public in public_keys))
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-c", f"gpg.ssh.allowedSignersFile={signers}", "verify-commit", "--raw", commit],
        cwd=pod.origin,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_pushed_commit_verifies_with_the_platform_key(pod: Pod, key: Key) -> None:
    (pod.workdir / "README.md").write_text("hello, signed world\n")

    report = run_publisher(pod, signed_plan(pod), key.private)

    assert report.reason is None, report.message
    assert report.signed and report.signing_key == key.fingerprint()
    assert pod.branches()["harness/run-1"] == report.commit
    assert report.commit is not None
    done = verify(pod, report.commit, [key.public])
    assert done.returncode == 0, done.stderr
    assert "Good" in done.stderr and key.fingerprint() in done.stderr
    # The same change as unsigned: the base as parent, the agent's tree, the plan's author and message;
    # the signer commits.
    assert git("rev-parse", f"{report.commit}^", cwd=pod.origin) == pod.base
    assert git("show", f"{report.commit}:README.md", cwd=pod.origin) == "hello, signed world"
    shown = git("show", "-s", "--format=%an <%ae>|%cn <%ce>|%B", report.commit, cwd=pod.origin)
    assert (
        shown
        == "harness-operator <harness-operator@users.noreply.invalid>|Harness Bot <bot@example.invalid>|run-1"
    )
    # The key's file is gone from the publisher's volume once signed.
    assert not (pod.state / "signing" / "key").exists()


def test_another_key_does_not_verify_it(pod: Pod, key: Key, tmp_path: Path) -> None:
    (pod.workdir / "README.md").write_text("changed\n")
    report = run_publisher(pod, signed_plan(pod), key.private)
    assert report.commit is not None and report.signed

    other = Key(tmp_path / "other")
    done = verify(pod, report.commit, [other.public])

    assert done.returncode != 0 and "No principal matched" in done.stderr


def test_an_rsa_key_signs_too(pod: Pod, tmp_path: Path) -> None:
    rsa = Key(tmp_path / "rsa", kind="rsa")
    (pod.workdir / "README.md").write_text("changed\n")

    report = run_publisher(pod, signed_plan(pod), rsa.private.replace("\n", "\r\n").strip())

    assert report.reason is None, report.message
    assert report.signing_key == rsa.fingerprint() == compute_fingerprint(rsa.public)
    assert report.commit is not None and verify(pod, report.commit, [rsa.public]).returncode == 0


def test_without_a_signing_plan_nothing_is_signed(pod: Pod, key: Key) -> None:
    (pod.workdir / "README.md").write_text("changed\n")

    report = run_publisher(pod, pod.plan(), key.private)

    assert report.reason is None and not report.signed and report.signing_key is None
    assert report.commit is not None and "gpgsig" not in git(
        "cat-file", "commit", report.commit, cwd=pod.origin
    )


@pytest.mark.parametrize(
    "broken",
    ["missing", "empty", "encrypted", "truncated", "public"],
)
def test_an_unusable_key_fails_the_publish_and_pushes_nothing(
    pod: Pod, key: Key, tmp_path: Path, broken: str
) -> None:
    text = {
        "missing": None,
        "empty": "  \n",
        "encrypted": Key(tmp_path / "enc", passphrase="correct horse").private,
        "truncated": key.private[: len(key.private) // 2],
        "public": key.public,
    }[broken]
    (pod.workdir / "README.md").write_text("changed\n")

    report = run_publisher(pod, signed_plan(pod), text)

    assert report.reason == Reason.SigningFailed, report
    message = report.message or ""
    assert "Secret harness-signing" in message and "nothing is pushed" in message
    assert "ssh-keygen -t ed25519 -N ''" in message  # the fix
    assert "harness/run-1" not in pod.branches()
    assert not report.signed and report.commit is None
    # The patch is kept all the same, and no line of any key reaches the report.
    assert report.patch_sha256
    rendered = report.render()
    for line in (text or "").splitlines() + key.private.splitlines()[1:-1]:
        assert len(line) < 16 or line not in rendered


def test_the_workspace_git_configuration_takes_no_part_in_signing(pod: Pod, key: Key) -> None:
    """The agent sets a signing program, a key and a format in the workspace's config and in its home:
    git signs with the publisher's own settings, and the agent's program never runs."""
    marker = pod.tmp / "program-ran"
    program = pod.tmp / "evil-keygen"
    program.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    program.chmod(0o755)
    evil = (
        f'[gpg]\n\tformat = x509\n[gpg "ssh"]\n\tprogram = {program}\n[gpg "x509"]\n\tprogram = {program}\n'
    )
    evil += "[user]\n\tsigningKey = /nonexistent\n"
    config = pod.workdir / ".git" / "config"
    config.write_text(config.read_text() + evil)
    (pod.tmp / "home" / ".gitconfig").write_text(evil)
    (pod.workdir / "README.md").write_text("changed\n")

    report = run_publisher(pod, signed_plan(pod), key.private)

    assert report.reason is None, report.message
    assert report.commit is not None and verify(pod, report.commit, [key.public]).returncode == 0
    assert not marker.exists()


def test_the_fingerprint_is_what_ssh_keygen_prints(key: Key) -> None:
    assert compute_fingerprint(key.public) == key.fingerprint()
    assert compute_fingerprint(key.public).startswith("SHA256:") and "=" not in compute_fingerprint(
        key.public
    )
