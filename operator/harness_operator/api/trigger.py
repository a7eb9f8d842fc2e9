"""HarnessTrigger: runs and pipelines created from a forge's webhook deliveries (issues, commands, reviews,
checks)."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from harness_operator.api.common import (
    API_VERSION,
    Model,
    SecretKeySelector,
    object_name,
    rule,
    validations,
)
from harness_operator.api.run import RunTemplate
from harness_operator.api.sandbox import Forge
from harness_operator.api.schedule import ConcurrencyPolicy, PipelineTemplate

REPOSITORIES_MAX = 64
AUTHORS_MAX = 256
TEAMS_MAX = 16  # each may be one membership question to the forge per delivery
# The runs carry the trigger's name as a label value (agentharness.dev/trigger), by which the receiver
# and the reporting step find them and the reporter finds the trigger again: a label value's limit.
TRIGGER_NAME_MAX = 63

Repository = Annotated[
    str,
    Field(
        min_length=3,
        max_length=512,
        json_schema_extra=validations(
            rule(
                "self.contains('/') && !self.startsWith('/') && !self.endsWith('/')",
                "spec.repositories[]: must be owner/name, e.g. acme/payments",
            )
        ),
    ),
]
User = Annotated[str, Field(min_length=1, max_length=128)]
Team = Annotated[
    str,
    Field(
        min_length=2,
        max_length=256,
        json_schema_extra=validations(
            rule(
                "!self.startsWith('/') && !self.endsWith('/') && !self.contains('//') && !self.contains(' ')",
                "spec.authors.teams[]: must be org/team (GitHub: the team's slug; Gitea: its name) or a "
                "GitLab group's full path, e.g. acme/platform",
            )
        ),
    ),
]


class TriggerEventType(StrEnum):
    IssueLabeled = "IssueLabeled"
    Command = "Command"
    ReviewComment = "ReviewComment"
    CheckFailed = "CheckFailed"


class AuthorAssociation(StrEnum):
    """GitHub's author_association of a comment's or issue's author."""

    OWNER = "OWNER"
    MEMBER = "MEMBER"
    COLLABORATOR = "COLLABORATOR"
    CONTRIBUTOR = "CONTRIBUTOR"
    FIRST_TIME_CONTRIBUTOR = "FIRST_TIME_CONTRIBUTOR"
    FIRST_TIMER = "FIRST_TIMER"
    MANNEQUIN = "MANNEQUIN"
    NONE = "NONE"


class TriggerForge(Model):
    """The forge that sends the deliveries, the Secret that signs them, the token the reports use."""

    type: Forge = Field(description="github, gitea or gitlab: how deliveries are verified and read.")
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="The forge's web root, e.g. https://github.com or http://gitea.example:3000.",
        json_schema_extra=validations(
            rule("self.startsWith('https://') || self.startsWith('http://')", "must be an http(s) URL")
        ),
    )
    api_url: str | None = Field(
        default=None,
        alias="apiURL",
        max_length=2048,
        description="The forge's API root. Default: https://api.github.com for github.com, else the url's "
        "/api/v3 (GitHub Enterprise), /api/v1 (Gitea) or /api/v4 (GitLab).",
        json_schema_extra=validations(
            rule("self.startsWith('https://') || self.startsWith('http://')", "must be an http(s) URL")
        ),
    )
    webhook_secret_ref: SecretKeySelector = Field(
        description="The webhook's secret: GitHub's and Gitea's HMAC key, GitLab's token. Only the "
        "receiver reads it."
    )
    token_secret_ref: SecretKeySelector | None = Field(
        default=None,
        description="A token that may comment on issues and pull requests and set commit statuses; only "
        "the operator's reporting step reads it, never a sandbox. Unset: nothing is reported on the forge.",
    )


