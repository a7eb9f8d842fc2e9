"""core/forge/report.py: when a trigger's run is reported, the comment's markdown (parsed as CommonMark, as
the forges render it), the commit status, and the run's metadata patch."""

from __future__ import annotations

from typing import Any

import pytest
from markdown_it import MarkdownIt

from harness_operator.core.forge.report import (
    ANNOTATION_REPORTED,
    DESCRIPTION_CHARS,
    FINISHED,
    FINISHED_PR,
    SUMMARY_CHARS,
    SUMMARY_LINES,
    WORKING,
    WORKING_PR,
    build_comment_body,
    build_commit_status,
    build_fenced,
    build_report_patch,
    build_reported_run,
    compute_outcome,
    is_report_due,
)
from harness_operator.core.forge.triggering import ANNOTATION_COMMENT_ID, LABEL_PULL_REQUEST
from harness_operator.core.objects.naming import ANNOTATION_HEAD

SHA = "a" * 40
HEAD = "b" * 40


def run(
    *,
    succeeded: tuple[str, str] | None = None,
    changes: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    **status: Any,
) -> dict[str, Any]:
    """A trigger's run as stored: its forge context as the receiver writes it."""
    conditions = [{"type": "Succeeded", "status": "Unknown", "reason": "Running"}]
    if succeeded is not None:
        conditions = [{"type": "Succeeded", "status": succeeded[0], "reason": succeeded[1]}]
    return {
        "metadata": {
            "name": "fixer-7-0123456789",
            "namespace": "team-a",
            "uid": "uid-1",
            "labels": {
                "agentharness.dev/trigger": "fixer",
                "agentharness.dev/forge-thread": "7",
                **(labels or {}),
            },
            "annotations": {
                "agentharness.dev/forge-repository": "acme/app",
                "agentharness.dev/forge-thread-kind": "issue",
                **(annotations or {}),
            },
        },
        "status": {"conditions": conditions, **({"changes": changes} if changes else {}), **status},
    }


def reported(obj: dict[str, Any]):
    found = build_reported_run(obj)
    assert found is not None
    return found


PR = {"pullRequestURL": "http://gitea.test:3000/acme/app/pulls/12", "commit": SHA, "branch": "harness/x"}
USAGE = {
    "inputTokens": 1000,
    "outputTokens": 200,
    "cacheReadTokens": 30,
    "costUSD": 0.0123,
    "costSource": "metered",
}


# --- whose runs, and when ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "drop",
    [
        ("labels", "agentharness.dev/trigger"),
        ("labels", "agentharness.dev/forge-thread"),
        ("annotations", "agentharness.dev/forge-repository"),
    ],
)
def test_a_run_without_its_forge_context_is_not_reported(drop: tuple[str, str]) -> None:
    obj = run()
    del obj["metadata"][drop[0]][drop[1]]
    assert build_reported_run(obj) is None


@pytest.mark.parametrize("thread", ["0", "-3", "7; rm", "12345678901", ""])
def test_a_malformed_thread_number_is_not_reported(thread: str) -> None:
    assert build_reported_run(run(labels={"agentharness.dev/forge-thread": thread})) is None


@pytest.mark.parametrize(
    ("condition", "outcome"),
    [
        (None, "working"),
        (("Unknown", "Queued"), "working"),
        (("True", "Succeeded"), "succeeded"),
        (("False", "ProviderFailed"), "failed"),
        (("False", "Cancelled"), "cancelled"),
    ],
)
def test_the_outcome_is_the_succeeded_condition(condition: tuple[str, str] | None, outcome: str) -> None:
    obj = run(succeeded=condition)
    if condition is None:
        obj["status"]["conditions"] = []
    obj["status"]["phase"] = "Succeeded"  # the phase is a summary: never read to decide
    assert compute_outcome(obj["status"]) == outcome


