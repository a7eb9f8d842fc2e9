"""The reporting step's REST calls on each forge: where the trigger's forge answers, the requests that
find, create and edit the one comment and set a commit status, and what their answers say (pure).

GitHub: {api}/repos/{o}/{r}/issues/{n}/comments (POST, GET), /issues/comments/{id} (PATCH),
        /statuses/{sha} (POST), /commits/{sha}/status and /commits/{sha}/check-runs (GET: the checks);
        `Authorization: Bearer`.
Gitea:  the same paths under {web}/api/v1 (no check runs: Gitea Actions set commit statuses);
        `Authorization: token`.
GitLab: {api}/projects/{path}/issues|merge_requests/{iid}/notes (POST, GET), .../notes/{id} (PUT),
        /statuses/{sha} (POST, states pending|running|success|failed|canceled),
        /repository/commits/{sha}/statuses (GET: its pipelines' jobs, the latest of each name);
        `PRIVATE-TOKEN`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from harness_operator.api.v1alpha1 import Forge, HarnessTrigger
from harness_operator.core.forge.report import CommitStatus, ReportedRun

API_SUFFIX = {Forge.github: "/api/v3", Forge.gitea: "/api/v1", Forge.gitlab: "/api/v4"}
GITHUB_API = "https://api.github.com"
PAGE = 100
ANSWER_CHARS = 300
GITLAB_STATES = {"pending": "running", "success": "success", "failure": "failed", "error": "canceled"}


@dataclass(frozen=True)
class ForgeTarget:
    """Where and how a trigger's runs are reported, from its spec."""

    forge: str
    api_url: str
    comment: bool
    commit_status: bool
    token_secret: tuple[str, str] | None  # (name, key) of the reporting token's Secret


@dataclass(frozen=True)
class ForgeCall:
    """One HTTP request to the forge's API. Its headers hold the token: never logged or shown."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None

    def __repr__(self) -> str:  # the token stays out of any log line or traceback that shows a call
        return f"ForgeCall({self.method} {self.url})"


def compute_api_root(forge: str, url: str, api_url: str | None) -> str:
    """The API root: apiURL as given, else api.github.com for github.com, else the web root with the
    forge's API suffix (GitHub Enterprise /api/v3, Gitea /api/v1, GitLab /api/v4)."""
    if api_url:
        return api_url.rstrip("/")
    if forge == Forge.github and (urlsplit(url).hostname or "").lower() == "github.com":
        return GITHUB_API
    return url.rstrip("/") + API_SUFFIX[Forge(forge)]


def build_forge_target(trigger: HarnessTrigger) -> ForgeTarget:
    """The reporting side of a HarnessTrigger: its forge, API root, what it reports, and its token's
    Secret (none: nothing is reported)."""
    forge, report = trigger.spec.forge, trigger.spec.report
    ref = forge.token_secret_ref
    return ForgeTarget(
        forge=str(forge.type),
        api_url=compute_api_root(str(forge.type), forge.url, forge.api_url),
        comment=report.comment,
        commit_status=report.commit_status,
        token_secret=(ref.name, ref.key) if ref is not None else None,
    )


