"""What a verified forge delivery does for a HarnessTrigger: the run or pipeline it creates, or why none
(pure).

The run is the trigger's runTemplate with the event's fields substituted (a pipelineTemplate's pipeline,
for an issue's delivery, when the trigger has one); its name is fixed by the delivery's body, so a
replayed or redelivered body names the same object and its second create fails AlreadyExists. A comment,
review or failed check on a pull request that a run of the trigger opened (a pipeline's run too: it
carries the pipeline's forge context) continues the newest run of that pull request on its branch
(resumeFrom, fast-forward publish), always as a run of runTemplate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from harness_operator.api.v1alpha1 import (
    API_VERSION,
    GROUP,
    ConcurrencyPolicy,
    HarnessTrigger,
    RunTemplateMetadata,
    TriggerEventType,
)
from harness_operator.core.forge.events import ForgeEvent
from harness_operator.core.objects.conditions import FALSE, SUCCEEDED, TRUE
from harness_operator.core.objects.naming import (
    ANNOTATION_AUTHOR,
    ANNOTATION_DELIVERY,
    ANNOTATION_EVENT,
    ANNOTATION_HEAD,
    ANNOTATION_REPOSITORY,
    ANNOTATION_THREAD_KIND,
    LABEL_MANAGED_BY,
    LABEL_THREAD,
    LABEL_TRIGGER,
    LABEL_USER,
    MANAGED_BY,
    encode_user_label,
    label_value,
    service_account_user,
)

LABEL_PULL_REQUEST = f"{GROUP}/pull-request"
ANNOTATION_COMMENT_ID = f"{GROUP}/forge-comment-id"
RUN = "HarnessRun"
PIPELINE = "HarnessPipeline"
THREAD_ISSUE = "issue"
THREAD_PULL = "pull"
TRIGGER_NAME_CUT = 30

CREATED = "created"
DUPLICATE = "duplicate"
SKIPPED = "skipped"
IGNORED = "ignored"
REFUSED = "refused"
UNCHECKED = "error"  # the author's teams could not be asked: nothing starts (fail closed)

_PARAMETER = re.compile(r"\$\(event\.([A-Za-z]+)\)")


@dataclass(frozen=True)
class TriggerRun:
    """A run or pipeline of the trigger (labelled agentharness.dev/trigger=<name>), as the receiver lists
    it."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    creation_timestamp: str
    finished: bool
    branch: str | None  # status.changes.branch: the branch it pushed
    succeeded: bool = False
    commit: str | None = None  # status.changes.commit: the commit it pushed
    kind: str = RUN
    pipeline: str | None = None  # a run's: the pipeline that owns it


@dataclass(frozen=True)
class TriggerDecision:
    """What the receiver does: create `create` after deleting `delete` ((kind, name) each), or nothing,
    and why."""

    result: str  # created | duplicate | skipped | ignored | refused | error (teams not asked)
    reason: str  # one sentence for the Event and the HTTP answer; never echoes the delivery's text
    create: dict[str, Any] | None = None
    delete: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class TeamAnswer:
    """What the forge said of the author and the teams find_teams_to_ask named (receiver/teams.py asks):
    the team they are in, else why it could not be told (`failed`); neither: in none of them."""

    member_of: str | None = None
    failed: str | None = None


def build_trigger_run(body: Mapping[str, Any], kind: str = RUN) -> TriggerRun:
    """A HarnessRun or HarnessPipeline object (as the API returns it) as decide_delivery reads it."""
    meta = body.get("metadata") or {}
    owner = next(
        (
            o.get("name")
            for o in meta.get("ownerReferences") or []
            if o.get("kind") == PIPELINE and o.get("controller")
        ),
        None,
    )
    status = body.get("status") or {}
    succeeded = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == SUCCEEDED), None
    )
    return TriggerRun(
        name=str(meta.get("name", "")),
        labels=dict(meta.get("labels") or {}),
        annotations=dict(meta.get("annotations") or {}),
        creation_timestamp=str(meta.get("creationTimestamp") or ""),
        finished=succeeded in (TRUE, FALSE),
        branch=(status.get("changes") or {}).get("branch"),
        succeeded=succeeded == TRUE,
        commit=(status.get("changes") or {}).get("commit"),
        kind=kind,
        pipeline=str(owner) if owner and kind == RUN else None,
    )


def compute_trigger_accounts(trigger: HarnessTrigger) -> set[str]:
    """The users a run of the trigger is created as: its ServiceAccount (the receiver's runs and
    pipelines) and its pipelines' (their runs)."""
    namespace = str(trigger.metadata.get("namespace", ""))
    accounts = {trigger.spec.service_account_name}
    if trigger.spec.pipeline_template is not None:
        accounts.add(trigger.spec.pipeline_template.spec.service_account_name)
    return {service_account_user(namespace, a) for a in accounts}