class TriggerEvent(Model):
    """One kind of delivery that starts a run."""

    type: TriggerEventType = Field(
        description="IssueLabeled: an issue opened with the label or given it; Command: an issue or pull "
        "request comment that starts with the command; ReviewComment: a review or review comment on a pull "
        "request a run of this trigger opened; CheckFailed: a failed check or commit status on such a pull "
        "request."
    )
    label: str | None = Field(
        default=None, min_length=1, max_length=128, description="IssueLabeled: the label that starts a run."
    )
    command: str | None = Field(
        default=None,
        min_length=2,
        max_length=64,
        description="Command: the word a comment starts with, e.g. /agent; the rest of the comment is "
        "$(event.comment).",
        json_schema_extra=validations(
            rule(
                "self.startsWith('/') && !self.contains(' ')",
                "spec.events[].command: must start with '/' and hold no space, e.g. /agent",
            )
        ),
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "self.type != 'IssueLabeled' || has(self.label)",
                "spec.events[].label is required for type IssueLabeled: the label that starts a run",
                field_path=".label",
            ),
            rule(
                "self.type != 'Command' || has(self.command)",
                "spec.events[].command is required for type Command, e.g. command: /agent",
                field_path=".command",
            ),
            rule(
                "self.type == 'IssueLabeled' || !has(self.label)",
                "spec.events[].label belongs to type IssueLabeled only",
                field_path=".label",
            ),
            rule(
                "self.type == 'Command' || !has(self.command)",
                "spec.events[].command belongs to type Command only",
                field_path=".command",
            ),
        )
    )


class TriggerAuthors(Model):
    """Who may start a run: the delivery's author must be listed by name, (GitHub) association or team."""

    users: list[User] = Field(
        default_factory=list,
        max_length=AUTHORS_MAX,
        description="Forge user names (logins) allowed to trigger, compared case-insensitively.",
    )
    associations: list[AuthorAssociation] = Field(
        default_factory=list,
        max_length=8,
        description="GitHub only: author associations allowed to trigger, e.g. OWNER, MEMBER, COLLABORATOR.",
    )
    teams: list[Team] = Field(
        default_factory=list,
        max_length=TEAMS_MAX,
        description="Teams whose members may trigger: org/team on GitHub (the team's slug) and Gitea (its "
        "name), a group's full path on GitLab (its members, inherited ones too). The receiver asks the "
        "forge at delivery time, with spec.forge.tokenSecretRef's token (GitHub read:org, Gitea "
        "read:organization and its user a member of the org, GitLab read_api), only when users and "
        "associations do not already allow the author; answers are kept a minute; a forge that does not "
        "answer, or refuses the token, starts nothing.",
    )


class TriggerReport(Model):
    """What the reporting step writes on the forge (with forge.tokenSecretRef)."""

    comment: bool = Field(
        default=True, description="One comment on the issue or pull request, edited as the run goes."
    )
    commit_status: bool = Field(
        default=True, description="A commit status on the pull request's head, context harness/<trigger>."
    )