def build_headers(forge: str, token: str) -> dict[str, str]:
    """A call's headers: JSON, and the token in the forge's own header and scheme."""
    headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "harness"}
    if forge == Forge.gitlab:
        return headers | {"PRIVATE-TOKEN": token}
    if forge == Forge.github:
        return headers | {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
    return headers | {"Authorization": f"token {token}"}


def _repo(target: ForgeTarget, repository: str) -> str:
    """The repository's API path: /repos/owner/name, or GitLab's /projects/<url-encoded path>."""
    if target.forge == Forge.gitlab:
        return f"{target.api_url}/projects/{quote(repository, safe='')}"
    owner, _, name = repository.partition("/")
    return f"{target.api_url}/repos/{quote(owner, safe='')}/{quote(name, safe='')}"


def _thread(target: ForgeTarget, report: ReportedRun) -> str:
    """The issue's or pull request's comments collection (GitHub and Gitea: a PR is an issue too)."""
    base = _repo(target, report.repository)
    if target.forge == Forge.gitlab:
        kind = "merge_requests" if report.is_pull_request else "issues"
        return f"{base}/{kind}/{report.number}/notes"
    return f"{base}/issues/{report.number}/comments"


def build_comment_call(
    target: ForgeTarget, report: ReportedRun, body: str, token: str, comment_id: str | None
) -> ForgeCall:
    """Create the run's comment, or (its id known) edit it in place."""
    payload = json.dumps({"body": body}).encode("utf-8")
    headers = build_headers(target.forge, token)
    if comment_id is None:
        return ForgeCall("POST", _thread(target, report), headers, payload)
    if target.forge == Forge.gitlab:
        return ForgeCall("PUT", f"{_thread(target, report)}/{comment_id}", headers, payload)
    url = f"{_repo(target, report.repository)}/issues/comments/{comment_id}"
    return ForgeCall("PATCH", url, headers, payload)


def build_find_comment_call(target: ForgeTarget, report: ReportedRun, since: str, token: str) -> ForgeCall:
    """List the thread's comments made since the run was created (GitLab: the newest page), to find one
    this run already made but whose id it did not keep (the operator stopped in between)."""
    if target.forge == Forge.gitlab:
        query = {"sort": "desc", "order_by": "created_at", "per_page": PAGE}
    else:  # Gitea lists every comment since, unpaged, and ignores per_page
        query = {"since": since, "per_page": PAGE}
    return ForgeCall(
        "GET", f"{_thread(target, report)}?{urlencode(query)}", build_headers(target.forge, token), None
    )


def read_marked_comments(answer: bytes, marker: str) -> list[tuple[str, int, str | None]]:
    """The listed comments whose body starts with the run's marker: (created, id, author lowercased)."""
    try:
        listed = json.loads(answer or b"[]")
    except ValueError:
        return []
    return [
        (str(c.get("created_at") or ""), c["id"], _author(c))
        for c in (listed if isinstance(listed, list) else [])
        if isinstance(c, dict)
        and isinstance(c.get("id"), int)
        and str(c.get("body") or "").startswith(marker)
    ]


def pick_marked_comment(marked: list[tuple[str, int, str | None]], login: str) -> str | None:
    """The oldest of the marked comments made by `login` (the token's own user), or None: a comment by
    anyone else is never taken for the run's, whatever it says."""
    ours = [(created, id_) for created, id_, author in marked if author == login.lower()]
    return str(min(ours)[1]) if ours else None


def _author(comment: Mapping[str, Any]) -> str | None:
    """A comment's author: GitHub's and Gitea's user.login, GitLab's author.username."""
    who = comment.get("user") or comment.get("author")
    name = who.get("login") or who.get("username") if isinstance(who, dict) else None
    return name.lower() if isinstance(name, str) and name else None


def build_whoami_call(target: ForgeTarget, token: str) -> ForgeCall:
    """Ask who the token is: {api}/user on all three forges."""
    return ForgeCall("GET", f"{target.api_url}/user", build_headers(target.forge, token), None)


def read_login(answer: bytes) -> str | None:
    """The token's user name: GitHub's and Gitea's `login`, GitLab's `username`."""
    try:
        parsed = json.loads(answer or b"{}")
    except ValueError:
        return None
    name = (parsed.get("login") or parsed.get("username")) if isinstance(parsed, dict) else None
    return name if isinstance(name, str) and name else None


def read_comment_id(answer: bytes) -> str | None:
    """The id a created comment (or GitLab note) was given."""
    try:
        parsed = json.loads(answer or b"{}")
    except ValueError:
        return None
    found = parsed.get("id") if isinstance(parsed, dict) else None
    return str(found) if isinstance(found, int) and not isinstance(found, bool) else None


def build_status_call(target: ForgeTarget, repository: str, status: CommitStatus, token: str) -> ForgeCall:
    """Set the commit status (context harness/<trigger>) on the head."""
    url = f"{_repo(target, repository)}/statuses/{status.sha}"
    payload: dict[str, str]
    if target.forge == Forge.gitlab:
        payload = {
            "state": GITLAB_STATES[status.state],
            "name": status.context,
            "description": status.description,
        }
    else:
        payload = {"state": status.state, "context": status.context, "description": status.description}
    return ForgeCall("POST", url, build_headers(target.forge, token), json.dumps(payload).encode("utf-8"))


def build_checks_calls(target: ForgeTarget, repository: str, sha: str, token: str) -> list[ForgeCall]:
    """The reads of commit `sha`'s checks (core/forge/checks.compute_checks reads their answers): the
    latest commit status of each context, and on GitHub the latest check run of each name too (a first
    page of 100: a commit with more is counted by those)."""
    headers = build_headers(target.forge, token)
    base = _repo(target, repository)
    if target.forge == Forge.gitlab:
        return [ForgeCall("GET", f"{base}/repository/commits/{sha}/statuses?per_page={PAGE}", headers, None)]
    calls = [ForgeCall("GET", f"{base}/commits/{sha}/status?per_page={PAGE}", headers, None)]
    if target.forge == Forge.github:
        calls.append(ForgeCall("GET", f"{base}/commits/{sha}/check-runs?per_page={PAGE}", headers, None))
    return calls


def describe_failure(call: ForgeCall, status: int, answer: bytes) -> str:
    """Why a call failed, in the forge's words (bounded), for a log line and an Event: the method and the
    URL's path, never a header."""
    said = ""
    try:
        parsed = json.loads(answer or b"{}")
    except ValueError:
        parsed = None
    if isinstance(parsed, dict):
        said = str(parsed.get("message") or parsed.get("error") or "")
    said = said or answer[:ANSWER_CHARS].decode("utf-8", "replace")
    return f"{call.method} {urlsplit(call.url).path}: HTTP {status}: {said[:ANSWER_CHARS]}".strip()