def find_foreign_reason(trigger: HarnessTrigger, annotations: Mapping[str, str]) -> str | None:
    """Why an object labelled as the trigger's was not made by it, else None. The label is anyone's to
    set, so what counts is agentharness.dev/author (the creator, which admission holds to the requester)
    and a repository the trigger lists: the trigger's token writes only there, for its own runs."""
    author = annotations.get(ANNOTATION_AUTHOR, "")
    if author not in compute_trigger_accounts(trigger):
        return (
            f"its author {author or '(none)'} is not the trigger's ServiceAccount or its pipelines', so "
            "it is not the trigger's run whatever its labels say"
        )
    repository = annotations.get(ANNOTATION_REPOSITORY, "")
    if repository.casefold() not in {r.casefold() for r in trigger.spec.repositories}:
        return f"its repository {repository or '(none)'} is not one of the trigger's spec.repositories"
    return None


def trigger_run_name(trigger: str, number: int, delivery_key: str) -> str:
    """`<trigger cut to 30>-<number>-<10 hex of the body's sha256>`: a replay names the same run (or
    pipeline)."""
    return f"{trigger[:TRIGGER_NAME_CUT].rstrip('-.')}-{number}-{delivery_key[:10]}"


def find_teams_to_ask(trigger: HarnessTrigger, event: ForgeEvent) -> tuple[str, ...]:
    """The spec.authors.teams the forge must be asked about before the delivery is decided: none when it
    is ignored anyway, when its author counts for nothing (a failed check) or is allowed by users or
    associations already, or cannot be named to the forge (GitLab's delivery without a user id)."""
    teams = trigger.spec.authors.teams
    if not teams or not event.author or isinstance(matched := _matched(trigger, event), str):
        return ()
    if matched[0] == TriggerEventType.CheckFailed or _allowed(trigger, event):
        return ()
    if trigger.spec.forge.type == "gitlab" and not event.author_id:
        return ()
    return tuple(teams)


def decide_delivery(
    trigger: HarnessTrigger,
    event: ForgeEvent,
    runs: Sequence[TriggerRun],
    teams: TeamAnswer | None = None,
) -> TriggerDecision:
    """What a verified delivery does, given the runs and pipelines of this trigger in its namespace and
    what the forge said of the teams find_teams_to_ask named: ignored (not this trigger's repository or
    event), refused (an author not allowed), error (the teams could not be asked), duplicate (its run
    exists), skipped (Forbid and the thread's run is unfinished), or created (after deleting the thread's
    runs: Replace). An issue's delivery creates a pipeline when the trigger has a pipelineTemplate; a pull
    request's is a follow-up run, from runTemplate."""
    spec, name = trigger.spec, str(trigger.metadata.get("name", ""))
    matched = _matched(trigger, event)
    if isinstance(matched, str):
        return TriggerDecision(IGNORED, matched)
    kind, comment = matched
    if kind != TriggerEventType.CheckFailed and not _allowed(trigger, event):
        refused = _refused(trigger, event, teams)
        if refused is not None:
            return refused
    ours = [
        r
        for r in runs
        if r.labels.get(LABEL_TRIGGER) == label_value(name)
        and find_foreign_reason(trigger, r.annotations) is None
    ]
    if kind == TriggerEventType.CheckFailed and not event.number:
        number = _pull_request_of_commit(ours, event)
        if number is None:
            return TriggerDecision(
                IGNORED, f"commit {event.head_sha} was not pushed by a run of trigger {name}"
            )
        event = replace(event, number=number)
    previous = None
    if event.is_pull_request:
        opened = [r for r in _runs_of_pull_request(ours, event) if r.kind == RUN]
        if not opened:
            return TriggerDecision(
                IGNORED, f"pull request #{event.number} was not opened by a run of trigger {name}"
            )
        previous = max(opened, key=lambda r: (r.succeeded, r.creation_timestamp, r.name))
        if not (previous.branch or event.head_branch):
            return TriggerDecision(
                IGNORED,
                f"the branch of pull request #{event.number} is unknown: run {previous.name} reported none",
            )
        if kind == TriggerEventType.CheckFailed:
            why = _check_not_followed(previous, event)
            if why:
                return TriggerDecision(IGNORED, why)
        if spec.run_template is None:
            return TriggerDecision(
                IGNORED,
                f"trigger {name} makes pipelines from issues, and a follow-up on pull request "
                f"#{event.number} is a run: set spec.runTemplate, the run that answers on it",
            )
    pipeline = not event.is_pull_request and spec.pipeline_template is not None
    what = "pipeline" if pipeline else "run"
    run_name = trigger_run_name(name, event.number, event.delivery_key)
    taken = next((r for r in runs if r.name == run_name and r.kind == (PIPELINE if pipeline else RUN)), None)
    if taken is not None:
        return TriggerDecision(DUPLICATE, f"{what} {run_name} exists: this delivery was received before")
    active = _unfinished_of_thread(ours, event)
    if active and spec.concurrency_policy == ConcurrencyPolicy.Forbid:
        first = active[0]
        return TriggerDecision(
            SKIPPED,
            f"{'pipeline' if first.kind == PIPELINE else 'run'} {first.name} of {_thread(event)} is "
            "unfinished and spec.concurrencyPolicy is Forbid",
        )
    replaced = spec.concurrency_policy == ConcurrencyPolicy.Replace
    delete = tuple((r.kind, r.name) for r in active) if replaced else ()
    if pipeline:
        made = build_trigger_pipeline_manifest(trigger, event, kind, comment, run_name)
    else:
        made = build_trigger_run_manifest(trigger, event, kind, comment, run_name, previous)
    return TriggerDecision(CREATED, f"created {what} {run_name} for {_thread(event)}", made, delete)


