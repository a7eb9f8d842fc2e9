"""The pull request calls of each forge's REST API: the request to send and what its answer says (pure).

Open:  GitHub POST {api}/repos/{owner}/{repo}/pulls, Gitea the same, GitLab POST
       {api}/projects/{url-encoded path}/merge_requests; answer `html_url` (GitLab `web_url`) and
       `number` (GitLab `iid`).
Find the open one from a branch (FastForward): GitHub GET .../pulls?head={owner}:{branch}&state=open,
       GitLab GET .../merge_requests?source_branch={branch}&state=opened, Gitea GET .../pulls?state=open
       page by page (its API has no head filter) matching `head.ref`.
Credentials: GitHub `Authorization: Bearer`, Gitea `Authorization: token`, GitLab `PRIVATE-TOKEN`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from harness_operator.api.v1alpha1 import Forge
from harness_operator.contract.changes import PullRequestPlan

ANSWER_CHARS = 300
# Open pull requests asked for per page when looking for the branch's (Gitea's largest page by default).
PAGE_SIZE = 50


@dataclass(frozen=True)
class ForgeRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class PullRequestRef:
    """A pull (merge) request: its web page and its number (GitLab: the merge request's iid)."""

    url: str
    number: int | None


def _headers(forge: str, token: str) -> dict[str, str]:
    headers = {"Accept": "application/json", "User-Agent": "harness"}
    if forge == Forge.gitlab:
        headers["PRIVATE-TOKEN"] = token
    elif forge == Forge.github:
        headers |= {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
    else:
        headers["Authorization"] = f"token {token}"
    return headers


def _collection(plan: PullRequestPlan) -> str:
    api = plan.api_url.rstrip("/")
    if plan.forge == Forge.gitlab:
        return f"{api}/projects/{quote(plan.repository, safe='')}/merge_requests"
    return f"{api}/repos/{plan.repository}/pulls"


def build_pull_request(plan: PullRequestPlan, head: str, base: str, token: str) -> ForgeRequest:
    """The request that opens the pull request from branch `head` into `base`."""
    headers = _headers(plan.forge, token) | {"Content-Type": "application/json"}
    payload: dict[str, Any]
    if plan.forge == Forge.gitlab:
        title = f"Draft: {plan.title}" if plan.draft else plan.title
        payload = {"source_branch": head, "target_branch": base, "title": title, "description": plan.body}
    else:
        payload = {"title": plan.title, "head": head, "base": base, "body": plan.body}
        if plan.forge == Forge.github:
            payload["draft"] = plan.draft
    return ForgeRequest("POST", _collection(plan), headers, json.dumps(payload).encode("utf-8"))


def build_find_pull_request(plan: PullRequestPlan, head: str, token: str, page: int = 1) -> ForgeRequest:
    """The request that lists the open pull requests from branch `head` (Gitea: all open ones, `page`)."""
    query: dict[str, str | int]
    if plan.forge == Forge.gitlab:
        query = {"source_branch": head, "state": "opened", "per_page": PAGE_SIZE}
    elif plan.forge == Forge.github:
        owner = plan.repository.split("/", 1)[0]
        query = {"head": f"{owner}:{head}", "state": "open", "per_page": PAGE_SIZE}
    else:
        query = {"state": "open", "sort": "recentupdate", "limit": PAGE_SIZE, "page": page}
    url = f"{_collection(plan)}?{urlencode(query)}"
    return ForgeRequest("GET", url, _headers(plan.forge, token), b"")


def _reference(forge: str, item: dict[str, Any]) -> PullRequestRef | None:
    url = item.get("web_url" if forge == Forge.gitlab else "html_url")
    number = item.get("iid" if forge == Forge.gitlab else "number")
    if not isinstance(url, str) or not url:
        return None
    return PullRequestRef(url, number if isinstance(number, int) and not isinstance(number, bool) else None)


def _refusal(status: int, answer: Any, body: bytes) -> str:
    said = ""
    if isinstance(answer, dict):
        parts = [str(answer.get("message") or answer.get("error") or "")]
        for error in answer.get("errors") or []:
            parts.append(str(error.get("message") if isinstance(error, dict) else error))
        said = "; ".join(p for p in parts if p)
    return f"HTTP {status}: {said or body[:ANSWER_CHARS].decode('utf-8', 'replace')}"


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"{}")
    except ValueError:
        return None


def read_pull_request(forge: str, status: int, body: bytes) -> tuple[PullRequestRef | None, str | None]:
    """(the opened pull request, None) or (None, why it failed, in the forge's words)."""
    answer = _json(body)
    if 200 <= status < 300 and isinstance(answer, dict):
        found = _reference(forge, answer)
        if found is not None:
            return found, None
        return None, f"HTTP {status} without a pull request URL in the answer"
    return None, _refusal(status, answer, body)


def _is_from(plan: PullRequestPlan, head: str, item: dict[str, Any]) -> bool:
    """Whether a listed pull request is from branch `head` of the repository itself (not of a fork)."""
    if plan.forge == Forge.gitlab:
        source, target = item.get("source_project_id"), item.get("project_id")
        return item.get("source_branch") == head and (source is None or source == target)
    side = item.get("head")
    side = side if isinstance(side, dict) else {}
    repo = side.get("repo")
    name = str(repo.get("full_name") or "") if isinstance(repo, dict) else ""
    return side.get("ref") == head and name.lower() == plan.repository.lower()


def read_found_pull_request(
    plan: PullRequestPlan, head: str, status: int, body: bytes
) -> tuple[PullRequestRef | None, bool, str | None]:
    """(the open pull request from `head` or None, whether a next page may hold it, why the call
    failed or None)."""
    answer = _json(body)
    if not (200 <= status < 300 and isinstance(answer, list)):
        return None, False, _refusal(status, answer, body)
    for item in answer:
        if isinstance(item, dict) and _is_from(plan, head, item):
            found = _reference(plan.forge, item)
            if found is not None:
                return found, False, None
    return None, plan.forge == Forge.gitea and len(answer) >= PAGE_SIZE, None