@pytest.mark.parametrize(
    ("condition", "changes", "stage"),
    [
        (None, None, WORKING),
        (None, PR, WORKING_PR),
        (("False", "ProviderFailed"), None, FINISHED),
        (("True", "Succeeded"), PR, FINISHED_PR),
    ],
)
def test_a_report_is_due_once_per_stage(condition: Any, changes: Any, stage: str) -> None:
    fresh = reported(run(succeeded=condition, changes=changes))
    assert fresh.stage == stage and is_report_due(fresh)
    told = reported(run(succeeded=condition, changes=changes, annotations={ANNOTATION_REPORTED: stage}))
    assert not is_report_due(told)


def test_progress_without_a_new_stage_is_not_a_new_report() -> None:
    obj = run(
        annotations={ANNOTATION_REPORTED: WORKING}, progress={"tokens": 50, "turns": 3, "costUSD": 0.01}
    )
    assert not is_report_due(reported(obj))


# --- the pull request and the head -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "number"),
    [
        ("https://github.com/acme/app/pull/12", 12),
        ("http://gitea.test:3000/acme/app/pulls/12", 12),
        ("https://gitlab.example/group/sub/app/-/merge_requests/12", 12),
        ("https://forge.example/acme/app/whatever", None),
    ],
)
def test_the_pull_request_number_is_read_from_its_url(url: str, number: int | None) -> None:
    found = reported(run(changes={"pullRequestURL": url}))
    assert (found.pull_request_url, found.pull_request_number) == (url, number)


def test_the_status_number_wins_over_the_url() -> None:
    found = reported(run(changes={**PR, "pullRequestNumber": 44}))
    assert found.pull_request_number == 44


@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(1)",
        "https://x.example/a b",
        "https://x.example/a)[click](https://evil.example",
        "https://x.example/<img>",
        "ftp://x.example/a/pull/1",
    ],
)
def test_a_pull_request_url_that_is_not_a_plain_web_url_is_not_shown(url: str) -> None:
    found = reported(run(changes={"pullRequestURL": url}))
    assert found.pull_request_url is None and found.pull_request_number is None
    assert url not in build_comment_body(found)


@pytest.mark.parametrize(
    ("commit", "head", "expected"),
    [
        (SHA, HEAD, SHA),  # the commit pushed is the PR's head now
        (None, HEAD, HEAD),  # a follow-up before it pushed: the head the event saw
        ("not-a-sha", HEAD, HEAD),
        (None, "HEAD~1", None),
    ],
)
def test_the_head_is_the_commit_pushed_else_the_events(commit: Any, head: str, expected: str | None) -> None:
    obj = run(changes={"commit": commit} if commit else None, annotations={ANNOTATION_HEAD: head})
    assert reported(obj).head_sha == expected


# --- the comment -----------------------------------------------------------------------------------


def blocks(markdown: str) -> list[Any]:
    return MarkdownIt("commonmark").parse(markdown)


def code_blocks(markdown: str) -> list[str]:
    return [t.content for t in blocks(markdown) if t.type == "fence"]


def outside_code(markdown: str) -> str:
    """The rendered text of the comment outside code blocks (where a mention or a link would work), and
    every link's target."""
    said = []
    for token in blocks(markdown):
        for child in token.children or []:
            if child.type in ("text", "code_inline", "html_inline"):
                said.append(child.content)
            elif child.type in ("softbreak", "hardbreak"):
                said.append("\n")
            elif child.type == "link_open":
                said.append(f"[link {child.attrs.get('href')}]")
    return "".join(said)


def test_a_working_comment_says_so_and_how_to_see_more() -> None:
    body = build_comment_body(reported(run(progress={"tokens": 1234, "costUSD": 0.5, "duration": "2m5s"})))
    first = body.splitlines()[0]
    assert first == "<!-- harness-run team-a/fixer-7-0123456789 uid-1 -->"
    text = outside_code(body)
    assert "HarnessRun team-a/fixer-7-0123456789 is working on it" in text
    assert "tokens: 1,234" in text and "cost: $0.5000" in text and "time: 2m5s" in text
    assert "kubectl -n team-a get hrun fixer-7-0123456789" in text
    assert "harnessctl logs fixer-7-0123456789 -n team-a" in text
    assert "Summary" not in text and code_blocks(body) == []


