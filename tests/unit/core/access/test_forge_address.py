"""The pull request's repository and API root for each forge's layout, and the clone's and publisher's
destinations, from a table of URLs."""

from typing import Any

import pytest

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.changes import PullRequestPlan
from harness_operator.core.access.forge_address import (
    GitDestination,
    GitLocation,
    compute_api_url,
    compute_git_destinations,
    compute_repository,
    parse_git_url,
)
from harness_operator.core.pod.publish import build_publish_plan
from harness_operator.runner.forges import build_pull_request


@pytest.mark.parametrize(
    ("url", "location"),
    [
        ("https://GitHub.com/acme/widgets.git", GitLocation("https", "github.com", 443, "acme/widgets.git")),
        ("http://10.0.0.5:3000/o/r/", GitLocation("http", "10.0.0.5", 3000, "o/r")),
        ("http://git.corp/o/r", GitLocation("http", "git.corp", 80, "o/r")),
        ("git@github.com:acme/widgets.git", GitLocation("ssh", "github.com", 22, "acme/widgets.git")),
        ("ssh://git@git.corp:2222/acme/w.git", GitLocation("ssh", "git.corp", 2222, "acme/w.git")),
        ("git://172.18.0.1:9500/repo.git", GitLocation("git", "172.18.0.1", 9500, "repo.git")),
        ("git://git.corp/repo.git", GitLocation("git", "git.corp", 9418, "repo.git")),
        ("/srv/git/repo.git", GitLocation("file", "", None, "srv/git/repo.git")),
        ("file:///srv/git/repo.git", GitLocation("file", "", None, "srv/git/repo.git")),
    ],
)
def test_git_urls_are_taken_apart(url: str, location: GitLocation) -> None:
    assert parse_git_url(url) == location


# forge, git URL, apiURL given (or None), the repository, the API root the plan uses
LAYOUTS = [
    ("github", "https://github.com/acme/widgets.git", None, "acme/widgets", "https://api.github.com"),
    ("github", "git@github.com:acme/widgets.git", None, "acme/widgets", "https://api.github.com"),
    ("github", "https://github.com/acme/widgets", None, "acme/widgets", "https://api.github.com"),
    # GitHub Enterprise: host/api/v3; behind a sub-path, the API is under it too
    ("github", "https://ghe.corp/acme/widgets.git", None, "acme/widgets", "https://ghe.corp/api/v3"),
    ("github", "https://ghe.corp/code/acme/w.git", None, "acme/w", "https://ghe.corp/code/api/v3"),
    ("github", "git@ghe.corp:acme/widgets.git", None, "acme/widgets", "https://ghe.corp/api/v3"),
    (
        "github",
        "https://ghe.corp/acme/widgets.git",
        "https://ghe.corp/api/v3/",
        "acme/widgets",
        "https://ghe.corp/api/v3/",
    ),
    # Gitea: host/api/v1, a port kept under http(s), a sub-path found before owner/name
    ("gitea", "http://10.0.0.5:3000/o/r", None, "o/r", "http://10.0.0.5:3000/api/v1"),
    ("gitea", "https://gitea.corp:443/o/r.git", None, "o/r", "https://gitea.corp/api/v1"),
    (
        "gitea",
        "https://host.corp/git/acme/payments.git",
        None,
        "acme/payments",
        "https://host.corp/git/api/v1",
    ),
    (
        "gitea",
        "https://host.corp/git/acme/payments.git",
        "https://host.corp/git/api/v1",
        "acme/payments",
        "https://host.corp/git/api/v1",
    ),
    (
        "gitea",
        "ssh://git@host.corp:2222/acme/payments.git",
        None,
        "acme/payments",
        "https://host.corp/api/v1",
    ),
    # GitLab: nested groups are the project's path; its sub-path only from an apiURL ending /api/v4
    ("gitlab", "https://gitlab.com/g/sub/proj.git", None, "g/sub/proj", "https://gitlab.com/api/v4"),
    ("gitlab", "git@gitlab.corp:g/sub/proj.git", None, "g/sub/proj", "https://gitlab.corp/api/v4"),
    (
        "gitlab",
        "https://corp.example/gitlab/g/sub/proj.git",
        "https://corp.example/gitlab/api/v4",
        "g/sub/proj",
        "https://corp.example/gitlab/api/v4",
    ),
    (
        "gitlab",
        "https://corp.example/gitlab/g/sub/proj.git",
        None,
        "gitlab/g/sub/proj",
        "https://corp.example/api/v4",
    ),
    # An apiURL whose path is not the URL's prefix leaves the path whole
    ("gitea", "https://h.corp/acme/payments.git", "https://api.h.corp/x/api/v1", "acme/payments", None),
    ("gitlab", "https://h.corp/g/p.git", "https://h.corp/other/api/v4", "g/p", None),
    # The git host in front of the forge (a mirror, a proxy) under its own prefix: owner/name still
    ("github", "http://mirror:8080/git/acme/w.git", "http://forge:9000", "acme/w", None),
    ("gitea", "http://mirror:8080/git/acme/w.git", "http://forge:9000/api/v1", "acme/w", None),
]


