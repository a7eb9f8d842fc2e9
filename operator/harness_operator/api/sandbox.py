"""Where a run's agent works: its workspace (volume, git source) and its sandbox (network policy,
scheduling, resources)."""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import ConfigDict, Field

from harness_operator.api.common import (
    EgressRule,
    Model,
    SecretKeySelector,
    object_name,
    rule,
    validations,
)


class VolumeScope(StrEnum):
    run = "run"
    agent = "agent"
    agent_user = "agentUser"


class PersistentVolumeClaimRef(Model):
    """An existing PersistentVolumeClaim."""

    claim_name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the claim.",
        json_schema_extra=object_name("PersistentVolumeClaim"),
    )


class EmptyDir(Model):
    """A scratch volume, as in a pod's emptyDir."""

    medium: str | None = Field(default=None, description="Empty for disk, or Memory for tmpfs.")
    size_limit: str | None = Field(
        default=None, max_length=32, description="Most space it may use, e.g. 10Gi."
    )


class WorkspaceVolume(Model):
    """Where the workspace lives; emptyDir when nothing is set."""

    empty_dir: EmptyDir | None = Field(
        default=None, description="A scratch volume for the run (the default)."
    )
    persistent_volume_claim: PersistentVolumeClaimRef | None = Field(
        default=None, description="An existing claim."
    )
    scope: VolumeScope | None = Field(
        default=None,
        description="A claim the operator creates: run (owned by the run), agent (one per provider, kept) "
        "or agentUser (one per provider and user label, kept).",
    )
    size: str | None = Field(default=None, max_length=32, description="Size of an operator-created claim.")
    storage_class_name: str | None = Field(
        default=None,
        max_length=253,
        description="Storage class of an operator-created claim.",
        json_schema_extra=object_name("StorageClass"),
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "[has(self.emptyDir), has(self.persistentVolumeClaim), has(self.scope)]"
                ".filter(x, x).size() <= 1",
                "set at most one of emptyDir, persistentVolumeClaim or scope",
            ),
            rule(
                "has(self.scope) || !(has(self.size) || has(self.storageClassName))",
                "size and storageClassName apply only with scope",
            ),
        )
    )


class GitSource(Model):
    """A git repository cloned into the working directory by an init container."""

    url: str = Field(min_length=1, max_length=2048, description="Repository URL.")
    ref: str | None = Field(default=None, max_length=256, description="Branch, tag or commit.")
    credentials_secret_ref: SecretKeySelector | None = Field(
        default=None, description="Secret key with a token for the clone (never placed in argv)."
    )


# A branch name template: `$(run.name)` and `$(run.namespace)` are the run's; the rendered name must be a
# valid branch name (git check-ref-format --branch), which the operator checks before the run starts.
DEFAULT_BRANCH = "harness/$(run.name)"
DEFAULT_TITLE = "$(run.name)"
DEFAULT_BODY = "$(output)"
DEFAULT_COMMIT_MESSAGE = "$(run.name)\n\nMade by HarnessRun $(run.namespace)/$(run.name)."
PATCH_LIMIT_BYTES = 1_000_000  # what a ConfigMap holds (1 MiB) with room for its metadata


class Forge(StrEnum):
    github = "github"
    gitea = "gitea"
    gitlab = "gitlab"


class BranchIfExists(StrEnum):
    """What the push does when the run's branch exists on the origin."""

    fail = "Fail"
    fast_forward = "FastForward"


class ProtectedPathAction(StrEnum):
    """What a change touching a protected path gets: refused, or published only once a person approves."""

    refuse = "Refuse"
    require_approval = "RequireApproval"