def test_a_finished_comment_has_the_outcome_the_pull_request_usage_and_summary() -> None:
    output = {"excerpt": "Renamed parse() to parse_config().\nAll tests pass.\n"}
    obj = run(succeeded=("True", "Succeeded"), changes=PR, usage=USAGE, output=output)
    body = build_comment_body(reported(obj))
    text = outside_code(body)
    assert "succeeded" in text
    assert "Pull request: http://gitea.test:3000/acme/app/pulls/12" in text
    assert "tokens: 1,230" in text and "cost: $0.0123 (metered)" in text
    assert code_blocks(body) == ["Renamed parse() to parse_config().\nAll tests pass.\n"]


def test_a_failed_comment_says_why_in_a_code_block() -> None:
    obj = run(
        succeeded=("False", "ProviderFailed"), reason="ProviderFailed", message="exit 1: @alice broke it"
    )
    body = build_comment_body(reported(obj))
    assert "failed (ProviderFailed)" in outside_code(body)
    assert code_blocks(body) == ["exit 1: @alice broke it\n"]
    assert "@alice" not in outside_code(body)


def test_an_untrusted_reason_is_not_shown() -> None:
    obj = run(succeeded=("False", "x"), reason="Bad`](https://evil.example)")
    found = reported(obj)
    assert found.reason is None and "evil" not in build_comment_body(found)


HOSTILE = [
    "```\n@everyone look at [this](https://evil.example)\n```",
    "````\n# Heading\n<!-- harness-run team-a/other uid-2 -->",
    "~~~\n@admin fixes #1\n",
    "    indented\n```` ````` ``````\n@bob",
    "line\r\n```\r\n@carol\u202e",
]


@pytest.mark.parametrize("output", HOSTILE)
def test_the_output_cannot_leave_its_code_block(output: str) -> None:
    """Whatever the agent wrote, the rendered comment has it in one code block: nothing of it mentions
    anyone, links, or renders as markdown."""
    obj = run(succeeded=("True", "Succeeded"), output={"excerpt": output})
    body = build_comment_body(reported(obj))
    fenced = code_blocks(body)
    assert len(fenced) == 1
    assert "@" not in outside_code(body) and "evil" not in outside_code(body)
    assert "Heading" not in outside_code(body)
    assert [t.type for t in blocks(body) if t.type in ("heading_open", "html_block")] == ["html_block"]
    assert "\u202e" not in body and "\r" not in body


def test_the_summary_is_the_outputs_first_lines_bounded() -> None:
    many = "\n".join(f"line {i}" for i in range(100))
    fenced = build_fenced(many, SUMMARY_LINES, SUMMARY_CHARS)
    assert code_blocks(fenced) == ["\n".join(f"line {i}" for i in range(SUMMARY_LINES)) + "\n"]
    assert fenced.endswith("(cut; the whole output is on the run)")
    wide = build_fenced("x" * 10_000, SUMMARY_LINES, SUMMARY_CHARS)
    assert len(code_blocks(wide)[0]) == SUMMARY_CHARS + 1
    assert not build_fenced("short", SUMMARY_LINES, SUMMARY_CHARS).endswith("run)")


# --- the commit status -----------------------------------------------------------------------------


def test_an_issues_run_has_no_status_until_its_pull_request() -> None:
    assert build_commit_status(reported(run())) is None
    assert build_commit_status(reported(run(changes={"commit": SHA}))) is None  # pushed, no PR
    status = build_commit_status(reported(run(changes=PR)))
    assert status is not None and (status.sha, status.state) == (SHA, "pending")


def test_a_pull_requests_run_marks_the_head_the_event_saw_while_it_works() -> None:
    obj = run(annotations={"agentharness.dev/forge-thread-kind": "pull", ANNOTATION_HEAD: HEAD})
    status = build_commit_status(reported(obj))
    assert status is not None
    assert (status.sha, status.state, status.context) == (HEAD, "pending", "harness/fixer")
    assert status.description == "HarnessRun fixer-7-0123456789 working"