@pytest.mark.parametrize(("forge", "url", "api_url", "repository", "api_root"), LAYOUTS)
def test_each_forge_layout_gives_the_repository_and_api(
    forge: str, url: str, api_url: str | None, repository: str, api_root: str | None
) -> None:
    assert compute_repository(forge, url, api_url) == repository
    plan = build_publish_plan(make_run(url, {"forge": forge, "apiURL": api_url}), "/workspace", [], 60, [])
    assert plan is not None and plan.pull_request is not None
    assert plan.pull_request.repository == repository
    assert plan.pull_request.api_url == (api_url or api_root)
    if api_url is None:
        assert compute_api_url(forge, url) == api_root


def test_the_issue_s_gitea_sub_path_reaches_the_pull_request_endpoint() -> None:
    """The report: `git/acme/payments` was sent as the repository and the forge answered 404."""
    run = make_run("https://host.corp/git/acme/payments.git", {"forge": "gitea"})
    plan = build_publish_plan(run, "/workspace", [], 60, [])
    assert plan is not None and plan.pull_request is not None
    request = build_pull_request(plan.pull_request, "harness/x", "main", "t0ken")
    assert request.url == "https://host.corp/git/api/v1/repos/acme/payments/pulls"


def test_an_explicit_repository_wins() -> None:
    run = make_run("https://host.corp/git/acme/payments.git", {"forge": "gitea", "repository": "x/y"})
    plan = build_publish_plan(run, "/workspace", [], 60, [])
    assert plan is not None and isinstance(plan.pull_request, PullRequestPlan)
    assert plan.pull_request.repository == "x/y"


G, P = "spec.workspace.git.url", "spec.workspace.publish.pullRequest"


@pytest.mark.parametrize(
    ("url", "pull_request", "destinations"),
    [
        (
            "https://github.com/acme/w.git",
            None,
            [GitDestination(G, "https", "github.com", 443, "https://github.com/acme/w.git")],
        ),
        (
            "https://github.com/acme/w.git",
            {"forge": "github"},
            [
                GitDestination(G, "https", "github.com", 443, "https://github.com/acme/w.git"),
                GitDestination(P, "https", "api.github.com", 443, "https://api.github.com"),
            ],
        ),
        (
            "http://10.0.0.5:3000/git/o/r.git",
            {"forge": "gitea"},
            [
                GitDestination(G, "http", "10.0.0.5", 3000, "http://10.0.0.5:3000/git/o/r.git"),
                GitDestination(P, "http", "10.0.0.5", 3000, "http://10.0.0.5:3000/git/api/v1"),
            ],
        ),
        (
            "https://git.corp/o/r.git",
            {"forge": "gitea", "apiURL": "http://forge.corp:8080/api/v1"},
            [
                GitDestination(G, "https", "git.corp", 443, "https://git.corp/o/r.git"),
                GitDestination(P, "http", "forge.corp", 8080, "http://forge.corp:8080/api/v1"),
            ],
        ),
        (
            "git@github.com:acme/w.git",
            {"forge": "github"},
            [
                GitDestination(G, "ssh", "github.com", 22, "git@github.com:acme/w.git"),
                GitDestination(P, "https", "api.github.com", 443, "https://api.github.com"),
            ],
        ),
        (
            "git://172.18.0.1:9500/r.git",
            None,
            [GitDestination(G, "git", "172.18.0.1", 9500, "git://172.18.0.1:9500/r.git")],
        ),
        ("/srv/git/r.git", None, []),
        ("file:///srv/git/r.git", None, []),
    ],
)
def test_the_clone_and_publisher_destinations(
    url: str, pull_request: dict[str, Any] | None, destinations: list[GitDestination]
) -> None:
    assert compute_git_destinations(make_run(url, pull_request)) == destinations


@pytest.mark.parametrize(
    ("scheme", "proxied"), [("https", True), ("http", True), ("ssh", False), ("git", False)]
)
def test_only_http_destinations_go_through_a_proxy(scheme: str, proxied: bool) -> None:
    assert GitDestination(G, scheme, "h", 1, "u").proxied is proxied


def test_a_run_without_git_has_no_destinations() -> None:
    run = HarnessRun.model_validate(
        {"metadata": {"name": "r", "namespace": "n"}, "spec": {"provider": "claude", "prompt": "Go."}}
    )
    assert compute_git_destinations(run) == []


def make_run(url: str, pull_request: dict[str, Any] | None) -> HarnessRun:
    publish: dict[str, Any] = {"branch": {"name": "b"}}
    if pull_request is not None:
        publish = {"pullRequest": {k: v for k, v in pull_request.items() if v is not None}}
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "fix", "namespace": "team-a"},
            "spec": {
                "provider": "claude",
                "prompt": "Fix.",
                "workspace": {"git": {"url": url, "ref": "main"}, "publish": publish},
            },
        }
    )
