"""The publisher's secret scan of a change with gitleaks (I/O): a secret in an added line refuses it.

The files the change adds or edits are taken as the publisher committed them (the blobs in its own
repository, never the working tree) into a folder of its own and scanned there by gitleaks with the
publisher's configuration: its default rules (providers' token formats) and default allowlist. Nothing
the agent wrote steers the scan: the configuration is given (--config), the change's files lie one folder
below the scanned root, so gitleaks finds no .gitleaksignore or .gitleaks.toml of theirs, and inline
`gitleaks:allow` comments are ignored. A finding counts when one of its lines is added by the change (a
secret already in the base is not the agent's) and the platform does not allow it (SecretScanAllow). A
scan that cannot run refuses the change too: nothing unscanned is published. Findings are named by file,
line and rule; gitleaks redacts the values and only those three fields (and the rule's fingerprint) are
read from its report, which is deleted with the copies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import SecretScanAllow, SecretScanPlan
from harness_operator.runner.publish_git import Git, PublishError, last_lines

# Where the sandbox images hold it (sandbox-image/Dockerfile); its pin is in sandbox-image/gitleaks.
GITLEAKS = "/usr/local/bin/gitleaks"
# gitleaks' exit code when it found something (any other but 0 is a failure of the scan).
FOUND_EXIT = 42
CONFIG = "# The publisher's: gitleaks' default rules and allowlist.\n[extend]\nuseDefault = true\n"
SHOWN = 5
HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
ZERO = re.compile(r"^0+$")


@dataclass(frozen=True)
class Finding:
    """What gitleaks found, without the value: the repository path, the rule and the lines."""

    path: str
    rule: str
    start: int
    end: int

    @property
    def fingerprint(self) -> str:
        """gitleaks' fingerprint of a finding in a folder, with the repository path."""
        return f"{self.path}:{self.rule}:{self.start}"


@dataclass(frozen=True)
class Changed:
    """A file the change adds or edits: its path, and its blob before (None: added) and after."""

    path: bytes
    old: str | None
    new: str


def check_secrets(git: Git, base: str, commit: str, plan: SecretScanPlan, scanner: str = GITLEAKS) -> None:
    """PublishError ChangeHoldsSecret when the change adds a secret the platform does not allow, or
    SecretScanFailed when the scan could not run."""
    found = find_secrets(git, base, commit, plan.allow, scanner)
    if found:
        raise PublishError(Reason.ChangeHoldsSecret, describe_findings(found))


def find_secrets(
    git: Git, base: str, commit: str, allow: SecretScanAllow, scanner: str = GITLEAKS
) -> list[Finding]:
    """The findings in lines the change adds that the platform does not allow."""
    changed = list_changed(git, base, commit)
    if not changed:
        return []
    scan = Path(git.state) / "secret-scan"
    shutil.rmtree(scan, ignore_errors=True)
    try:
        files = scan / "source" / "change"
        try:
            files.mkdir(parents=True)
            for item in changed:
                write_blob(git, files, item)
        except OSError as exc:
            raise scan_failed(f"copying the change for the scan failed ({exc.strerror})") from None
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise scan_failed(f"reading the change for the scan failed: {last_lines(exc)}") from None
        found = run_gitleaks(scanner, scan, git.deadline, git.redactor.text)
    finally:
        shutil.rmtree(scan, ignore_errors=True)
    by_path = {item.path.decode("utf-8", "replace"): item for item in changed}
    kept = []
    for finding in found:
        if is_allowed(finding, allow):
            continue
        known = by_path.get(finding.path)  # a name gitleaks could not spell (not UTF-8) counts as added
        if known is None or known.old is None or touches(added_lines(git, known.old, known.new), finding):
            kept.append(finding)
    return sorted(kept, key=lambda f: (f.path, f.start, f.rule))


def list_changed(git: Git, base: str, commit: str) -> list[Changed]:
    """The files (not submodules) the change adds or edits, or whose type it changes."""
    raw = git.run("diff", "--raw", "-z", "--no-abbrev", "--no-renames", "--diff-filter=AMT", base, commit)
    fields = raw.split(b"\0")
    changed = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode("ascii", "replace").split()
        if len(meta) >= 4 and meta[0].startswith(":") and not meta[1].startswith("16"):
            old = None if ZERO.match(meta[2]) else meta[2]
            changed.append(Changed(fields[i + 1], old, meta[3]))
    return changed


