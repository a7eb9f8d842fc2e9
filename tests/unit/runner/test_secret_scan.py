"""The publisher's secret scan (runner/secret_scan.py) with real git and the real gitleaks the images hold
(sandbox-image/gitleaks, built once from the Go module proxy and cached): a change adding a token of a
provider's format is refused by file, line and rule, never by value; allowed findings, secrets already in
the base and a scan turned off pass; the agent's own ignore files and comments steer nothing; a scanner
that is missing or fails refuses the change."""

from __future__ import annotations

import secrets
import shutil
import string
from pathlib import Path

import pytest
from tests.tools.gobuilds import gitleaks_binary
from tests.unit.runner.test_publish import TOKEN, VENDOR_KEY, Pod

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import ChangesReport, PublishPlan, SecretScanAllow, SecretScanPlan
from harness_operator.contract.frame import FRAME_MARKER
from harness_operator.runner.publish import publish
from harness_operator.runner.secret_scan import Finding, describe_findings, is_allowed

ALPHANUMERIC = string.ascii_letters + string.digits


def github_token() -> str:
    """A GitHub personal access token's format (ghp_ and 36 characters), made up for each test."""
    return "ghp_" + "".join(secrets.choice(ALPHANUMERIC) for _ in range(36))


def aws_key() -> str:
    return "AKIA" + "".join(secrets.choice(string.ascii_uppercase + "234567") for _ in range(16))


@pytest.fixture(scope="module")
def gitleaks() -> str:
    if shutil.which("go") is None:
        pytest.skip("go is not installed: the real gitleaks (sandbox-image/gitleaks) cannot be built")
    return str(gitleaks_binary())


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path, {"README.md": "hello\n", "src/config.py": "NAME = 'widgets'\n"}).commit_and_clone()


def scanned(pod: Pod, scanner: str, allow: SecretScanAllow | None = None, **plan: object) -> ChangesReport:
    scan = SecretScanPlan(allow=allow or SecretScanAllow())
    environ = {"HARNESS_PUBLISH_TOKEN": TOKEN, "ANTHROPIC_API_KEY": VENDOR_KEY}
    full = pod.plan(secret_scan=scan.model_dump(by_alias=True), **plan)
    return publish(full, environ, str(pod.verdict), str(pod.tmp / "base"), pod.state, scanner)


@pytest.mark.gotool
@pytest.mark.parametrize("branch", ["harness/run-1", None])
def test_a_token_of_a_providers_format_is_refused_by_file_line_and_rule(
    pod: Pod, gitleaks: str, capfd: pytest.CaptureFixture[str], branch: str | None
) -> None:
    github, aws = github_token(), aws_key()
    (pod.workdir / "src" / "config.py").write_text(f"NAME = 'widgets'\n\nGITHUB = \"{github}\"\n")
    (pod.workdir / "deploy.env").write_text(f"# the key\nAWS_ACCESS_KEY_ID={aws}\n")

    report = scanned(pod, gitleaks, branch=branch)

    assert report.reason == Reason.ChangeHoldsSecret, report
    message = report.message or ""
    assert "src/config.py:3 (github-pat)" in message and "deploy.env:2 (aws-access-token)" in message
    assert "publishing.secretScan.allow" in message
    logged = capfd.readouterr().err
    for value in (github, aws, github[4:], aws[4:]):
        assert value not in report.render() and value not in logged
    # Nothing kept (no patch frame in the log), nothing pushed.
    assert report.patch_sha256 is None and FRAME_MARKER not in logged
    assert "harness/run-1" not in pod.branches()
    assert not (pod.state / "secret-scan").exists()  # the copies are gone


@pytest.mark.gotool
@pytest.mark.parametrize(
    "allow",
    [
        SecretScanAllow(paths=[r"^tests/fixtures/"]),
        SecretScanAllow(rules=["github-pat"]),
        SecretScanAllow(fingerprints=["tests/fixtures/github.json:github-pat:1"]),
    ],
    ids=["path", "rule", "fingerprint"],
)
def test_a_finding_the_platform_allows_passes(pod: Pod, gitleaks: str, allow: SecretScanAllow) -> None:
    (pod.workdir / "tests" / "fixtures").mkdir(parents=True)
    (pod.workdir / "tests" / "fixtures" / "github.json").write_text(f'{{"token": "{github_token()}"}}\n')

    report = scanned(pod, gitleaks, allow)

    assert report.reason is None, report.message
    assert pod.branches()["harness/run-1"] == report.commit


