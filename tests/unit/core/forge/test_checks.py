"""core/forge/checks.py: the deliveries that say a commit's checks changed (GitHub and GitLab as their
webhook docs give them; Gitea's as tests/forge/test_gitea_webhooks.py records them from the real server),
the runs a delivery marks, when a read is due, and the checks read from each forge's answers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness_operator.api.v1alpha1 import ChecksState
from harness_operator.core.forge.checks import (
    ANNOTATION_CHECKS_CHANGED,
    ANNOTATION_CHECKS_READ,
    ChecksChanged,
    build_checks_read_patch,
    compute_checks,
    compute_checks_due,
    parse_checks_changed,
    select_runs_to_nudge,
)
from harness_operator.core.forge.report_calls import ForgeTarget, build_checks_calls

SHA, OTHER = "a" * 40, "b" * 40
KEY = "0123456789abcdef" * 4
REPO = "acme/app"


def _json(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


GITHUB_REPO = {"repository": {"full_name": REPO}}
DELIVERIES = [
    # (forge, event header, payload, the check's name or None when the commit is not found)
    ("github", "status", {"sha": SHA, "state": "success", "context": "ci/tests", **GITHUB_REPO}),
    (
        "github",
        "check_run",
        {"action": "completed", "check_run": {"head_sha": SHA, "name": "build"}, **GITHUB_REPO},
    ),
    (
        "github",
        "check_run",
        {"action": "created", "check_run": {"head_sha": SHA, "name": "b"}, **GITHUB_REPO},
    ),
    ("github", "check_suite", {"action": "completed", "check_suite": {"head_sha": SHA}, **GITHUB_REPO}),
    ("gitea", "status", {"sha": SHA, "state": "pending", "context": "ci/tests", **GITHUB_REPO}),
    (
        "gitlab",
        "Pipeline Hook",
        {"object_attributes": {"sha": SHA, "status": "running"}, "project": {"path_with_namespace": REPO}},
    ),
    (
        "gitlab",
        "Job Hook",
        {"sha": SHA, "build_name": "test", "project": {"path_with_namespace": REPO}},
    ),
]
HEADER = {"github": "X-GitHub-Event", "gitea": "X-Gitea-Event-Type", "gitlab": "X-Gitlab-Event"}


@pytest.mark.parametrize(("forge", "event", "payload"), DELIVERIES)
def test_a_check_event_of_any_state_names_its_commit(forge: str, event: str, payload: dict[str, Any]) -> None:
    changed = parse_checks_changed(forge, {HEADER[forge]: event}, _json(payload), KEY)
    assert changed == ChecksChanged(REPO, SHA, KEY)
    assert changed.nudge == f"{SHA}@{KEY[:12]}"


@pytest.mark.parametrize(
    ("forge", "headers", "body"),
    [
        # the harness's own commit status is not one of the checks
        ("github", {"X-GitHub-Event": "status"}, {"sha": SHA, "context": "harness/fixer", **GITHUB_REPO}),
        ("gitea", {"X-Gitea-Event": "status"}, {"sha": SHA, "context": "harness/fixer", **GITHUB_REPO}),
        (
            "gitlab",
            {"X-Gitlab-Event": "Job Hook"},
            {"sha": SHA, "build_name": "harness/fixer", "project": {"path_with_namespace": REPO}},
        ),
        # other events, a commit that is not a sha, no repository
        ("github", {"X-GitHub-Event": "issues"}, {"sha": SHA, **GITHUB_REPO}),
        ("gitea", {"X-Gitea-Event-Type": "issue_comment"}, {"sha": SHA, **GITHUB_REPO}),
        ("github", {"X-GitHub-Event": "status"}, {"sha": "main", "context": "ci", **GITHUB_REPO}),
        ("github", {"X-GitHub-Event": "status"}, {"sha": SHA.upper(), "context": "ci", **GITHUB_REPO}),
        ("gitea", {"X-Gitea-Event": "status"}, {"sha": SHA, "context": "ci"}),
        ("gitlab", {"X-Gitlab-Event": "Pipeline Hook"}, {"object_attributes": {"sha": SHA}}),
        ("gitlab", {"X-Gitlab-Event": "Pipeline Hook"}, {"object_attributes": [SHA]}),
        ("bitbucket", {"X-Event-Key": "status"}, {"sha": SHA, **GITHUB_REPO}),
    ],
)
def test_anything_else_names_no_commit(forge: str, headers: dict[str, str], body: dict[str, Any]) -> None:
    assert parse_checks_changed(forge, headers, _json(body), KEY) is None


def test_a_body_that_is_not_an_object_names_no_commit() -> None:
    headers = {"X-Gitea-Event": "status"}
    for body in (b"[1]", b"not json", b"[" * 100000):
        assert parse_checks_changed("gitea", headers, body, KEY) is None


def run(
    name: str = "fixer-7-abc",
    commit: str | None = SHA,
    repository: str = REPO,
    pull_request: str | None = "http://gitea.test/acme/app/pulls/12",
    trigger: str | None = "fixer",
    **annotations: str,
) -> dict[str, Any]:
    changes = {k: v for k, v in (("commit", commit), ("pullRequestURL", pull_request)) if v}
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"agentharness.dev/trigger": trigger} if trigger else {},
            "annotations": {"agentharness.dev/forge-repository": repository, **annotations},
        },
        "status": {"changes": changes},
    }


def test_the_runs_marked_are_those_that_pushed_the_commit_to_a_pull_request_of_the_repository() -> None:
    changed = ChecksChanged("ACME/App", SHA, KEY)
    runs = [
        run("pushed-it"),
        run("older-commit", commit=OTHER),
        run("other-repository", repository="acme/other"),
        run("no-pull-request", pull_request=None),
        run("marked-already", **{ANNOTATION_CHECKS_CHANGED: changed.nudge}),
        run("marked-before", **{ANNOTATION_CHECKS_CHANGED: f"{SHA}@ffffffffffff"}),
        {"metadata": {"name": "no-status"}},
    ]
    assert select_runs_to_nudge(runs, changed) == [
        ("pushed-it", "uid-pushed-it"),
        ("marked-before", "uid-marked-before"),
    ]


def test_a_read_is_due_once_at_the_end_and_again_for_each_new_mark() -> None:
    finished = run()
    assert compute_checks_due(finished) == SHA  # the read when it ends
    read = run(**{ANNOTATION_CHECKS_READ: SHA})
    assert compute_checks_due(read) is None
    nudge = f"{SHA}@{KEY[:12]}"
    marked = run(**{ANNOTATION_CHECKS_READ: SHA, ANNOTATION_CHECKS_CHANGED: nudge})
    assert compute_checks_due(marked) == nudge
    assert (
        compute_checks_due(run(**{ANNOTATION_CHECKS_READ: nudge, ANNOTATION_CHECKS_CHANGED: nudge})) is None
    )
    # a mark for another commit than the run's own is not its checks: the run's commit is read
    stale = run(**{ANNOTATION_CHECKS_CHANGED: f"{OTHER}@{KEY[:12]}"})
    assert compute_checks_due(stale) == SHA
    assert build_checks_read_patch(nudge) == {"metadata": {"annotations": {ANNOTATION_CHECKS_READ: nudge}}}


@pytest.mark.parametrize(
    "unread",
    [
        run(commit=None),
        run(pull_request=None),
        run(pull_request="javascript:alert(1)"),
        run(commit="main"),
        run(trigger=None),
        {"metadata": {}},
    ],
)
def test_no_read_is_due_without_a_commit_pushed_to_a_pull_request_by_a_triggers_run(
    unread: dict[str, Any],
) -> None:
    assert compute_checks_due(unread) is None


def status(context: str, state: str, key: str = "state") -> dict[str, Any]:
    return {"context": context, key: state}


def combined(*statuses: dict[str, Any]) -> bytes:
    return _json({"sha": SHA, "state": "ignored", "statuses": list(statuses)})


def check_runs(*runs: tuple[str, str, str | None]) -> bytes:
    listed = [{"name": n, "status": s, "conclusion": c} for n, s, c in runs]
    return _json({"total_count": len(listed), "check_runs": listed})


NOW = "2026-12-07T08:00:00Z"


@pytest.mark.parametrize(
    ("forge", "answers", "expected"),
    [
        # nothing but the harness's own status: no check
        ("gitea", [combined(status("harness/fixer", "success", "status"))], ("none", 0, 0, 0, 0)),
        ("github", [combined(), check_runs()], ("none", 0, 0, 0, 0)),
        # Gitea names the state `status`; warning and skipped pass
        (
            "gitea",
            [combined(status("ci/a", "success", "status"), status("ci/b", "warning", "status"))],
            ("success", 2, 2, 0, 0),
        ),
        (
            "gitea",
            [combined(status("ci/a", "skipped", "status"), status("ci/b", "pending", "status"))],
            ("pending", 2, 1, 0, 1),
        ),
        # a failure beats an error, an error beats pending; the harness's own failure is not counted
        (
            "github",
            [
                combined(status("ci/a", "error"), status("harness/fixer", "failure")),
                check_runs(("build", "completed", "failure"), ("lint", "in_progress", None)),
            ],
            ("failure", 3, 0, 2, 1),
        ),
        (
            "github",
            [
                combined(status("ci/a", "success")),
                check_runs(("build", "completed", "cancelled"), ("x", "queued", None)),
            ],
            ("error", 3, 1, 1, 1),
        ),
        (
            "github",
            [combined(), check_runs(("build", "completed", "neutral"), ("docs", "completed", "skipped"))],
            ("success", 2, 2, 0, 0),
        ),
        ("github", [combined(), check_runs(("build", "completed", "timed_out"))], ("failure", 1, 0, 1, 0)),
        # GitLab: the commit's jobs; a failure allowed to fail passes; canceled is an error
        (
            "gitlab",
            [
                _json(
                    [
                        {"name": "test", "status": "success"},
                        {"name": "lint", "status": "failed", "allow_failure": True},
                        {"name": "harness/fixer", "status": "failed"},
                    ]
                )
            ],
            ("success", 2, 2, 0, 0),
        ),
        (
            "gitlab",
            [_json([{"name": "test", "status": "running"}, {"name": "deploy", "status": "canceled"}])],
            ("error", 2, 0, 1, 1),
        ),
        ("gitlab", [_json([{"name": "test", "status": "failed"}])], ("failure", 1, 0, 1, 0)),
        ("gitlab", [_json([])], ("none", 0, 0, 0, 0)),
    ],
)
def test_the_checks_of_a_commit_from_each_forges_answers(
    forge: str, answers: list[bytes], expected: tuple[str, int, int, int, int]
) -> None:
    checks = compute_checks(forge, answers, SHA, NOW)
    assert (checks.state, checks.total, checks.passed, checks.failed, checks.pending) == expected
    assert (checks.sha, checks.read_time) == (SHA, NOW)
    assert checks.to_api()["state"] == expected[0]


def test_an_answer_of_another_shape_is_refused() -> None:
    for answer in (b"[]", b'{"message": "Not Found"}', b"null", b'{"statuses": 3}'):
        with pytest.raises(ValueError, match="not a list of checks"):
            compute_checks("gitea", [answer], SHA, NOW)
    with pytest.raises(ValueError):
        compute_checks("gitea", [b"<html>"], SHA, NOW)
    with pytest.raises(ValueError):
        compute_checks("gitlab", [b"{}"], SHA, NOW)


def target(forge: str, api: str) -> ForgeTarget:
    return ForgeTarget(forge, api, True, True, ("report-token", "token"))


def test_the_reads_of_each_forge() -> None:
    github = build_checks_calls(target("github", "https://api.github.com"), "acme/app", SHA, "t0k")
    assert [(c.method, c.url) for c in github] == [
        ("GET", f"https://api.github.com/repos/acme/app/commits/{SHA}/status?per_page=100"),
        ("GET", f"https://api.github.com/repos/acme/app/commits/{SHA}/check-runs?per_page=100"),
    ]
    assert github[0].headers["Authorization"] == "Bearer t0k" and github[0].body is None
    gitea = build_checks_calls(target("gitea", "http://gitea.test/api/v1"), "acme/app", SHA, "t0k")
    assert [(c.method, c.url) for c in gitea] == [
        ("GET", f"http://gitea.test/api/v1/repos/acme/app/commits/{SHA}/status?per_page=100")
    ]
    assert gitea[0].headers["Authorization"] == "token t0k"
    gitlab = build_checks_calls(target("gitlab", "https://gl.test/api/v4"), "acme/app", SHA, "t0k")
    assert [(c.method, c.url) for c in gitlab] == [
        ("GET", f"https://gl.test/api/v4/projects/acme%2Fapp/repository/commits/{SHA}/statuses?per_page=100")
    ]
    assert gitlab[0].headers["PRIVATE-TOKEN"] == "t0k"
    assert "t0k" not in repr(gitlab[0])


def test_the_checks_state_is_one_of_the_apis() -> None:
    assert {s.value for s in ChecksState} == {"pending", "success", "failure", "error", "none"}