class HarnessTriggerSpec(Model):
    """Which forge deliveries start which run or pipeline, whose deliveries count, and how the runs of one
    thread overlap."""

    forge: TriggerForge = Field(description="The forge, its webhook secret and its reporting token.")
    repositories: list[Repository] = Field(
        min_length=1,
        max_length=REPOSITORIES_MAX,
        description="owner/name of each repository whose deliveries count (GitLab: the project path); "
        "deliveries from other repositories are ignored.",
    )
    service_account_name: str = Field(
        min_length=1,
        max_length=253,
        description="Runs are created as this ServiceAccount of the namespace, so admission judges them as "
        "any run it creates; the receiver must be granted to impersonate it.",
        json_schema_extra=object_name("ServiceAccount"),
    )
    events: list[TriggerEvent] = Field(
        min_length=1, max_length=16, description="The deliveries that start a run; at least one."
    )
    authors: TriggerAuthors = Field(
        description="Who may trigger; anyone else's delivery starts nothing (refused)."
    )
    concurrency_policy: ConcurrencyPolicy = Field(
        default=ConcurrencyPolicy.Forbid,
        description="Per issue or pull request: Forbid (default): a delivery starts nothing while a run (or "
        "pipeline) of the thread is unfinished; Replace: those are deleted first; Allow: they may overlap.",
    )
    report: TriggerReport = Field(
        default_factory=TriggerReport, description="What is written on the forge while a run works."
    )
    run_template: RunTemplate | None = Field(
        default=None,
        description="The run each delivery creates; $(event.repository), $(event.number), $(event.title), "
        "$(event.body), $(event.comment), $(event.author), $(event.headBranch), $(event.check) and "
        "$(event.url) in its spec's strings are replaced, once. With pipelineTemplate: the follow-up run a "
        "comment, review or failed check on a pull request a pipeline's run opened creates.",
    )
    pipeline_template: PipelineTemplate | None = Field(
        default=None,
        description="The HarnessPipeline an issue's delivery creates (its spec's strings get the same "
        "$(event.NAME) parameters), created as serviceAccountName, which must then be allowed to "
        "impersonate the pipeline's spec.serviceAccountName unless it is the same account. Its runs "
        "carry the trigger's labels, so each is reported on the issue; a pull request one of them opens "
        "is followed up by runTemplate's run.",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "has(self.runTemplate) || has(self.pipelineTemplate)",
                "set spec.runTemplate (the run a delivery creates), spec.pipelineTemplate (the pipeline an "
                "issue's delivery creates), or both",
            ),
            rule(
                "has(self.runTemplate) || "
                "self.events.all(e, e.type == 'IssueLabeled' || e.type == 'Command')",
                "spec.events: ReviewComment and CheckFailed follow up on a pull request with a run, and "
                "spec.pipelineTemplate makes pipelines only: set spec.runTemplate, the run that answers on "
                "the pull request",
                field_path=".events",
            ),
            rule(
                "self.forge.type == 'github' || !has(self.authors.associations) || "
                "size(self.authors.associations) == 0",
                "spec.authors.associations: only GitHub's deliveries carry an author association; with "
                "gitea or gitlab list the allowed users in spec.authors.users",
                field_path=".authors.associations",
            ),
            rule(
                "self.forge.type == 'gitlab' || !has(self.authors.teams) || "
                "self.authors.teams.all(t, t.matches('^[^/]+/[^/]+$'))",
                "spec.authors.teams: on github and gitea a team is org/team (GitHub: the team's slug), e.g. "
                "acme/platform",
                field_path=".authors.teams",
            ),
            rule(
                "!has(self.authors.teams) || size(self.authors.teams) == 0 || has(self.forge.tokenSecretRef)",
                "spec.authors.teams needs spec.forge.tokenSecretRef: the token the receiver asks the forge "
                "for team membership with (GitHub read:org, Gitea read:organization, GitLab read_api)",
                field_path=".authors.teams",
            ),
        )
    )


class TriggerDelivery(Model):
    """What the receiver did with a delivery."""

    time: str | None = Field(default=None, description="When it arrived.")
    event: str | None = Field(default=None, description="The forge's event name, e.g. issue_comment.")
    result: str | None = Field(
        default=None, description="created, duplicate, skipped, ignored, refused, bad_signature or error."
    )
    reason: str | None = Field(default=None, description="Why, in one sentence.")
    run: str | None = Field(default=None, description="The run it created, if any.")


class HarnessTriggerStatus(Model):
    """What the trigger's last verified delivery did (written by the trigger receiver)."""

    last_delivery: TriggerDelivery | None = Field(default=None, description="The last delivery.")


class HarnessTrigger(Model):
    """Runs started by forge events, as the trigger's ServiceAccount, reported back on the forge."""

    api_version: str = Field(default=API_VERSION, description="agentharness.dev/v1alpha1")
    kind: str = Field(default="HarnessTrigger", description="HarnessTrigger")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard object metadata.")
    spec: HarnessTriggerSpec = Field(description="Which deliveries start which run.")
    status: HarnessTriggerStatus | None = Field(default=None, description="What the trigger did.")

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                f"size(self.metadata.name) <= {TRIGGER_NAME_MAX}",
                f"metadata.name: a HarnessTrigger's name is at most {TRIGGER_NAME_MAX} characters: its runs "
                "carry it as the label agentharness.dev/trigger, by which the receiver and the reporting "
                "step find them; choose a shorter name",
            ),
        )
    )