@pytest.mark.gotool
def test_only_lines_the_change_adds_count(tmp_path: Path, gitleaks: str) -> None:
    """A secret already in the base is not the agent's: editing its file around it passes; a new one in
    the same file is refused, named at its own line."""
    old = github_token()
    pod = Pod(tmp_path, {"settings.py": f"A = 1\nTOKEN = '{old}'\nB = 2\n"}).commit_and_clone()
    (pod.workdir / "settings.py").write_text(f"A = 10\nTOKEN = '{old}'\nB = 20\n")

    assert scanned(pod, gitleaks).reason is None

    new = github_token()
    (pod.workdir / "settings.py").write_text(f"A = 10\nTOKEN = '{old}'\nB = 20\nC = '{new}'\n")
    report = scanned(pod, gitleaks, branch="harness/run-2")
    assert report.reason == Reason.ChangeHoldsSecret, report
    assert "settings.py:4 (github-pat)" in (report.message or "")
    assert "settings.py:2" not in (report.message or "")


@pytest.mark.gotool
def test_the_agents_ignore_files_and_comments_steer_nothing(pod: Pod, gitleaks: str) -> None:
    """The agent writes gitleaks' own ways to silence a finding: an ignore file with the fingerprint, a
    configuration allowing every path, an inline `gitleaks:allow`. The publisher's scan reads none."""
    (pod.workdir / "leak.py").write_text(f"KEY = '{github_token()}'  # gitleaks:allow\n")
    (pod.workdir / ".gitleaksignore").write_text("leak.py:github-pat:1\n")
    (pod.workdir / ".gitleaks.toml").write_text("[allowlist]\npaths = ['''.*''']\n")

    report = scanned(pod, gitleaks)

    assert report.reason == Reason.ChangeHoldsSecret, report
    assert "leak.py:1 (github-pat)" in (report.message or "")


def test_a_missing_scanner_refuses_the_change(pod: Pod, tmp_path: Path) -> None:
    (pod.workdir / "README.md").write_text("changed\n")

    report = scanned(pod, str(tmp_path / "no-gitleaks"))

    assert report.reason == Reason.SecretScanFailed, report
    assert "publishing.secretScan.enabled" in (report.message or "")
    assert "harness/run-1" not in pod.branches() and report.patch_sha256 is None


def test_a_failing_scanner_refuses_the_change_and_its_words_are_redacted(pod: Pod, tmp_path: Path) -> None:
    scanner = tmp_path / "broken-gitleaks"
    scanner.write_text(f"#!/bin/sh\necho 'fatal: cannot read config near {TOKEN}' >&2\nexit 3\n")
    scanner.chmod(0o755)
    (pod.workdir / "README.md").write_text("changed\n")

    report = scanned(pod, str(scanner))

    assert report.reason == Reason.SecretScanFailed, report
    assert "gitleaks exited 3: fatal: cannot read config" in (report.message or "")
    assert TOKEN not in report.render()
    assert "harness/run-1" not in pod.branches()


def test_a_scan_past_the_publishers_time_refuses_the_change(pod: Pod, tmp_path: Path) -> None:
    scanner = tmp_path / "slow-gitleaks"
    scanner.write_text("#!/bin/sh\nexec sleep 60\n")
    scanner.chmod(0o755)
    (pod.workdir / "README.md").write_text("changed\n")

    report = scanned(pod, str(scanner), timeout_seconds=8)

    assert report.reason == Reason.SecretScanFailed, report
    assert "did not end within the publisher's time" in (report.message or "")
    assert "harness/run-1" not in pod.branches()


def test_with_the_scan_off_the_scanner_is_not_run(pod: Pod, tmp_path: Path) -> None:
    (pod.workdir / "README.md").write_text(f"token {github_token()}\n")
    environ = {"HARNESS_PUBLISH_TOKEN": TOKEN}
    missing = str(tmp_path / "no-gitleaks")

    report = publish(pod.plan(), environ, str(pod.verdict), str(pod.tmp / "base"), pod.state, missing)

    assert report.reason is None, report.message
    assert PublishPlan.model_validate_json(pod.plan().to_json()).secret_scan is None


def test_the_refusal_names_five_findings_and_counts_the_rest() -> None:
    found = [Finding(f"f{i}.py", "github-pat", i + 1, i + 1) for i in range(7)]
    message = describe_findings(found)
    assert "f0.py:1 (github-pat)" in message and "f4.py:5 (github-pat)" in message
    assert "f5.py" not in message and "and 2 more" in message
    assert "f0.py:github-pat:1" in message  # the fingerprint to allow it by


def test_allowed_by_path_rule_or_fingerprint_alone() -> None:
    finding = Finding("tests/fixtures/a.json", "aws-access-token", 3, 3)
    assert is_allowed(finding, SecretScanAllow(paths=["fixtures/"]))
    assert not is_allowed(finding, SecretScanAllow(paths=["^fixtures/"]))
    assert is_allowed(finding, SecretScanAllow(rules=["aws-access-token"]))
    assert not is_allowed(finding, SecretScanAllow(rules=["github-pat"]))
    assert is_allowed(finding, SecretScanAllow(fingerprints=["tests/fixtures/a.json:aws-access-token:3"]))
    assert not is_allowed(finding, SecretScanAllow(fingerprints=["tests/fixtures/a.json:aws-access-token:4"]))
    assert not is_allowed(finding, SecretScanAllow())
