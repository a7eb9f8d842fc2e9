"""A small client of a real Gitea's REST API (tests/cluster/gitea), for tests: users, tokens, repositories,
issues, labels, comments, pull requests, files, commits, commit statuses and webhooks. Not pure: HTTP.

    gitea = Gitea.from_cluster()          # starts (and on first use builds) tests/cluster/gitea
    alice = gitea.create_user("alice")
    token = gitea.create_token(alice, ["write:repository"])
    gitea.create_repo("alice", "widgets", {"README.md": "hello\\n"})
    gitea.as_user("alice").create_issue("alice/widgets", "Fix it", labels=["agent"])

The routes and fields are Gitea v1.27's (routers/api/v1/api.go, modules/structs). The admin acts for other
users with the `Sudo` header, so a test needs no password but the admin's.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

SCRIPT = Path(__file__).resolve().parents[1] / "cluster" / "gitea"
PAGE = 50  # Gitea's default MAX_RESPONSE_ITEMS


class GiteaError(Exception):
    """Gitea answered a call with an unexpected status: the status and Gitea's message."""

    def __init__(self, method: str, path: str, status: int, body: bytes) -> None:
        try:
            said = json.loads(body).get("message") or body.decode("utf-8", "replace")
        except (ValueError, AttributeError):
            said = body.decode("utf-8", "replace")
        super().__init__(f"{method} {path}: HTTP {status}: {said}")
        self.status = status
        self.message = said


@dataclass(frozen=True)
class User:
    name: str
    password: str