def _matched(trigger: HarnessTrigger, event: ForgeEvent) -> tuple[TriggerEventType, str] | str:
    """The spec's event type the delivery is, with $(event.comment), or why it is none of this trigger's."""
    if event.repository.casefold() not in {r.casefold() for r in trigger.spec.repositories}:
        return f"repository {event.repository} is not in spec.repositories"
    return _match(trigger, event)


def _refused(trigger: HarnessTrigger, event: ForgeEvent, teams: TeamAnswer | None) -> TriggerDecision | None:
    """Why an author that users and associations do not allow starts nothing; None: a team allows them."""
    who = event.author or "an unknown author"
    if teams is not None and teams.member_of:
        return None
    if teams is not None and teams.failed:
        return TriggerDecision(
            UNCHECKED,
            f"whether {who} is in spec.authors.teams could not be asked of the forge ({teams.failed}): "
            "nothing started; redeliver once the forge answers",
        )
    # GitHub answers 404 for a team the token cannot see: that too is "not in it" (closed).
    asked = " nor in a team of spec.authors.teams (as the forge shows them to the token)" if teams else ""
    if not asked and trigger.spec.authors.teams and trigger.spec.forge.type == "gitlab":
        asked = " (the delivery names no user id, so spec.authors.teams could not be asked)"
    return TriggerDecision(REFUSED, f"{who} is not allowed by spec.authors to trigger runs{asked}")


def _check_not_followed(previous: TriggerRun, event: ForgeEvent) -> str | None:
    """Why a failed check starts no follow-up: it ran on an older commit than the run's, or the run was
    itself a failed check's follow-up (one fix per failure in a row: a person's comment starts the next)."""
    if previous.commit and event.head_sha and previous.commit != event.head_sha:
        return f"the check ran on {event.head_sha}, not on the head run {previous.name} pushed"
    if previous.annotations.get(ANNOTATION_EVENT) == TriggerEventType.CheckFailed:
        return f"run {previous.name} answered a failed check already; a comment starts the next follow-up"
    return None


def _pull_request_of_commit(runs: Sequence[TriggerRun], event: ForgeEvent) -> int | None:
    """The pull request a run of the trigger pushed the event's commit to (a commit status names none)."""
    for run in sorted(runs, key=lambda r: (r.creation_timestamp, r.name), reverse=True):
        number = run.labels.get(LABEL_PULL_REQUEST, "")
        pushed = event.head_sha and run.commit == event.head_sha
        if number.isdigit() and _same_repository(run, event) and pushed:
            return int(number)
    return None


def _thread(event: ForgeEvent) -> str:
    return f"{'pull request' if event.is_pull_request else 'issue'} #{event.number} of {event.repository}"


