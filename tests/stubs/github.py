"""Stub of the forges' pull request APIs (GitHub; also Gitea's and GitLab's), for the publisher.

    from tests.stubs.github import GitHubStub
    with GitHubStub(mode="ok") as stub:
        api = stub.base_url                    # GitHub: POST {api}/repos/{owner}/{repo}/pulls
        gitea_api = stub.base_url + "/api/v1"  # Gitea:  POST {api}/repos/{owner}/{repo}/pulls
        gitlab_api = stub.base_url + "/api/v4" # GitLab: POST {api}/projects/{url-encoded path}/merge_requests
        ...
        stub.pull_requests()   # what each create call sent: forge, repository, body, auth scheme, token sha256
        stub.listings()        # each list call of open pull requests: forge, repository, query, found

    python -m tests.stubs.github --mode ok

Each forge's own credential is required, or the call answers 401 in that forge's shape: GitHub
``Authorization: Bearer <t>`` (or ``token <t>``), Gitea ``Authorization: token <t>``, GitLab
``PRIVATE-TOKEN: <t>``. Pull requests are numbered from 1 in each repository; their web URLs start with
``web_url`` (default: the stub's own URL), e.g. ``{web_url}/{owner}/{repo}/pull/1``.

The pull requests a stub opened are listed as each forge lists open ones (GET on the same path): GitHub
filtered by ``head=owner:branch``, GitLab by ``source_branch``, Gitea unfiltered, ``limit`` a page (and
``page``), newest first. A listing is answered in every mode but ``unauthorized``.

Modes:
  ok             a create call answers 201 with the forge's pull (merge) request object
  unauthorized   every create call answers 401 (GitHub ``Bad credentials``), whatever its credential
  unprocessable  every create call is refused as a duplicate, as each forge refuses one: GitHub 422
                 ``Validation Failed`` (``A pull request already exists for owner:branch.``), Gitea 409,
                 GitLab 409 (its ``message`` a list)
  hang           create calls are accepted and never answered (until the stub stops)

Anything else answers 404 ``Not Found`` in GitHub's shape, and is logged.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from typing import Any
from urllib.parse import unquote

from ._base import RecordedRequest, Response, StubServer, _Handler, serve_main

GITHUB_DOCS = "https://docs.github.com/rest"
_GITHUB = re.compile(r"^(?:/api/v3)?/repos/([^/]+)/([^/]+)/pulls/?$")
_GITEA = re.compile(r"^/api/v1/repos/([^/]+)/([^/]+)/pulls/?$")
_GITLAB = re.compile(r"^/api/v4/projects/([^/]+)/merge_requests/?$")
# The credential schemes each forge is sent by the publisher (operator/.../runner/forges.py).
ACCEPTED_SCHEMES = {"github": ("bearer", "token"), "gitea": ("token",), "gitlab": ("private-token",)}


def _credential(headers: Any) -> tuple[str, str] | None:
    """(scheme, sha256 of the bare token) of a request's credential; the token itself is not kept."""
    private = headers.get("private-token")
    if private:
        return "private-token", hashlib.sha256(private.encode()).hexdigest()
    scheme, _, token = (headers.get("authorization") or "").strip().partition(" ")
    token = token.strip()
    if not token:
        return None
    return scheme.lower(), hashlib.sha256(token.encode()).hexdigest()