def start_gitea() -> str:
    """`tests/cluster/gitea start` (build on first use, idempotent): Gitea's base URL."""
    done = subprocess.run([str(SCRIPT), "start"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tests/cluster/gitea start failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


@dataclass(frozen=True)
class Gitea:
    base_url: str
    token: str
    sudo: str | None = None

    @classmethod
    def from_cluster(cls) -> Gitea:
        """The admin's client of the Gitea tests/cluster/gitea runs (started here if it is not)."""
        url = start_gitea()
        admin = subprocess.run([str(SCRIPT), "admin"], capture_output=True, text=True, check=True)
        name, password = admin.stdout.split()
        return cls(url, "").with_admin_token(User(name, password))

    def with_admin_token(self, admin: User) -> Gitea:
        """This client with a fresh token of the admin's, made with its password (a token is only ever
        made with a password: reqBasicOrRevProxyAuth)."""
        scopes = ["write:admin", "write:repository", "write:issue", "write:user", "write:organization"]
        return replace(self, token=self.create_token(admin, scopes))

    def as_user(self, name: str) -> Gitea:
        """This (admin's) client acting as user `name`."""
        return replace(self, sudo=name)

    @property
    def api(self) -> str:
        return self.base_url.rstrip("/") + "/api/v1"

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, Any] | None = None,
        auth: str | None = None,
        raw: bool = False,
    ) -> Any:
        """One API call: its decoded JSON answer (None when empty; bytes when `raw`); any status that is
        not 2xx raises GiteaError. `auth` replaces the token's Authorization header."""
        url = self.api + path + (f"?{urlencode(query)}" if query else "")
        headers = {"Accept": "application/json", "Authorization": auth or f"token {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if self.sudo:
            headers["Sudo"] = self.sudo
        request = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                content = answer.read()
        except urllib.error.HTTPError as exc:
            raise GiteaError(method, path, exc.code, exc.read()) from None
        if raw:
            return content
        return json.loads(content) if content.strip() else None

    def pages(self, path: str, **query: Any) -> list[Any]:
        """Every item of a paged list."""
        items: list[Any] = []
        page = 1
        while True:
            chunk = self.call("GET", path, query={**query, "limit": PAGE, "page": page})
            items.extend(chunk)
            if len(chunk) < PAGE:
                return items
            page += 1

    # Users and tokens

    def create_user(self, name: str) -> User:
        """A new user (a random password, no change forced)."""
        password = secrets.token_urlsafe(18)
        body = {
            "username": name,
            "email": f"{name}@harness.invalid",
            "password": password,
            "must_change_password": False,
        }
        self.call("POST", "/admin/users", body)
        return User(name, password)

    def create_token(self, user: User, scopes: list[str], name: str | None = None) -> str:
        """A new access token of `user` with `scopes` (e.g. read:repository, write:issue), made with the
        user's password as Gitea requires; its value is shown once."""
        auth = "Basic " + base64.b64encode(f"{user.name}:{user.password}".encode()).decode()
        body = {"name": name or f"test-{secrets.token_hex(4)}", "scopes": scopes}
        return str(self.call("POST", f"/users/{user.name}/tokens", body, auth=auth)["sha1"])

    # Organizations and teams

    def create_org(self, name: str, owner: str) -> None:
        """Organization `name`, owned by user `owner` (its Owners team)."""
        self.call("POST", f"/admin/users/{owner}/orgs", {"username": name, "visibility": "public"})

    def create_team(self, org: str, name: str, visibility: str = "limited") -> int:
        """A team of `org` that may read its repositories' code and issues; its id. `visibility`: private
        (Gitea's default: seen by its members and the org's owners), limited (every org member) or public."""
        units = ["repo.code", "repo.issues", "repo.pulls"]
        body = {"name": name, "permission": "read", "units": units, "visibility": visibility}
        return int(self.call("POST", f"/orgs/{org}/teams", body)["id"])

    def add_team_member(self, team_id: int, user: str) -> None:
        self.call("PUT", f"/teams/{team_id}/members/{user}")

    # Repositories, files, commits

    def create_repo(
        self, owner: str, name: str, files: dict[str, str | bytes], *, private: bool = False
    ) -> dict[str, Any]:
        """Repository owner/name with `files` committed on its default branch, main."""
        body = {"name": name, "private": private, "default_branch": "main", "auto_init": False}
        repo = self.call("POST", f"/admin/users/{owner}/repos", body)
        operations = [
            {
                "operation": "create",
                "path": path,
                "content": base64.b64encode(data if isinstance(data, bytes) else data.encode()).decode(),
            }
            for path, data in files.items()
        ]
        self.as_user(owner).call(
            "POST",
            f"/repos/{owner}/{name}/contents",
            {"files": operations, "branch": "main", "message": "Initial files"},
        )
        return dict(repo)

    def update_file(
        self,
        repository: str,
        path: str,
        content: str,
        branch: str,
        message: str,
        new_branch: str | None = None,
    ) -> str:
        """Commit `content` to `path` on `branch` (or on `new_branch`, made from it); the new commit."""
        current = self.call("GET", f"/repos/{repository}/contents/{quote(path)}", query={"ref": branch})
        body = {
            "content": base64.b64encode(content.encode()).decode(),
            "sha": current["sha"],
            "branch": branch,
            "new_branch": new_branch or branch,
            "message": message,
        }
        return str(self.call("PUT", f"/repos/{repository}/contents/{quote(path)}", body)["commit"]["sha"])

    def clone_url(self, repository: str) -> str:
        return f"{self.base_url.rstrip('/')}/{repository}.git"

    def file(self, repository: str, ref: str, path: str) -> bytes:
        """The file's bytes at a branch, tag or commit."""
        return bytes(self.call("GET", f"/repos/{repository}/raw/{quote(path)}", query={"ref": ref}, raw=True))

    def commits(self, repository: str, branch: str) -> list[dict[str, Any]]:
        """The branch's commits, newest first (sha, commit.message, parents)."""
        return self.pages(f"/repos/{repository}/commits", sha=branch, stat="false", files="false")

    def branches(self, repository: str) -> dict[str, str]:
        """branch name -> its head commit."""
        return {b["name"]: b["commit"]["id"] for b in self.pages(f"/repos/{repository}/branches")}

    def add_collaborator(self, repository: str, user: str, permission: str = "write") -> None:
        self.call("PUT", f"/repos/{repository}/collaborators/{user}", {"permission": permission})

    # Issues, labels, comments

    def label_id(self, repository: str, name: str) -> int:
        """The repository's label `name`, made if it has none."""
        for label in self.pages(f"/repos/{repository}/labels"):
            if label["name"] == name:
                return int(label["id"])
        return int(self.call("POST", f"/repos/{repository}/labels", {"name": name, "color": "#0e8a16"})["id"])

    def create_issue(
        self, repository: str, title: str, body: str = "", labels: list[str] | None = None
    ) -> dict[str, Any]:
        ids = [self.label_id(repository, name) for name in labels or []]
        return dict(
            self.call("POST", f"/repos/{repository}/issues", {"title": title, "body": body, "labels": ids})
        )

    def add_labels(self, repository: str, number: int, labels: list[str]) -> None:
        ids = [self.label_id(repository, name) for name in labels]
        self.call("POST", f"/repos/{repository}/issues/{number}/labels", {"labels": ids})

    def comment(self, repository: str, number: int, body: str) -> dict[str, Any]:
        """A comment on issue or pull request `number`."""
        return dict(self.call("POST", f"/repos/{repository}/issues/{number}/comments", {"body": body}))

    def comments(self, repository: str, number: int) -> list[dict[str, Any]]:
        """The issue's or pull request's comments, oldest first (id, body, user.login)."""
        return self.pages(f"/repos/{repository}/issues/{number}/comments")

    # Pull requests and statuses

    def pull_requests(self, repository: str, state: str = "all") -> list[dict[str, Any]]:
        """number, title, body, head.ref, head.sha, base.ref, html_url, state."""
        return self.pages(f"/repos/{repository}/pulls", state=state)

    def pull_request(self, repository: str, number: int) -> dict[str, Any]:
        return dict(self.call("GET", f"/repos/{repository}/pulls/{number}"))

    def create_pull_request(self, repository: str, head: str, base: str, title: str) -> dict[str, Any]:
        body = {"head": head, "base": base, "title": title}
        return dict(self.call("POST", f"/repos/{repository}/pulls", body))

    def review_comment(
        self, repository: str, number: int, path: str, line: int, body: str, summary: str = ""
    ) -> None:
        """A review of pull request `number` (its text `summary`) with one comment `body` on `path` at new
        line `line`."""
        comment = {"path": path, "body": body, "new_position": line}
        review = {"event": "COMMENT", "body": summary, "comments": [comment]}
        self.call("POST", f"/repos/{repository}/pulls/{number}/reviews", review)

    def statuses(self, repository: str, sha: str) -> list[dict[str, Any]]:
        """The commit's statuses, newest first (status, context, description, target_url)."""
        return self.pages(f"/repos/{repository}/statuses/{sha}")

    def combined_status(self, repository: str, ref: str) -> dict[str, Any]:
        """state (the combined one), statuses."""
        return dict(self.call("GET", f"/repos/{repository}/commits/{quote(ref, safe='')}/status"))

    def set_status(self, repository: str, sha: str, state: str, context: str, description: str = "") -> None:
        body = {"state": state, "context": context, "description": description}
        self.call("POST", f"/repos/{repository}/statuses/{sha}", body)

    # Webhooks

    def create_webhook(
        self, repository: str, url: str, secret: str, events: list[str] | None = None
    ) -> dict[str, Any]:
        """A Gitea-type webhook (X-Gitea-Signature: HMAC-SHA256 of the body with `secret`) delivering
        `events` as JSON to `url`; by default every issue event (opened, labelled, commented...), every pull
        request event (its comments and reviews too) and commit statuses."""
        config = {"url": url, "content_type": "json", "secret": secret}
        chosen = events or ["issues", "pull_request", "status"]
        body = {"type": "gitea", "config": config, "events": chosen, "active": True}
        return dict(self.call("POST", f"/repos/{repository}/hooks", body))