class ProtectedPathRule(Model):
    """A path the published change may not touch freely (added, edited, removed, renamed from or to)."""

    path: str = Field(
        min_length=1,
        max_length=1024,
        description='"dir/" (a folder from the root, and all below it), a name without "/" (a file or '
        'folder of that name at any depth, e.g. "AGENTS.md"), or a path from the root, "*", "?" and "[...]" '
        'matching as in fnmatch ("*" crosses "/"). Case is ignored.',
        json_schema_extra=validations(
            rule("!self.startsWith('/')", 'is relative to the repository\'s root: drop the leading "/"')
        ),
    )
    action: ProtectedPathAction = Field(
        default=ProtectedPathAction.refuse,
        description="Refuse (the default: ChangeTouchesProtectedPath) or RequireApproval (the change is "
        "published only once a person approves it).",
    )


class PublishBranch(Model):
    """The commit pushed to the origin: a new branch, or one commit on the branch the workspace cloned;
    never forced, never another ref."""

    name: str = Field(
        default=DEFAULT_BRANCH,
        min_length=1,
        max_length=200,
        description="Branch name; $(run.name) and $(run.namespace) are replaced (default "
        f"{DEFAULT_BRANCH}). The push fails if the branch exists, unless ifExists is FastForward.",
    )
    if_exists: BranchIfExists = Field(
        default=BranchIfExists.fail,
        description="Fail (the default): the branch must not exist. FastForward: the branch may exist, "
        "and then the change is one commit on the commit the workspace cloned from it (workspace.git.ref "
        "must be the branch's name), pushed without force; if someone pushed to the branch meanwhile, "
        "nothing is pushed and the run fails BranchMoved. An open pull request from the branch is "
        "reported, not opened again.",
    )


class PullRequest(Model):
    """A pull (merge) request from the pushed branch, opened through the forge's REST API."""

    forge: Forge = Field(default=Forge.github, description="github (the default), gitea or gitlab.")
    api_url: str | None = Field(
        default=None,
        alias="apiURL",
        max_length=2048,
        description="The forge's API root. Default: https://api.github.com for github.com, else the "
        "repository host's /api/v3 (GitHub Enterprise), /api/v1 (Gitea) or /api/v4 (GitLab).",
        json_schema_extra=validations(
            rule("self.startsWith('https://') || self.startsWith('http://')", "must be an http(s) URL")
        ),
    )
    repository: str | None = Field(
        default=None,
        max_length=512,
        description="owner/name (GitLab: the project path). Default: the git URL's path without .git.",
    )
    base: str | None = Field(
        default=None,
        max_length=256,
        description="The branch to merge into. Default: workspace.git.ref, else the origin's HEAD branch.",
    )
    title: str = Field(
        default=DEFAULT_TITLE,
        min_length=1,
        max_length=1024,
        description="Title; $(run.name), $(run.namespace) and $(output) (the run's output) are replaced.",
    )
    body: str = Field(
        default=DEFAULT_BODY,
        max_length=16384,
        description="Body, with the title's variables (the output is cut at 60000 characters).",
    )
    draft: bool = Field(default=False, description="Open it as a draft (GitHub and GitLab).")


# A Go-style duration of hours, minutes and seconds ("72h", "1h30m", "10s"), as CEL's duration() reads it.
DURATION_PATTERN = r"^([0-9]+(h|m|s))+$"
APPROVAL_TIMEOUT_DEFAULT = "72h"
APPROVAL_TIMEOUT_MAX = "720h"  # 30 days


class PublishApproval(Model):
    """A person approves the change before it is published: the attempt ends with its change kept, the
    run waits (phase AwaitingApproval, no pod), and an approval publishes it from a pod of its own."""

    required: bool = Field(
        default=False,
        description="Wait for an approval (annotation approval.agentharness.dev/decision, written by "
        "`harnessctl approve|reject`) before the branch is pushed and the pull request opened.",
    )
    timeout: str = Field(
        default=APPROVAL_TIMEOUT_DEFAULT,
        max_length=32,
        pattern=DURATION_PATTERN,
        description="How long the run waits for a decision (hours, minutes, seconds: 72h, 1h30m, 10s; at "
        "most 720h, 30 days); then it fails with ApprovalTimedOut.",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                f"!has(self.timeout) || (duration(self.timeout) > duration('0s') && "
                f"duration(self.timeout) <= duration('{APPROVAL_TIMEOUT_MAX}'))",
                "timeout must be more than 0s and at most 720h (30 days), e.g. 72h",
                field_path=".timeout",
            )
        )
    )


