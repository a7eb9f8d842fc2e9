"""Signed commits against a real Gitea: the operator configured to sign (publishing.signing), the Job it
builds for a run, and the publisher pushing the signed commit with the run's write token. The pushed
commit, fetched back from Gitea, verifies with `git verify-commit` and an allowed_signers file holding the
documented public key; and once that key is on the pushing account, verified the way Gitea's settings
page asks (a token signed with `ssh-keygen -Y sign -n gitea`), Gitea's API reports the commit verified.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import subprocess
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from harness_operator.contract.changes import (
    CLONE_TOKEN_ENV,
    PUBLISH_TOKEN_ENV,
    SIGNING_KEY_ENV,
    ChangesReport,
)
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.objects.naming import PUBLISH_CONTAINER
from harness_operator.core.pod.job import build_job
from harness_operator.runner.publish import publish
from tests.forge.test_publish_gitea import EDITED, README, TARGET, VENDOR_KEY, Pod, make_run, run_name
from tests.lib.gitea import Gitea, User
from tests.tools.gobuilds import gitleaks_binary
from tests.unit.runner.test_signing import Key

# The settings page's instruction: echo -n 'TOKEN' | ssh-keygen -Y sign -n gitea -f ...
TOKEN_TO_SIGN = re.compile(r"echo -n (?:'|&#39;)([^'&<]+)(?:'|&#39;) \| ssh-keygen -Y sign -n gitea")


@pytest.fixture
def repository(gitea: Gitea, owner: User) -> str:
    """A private repository with one file on main (a clone needs the read token)."""
    gitea.create_repo(owner.name, "widgets", {"README.md": README}, private=True)
    return f"{owner.name}/widgets"


def signing_config(owner: User) -> OperatorConfig:
    """The chart's publishing.signing: on, the key's Secret, the pushing account as committer."""
    return replace(
        OperatorConfig(),
        signing_secret_name="harness-signing",
        signing_enabled=True,
        signing_committer_name=owner.name,
        signing_committer_email=f"{owner.name}@harness.invalid",
    )


def publish_signed(pod: Pod, config: OperatorConfig, read: str, write: str, key: Key) -> ChangesReport:
    """The publisher as the operator configured for signing builds it: its plan and, from Secrets, the
    tokens, the granted key and the signing key."""
    spec = build_job(pod.run, decide_attempt(pod.run, TARGET, config), config)["spec"]["template"]["spec"]
    pod.containers = {c["name"]: c for c in [*spec["initContainers"], *spec["containers"]]}
    values = {PUBLISH_TOKEN_ENV: write, CLONE_TOKEN_ENV: read, "ANTHROPIC_API_KEY": VENDOR_KEY}
    values[SIGNING_KEY_ENV] = key.private
    env = [e["name"] for e in pod.containers[PUBLISH_CONTAINER]["env"] if "valueFrom" in e]
    assert set(env) == set(values), env
    plan = pod.plan()
    assert plan.sign is not None
    # The plan's secret scan (on, as the chart's default) runs the gitleaks the images hold.
    return publish(plan, values, str(pod.verdict), str(pod.base_file), pod.state, str(gitleaks_binary()))


def fetch_and_verify(gitea: Gitea, repository: str, branch: str, read: str, key: Key, tmp: Path) -> str:
    """`git verify-commit` of the branch's head fetched from Gitea, as the README tells a reviewer: an
    allowed_signers file with the platform's public key. Its words (stderr)."""
    clone = tmp / "check"
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
    }
    url = gitea.clone_url(repository).replace("://", f"://x-access-token:{read}@", 1)
    subprocess.run(["git", "init", "-q", str(clone)], check=True, env=env)
    subprocess.run(["git", "fetch", "-q", url, branch], cwd=clone, check=True, env=env, capture_output=True)
    signers = tmp / "allowed_signers"
    signers.write_text(f"* {key.public}\n")
    done = subprocess.run(
        ["git", "-c", f"gpg.ssh.allowedSignersFile={signers}", "verify-commit", "FETCH_HEAD"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def add_verified_signing_key(gitea: Gitea, owner: User, key: Key) -> None:
    """The key on the owner's account (SSH / GPG keys: with SSH off, Gitea keeps it for signatures), then
    verified as its settings page asks: the page's token signed with `ssh-keygen -Y sign -n gitea`."""
    added = gitea.as_user(owner.name).call(
        "POST", "/user/keys", {"title": "harness signing", "key": key.public}
    )
    fingerprint = added["fingerprint"]
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    login = urllib.parse.urlencode({"user_name": owner.name, "password": owner.password}).encode()
    browser.open(f"{gitea.base_url}/user/login", login, timeout=30).read()
    page = browser.open(
        f"{gitea.base_url}/user/settings/keys?verify_ssh={urllib.parse.quote(fingerprint, safe='')}",
        timeout=30,
    ).read()
    found = TOKEN_TO_SIGN.search(page.decode())
    assert found is not None, "the settings page shows no token to sign (not logged in?)"
    signed = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-n", "gitea", "-f", str(key.path)],
        input=found.group(1),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    form = {
        "title": "none",
        "content": key.public,
        "fingerprint": fingerprint,
        "signature": signed,
        "type": "verify_ssh",
    }
    browser.open(
        f"{gitea.base_url}/user/settings/keys", urllib.parse.urlencode(form).encode(), timeout=30
    ).read()


def test_the_pushed_commit_verifies_with_the_documented_public_key(
    gitea: Gitea, owner: User, repository: str, tmp_path: Path
) -> None:
    key = Key(tmp_path / "key")
    read = gitea.create_token(owner, ["read:repository"])
    write = gitea.create_token(owner, ["write:repository"])
    name = run_name()
    pod = Pod(tmp_path / "pod", make_run(gitea, repository, name))
    pod.clone(read)
    pod.agent_edits({"README.md": EDITED})

    report = publish_signed(pod, signing_config(owner), read, write, key)

    assert report.reason is None, report.message
    assert report.signed and report.signing_key == key.fingerprint()
    branch = f"harness/{name}"
    assert gitea.branches(repository)[branch] == report.commit
    said = fetch_and_verify(gitea, repository, branch, read, key, tmp_path)
    assert 'Good "git" signature' in said and key.fingerprint() in said
    [commit] = gitea.commits(repository, branch)[:1]
    assert commit["commit"]["committer"]["email"] == f"{owner.name}@harness.invalid"
    assert commit["commit"]["author"]["name"] == "harness-operator"
    # The pull request is opened on the signed commit.
    [pull] = gitea.pull_requests(repository)
    assert pull["head"]["sha"] == report.commit


def test_gitea_reports_the_commit_verified_once_the_key_is_the_pushers(
    gitea: Gitea, owner: User, repository: str, tmp_path: Path
) -> None:
    key = Key(tmp_path / "key")
    read = gitea.create_token(owner, ["read:repository"])
    write = gitea.create_token(owner, ["write:repository"])
    pod = Pod(tmp_path / "pod", make_run(gitea, repository, run_name()))
    pod.clone(read)
    pod.agent_edits({"README.md": EDITED})
    report = publish_signed(pod, signing_config(owner), read, write, key)
    assert report.reason is None, report.message

    before = gitea.call("GET", f"/repos/{repository}/git/commits/{report.commit}")["commit"]["verification"]
    assert before["verified"] is False and before["signature"].startswith("-----BEGIN SSH SIGNATURE-----")

    add_verified_signing_key(gitea, owner, key)

    [listed] = gitea.as_user(owner.name).call("GET", "/user/keys")
    assert listed["fingerprint"] == key.fingerprint()
    after = gitea.call("GET", f"/repos/{repository}/git/commits/{report.commit}")["commit"]["verification"]
    assert after["verified"] is True, after
    assert after["signer"]["email"] == f"{owner.name}@harness.invalid"
