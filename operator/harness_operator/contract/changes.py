"""The documents of publishing an agent's change (pure): what the operator tells the publishing container
(PublishPlan, in its environment), what the runner tells it (Verdict, in a volume only the two mount) and
what it reports (ChangesReport, its termination message, under 4 KiB; the patch follows in its log, framed
as the output is, contract/frame.py).

The publisher is the attempt pod's sidecar container: it starts before the agent and acts when the
kubelet stops it, which it does only once every regular container (the runner's and the agent's) has
ended, so no process of the agent is left to change the workspace while it is read.
"""

from __future__ import annotations

import json
from enum import StrEnum

from pydantic import ConfigDict, Field, ValidationError

from harness_operator.api.v1alpha1 import BranchIfExists, Forge, Model, ProtectedPathRule

PUBLISH_PLAN_ENV = "HARNESS_PUBLISH_PLAN"
# The write credential (spec.workspace.publish.credentialsSecretRef): only the publisher's container has it.
PUBLISH_TOKEN_ENV = "HARNESS_PUBLISH_TOKEN"
# The clone's read credential (spec.workspace.git.credentialsSecretRef), when the run names one.
CLONE_TOKEN_ENV = "GIT_TOKEN"
# The runner writes VERDICT_FILE in VERDICT_DIR, a volume the agent's container does not mount.
VERDICT_DIR = "/run/harness-verdict"
VERDICT_FILE = f"{VERDICT_DIR}/verdict.json"
# The platform's SSH signing key (the operator's publishing.signing Secret): only the publisher's container
# has it, and it writes it to a file of its own (mode 0600) for ssh-keygen.
SIGNING_KEY_ENV = "HARNESS_SIGNING_KEY"
# The publisher's own volume (the agent's container does not mount it): the clone writes BASE_FILE there
# before the agent starts, the publisher keeps its repository, index and home in it.
PUBLISH_DIR = "/run/harness-publish"
BASE_FILE = f"{PUBLISH_DIR}/base"
# The pull request's body takes at most this much of the output (GitHub's limit is 65536 characters).
BODY_OUTPUT_CHARS = 60000
MESSAGE_CHARS = 1000
TERMINATION_LIMIT = 4096
# The kept-change publisher (runner/kept_change.py) reads the kept patch, and the run's output for the
# pull request's body, from this read-only volume (the run's changes and output ConfigMaps).
KEPT_DIR = "/run/harness-kept"
KEPT_PATCH_FILE = f"{KEPT_DIR}/changes.patch"
KEPT_OUTPUT_FILE = f"{KEPT_DIR}/output"
# The approval paths a report names, each cut to APPROVAL_PATH_CHARS (a report stays under 4 KiB).
APPROVAL_PATHS_MAX = 10
APPROVAL_PATH_CHARS = 150


class PublishMode(StrEnum):
    """Attempt: the attempt's sidecar takes the agent's change; PublishKept: an approved change, kept
    by an attempt, is published from a pod of its own."""

    attempt = "Attempt"
    publish_kept = "PublishKept"


class KeptChange(Model):
    """The change an attempt kept for approval, as the operator recorded it: what is published is the
    patch whose sha256 this is, applied to `base`, giving `tree`; anything else is refused."""

    base: str
    tree: str
    patch_sha256: str = Field(alias="patchSHA256")


class PullRequestPlan(Model):
    """The pull request to open, with everything but $(output) already replaced."""

    forge: Forge
    api_url: str = Field(alias="apiURL")
    repository: str
    base: str | None = None
    title: str
    body: str
    draft: bool = False


class SecretScanAllow(Model):
    """Findings of the secret scan the platform allows (chart publishing.secretScan.allow), each entry
    alone: a path matching one of `paths` (Python regular expressions, searched in the repository path),
    a rule in `rules` (gitleaks rule ids), or a fingerprint in `fingerprints` (`path:rule:line`)."""

    paths: list[str] = Field(default_factory=list)
    rules: list[str] = Field(default_factory=list)
    fingerprints: list[str] = Field(default_factory=list)