def parse_duration_seconds(text: str) -> int:
    """The seconds of a DURATION_PATTERN duration ("1h30m" -> 5400)."""
    units = {"h": 3600, "m": 60, "s": 1}
    return sum(int(n) * units[u] for n, u in re.findall(r"([0-9]+)([hms])", text))


class WorkspacePublish(Model):
    """What happens to the agent's change after it exited successfully. The patch (git diff --binary
    against the cloned commit) is always kept; a branch and a pull request are pushed and opened by a
    container of the pod the agent never reaches, with a credential the agent never holds."""

    branch: PublishBranch | None = Field(
        default=None, description="Push the change as a commit on a new branch (needs credentialsSecretRef)."
    )
    pull_request: PullRequest | None = Field(
        default=None, description="Open a pull request from the branch (implies branch with its default)."
    )
    credentials_secret_ref: SecretKeySelector | None = Field(
        default=None,
        description="Secret key with a token that may push to the origin and open pull requests. Only "
        "the publishing container reads it; the agent's container never does.",
    )
    commit_message: str = Field(
        default=DEFAULT_COMMIT_MESSAGE,
        min_length=1,
        max_length=16384,
        description="Commit message; $(run.name) and $(run.namespace) are replaced.",
    )
    protected_paths: list[ProtectedPathRule] = Field(
        default_factory=list,
        max_length=64,
        description="Paths added to the platform's protected paths (the chart's publishing.protectedPaths "
        "and the namespace's agentharness.dev/protected-paths annotation), or made stricter (RequireApproval "
        "to Refuse). A run never loosens a rule: its RequireApproval for a path the platform refuses stays "
        "Refuse.",
    )
    allow_ci_changes: bool = Field(
        default=False,
        alias="allowCIChanges",
        description="Removed: a run may not loosen the protected paths. true is refused; a platform that "
        "lets CI changes through a person's approval sets RequireApproval on the chart's rule.",
        json_schema_extra=validations(
            rule(
                "!self",
                "allowCIChanges was removed: a run may not loosen the protected paths; drop the field (a "
                "platform admin can set action RequireApproval on the CI rules of the chart's "
                "publishing.protectedPaths, so that a person approves such a change)",
            )
        ),
    )
    approval: PublishApproval | None = Field(
        default=None,
        description="Wait for a person's approval before publishing (needs branch or pullRequest).",
    )
    sign: bool | None = Field(
        default=None,
        description="Sign the pushed commit with the platform's SSH key (the operator's publishing.signing). "
        "Unset: as the platform says (publishing.signing.enabled). true needs a key the platform "
        "configured; false only where the platform allows unsigned commits (publishing.signing."
        "allowUnsigned).",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "!(has(self.branch) || has(self.pullRequest)) || has(self.credentialsSecretRef)",
                "branch and pullRequest need credentialsSecretRef: a Secret key with a token that may push",
            ),
            rule(
                "!has(self.approval) || !has(self.approval.required) || !self.approval.required || "
                "has(self.branch) || has(self.pullRequest)",
                "approval.required needs branch or pullRequest: an approval publishes the change there "
                "(without either, the patch is only kept in status.changes)",
                field_path=".approval.required",
            ),
        )
    )


class WorkspaceFrom(Model):
    """Start from another run's change: its patch applied to the commit it was made against (the change
    shows as uncommitted, so `git diff` reads it), or its branch when the patch was too large to keep."""

    run: str = Field(
        min_length=1,
        max_length=253,
        description="A HarnessRun of this namespace that published a change of the same repository; this "
        "run waits until it has succeeded.",
        json_schema_extra=object_name("HarnessRun"),
    )


