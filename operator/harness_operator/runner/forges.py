"""The pull request call of each forge's REST API: the request to send and what its answer says (pure).

GitHub: POST {api}/repos/{owner}/{repo}/pulls, `Authorization: Bearer`, answer `html_url`.
Gitea:  POST {api}/repos/{owner}/{repo}/pulls, `Authorization: token`, answer `html_url`.
GitLab: POST {api}/projects/{url-encoded path}/merge_requests, `PRIVATE-TOKEN`, answer `web_url`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from harness_operator.api.v1alpha1 import Forge
from harness_operator.contract.changes import PullRequestPlan

ANSWER_CHARS = 300


@dataclass(frozen=True)
class ForgeRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes


def build_pull_request(plan: PullRequestPlan, head: str, base: str, token: str) -> ForgeRequest:
    """The request that opens the pull request from branch `head` into `base`."""
    api = plan.api_url.rstrip("/")
    headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "harness"}
    payload: dict[str, Any]
    if plan.forge == Forge.gitlab:
        url = f"{api}/projects/{quote(plan.repository, safe='')}/merge_requests"
        headers["PRIVATE-TOKEN"] = token
        title = f"Draft: {plan.title}" if plan.draft else plan.title
        payload = {"source_branch": head, "target_branch": base, "title": title, "description": plan.body}
    else:
        url = f"{api}/repos/{plan.repository}/pulls"
        payload = {"title": plan.title, "head": head, "base": base, "body": plan.body}
        if plan.forge == Forge.github:
            headers |= {
                "Authorization": f"Bearer {token}",
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": "2022-11-28",
            }
            payload["draft"] = plan.draft
        else:
            headers["Authorization"] = f"token {token}"
    return ForgeRequest("POST", url, headers, json.dumps(payload).encode("utf-8"))


def read_pull_request_url(forge: str, status: int, body: bytes) -> tuple[str | None, str | None]:
    """(URL of the opened pull request, None) or (None, why it failed, in the forge's words)."""
    try:
        answer = json.loads(body or b"{}")
    except ValueError:
        answer = None
    if 200 <= status < 300 and isinstance(answer, dict):
        url = answer.get("web_url" if forge == Forge.gitlab else "html_url")
        if isinstance(url, str) and url:
            return url, None
        return None, f"HTTP {status} without a pull request URL in the answer"
    said = ""
    if isinstance(answer, dict):
        parts = [str(answer.get("message") or answer.get("error") or "")]
        for error in answer.get("errors") or []:
            parts.append(str(error.get("message") if isinstance(error, dict) else error))
        said = "; ".join(p for p in parts if p)
    return None, f"HTTP {status}: {said or body[:ANSWER_CHARS].decode('utf-8', 'replace')}"