class _ForgeHandler(_Handler):
    """The base handler, plus the request's credential scheme for the stub (the base keeps only sha256s)."""

    def _dispatch(self) -> None:
        stub: GitHubStub = self.server.stub  # type: ignore[attr-defined]
        stub._credential.value = _credential(self.headers)
        super()._dispatch()

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _dispatch


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class GitHubStub(StubServer):
    name = "github"
    modes = ("ok", "unauthorized", "unprocessable", "hang")

    def __init__(self, *args: Any, web_url: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._web_url = web_url
        self._numbers: dict[tuple[str, str], int] = {}
        self._created: list[dict[str, Any]] = []
        self._listed: list[dict[str, Any]] = []
        self._opened: list[tuple[str, str, dict[str, Any]]] = []  # (forge, repository, the pull request)
        self._credential = threading.local()

    def start(self) -> GitHubStub:
        super().start()
        assert self._httpd is not None
        self._httpd.RequestHandlerClass = _ForgeHandler  # before anyone knows the port
        return self

    def __enter__(self) -> GitHubStub:
        return self.start()

    @property
    def web_url(self) -> str:
        """Where the pull requests' web pages are said to be (``web_url=``, default the stub itself)."""
        return (self._web_url or self.base_url).rstrip("/")

    # -- hooks -----------------------------------------------------------------------------
    @staticmethod
    def _route(req: RecordedRequest) -> tuple[str, str] | None:
        """(forge, repository) of a create call, else None."""
        if req.method != "POST":
            return None
        return GitHubStub._collection(req)

    @staticmethod
    def _collection(req: RecordedRequest) -> tuple[str, str] | None:
        """(forge, repository) of a call on the pull requests' collection, else None."""
        if m := _GITEA.match(req.path):
            return "gitea", f"{m[1]}/{m[2]}"
        if m := _GITHUB.match(req.path):
            return "github", f"{m[1]}/{m[2]}"
        if m := _GITLAB.match(req.path):
            return "gitlab", unquote(m[1])
        return None

    def is_model_call(self, req: RecordedRequest) -> bool:
        return self._route(req) is not None

    def handle(self, req: RecordedRequest) -> Response:
        listing = self._collection(req) if req.method == "GET" else None
        if listing is not None:
            return self._list(*listing, req)
        route = self._route(req)
        if route is None:
            return Response(404, {"message": "Not Found", "documentation_url": GITHUB_DOCS})
        forge, repository = route
        credential: tuple[str, str] | None = getattr(self._credential, "value", None)
        body = req.body if isinstance(req.body, dict) else {}
        if credential is None or credential[0] not in ACCEPTED_SCHEMES[forge] or self.mode == "unauthorized":
            resp = self._unauthorized(forge)
        elif self.mode == "unprocessable":
            resp = self._duplicate(forge, repository, body)
        else:
            resp = self._create(forge, repository, body)
        with self._lock:
            self._created.append(
                {
                    "forge": forge,
                    "repository": repository,
                    "body": req.body,
                    "auth_scheme": credential[0] if credential else None,
                    "token_sha256": credential[1] if credential else None,
                    "auth_sha256": list(req.auth_sha256),
                    "status": resp.status,
                }
            )
        return resp

    # -- answers ---------------------------------------------------------------------------
    def _unauthorized(self, forge: str) -> Response:
        if forge == "gitlab":
            return Response(401, {"message": "401 Unauthorized"})
        if forge == "gitea":
            return Response(401, {"message": "token is required", "url": f"{self.web_url}/api/swagger"})
        return Response(
            401, {"message": "Bad credentials", "documentation_url": GITHUB_DOCS, "status": "401"}
        )

    def _duplicate(self, forge: str, repository: str, body: dict[str, Any]) -> Response:
        owner = repository.split("/", 1)[0]
        if forge == "gitlab":
            return Response(
                409, {"message": ["Another open merge request already exists for this source branch: !1"]}
            )
        head, base = str(body.get("head") or ""), str(body.get("base") or "")
        if forge == "gitea":
            return Response(
                409,
                {
                    "message": "pull request already exists for these targets [id: 1, issue_id: 1, head_repo_id: 1,"
                    f" base_repo_id: 1, head_branch: {head}, base_branch: {base}]",
                    "url": f"{self.web_url}/api/swagger",
                },
            )
        label = head if ":" in head else f"{owner}:{head}"
        return Response(
            422,
            {
                "message": "Validation Failed",
                "errors": [
                    {
                        "resource": "PullRequest",
                        "code": "custom",
                        "message": f"A pull request already exists for {label}.",
                    }
                ],
                "documentation_url": f"{GITHUB_DOCS}/pulls/pulls#create-a-pull-request",
                "status": "422",
            },
        )

    def _list(self, forge: str, repository: str, req: RecordedRequest) -> Response:
        credential: tuple[str, str] | None = getattr(self._credential, "value", None)
        query = {k: v[-1] for k, v in req.query.items() if v}
        if credential is None or credential[0] not in ACCEPTED_SCHEMES[forge] or self.mode == "unauthorized":
            resp = self._unauthorized(forge)
            found: list[Any] = []
        else:
            with self._lock:
                found = [p for f, r, p in reversed(self._opened) if (f, r) == (forge, repository)]
            if forge == "github":
                owner, _, branch = query.get("head", "").partition(":")
                found = [p for p in found if p["head"]["label"] == f"{owner}:{branch}"] if branch else found
            elif forge == "gitlab":
                branch = query.get("source_branch", "")
                found = [p for p in found if p["source_branch"] == branch] if branch else found
            size = int(query.get("limit") or query.get("per_page") or 30)
            page = int(query.get("page") or 1)
            found = found[(page - 1) * size : page * size]
            resp = Response(200, found)
        with self._lock:
            self._listed.append(
                {
                    "forge": forge,
                    "repository": repository,
                    "query": query,
                    "auth_scheme": credential[0] if credential else None,
                    "status": resp.status,
                    "found": [p.get("iid", p.get("number")) for p in found],
                }
            )
        return resp

    def _number(self, forge: str, repository: str) -> int:
        with self._lock:
            n = self._numbers.get((forge, repository), 0) + 1
            self._numbers[(forge, repository)] = n
            return n

    def _create(self, forge: str, repository: str, body: dict[str, Any]) -> Response:
        if forge == "gitlab":
            missing = [k for k in ("source_branch", "target_branch", "title") if not body.get(k)]
            if missing:
                return Response(400, {"error": f"{', '.join(missing)} is missing"})
            return self._merge_request(repository, body)
        missing = [k for k in ("title", "head", "base") if not body.get(k)]
        if missing:
            if forge == "gitea":
                return Response(422, {"message": f"[{missing[0].capitalize()}]: Required", "url": ""})
            return Response(
                422,
                {
                    "message": "Validation Failed",
                    "errors": [
                        {"resource": "PullRequest", "field": k, "code": "missing_field"} for k in missing
                    ],
                    "documentation_url": f"{GITHUB_DOCS}/pulls/pulls#create-a-pull-request",
                    "status": "422",
                },
            )
        owner = repository.split("/", 1)[0]
        n = self._number(forge, repository)
        head, base = str(body["head"]), str(body["base"])
        head_owner, _, head_ref = head.rpartition(":")
        head_owner = head_owner or owner
        api = f"{self.base_url}/api/v1" if forge == "gitea" else self.base_url
        url = f"{api}/repos/{repository}/pulls/{n}"
        web = f"{self.web_url}/{repository}/{'pulls' if forge == 'gitea' else 'pull'}/{n}"
        now = _now()
        pull = {
            "url": url,
            "id": 1000 + n,
            "html_url": web,
            "diff_url": f"{web}.diff",
            "patch_url": f"{web}.patch",
            "number": n,
            "state": "open",
            "locked": False,
            "title": body["title"],
            "body": body.get("body") or "",
            "draft": bool(body.get("draft", False)),
            "user": {"login": "harness-stub", "id": 1, "type": "Bot"},
            "head": {
                "label": f"{head_owner}:{head_ref}",
                "ref": head_ref,
                "repo": {"full_name": f"{head_owner}/{repository.split('/', 1)[1]}"},  # a fork's own
            },
            "base": {"label": f"{owner}:{base}", "ref": base, "repo": {"full_name": repository}},
            "merged": False,
            "mergeable": None,
            "created_at": now,
            "updated_at": now,
        }
        if forge == "github":
            pull["node_id"] = f"PR_stub{n}"
        with self._lock:
            self._opened.append((forge, repository, pull))
        return Response(201, pull, headers={"location": url})

    def _merge_request(self, project: str, body: dict[str, Any]) -> Response:
        iid = self._number("gitlab", project)
        title = str(body["title"])
        draft = bool(re.match(r"^\s*(\[draft\]|\(draft\)|draft:|draft\s-\s)", title, re.IGNORECASE))
        now = _now()
        merge_request = {
            "id": 1000 + iid,
            "iid": iid,
            "project_id": 1,
            "source_project_id": 1,
            "title": title,
            "description": body.get("description") or "",
            "state": "opened",
            "source_branch": body["source_branch"],
            "target_branch": body["target_branch"],
            "draft": draft,
            "work_in_progress": draft,
            "web_url": f"{self.web_url}/{project}/-/merge_requests/{iid}",
            "author": {"username": "harness-stub", "id": 1},
            "created_at": now,
            "updated_at": now,
        }
        with self._lock:
            self._opened.append(("gitlab", project, merge_request))
        return Response(201, merge_request)

    # -- helpers ---------------------------------------------------------------------------
    def pull_requests(self) -> list[dict[str, Any]]:
        """Every create call, in order: ``forge``, ``repository`` (``owner/repo`` or GitLab's decoded
        path), ``body`` (the JSON sent), ``auth_scheme`` (``bearer``, ``token``, ``private-token`` or
        None), ``token_sha256`` (of the bare token, whichever the scheme), ``auth_sha256`` (the base's
        record) and the ``status`` answered."""
        with self._lock:
            return [dict(c) for c in self._created]

    def listings(self) -> list[dict[str, Any]]:
        """Every list call of open pull requests, in order: ``forge``, ``repository``, ``query`` (each
        parameter's last value), ``auth_scheme``, the ``status`` answered and the numbers ``found``."""
        with self._lock:
            return [dict(c) for c in self._listed]


def main(argv: list[str] | None = None) -> int:
    return serve_main(GitHubStub, argv)


if __name__ == "__main__":
    raise SystemExit(main())