_FAST_FORWARD = (
    "has(self.publish) && has(self.publish.branch) && has(self.publish.branch.ifExists) && "
    "self.publish.branch.ifExists == 'FastForward'"
)


class Workspace(Model):
    """The agent's working directory and the volume behind it."""

    working_dir: str | None = Field(
        default=None,
        max_length=4096,
        description="Absolute working directory in the sandbox (created if missing).",
        json_schema_extra=validations(rule("self.startsWith('/')", "must be an absolute path")),
    )
    volume: WorkspaceVolume | None = Field(default=None, description="The workspace volume.")
    git: GitSource | None = Field(default=None, description="A repository cloned into workingDir.")
    from_: WorkspaceFrom | None = Field(
        default=None,
        alias="from",
        description="Start from another run's published change (needs git: the same repository).",
    )
    publish: WorkspacePublish | None = Field(
        default=None,
        description="Keep the agent's change as a patch, and push it as a branch and a pull request "
        "(needs git).",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "!has(self.publish) || has(self.git)",
                "publish needs git: the change is taken against the commit the workspace cloned",
                field_path=".publish",
            ),
            rule(
                "!has(self.from) || has(self.git)",
                "from needs git: the repository the earlier run changed",
                field_path=".from",
            ),
            rule(
                f"!({_FAST_FORWARD}) || (has(self.git) && has(self.git.ref) && "
                "(!has(self.publish.branch.name) || self.publish.branch.name.contains('$(') || "
                "self.publish.branch.name == self.git.ref))",
                "publish.branch.ifExists FastForward adds a commit to the branch the workspace cloned: set "
                "git.ref to the branch's name",
                field_path=".publish.branch.ifExists",
            ),
            rule(
                f"!({_FAST_FORWARD}) || !has(self.from)",
                "publish.branch.ifExists FastForward takes the change against the branch's head, not another "
                "run's change: drop from (resumeFrom continues a run's conversation)",
                field_path=".publish.branch.ifExists",
            ),
        )
    )


class NetworkPolicyMode(StrEnum):
    none = "none"
    provider = "provider"
    allowlist = "allowlist"
    unrestricted = "unrestricted"


class Toleration(Model):
    """A pod toleration, passed through."""

    key: str | None = Field(default=None, description="Taint key.")
    operator: str | None = Field(default=None, description="Exists or Equal.")
    value: str | None = Field(default=None, description="Taint value.")
    effect: str | None = Field(default=None, description="NoSchedule, PreferNoSchedule or NoExecute.")
    toleration_seconds: int | None = Field(default=None, description="For NoExecute: how long to stay.")


class Resources(Model):
    """Container resource requests and limits (quantities)."""

    requests: dict[str, str | int] = Field(
        default_factory=dict,
        description="Requests, e.g. {cpu: 500m, memory: 1Gi}.",
        json_schema_extra={"additionalProperties": {"x-kubernetes-int-or-string": True}},
    )
    limits: dict[str, str | int] = Field(
        default_factory=dict,
        description="Limits, e.g. {memory: 2Gi}.",
        json_schema_extra={"additionalProperties": {"x-kubernetes-int-or-string": True}},
    )


class Sandbox(Model):
    """Isolation and placement of the sandbox pod."""

    network_policy: NetworkPolicyMode = Field(
        default=NetworkPolicyMode.provider,
        description="Egress: none (nothing, not even DNS), provider (DNS and the definition's egress), "
        "allowlist (DNS and sandbox.egress) or unrestricted.",
    )
    egress: list[EgressRule] = Field(
        default_factory=list, max_length=32, description="Destinations for networkPolicy allowlist."
    )
    resources: Resources | None = Field(default=None, description="Container resources.")
    runtime_class_name: str | None = Field(
        default=None,
        max_length=253,
        description="RuntimeClass, e.g. gvisor.",
        json_schema_extra=object_name("RuntimeClass"),
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node selector, passed through.")
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, description="Tolerations.")
    image: str | None = Field(default=None, max_length=1024, description="Sandbox image override.")