def _match(trigger: HarnessTrigger, event: ForgeEvent) -> tuple[TriggerEventType, str] | str:
    """(the spec's event type it is, $(event.comment)), or why the delivery is not one of spec.events."""
    wanted = {e.type: e for e in trigger.spec.events}
    if event.kind == TriggerEventType.IssueLabeled:
        wanted_labels = {e.label.casefold() for e in trigger.spec.events if e.label}
        if not wanted_labels:
            return "spec.events has no IssueLabeled"
        given = {label.casefold() for label in (*event.labels, event.label or "")}
        if wanted_labels & given:
            return TriggerEventType.IssueLabeled, ""
        return "the issue's label is not one of spec.events' labels"
    if event.kind == TriggerEventType.CheckFailed:
        if TriggerEventType.CheckFailed in wanted:
            return TriggerEventType.CheckFailed, ""
        return "spec.events has no CheckFailed"
    commands = [e.command for e in trigger.spec.events if e.command]
    rest = next((r for c in commands if (r := _after_command(event.comment, c)) is not None), None)
    if event.kind == TriggerEventType.ReviewComment and TriggerEventType.ReviewComment in wanted:
        return TriggerEventType.ReviewComment, event.comment if rest is None else rest
    if event.kind in (TriggerEventType.Command, TriggerEventType.ReviewComment) and rest is not None:
        return TriggerEventType.Command, rest
    if event.kind in (TriggerEventType.Command, TriggerEventType.ReviewComment):
        return "the comment does not start with a command of spec.events"
    return f"{event.kind} is not a trigger event"


def _after_command(comment: str, command: str) -> str | None:
    """The comment after `command` when the comment starts with it as a word, else None."""
    text = comment.lstrip()
    if not text.startswith(command):
        return None
    rest = text[len(command) :]
    if rest and not rest[0].isspace():
        return None  # /agentx is not /agent
    return rest.strip()


def _allowed(trigger: HarnessTrigger, event: ForgeEvent) -> bool:
    authors = trigger.spec.authors
    if event.author and event.author.casefold() in {u.casefold() for u in authors.users}:
        return True
    return (
        trigger.spec.forge.type == "github"
        and event.association is not None
        and event.association in set(authors.associations)
    )


def _same_repository(run: TriggerRun, event: ForgeEvent) -> bool:
    return run.annotations.get(ANNOTATION_REPOSITORY, "").casefold() == event.repository.casefold()


def _runs_of_pull_request(runs: Sequence[TriggerRun], event: ForgeEvent) -> list[TriggerRun]:
    """The runs that opened or continued this pull request."""
    return [
        r
        for r in runs
        if r.labels.get(LABEL_PULL_REQUEST) == str(event.number) and _same_repository(r, event)
    ]


def _unfinished_of_thread(ours: Sequence[TriggerRun], event: ForgeEvent) -> list[TriggerRun]:
    """The thread's unfinished runs and pipelines; a pipeline's run counts as its pipeline (Replace deletes
    the pipeline, whose runs go with it)."""
    thread = _runs_of_thread(ours, event)
    owners = {r.pipeline for r in thread if r.pipeline}
    return [
        r
        for r in ours
        if not r.finished and ((r in thread and not r.pipeline) or (r.kind == PIPELINE and r.name in owners))
    ]


def _runs_of_thread(runs: Sequence[TriggerRun], event: ForgeEvent) -> list[TriggerRun]:
    """The runs of this issue or pull request (a pull request's include the run that opened it)."""
    kind = THREAD_PULL if event.is_pull_request else THREAD_ISSUE
    thread = [
        r
        for r in runs
        if r.labels.get(LABEL_THREAD) == str(event.number)
        and r.annotations.get(ANNOTATION_THREAD_KIND) == kind
        and _same_repository(r, event)
    ]
    opened = _runs_of_pull_request(runs, event) if event.is_pull_request else []
    return thread + [r for r in opened if r not in thread]


EVENT_PARAMETERS = (
    "repository",
    "number",
    "title",
    "body",
    "comment",
    "author",
    "headBranch",
    "check",
    "url",
)