class SecretScanPlan(Model):
    """The publisher scans the change for secrets (gitleaks) before keeping or pushing it."""

    allow: SecretScanAllow = Field(default_factory=SecretScanAllow)


class SigningPlan(Model):
    """Sign the pushed commit with the platform's SSH key (in SIGNING_KEY_ENV); `name` and `email`, when set,
    the committer (the identity a forge matches with the key's owner). `source` names the Secret."""

    source: str
    name: str | None = None
    email: str | None = None


class PublishPlan(Model):
    """What the publisher does once the agent has succeeded; templates rendered by the operator."""

    url: str
    working_dir: str
    patch_limit: int
    branch: str | None = None
    # FastForward: the branch may exist at the cloned commit (the base); the change is pushed onto it.
    if_exists: BranchIfExists = BranchIfExists.fail
    commit_message: str = ""
    author_name: str = "harness-operator"
    author_email: str = "harness-operator@users.noreply.invalid"
    pull_request: PullRequestPlan | None = None
    # The names of the variables holding granted credentials: a change holding one's value is refused.
    secret_envs: list[str] = Field(default_factory=list)
    timeout_seconds: int = 120
    # The platform's, the namespace's and the run's rules merged (core/pod/protected_paths.py).
    protected_paths: list[ProtectedPathRule] = Field(default_factory=list)
    # Keep the change and push nothing until a person approves (spec.workspace.publish.approval).
    approval_required: bool = False
    mode: PublishMode = PublishMode.attempt
    kept: KeptChange | None = None
    # None: the platform turned the scan off (chart publishing.secretScan.enabled: false).
    secret_scan: SecretScanPlan | None = None
    sign: SigningPlan | None = None

    def to_json(self) -> str:
        return self.model_dump_json(by_alias=True, exclude_none=True)


class Verdict(Model):
    """The runner's word on the agent: whether it succeeded, and its output (redacted, cut)."""

    succeeded: bool
    output: str = ""


class ChangesReport(Model):
    """What the publisher did: `reason` set when it failed (a Reason), else the change as published.
    `skipped`: the agent did not succeed, so nothing was taken."""

    model_config = ConfigDict(extra="ignore")  # a newer publisher's fields do not break an older reader

    skipped: bool = False
    reason: str | None = None
    message: str | None = None
    base: str | None = None
    commit: str | None = None
    branch: str | None = None
    files: int | None = None
    insertions: int | None = None
    deletions: int | None = None
    patch_bytes: int | None = None
    patch_sha256: str | None = Field(default=None, alias="patchSHA256")
    pull_request_url: str | None = Field(default=None, alias="pullRequestURL")
    pull_request_number: int | None = None
    # Kept, not pushed: a person approves first (the plan's approval_required, or paths needing it).
    awaiting_approval: bool = False
    tree: str | None = None
    # The protected paths (action RequireApproval) the change touches: it is published only once approved.
    approval_paths: list[str] | None = None
    # The pushed commit carries an SSH signature by the key of this fingerprint (SHA256:...).
    signed: bool = False
    signing_key: str | None = None

    def render(self) -> str:
        """The termination message: the message is cut until the whole fits in 4 KiB."""
        paths = (
            [p[:APPROVAL_PATH_CHARS] for p in self.approval_paths[:APPROVAL_PATHS_MAX]]
            if self.approval_paths
            else None
        )
        report = self.model_copy(
            update={"message": (self.message or "")[:MESSAGE_CHARS] or None, "approval_paths": paths}
        )
        text = report.model_dump_json(by_alias=True, exclude_none=True, exclude_defaults=True)
        while len(text.encode("utf-8")) > TERMINATION_LIMIT and report.message:
            report = report.model_copy(update={"message": report.message[: len(report.message) // 2]})
            text = report.model_dump_json(by_alias=True, exclude_none=True, exclude_defaults=True)
        return text


def parse_report(text: str) -> ChangesReport | None:
    """The publisher's termination message, or None when it is missing or not one."""
    try:
        return ChangesReport.model_validate(json.loads(text))
    except (ValueError, ValidationError):
        return None
