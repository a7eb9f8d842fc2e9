"""Where a run's repository lives: the pull request's repository and API root for each forge's usual
layout, and the host:ports the clone and the publisher reach (pure).

A forge served under a sub-path (`https://host/git/acme/payments.git`) has its API under that path too
(`https://host/git/api/v1`); the repository is the URL's path without it. GitHub and Gitea repositories are
always `owner/name`, so what comes before those two segments is the sub-path (the git host may be another
than the API's, as a mirror or a proxy in front of it). GitLab nests groups, so its sub-path is known only
from an explicit apiURL: its path, without /api/v4, is taken off the URL's.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from harness_operator.api.v1alpha1 import Forge, HarnessRun

API_SUFFIX = {Forge.github: "/api/v3", Forge.gitea: "/api/v1", Forge.gitlab: "/api/v4"}
GITHUB_HOST = "github.com"
GITHUB_API = "https://api.github.com"
DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}


@dataclass(frozen=True)
class GitLocation:
    """A git URL taken apart: scheme (`ssh` for scp-like), lowercase host, port (the scheme's default when
    the URL names none) and the path without its slashes."""

    scheme: str
    host: str
    port: int | None
    path: str


def parse_git_url(url: str) -> GitLocation:
    """A git URL of any form git accepts for a remote: scheme://, scp-like `user@host:path`, a local path."""
    if "://" not in url:
        if ":" in url.split("/", 1)[0]:  # git@host:owner/name.git (a colon before any slash)
            login, path = url.split(":", 1)
            return GitLocation("ssh", login.rpartition("@")[2].lower(), DEFAULT_PORTS["ssh"], path.strip("/"))
        return GitLocation("file", "", None, url.strip("/"))
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or DEFAULT_PORTS.get(scheme)
    return GitLocation(scheme, (parts.hostname or "").lower(), port, parts.path.strip("/"))


def compute_repository(forge: str, url: str, api_url: str | None = None) -> str:
    """The pull request's repository for a git URL: its path without the forge's sub-path and `.git`."""
    path = parse_git_url(url).path.removesuffix(".git").strip("/")
    if forge != Forge.gitlab:
        return "/".join(path.split("/")[-2:])  # owner/name, whatever serves it under which prefix
    prefix = _api_prefix(forge, api_url) if api_url else ""
    return path[len(prefix) :].strip("/") if prefix and path.startswith(f"{prefix}/") else path


def compute_api_url(forge: str, url: str) -> str:
    """The forge's API root for a repository URL (no apiURL given): api.github.com for github.com, else
    the URL's host (its port under http(s)) and sub-path with the forge's API suffix."""
    where = parse_git_url(url)
    if forge == Forge.github and where.host == GITHUB_HOST:
        return GITHUB_API
    web = where.scheme in ("http", "https")
    scheme = where.scheme if web else "https"  # ssh or git: the forge answers https on the same host
    port = f":{where.port}" if web and where.port != DEFAULT_PORTS[where.scheme] else ""
    segments = where.path.removesuffix(".git").split("/")
    prefix = "" if forge == Forge.gitlab else "".join(f"/{s}" for s in segments[:-2] if s)
    return f"{scheme}://{where.host}{port}{prefix}{API_SUFFIX[Forge(forge)]}"


def describe_pull_request(run: HarnessRun) -> str | None:
    """What `validate` says of the pull request: where it will be opened, as the publisher will."""
    workspace = run.spec.workspace
    git = workspace.git if workspace else None
    pr = workspace.publish.pull_request if workspace and workspace.publish and git else None
    if pr is None or git is None:
        return None
    repository = pr.repository or compute_repository(pr.forge, git.url, pr.api_url)
    api_url = pr.api_url or compute_api_url(pr.forge, git.url)
    said = f"opens a pull request on {pr.forge} repository {repository} through {api_url}"
    if pr.forge == Forge.gitlab and not pr.api_url and not pr.repository:
        said += "; a GitLab under a sub-path needs apiURL (its .../api/v4 root) to take the prefix off"
    return said


def _api_prefix(forge: str, api_url: str) -> str:
    """The sub-path an apiURL names: its path without the forge's API suffix (none on api.github.com)."""
    path = urlsplit(api_url).path.rstrip("/")
    return path.removesuffix(API_SUFFIX[Forge(forge)]).strip("/")


GIT_URL_FIELD = "spec.workspace.git.url"
PULL_REQUEST_FIELD = "spec.workspace.publish.pullRequest"


@dataclass(frozen=True)
class GitDestination:
    """One place the clone or the publisher connects to: which field names it, how (scheme), where."""

    field: str
    scheme: str
    host: str
    port: int
    url: str

    @property
    def proxied(self) -> bool:
        """http(s), which an HTTP proxy (the egress gateway) carries; ssh and git:// it cannot."""
        return self.scheme in ("http", "https")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def compute_git_destinations(run: HarnessRun) -> list[GitDestination]:
    """The run's own destinations: its git URL's host (none for a local path) and, when it opens a pull
    request, the forge API's."""
    workspace = run.spec.workspace
    git = workspace.git if workspace else None
    if git is None:
        return []
    found = []
    where = parse_git_url(git.url)
    if where.scheme in DEFAULT_PORTS and where.host and where.port:
        found.append(GitDestination(GIT_URL_FIELD, where.scheme, where.host, where.port, git.url))
    pr = workspace.publish.pull_request if workspace and workspace.publish else None
    if pr is not None:
        api_url = pr.api_url or compute_api_url(pr.forge, git.url)
        api = parse_git_url(api_url)
        if api.port:
            found.append(GitDestination(PULL_REQUEST_FIELD, api.scheme, api.host, api.port, api_url))
    return found