def find_unknown_parameters(value: Any, path: str) -> list[tuple[str, str]]:
    """(field, $(event.NAME)) for each NAME in `value`'s strings that no delivery replaces: it would reach
    the run as written (a typo of a parameter's name, say)."""
    if isinstance(value, str):
        return [(path, m.group(0)) for m in _PARAMETER.finditer(value) if m.group(1) not in EVENT_PARAMETERS]
    if isinstance(value, dict):
        return [found for k, v in value.items() for found in find_unknown_parameters(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [found for i, v in enumerate(value) for found in find_unknown_parameters(v, f"{path}[{i}]")]
    return []


def build_event_parameters(event: ForgeEvent, comment: str) -> dict[str, str]:
    """The values of $(event.NAME), as the template may use them."""
    return {
        "repository": event.repository,
        "number": str(event.number),
        "title": event.title,
        "body": event.body,
        "comment": comment,
        "author": event.author,
        "headBranch": event.head_branch or "",
        "check": event.check or "",
        "url": event.url,
    }


def substitute(value: Any, parameters: Mapping[str, str]) -> Any:
    """`value` with $(event.NAME) replaced in every string, in one pass: a replacement is never read
    again, so a body holding "$(event.title)" stays literal; an unknown NAME stays as written."""
    if isinstance(value, str):
        return _PARAMETER.sub(lambda m: parameters.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {k: substitute(v, parameters) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, parameters) for v in value]
    return value


def build_trigger_run_manifest(
    trigger: HarnessTrigger,
    event: ForgeEvent,
    kind: TriggerEventType,
    comment: str,
    run_name: str,
    previous: TriggerRun | None,
) -> dict[str, Any]:
    """The HarnessRun a delivery creates: the template's spec with the event's parameters, its labels and
    annotations with ours last; a follow-up (`previous` set) resumes `previous` on its branch."""
    template = trigger.spec.run_template
    assert template is not None  # decide_delivery makes a run only from a trigger with one
    spec = substitute(template.spec.to_api(), build_event_parameters(event, comment))
    labels, annotations = _forge_metadata(trigger, event, kind, template.metadata)
    # The run's author is the trigger's ServiceAccount (the receiver creates it so); admission checks it.
    user = encode_user_label(
        f"system:serviceaccount:{trigger.metadata['namespace']}:{trigger.spec.service_account_name}"
    )
    if user:
        labels[LABEL_USER] = user
    if previous is not None:
        labels[LABEL_PULL_REQUEST] = str(event.number)
        spec = _follow_up(spec, previous, event)
    return _manifest(RUN, trigger, run_name, labels, annotations, spec)


def build_trigger_pipeline_manifest(
    trigger: HarnessTrigger, event: ForgeEvent, kind: TriggerEventType, comment: str, name: str
) -> dict[str, Any]:
    """The HarnessPipeline an issue's delivery creates: the pipelineTemplate's spec with the event's
    parameters (a step's $(steps...) and $(matrix...) stay for the pipeline), and the forge context its
    runs inherit."""
    template = trigger.spec.pipeline_template
    assert template is not None  # decide_delivery makes a pipeline only from a trigger with one
    spec = substitute(template.spec.to_api(), build_event_parameters(event, comment))
    labels, annotations = _forge_metadata(trigger, event, kind, template.metadata)
    return _manifest(PIPELINE, trigger, name, labels, annotations, spec)


def _forge_metadata(
    trigger: HarnessTrigger, event: ForgeEvent, kind: TriggerEventType, template: RunTemplateMetadata | None
) -> tuple[dict[str, str], dict[str, str]]:
    """The template's labels and annotations with the delivery's forge context last (the template can
    set none of it, nor the author label)."""
    labels = dict(template.labels if template else {})
    annotations = dict(template.annotations if template else {})
    for key in (LABEL_USER, ANNOTATION_COMMENT_ID, LABEL_PULL_REQUEST, ANNOTATION_HEAD):
        labels.pop(key, None)
        annotations.pop(key, None)
    labels.update(
        {
            LABEL_TRIGGER: label_value(trigger.metadata["name"]),
            LABEL_THREAD: str(event.number),
            LABEL_MANAGED_BY: MANAGED_BY,
        }
    )
    annotations.update(
        {
            ANNOTATION_REPOSITORY: event.repository,
            ANNOTATION_THREAD_KIND: THREAD_PULL if event.is_pull_request else THREAD_ISSUE,
            ANNOTATION_DELIVERY: event.delivery_key,
            ANNOTATION_EVENT: str(kind),
        }
    )
    if event.head_sha:
        annotations[ANNOTATION_HEAD] = event.head_sha
    return labels, annotations


def _manifest(
    kind: str,
    trigger: HarnessTrigger,
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
    spec: dict[str, Any],
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": trigger.metadata["namespace"],
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def _follow_up(spec: dict[str, Any], previous: TriggerRun, event: ForgeEvent) -> dict[str, Any]:
    """The spec continuing `previous`: its conversation, from its branch's head, onto the same branch
    fast-forward only (the publisher refuses the push if the branch moved since the clone); a template's
    workspace.from is dropped, as FastForward requires."""
    branch = previous.branch or event.head_branch
    spec = {**spec, "resumeFrom": {"run": previous.name}}
    workspace = dict(spec.get("workspace") or {})
    workspace.pop("from", None)  # the earlier change is on the branch already
    if "git" in workspace:
        workspace["git"] = {**workspace["git"], "ref": branch}
    if "publish" in workspace:
        publish = dict(workspace["publish"])
        publish["branch"] = {**(publish.get("branch") or {}), "name": branch, "ifExists": "FastForward"}
        workspace["publish"] = publish
    if workspace:
        spec["workspace"] = workspace
    return spec
