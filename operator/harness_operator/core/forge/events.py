"""A forge's webhook delivery read into one ForgeEvent, or Ignored with why (pure; bodies are untrusted)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# Untrusted text is cut to these many characters before it reaches a run's spec (a prompt holds far more).
TITLE_MAX = 256
BODY_MAX = 16384
COMMENT_MAX = 8192
NAME_MAX = 256  # repository, author, label, branch, check names
URL_MAX = 2048
LABELS_MAX = 64
NUMBER_MAX = 2**53  # JSON's exact integers
# C0 controls but tab, newline and carriage return: a NUL is refused in a run's spec, the rest is noise.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# The reporting step's own commit statuses (harness/<trigger>): a failed run's must not start another.
REPORT_CONTEXT_PREFIX = "harness/"
FAILED_CHECKS = ("failure", "timed_out")
FAILED_STATUSES = ("failure", "error")


@dataclass(frozen=True)
class ForgeEvent:
    """One delivery that may start a run, with the fields a run template may use."""

    forge: str  # github | gitea | gitlab
    kind: str  # IssueLabeled | Command | ReviewComment | CheckFailed (a Command's comment is still raw)
    repository: str  # owner/name
    number: int  # the issue's or pull request's number
    is_pull_request: bool
    title: str
    body: str
    comment: str  # the comment's text, whole (triggering cuts the command off)
    author: str
    association: str | None  # GitHub's author_association
    label: str | None
    head_branch: str | None
    head_sha: str | None
    check: str | None
    url: str  # the issue's or pull request's web URL
    delivery_key: str  # sha256 hex of the body
    # The labels the event may have added: GitHub names the one; Gitea sends all the issue's labels.
    labels: tuple[str, ...] = ()
    author_id: int | None = None  # GitLab's user id (its group membership API takes ids, not names)


@dataclass(frozen=True)
class Ignored:
    """A delivery that starts nothing, and why, in one sentence."""

    reason: str


def delivery_key(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def _header(headers: Mapping[str, str], name: str) -> str:
    wanted = name.lower()
    return next((str(v) for k, v in headers.items() if k.lower() == wanted), "")


def _words(event: str, action: str) -> str:
    """The event and action for a reason: cut, printable, 'delivery' when neither is given."""
    text = " ".join(w for w in (_CONTROL.sub("", event)[:64], action) if w)
    return text or "delivery"


def _obj(node: Any, *keys: str) -> dict[str, Any]:
    """The object at `keys` under `node`, or {} when any step is missing or not an object."""
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _text(node: Any, key: str, limit: int = NAME_MAX) -> str:
    """The string at `key`, control characters dropped and cut to `limit`; '' when it is not a string."""
    value = node.get(key) if isinstance(node, dict) else None
    return _CONTROL.sub("", value)[:limit] if isinstance(value, str) else ""


def _number(node: Any, key: str) -> int:
    """A positive integer at `key`, else 0."""
    value = node.get(key) if isinstance(node, dict) else None
    return value if type(value) is int and 0 < value < NUMBER_MAX else 0


def _names(items: Any, key: str) -> tuple[str, ...]:
    """The `key` of each object in a list (labels' names), at most LABELS_MAX."""
    if not isinstance(items, list):
        return ()
    return tuple(n for item in items[:LABELS_MAX] if (n := _text(item, key)))


@dataclass(frozen=True)
class _Thread:
    """The issue or pull request an event is about, read from a forge's object for it."""

    number: int
    title: str
    body: str
    url: str
    is_pull_request: bool
    head_branch: str | None = None
    head_sha: str | None = None


def _event(
    forge: str,
    kind: str,
    repository: str,
    thread: _Thread,
    body: bytes,
    *,
    author: str,
    comment: str = "",
    association: str | None = None,
    labels: tuple[str, ...] = (),
    check: str | None = None,
    author_id: int = 0,
) -> ForgeEvent | Ignored:
    if not repository:
        return Ignored("the delivery names no repository")
    if not thread.number and kind != "CheckFailed":
        return Ignored("the delivery names no issue or pull request number")
    return ForgeEvent(
        forge=forge,
        kind=kind,
        repository=repository,
        number=thread.number,
        is_pull_request=thread.is_pull_request,
        title=thread.title,
        body=thread.body,
        comment=comment,
        author=author,
        association=association or None,
        label=labels[0] if labels else None,
        head_branch=thread.head_branch or None,
        head_sha=thread.head_sha or None,
        check=check or None,
        url=thread.url,
        delivery_key=delivery_key(body),
        labels=labels,
        author_id=author_id or None,
    )


# --- GitHub ---------------------------------------------------------------------------------------


def _github_thread(node: dict[str, Any], is_pull_request: bool) -> _Thread:
    """An issue or a pull_request object of GitHub's (an issue object with `pull_request` is a PR)."""
    head = _obj(node, "head")
    return _Thread(
        number=_number(node, "number"),
        title=_text(node, "title", TITLE_MAX),
        body=_text(node, "body", BODY_MAX),
        url=_text(node, "html_url", URL_MAX),
        is_pull_request=is_pull_request or bool(_obj(node, "pull_request")),
        head_branch=_text(head, "ref") or None,
        head_sha=_text(head, "sha") or None,
    )


# GitHub's comment events: (event, action) -> the ForgeEvent's kind, the payload's key of the thread (and
# whether it is a pull request), the payload's key of the comment (a review is one).
_GITHUB_COMMENTS = {
    ("issue_comment", "created"): ("Command", "issue", False, "comment"),
    ("pull_request_review_comment", "created"): ("ReviewComment", "pull_request", True, "comment"),
    ("pull_request_review", "submitted"): ("ReviewComment", "pull_request", True, "review"),
}


def _github(event: str, payload: dict[str, Any], body: bytes) -> ForgeEvent | Ignored:
    repository = _text(_obj(payload, "repository"), "full_name")
    action = _text(payload, "action")
    sender = _text(_obj(payload, "sender"), "login")
    if event == "issues" and action == "labeled":
        # GitHub sends `labeled` for every label an issue is opened with too, so `opened` is not read:
        # one run per label given. The labeller's association is not in the payload: users only.
        thread = _github_thread(_obj(payload, "issue"), False)
        if thread.is_pull_request:
            return Ignored("a pull request's label is not a trigger event")
        labels = tuple(n for n in [_text(_obj(payload, "label"), "name")] if n)
        return _event("github", "IssueLabeled", repository, thread, body, author=sender, labels=labels)
    if (event, action) in _GITHUB_COMMENTS:
        kind, thread_key, is_pull_request, comment_key = _GITHUB_COMMENTS[event, action]
        comment = _obj(payload, comment_key)
        text = _text(comment, "body", COMMENT_MAX)
        if comment_key == "review" and (_text(comment, "state").lower() == "approved" or not text.strip()):
            return Ignored("a review that approves or says nothing is not a trigger event")
        return _event(
            "github",
            kind,
            repository,
            _github_thread(_obj(payload, thread_key), is_pull_request),
            body,
            author=_text(_obj(comment, "user"), "login"),
            comment=text,
            association=_text(comment, "author_association"),
        )
    if event == "check_run" and action == "completed":
        run = _obj(payload, "check_run")
        if _text(run, "conclusion") not in FAILED_CHECKS:
            return Ignored("a check that did not fail is not a trigger event")
        pulls = run.get("pull_requests")
        first = _obj(pulls[0]) if isinstance(pulls, list) and pulls else {}
        head = _obj(first, "head")
        thread = _Thread(
            number=_number(first, "number"),
            title="",
            body="",
            url=_text(run, "html_url", URL_MAX),
            is_pull_request=True,
            head_branch=_text(head, "ref") or None,
            head_sha=_text(run, "head_sha") or _text(head, "sha") or None,
        )
        return _event(
            "github", "CheckFailed", repository, thread, body, author=sender, check=_text(run, "name")
        )
    if event == "status":
        return _status("github", payload, repository, sender, body)
    return Ignored(f"github {_words(event, action)} is not a trigger event")


def _status(
    forge: str, payload: dict[str, Any], repository: str, sender: str, body: bytes
) -> ForgeEvent | Ignored:
    """A commit status (GitHub's and Gitea's share the shape): failed ones only. It names no pull request:
    the number is 0 and triggering finds the pull request whose run pushed that commit."""
    if _text(payload, "state") not in FAILED_STATUSES:
        return Ignored("a commit status that did not fail is not a trigger event")
    sha = _text(payload, "sha")
    if not sha:
        return Ignored("the commit status names no commit")
    thread = _Thread(0, "", "", _text(payload, "target_url", URL_MAX), True, None, sha)
    context = _text(payload, "context")
    if context.startswith(REPORT_CONTEXT_PREFIX):
        return Ignored("a harness report's own commit status starts nothing")
    return _event(forge, "CheckFailed", repository, thread, body, author=sender, check=context)


# --- Gitea ----------------------------------------------------------------------------------------


def _gitea_pull(payload: dict[str, Any]) -> _Thread:
    pull = _obj(payload, "pull_request")
    head = _obj(pull, "head")
    return _Thread(
        number=_number(pull, "number") or _number(payload, "number"),
        title=_text(pull, "title", TITLE_MAX),
        body=_text(pull, "body", BODY_MAX),
        url=_text(pull, "html_url", URL_MAX),
        is_pull_request=True,
        head_branch=_text(head, "ref") or None,
        head_sha=_text(head, "sha") or None,
    )


def _gitea(event: str, event_type: str, payload: dict[str, Any], body: bytes) -> ForgeEvent | Ignored:
    repository = _text(_obj(payload, "repository"), "full_name")
    action = _text(payload, "action")
    sender = _text(_obj(payload, "sender"), "login")
    if event_type == "issue_label" and action == "label_updated":
        # Gitea sends this for the labels an issue is opened with too, so `opened` is not read. Its payload
        # names the issue's labels, not the one added: every label counts.
        issue = _obj(payload, "issue")
        thread = _github_thread(issue, False)
        labels = _names(issue.get("labels"), "name")
        return _event("gitea", "IssueLabeled", repository, thread, body, author=sender, labels=labels)
    if event_type in ("issue_comment", "pull_request_comment") and action == "created":
        comment = _obj(payload, "comment")
        issue = _obj(payload, "issue")
        is_pull = payload.get("is_pull") is True or event_type == "pull_request_comment"
        thread = _github_thread(issue, is_pull)
        if is_pull and _obj(payload, "pull_request"):
            pull = _gitea_pull(payload)
            thread = _Thread(
                thread.number, thread.title, thread.body, thread.url, True, pull.head_branch, pull.head_sha
            )
        return _event(
            "gitea",
            "Command",
            repository,
            thread,
            body,
            author=_text(_obj(comment, "user"), "login"),
            comment=_text(comment, "body", COMMENT_MAX),
        )
    if event_type in ("pull_request_review_comment", "pull_request_review_rejected"):
        text = _text(_obj(payload, "review"), "content", COMMENT_MAX)
        if not text.strip():
            return Ignored(
                "a review without text is not a trigger event (Gitea's delivery carries no line comments)"
            )
        return _event(
            "gitea", "ReviewComment", repository, _gitea_pull(payload), body, author=sender, comment=text
        )
    if event_type == "status":
        return _status("gitea", payload, repository, sender, body)
    return Ignored(f"gitea {_words(event_type or event, action)} is not a trigger event")


# --- GitLab ---------------------------------------------------------------------------------------


def _gitlab_thread(node: dict[str, Any], is_pull_request: bool) -> _Thread:
    """An issue or merge request object of GitLab's (object_attributes, or a note's issue/merge_request)."""
    return _Thread(
        number=_number(node, "iid"),
        title=_text(node, "title", TITLE_MAX),
        body=_text(node, "description", BODY_MAX),
        url=_text(node, "url", URL_MAX),
        is_pull_request=is_pull_request,
        head_branch=_text(node, "source_branch") or None,
        head_sha=_text(_obj(node, "last_commit"), "id") or None,
    )


def _gitlab(event: str, payload: dict[str, Any], body: bytes) -> ForgeEvent | Ignored:
    repository = _text(_obj(payload, "project"), "path_with_namespace")
    user = _text(_obj(payload, "user"), "username")
    user_id = _number(_obj(payload, "user"), "id")
    attributes = _obj(payload, "object_attributes")
    if event == "Issue Hook":
        action = _text(attributes, "action")
        if action == "open":
            labels = _names(payload.get("labels"), "title")
        elif action == "update":
            change = _obj(payload, "changes", "labels")
            before = set(_names(change.get("previous"), "title"))
            labels = tuple(n for n in _names(change.get("current"), "title") if n not in before)
        else:
            return Ignored(f"gitlab Issue Hook {action} is not a trigger event")
        if not labels:
            return Ignored("the issue was given no label")
        thread = _gitlab_thread(attributes, False)
        return _event(
            "gitlab", "IssueLabeled", repository, thread, body, author=user, author_id=user_id, labels=labels
        )
    if event == "Note Hook":
        noteable = _text(attributes, "noteable_type")
        comment = _text(attributes, "note", COMMENT_MAX)
        if noteable == "Issue":
            thread = _gitlab_thread(_obj(payload, "issue"), False)
            return _event(
                "gitlab", "Command", repository, thread, body, author=user, author_id=user_id, comment=comment
            )
        if noteable == "MergeRequest":
            kind = "ReviewComment" if _text(attributes, "type") == "DiffNote" else "Command"
            thread = _gitlab_thread(_obj(payload, "merge_request"), True)
            return _event(
                "gitlab", kind, repository, thread, body, author=user, author_id=user_id, comment=comment
            )
        return Ignored(f"a note on a {noteable or 'thing'} is not a trigger event")
    if event == "Pipeline Hook":
        if _text(attributes, "status") != "failed":
            return Ignored("a pipeline that did not fail is not a trigger event")
        request = _obj(payload, "merge_request")
        thread = _Thread(
            number=_number(request, "iid"),
            title=_text(request, "title", TITLE_MAX),
            body="",
            url=_text(request, "url", URL_MAX) or _text(attributes, "url", URL_MAX),
            is_pull_request=True,
            head_branch=_text(request, "source_branch") or _text(attributes, "ref") or None,
            head_sha=_text(attributes, "sha") or None,
        )
        check = f"pipeline {_number(attributes, 'id')}" if _number(attributes, "id") else "pipeline"
        return _event(
            "gitlab", "CheckFailed", repository, thread, body, author=user, author_id=user_id, check=check
        )
    return Ignored(f"gitlab {_words(event, '')} is not a trigger event")


def parse_event(forge: str, headers: Mapping[str, str], body: bytes) -> ForgeEvent | Ignored:
    """The delivery as a ForgeEvent, or Ignored naming why; never raises on an odd body."""
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return Ignored("the body is not JSON")
    if not isinstance(payload, dict):
        return Ignored("the body is not a JSON object")
    readers: dict[str, Callable[[], ForgeEvent | Ignored]] = {
        "github": lambda: _github(_header(headers, "X-GitHub-Event"), payload, body),
        "gitea": lambda: _gitea(
            _header(headers, "X-Gitea-Event"),
            _header(headers, "X-Gitea-Event-Type") or _header(headers, "X-Gitea-Event"),
            payload,
            body,
        ),
        "gitlab": lambda: _gitlab(_header(headers, "X-Gitlab-Event"), payload, body),
    }
    reader = readers.get(forge)
    return reader() if reader else Ignored(f"{forge} is not a forge (github, gitea or gitlab)")