def write_blob(git: Git, root: Path, item: Changed) -> None:
    """The blob as a plain file at its path below `root` (a link's blob is its target, as text)."""
    parts = item.path.split(b"/")
    if any(part in (b"", b".", b"..") for part in parts):
        raise PublishError(
            Reason.SecretScanFailed,
            f"the change names a path git does not write ({item.path.decode('utf-8', 'replace')!r}): the "
            "secret scan cannot read it, so the change is not kept, pushed or opened",
        )
    target = os.path.join(os.fsencode(root), *parts)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target, "wb") as out:
        out.write(git.run("cat-file", "blob", item.new))


def run_gitleaks(scanner: str, scan: Path, deadline: float, redact: Callable[[str], str]) -> list[Finding]:
    """gitleaks on `scan`/source with the publisher's configuration; the findings' paths relative to the
    repository. SecretScanFailed when it is missing, fails or runs out of the publisher's time."""
    config = scan / "gitleaks.toml"
    config.write_text(CONFIG, encoding="utf-8")
    report = scan / "report.json"
    source = scan / "source"
    command = [
        scanner,
        "dir",
        "--no-banner",
        "--log-level=error",
        f"--config={config}",
        f"--gitleaks-ignore-path={scan}",  # ours, holding none: the default is the working directory
        "--ignore-gitleaks-allow",
        "--redact",
        "--report-format=json",
        f"--report-path={report}",
        f"--exit-code={FOUND_EXIT}",
        str(source),
    ]
    env = {"HOME": str(scan), "TMPDIR": str(scan), "LANG": "C"}  # no GITLEAKS_CONFIG of the pod's
    try:
        done = subprocess.run(
            command,
            cwd=scan,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=max(deadline - time.monotonic(), 0.001),
            check=False,
        )
    except FileNotFoundError:
        raise scan_failed(
            f"the publisher's image has no secret scanner ({scanner}): run an image built FROM the "
            "project's sandbox image, which holds gitleaks, or have the platform set the chart's "
            "publishing.secretScan.enabled: false"
        ) from None
    except subprocess.TimeoutExpired:
        raise scan_failed(
            "the secret scan did not end within the publisher's time (the operator's publishTimeoutSeconds)"
        ) from None
    if done.returncode not in (0, FOUND_EXIT):
        said = redact(done.stderr.decode("utf-8", "replace")).strip().splitlines()
        raise scan_failed(f"gitleaks exited {done.returncode}: {' / '.join(said[-3:])[:300]}")
    try:
        entries = json.loads(report.read_text(encoding="utf-8"))
        prefix = f"{source}/change/"
        return [
            Finding(
                str(e["File"]).removeprefix(prefix), str(e["RuleID"]), int(e["StartLine"]), int(e["EndLine"])
            )
            for e in entries
        ]
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise scan_failed(f"gitleaks wrote no report the publisher reads ({type(exc).__name__})") from None


def scan_failed(why: str) -> PublishError:
    return PublishError(
        Reason.SecretScanFailed, f"{why}; the change was not scanned, so it is not kept, pushed or opened"
    )


def added_lines(git: Git, old: str, new: str) -> set[int]:
    """The line numbers of `new` that are not in `old` (git's diff of the two blobs, no context)."""
    try:
        diff = git.run("diff", "-U0", "--no-color", "--no-ext-diff", "--no-textconv", old, new)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        raise scan_failed(f"comparing a file with its base failed: {last_lines(exc)}") from None
    lines: set[int] = set()
    for line in diff.splitlines():
        hunk = HUNK.match(line)  # a content line starts with "+", "-", " " or "\\", never "@@"
        if hunk:
            start, count = int(hunk.group(1)), int(hunk.group(2) or 1)
            lines.update(range(start, start + count))
    return lines


def touches(lines: set[int], finding: Finding) -> bool:
    return any(n in lines for n in range(finding.start, max(finding.end, finding.start) + 1))


def is_allowed(finding: Finding, allow: SecretScanAllow) -> bool:
    """Whether the platform allows a finding: by path, rule or fingerprint."""
    return (
        finding.rule in allow.rules
        or finding.fingerprint in allow.fingerprints
        or any(re.search(pattern, finding.path) for pattern in allow.paths)
    )


def describe_findings(found: Iterable[Finding]) -> str:
    """The refusal: where and by which rule, never what; the fix."""
    found = list(found)
    shown = ", ".join(f"{f.path}:{f.start} ({f.rule})" for f in found[:SHOWN])
    more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return (
        f"the change adds what the secret scanner (gitleaks) takes for secrets: {shown}{more}; it is not "
        "kept, pushed or opened. Take them out of the workspace (the agent wrote them) and rotate any that "
        "is real; a test fixture the platform accepts is allowed by the chart's publishing.secretScan.allow "
        f"(a path regex, a rule id, or a fingerprint such as {found[0].fingerprint})"
    )