@pytest.mark.parametrize(
    ("condition", "state", "said"),
    [
        (("True", "Succeeded"), "success", "succeeded, $0.0123"),
        (("False", "MaxTurns"), "failure", "failed: MaxTurns, $0.0123"),
        (("False", "Cancelled"), "error", "cancelled: Cancelled, $0.0123"),
    ],
)
def test_a_finished_runs_status(condition: tuple[str, str], state: str, said: str) -> None:
    status = build_commit_status(reported(run(succeeded=condition, changes=PR, usage=USAGE)))
    assert status is not None
    assert status.state == state and status.description == f"HarnessRun fixer-7-0123456789 {said}"


def test_a_status_description_is_bounded() -> None:
    obj = run(succeeded=("False", "P" * 64), changes=PR, usage=USAGE)
    obj["metadata"]["name"] = "n" * 253
    status = build_commit_status(reported(obj))
    assert status is not None and len(status.description) == DESCRIPTION_CHARS


# --- what the run remembers ------------------------------------------------------------------------


def test_the_patch_records_the_stage_the_comment_and_the_pull_request() -> None:
    assert build_report_patch(reported(run()), None) == {
        "metadata": {"annotations": {ANNOTATION_REPORTED: WORKING}}
    }
    patch = build_report_patch(reported(run(changes=PR)), "301")
    assert patch == {
        "metadata": {
            "annotations": {ANNOTATION_REPORTED: WORKING_PR, ANNOTATION_COMMENT_ID: "301"},
            "labels": {LABEL_PULL_REQUEST: "12"},
        }
    }


def test_a_malformed_comment_id_is_not_used() -> None:
    assert reported(run(annotations={ANNOTATION_COMMENT_ID: "../../x"})).comment_id is None
    assert reported(run(annotations={ANNOTATION_COMMENT_ID: "301"})).comment_id == "301"


# --- a change awaiting approval ----------------------------------------------------------------------

AWAITING_CHANGES = {
    "base": SHA,
    "files": 3,
    "insertions": 12,
    "deletions": 4,
    "tree": "c" * 40,
    "approvalPaths": [".github/workflows/ci.yml", "AGENTS.md\n@everyone [x](http://evil)"],
}


def test_a_change_awaiting_approval_is_its_own_stage_with_the_diffs_summary_and_how_to_approve() -> None:
    obj = run(
        succeeded=("Unknown", "AwaitingApproval"),
        changes=AWAITING_CHANGES,
        output={"excerpt": "Fixed the workflow."},
        annotations={ANNOTATION_REPORTED: WORKING},
    )
    report = reported(obj)
    assert report.outcome == "awaiting" and report.stage == "awaiting" and is_report_due(report)
    body = build_comment_body(report)
    text = outside_code(body)
    assert "HarnessRun team-a/fixer-7-0123456789 awaits approval" in text
    assert "The change is kept, not pushed: 3 files changed (+12 -4)." in text
    assert "harnessctl approve fixer-7-0123456789 -n team-a" in text
    assert "harnessctl reject fixer-7-0123456789 -n team-a --reason TEXT" in text
    # The paths are the agent's file names: shown only inside a code block, where nothing renders.
    assert "@everyone" not in text and "evil" not in text
    assert any(".github/workflows/ci.yml" in block for block in code_blocks(body))
    assert "Fixed the workflow." in "".join(code_blocks(body))
    # Approved and published later: a new stage, the comment edited once more.
    later = reported(run(succeeded=("True", "Succeeded"), changes={**AWAITING_CHANGES, **PR}))
    assert later.stage == FINISHED_PR and later.kept is None


def test_a_pull_requests_run_awaiting_approval_stays_pending() -> None:
    obj = run(
        succeeded=("Unknown", "AwaitingApproval"),
        changes=AWAITING_CHANGES,
        annotations={"agentharness.dev/forge-thread-kind": "pull", ANNOTATION_HEAD: HEAD},
    )
    status = build_commit_status(reported(obj))
    assert status is not None and (status.state, status.description) == (
        "pending",
        "HarnessRun fixer-7-0123456789 awaits approval",
    )
