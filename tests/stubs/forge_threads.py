"""Stub of the forges' issue-comment and commit-status APIs (GitHub, Gitea, GitLab), for the operator's
reporting step (controller/forge_reports.py).

    from tests.stubs.forge_threads import ForgeThreadsStub
    with ForgeThreadsStub(token="t0k") as stub:
        github_api = stub.base_url                # GitHub: {api}/repos/{o}/{r}/issues/{n}/comments ...
        gitea_api = stub.base_url + "/api/v1"     # Gitea: the same paths
        gitlab_api = stub.base_url + "/api/v4"    # GitLab: {api}/projects/{path}/issues/{iid}/notes ...
        stub.comments("gitea", "acme/app", 7)     # what the thread holds (as the forge's GET lists it)
        stub.statuses("gitea", "acme/app", sha)   # the commit's statuses, newest first
        stub.add_check_run("acme/app", sha, "build", "completed", "failure")  # GitHub's check runs

It keeps what it is sent, as the forge would, and serves it back through the same GET routes a real forge
has: a test reads the forge, not a log of calls, and so can run against a real forge unchanged. Only the
given `token`, sent in the forge's own header, is accepted (GitHub `Authorization: Bearer`, Gitea
`Authorization: token`, GitLab `PRIVATE-TOKEN`); anything else answers 401. GitHub and GitLab are
stubs because no real server of theirs can run here; Gitea is also tested for real (tests/forge/).

Modes:
  ok        as above
  down      every call answers 503
  redirect  every call answers 302 to `redirect_to` (a client must not follow it with its token)

What the token makes is made by `login`, whom GET {api}/user names (`whoami=False`: 403, as Gitea answers
a token without read:user).

Teams (the trigger receiver's membership questions), made with `add_team_member`:
  GitHub  GET {api}/orgs/{org}/teams/{slug}/memberships/{user}   200 {state: active} or 404
  Gitea   GET /api/v1/orgs/{org}/teams/search?q=   then   GET /api/v1/teams/{id}/members/{user}   200 or 404
  GitLab  GET /api/v4/groups/{url-encoded path}/members/all/{user id}   200 {state: active} or 404
(the shapes of GitHub's and GitLab's documented answers; Gitea's are checked for real in tests/forge/).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
import time
from typing import Any
from urllib.parse import unquote

from ._base import RecordedRequest, Response, StubServer, serve_main
from .github import ACCEPTED_SCHEMES, _ForgeHandler

_REPO = r"(?:/api/v3|/api/v1)?/repos/([^/]+/[^/]+)"
_COMMENTS = re.compile(_REPO + r"/issues/(\d+)/comments$")
_COMMENT = re.compile(_REPO + r"/issues/comments/(\d+)$")
_STATUS = re.compile(_REPO + r"/statuses/([0-9a-f]{40})$")
_STATUSES = re.compile(_REPO + r"/commits/([0-9a-f]{40})/statuses$")
_COMBINED = re.compile(_REPO + r"/commits/([0-9a-f]{40})/status$")
_CHECK_RUNS = re.compile(r"(?:/api/v3)?/repos/([^/]+/[^/]+)/commits/([0-9a-f]{40})/check-runs$")
_PROJECT = r"/api/v4/projects/([^/]+)"
_NOTES = re.compile(_PROJECT + r"/(issues|merge_requests)/(\d+)/notes$")
_NOTE = re.compile(_PROJECT + r"/(issues|merge_requests)/(\d+)/notes/(\d+)$")
_GL_STATUS = re.compile(_PROJECT + r"/statuses/([0-9a-f]{40})$")
_GL_STATUSES = re.compile(_PROJECT + r"/repository/commits/([0-9a-f]{40})/statuses$")
_GH_MEMBERSHIP = re.compile(r"(?:/api/v3)?/orgs/([^/]+)/teams/([^/]+)/memberships/([^/]+)$")
_GT_SEARCH = re.compile(r"/api/v1/orgs/([^/]+)/teams/search$")
_GT_MEMBER = re.compile(r"/api/v1/teams/(\d+)/members/([^/]+)$")
_GL_MEMBER = re.compile(r"/api/v4/groups/([^/]+)/members/all/(\d+)$")
STATES = {
    "github": ("pending", "success", "failure", "error"),
    "gitea": ("pending", "success", "failure", "error", "warning", "skipped"),
    "gitlab": ("pending", "running", "success", "failed", "canceled", "skipped"),
}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class ForgeThreadsStub(StubServer):
    name = "forge_threads"
    modes = ("ok", "down", "redirect")

    def __init__(
        self,
        *args: Any,
        token: str = "forge-token",
        login: str = "bot",
        whoami: bool = True,
        redirect_to: str = "",
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.token, self.login, self.whoami = token, login, whoami
        self.redirect_to = redirect_to
        self._ids = itertools.count(101)
        self._threads: dict[tuple[str, str, str, int], list[dict[str, Any]]] = {}
        self._statuses: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        self._check_runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._credential = threading.local()  # (scheme, sha256 of the token), set by _ForgeHandler
        self._teams: dict[tuple[str, str], set[str]] = {}  # (forge, org/team or group path) -> members
        self._team_ids: dict[tuple[str, str], int] = {}

    def start(self) -> ForgeThreadsStub:
        super().start()
        assert self._httpd is not None
        self._httpd.RequestHandlerClass = _ForgeHandler  # before anyone knows the port
        return self

    def __enter__(self) -> ForgeThreadsStub:
        return self.start()

    # -- what the forge holds ------------------------------------------------------------------
    def comments(
        self, forge: str, repository: str, number: int, kind: str = "issues"
    ) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(c) for c in self._threads.get((forge, repository, kind, number), [])]

    def statuses(self, forge: str, repository: str, sha: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(s) for s in reversed(self._statuses.get((forge, repository, sha), []))]

    def add_check_run(
        self, repository: str, sha: str, name: str, status: str, conclusion: str | None = None
    ) -> None:
        """A GitHub check run on the commit (a CI's), replacing the one of the same name as GitHub's
        `filter=latest` lists them."""
        with self._lock:
            held = [r for r in self._check_runs.get((repository, sha), []) if r["name"] != name]
            run = {"id": next(self._ids), "name": name, "status": status, "conclusion": conclusion}
            self._check_runs[(repository, sha)] = [*held, run]

    def add_comment(
        self, forge: str, repository: str, number: int, body: str, author: str = "someone"
    ) -> int:
        """A comment someone else made on the thread."""
        with self._lock:
            return self._add(forge, repository, "issues", number, body, author)["id"]

    def add_team_member(self, forge: str, team: str, user: str) -> None:
        """`user` (GitLab: a user id, as a string) joins `team` (org/team, or a GitLab group's path)."""
        with self._lock:
            self._teams.setdefault((forge, team.casefold()), set()).add(user.casefold())
            self._team_ids.setdefault((forge, team.casefold()), next(self._ids))

    def team_questions(self) -> int:
        """How many membership questions were asked (a cached answer asks none)."""
        return sum(1 for r in self.requests if "/teams/" in r.path or "/members/all/" in r.path)

    # -- the API ---------------------------------------------------------------------------------
    def handle(self, req: RecordedRequest) -> Response:
        if self.mode == "down":
            return Response(503, {"message": "Service Unavailable"})
        if self.mode == "redirect":
            return Response(302, None, headers={"location": self.redirect_to + req.path})
        forge = (
            "gitlab" if req.path.startswith("/api/v4/") else "gitea" if "/api/v1/" in req.path else "github"
        )
        if not self._authorized(forge, req):
            return Response(401, {"message": "Bad credentials" if forge == "github" else "401 Unauthorized"})
        body = req.body if isinstance(req.body, dict) else {}
        with self._lock:
            return self._route(forge, req, body)

    def _authorized(self, forge: str, req: RecordedRequest) -> bool:
        """The stub's token, in the forge's own header and scheme."""
        credential = getattr(self._credential, "value", None)
        expected = hashlib.sha256(self.token.encode()).hexdigest()
        return (
            credential is not None and credential[0] in ACCEPTED_SCHEMES[forge] and credential[1] == expected
        )

    def _route(self, forge: str, req: RecordedRequest, body: dict[str, Any]) -> Response:
        path, method = req.path, req.method
        if re.fullmatch(r"(?:/api/v[134])?/user", path) and method == "GET":
            if not self.whoami:  # Gitea, for a token without read:user
                return Response(
                    403, {"message": "token does not have at least one of required scope(s): [read:user]"}
                )
            return Response(200, {"username" if forge == "gitlab" else "login": self.login, "id": 1})
        if method == "GET" and (answer := self._membership(forge, req)) is not None:
            return answer
        if forge == "gitlab":
            return self._gitlab(req, body)
        if (m := _COMMENTS.match(path)) and method == "POST":
            return Response(
                201, self._add(forge, m[1], "issues", int(m[2]), str(body.get("body") or ""), self.login)
            )
        if (m := _COMMENTS.match(path)) and method == "GET":
            since = (req.query.get("since") or [""])[0]
            held = self._threads.get((forge, m[1], "issues", int(m[2])), [])
            return Response(200, [c for c in held if c["updated_at"] >= since])
        if (m := _COMMENT.match(path)) and method == "PATCH":
            return self._edit(forge, m[1], int(m[2]), str(body.get("body") or ""))
        if (m := _STATUS.match(path)) and method == "POST":
            return self._status(forge, m[1], m[2], body, "state", "context")
        if (m := _COMBINED.match(path)) and method == "GET":
            return Response(200, self._combined(forge, m[1], m[2]))
        if forge == "github" and (m := _CHECK_RUNS.match(path)) and method == "GET":
            runs = self._check_runs.get((m[1], m[2]), [])
            return Response(200, {"total_count": len(runs), "check_runs": runs})
        if (m := (_STATUSES.match(path) or _STATUS.match(path))) and method == "GET":
            return Response(200, self.statuses_unlocked(forge, m[1], m[2]))
        return Response(404, {"message": "Not Found"})

    def _membership(self, forge: str, req: RecordedRequest) -> Response | None:
        """A team membership question's answer, or None when the path is not one."""
        path, found = unquote(req.path), None
        if forge == "github" and (m := _GH_MEMBERSHIP.match(req.path)):
            found = self._teams.get((forge, f"{unquote(m[1])}/{unquote(m[2])}".casefold()), set())
            if unquote(m[3]).casefold() in found:
                return Response(200, {"state": "active", "role": "member"})
            return Response(404, {"message": "Not Found"})
        if forge == "gitea" and (m := _GT_SEARCH.match(path)):
            q = (req.query.get("q") or [""])[0].casefold()
            teams = [
                {"id": self._team_ids[key], "name": key[1].partition("/")[2]}
                for key in self._teams
                if key[0] == "gitea" and key[1].startswith(m[1].casefold() + "/") and q in key[1]
            ]
            return Response(200, {"ok": True, "data": teams})
        if forge == "gitea" and (m := _GT_MEMBER.match(path)):
            team = next((k for k, i in self._team_ids.items() if i == int(m[1])), None)
            member = team is not None and m[2].casefold() in self._teams[team]
            return Response(200, {"login": m[2]}) if member else Response(404, {"message": "not found"})
        if forge == "gitlab" and (m := _GL_MEMBER.match(req.path)):
            if m[2] in self._teams.get(("gitlab", unquote(m[1]).casefold()), set()):
                return Response(200, {"id": int(m[2]), "state": "active", "access_level": 30})
            return Response(404, {"message": "404 Not found"})
        return None

    def _gitlab(self, req: RecordedRequest, body: dict[str, Any]) -> Response:
        path, method = req.path, req.method
        if (m := _NOTES.match(path)) and method == "POST":
            note = self._add(
                "gitlab", unquote(m[1]), m[2], int(m[3]), str(body.get("body") or ""), self.login
            )
            return Response(201, note)
        if (m := _NOTES.match(path)) and method == "GET":
            held = self._threads.get(("gitlab", unquote(m[1]), m[2], int(m[3])), [])
            return Response(200, list(reversed(held)))  # sort=desc
        if (m := _NOTE.match(path)) and method == "PUT":
            return self._edit("gitlab", unquote(m[1]), int(m[4]), str(body.get("body") or ""))
        if (m := _GL_STATUS.match(path)) and method == "POST":
            return self._status("gitlab", unquote(m[1]), m[2], body, "state", "name")
        if (m := _GL_STATUSES.match(path)) and method == "GET":
            held = self.statuses_unlocked("gitlab", unquote(m[1]), m[2])
            if (req.query.get("all") or [""])[0] != "true":  # GitLab's default: the latest of each name
                held = list({s["name"]: s for s in reversed(held)}.values())
            return Response(200, held)
        return Response(404, {"message": "404 Not Found"})

    def _combined(self, forge: str, repository: str, sha: str) -> dict[str, Any]:
        """GitHub's and Gitea's combined status: the latest status of each context (its own state is left
        out: the reporting step computes one without the harness's own status)."""
        latest: dict[str, dict[str, Any]] = {}
        for status in self._statuses.get((forge, repository, sha), []):
            latest[status["context"]] = status
        return {"sha": sha, "total_count": len(latest), "statuses": list(latest.values())}

    def statuses_unlocked(self, forge: str, repository: str, sha: str) -> list[dict[str, Any]]:
        return list(reversed(self._statuses.get((forge, repository, sha), [])))

    def _add(
        self, forge: str, repository: str, kind: str, number: int, body: str, author: str
    ) -> dict[str, Any]:
        now = _now()
        user = {"author": {"username": author}} if forge == "gitlab" else {"user": {"login": author}}
        comment = {"id": next(self._ids), "body": body, "created_at": now, "updated_at": now, **user}
        self._threads.setdefault((forge, repository, kind, number), []).append(comment)
        return comment

    def _edit(self, forge: str, repository: str, comment_id: int, body: str) -> Response:
        for (held_forge, held_repo, _, _), comments in self._threads.items():
            for comment in comments:
                if (held_forge, held_repo) == (forge, repository) and comment["id"] == comment_id:
                    comment.update(body=body, updated_at=_now())
                    return Response(200, comment)
        return Response(404, {"message": "Not Found"})

    def _status(
        self, forge: str, repository: str, sha: str, body: dict[str, Any], state_key: str, context_key: str
    ) -> Response:
        state = body.get(state_key)
        if state not in STATES[forge]:
            return Response(422 if forge != "gitlab" else 400, {"message": f"invalid state {state!r}"})
        status = {
            "id": next(self._ids),
            "state" if forge != "gitea" else "status": state,
            "context" if forge != "gitlab" else "name": body.get(context_key) or "default",
            "description": body.get("description") or "",
            "created_at": _now(),
        }
        if forge == "gitlab":
            status["status"] = state
        self._statuses.setdefault((forge, repository, sha), []).append(status)
        return Response(201, status)


if __name__ == "__main__":
    raise SystemExit(serve_main(ForgeThreadsStub))
