"""What a delivery does for a HarnessTrigger (pure): the repository and event filters, who may trigger,
follow-ups on a pull request a run of the trigger opened, duplicates, concurrency per thread, and the run
manifest (name from the body's hash, labels and annotations, $(event.*) substituted once), validated as a
HarnessRun."""

import dataclasses
from typing import Any

import pytest

from harness_operator.api.crd import crd_schema_for
from harness_operator.api.v1alpha1 import HarnessPipeline, HarnessRun, HarnessTrigger
from harness_operator.core.forge.events import ForgeEvent
from harness_operator.core.forge.triggering import (
    ANNOTATION_COMMENT_ID,
    LABEL_PULL_REQUEST,
    PIPELINE,
    TeamAnswer,
    TriggerRun,
    build_trigger_run,
    decide_delivery,
    find_foreign_reason,
    find_teams_to_ask,
    substitute,
    trigger_run_name,
)
from harness_operator.core.objects.cel import check_rules
from harness_operator.core.objects.naming import (
    ANNOTATION_AUTHOR,
    ANNOTATION_DELIVERY,
    ANNOTATION_EVENT,
    ANNOTATION_HEAD,
    ANNOTATION_REPOSITORY,
    ANNOTATION_THREAD_KIND,
    LABEL_MANAGED_BY,
    LABEL_THREAD,
    LABEL_TRIGGER,
    LABEL_USER,
)

KEY = "0123456789abcdef" * 4
TEMPLATE_SPEC: dict[str, Any] = {
    "provider": "claude",
    "prompt": "Fix issue #$(event.number) of $(event.repository): $(event.title)\n\n$(event.body)\n"
    "Asked by $(event.author): $(event.comment) ($(event.url)) $(event.unknown)",
    "workspace": {
        "git": {"url": "http://gitea.test:3000/acme/payments.git"},
        "publish": {
            "credentialsSecretRef": {"name": "push", "key": "token"},
            "branch": {"name": "agent/$(run.name)"},
            "pullRequest": {"forge": "gitea", "title": "agent: $(event.title)"},
        },
    },
}


RUN_SCHEMA = crd_schema_for("HarnessRun")


def valid_run(manifest: dict[str, Any] | None) -> dict[str, Any]:
    """The manifest, checked as the API server would: the model, then the CRD's CEL rules."""
    assert manifest is not None
    HarnessRun.model_validate(manifest)
    assert check_rules(RUN_SCHEMA, manifest) == []
    return manifest


def trigger(**spec: Any) -> HarnessTrigger:
    body: dict[str, Any] = {
        "metadata": {"name": "payments-agent", "namespace": "team-a", "uid": "t-uid"},
        "spec": {
            "forge": {
                "type": "gitea",
                "url": "http://gitea.test:3000",
                "webhookSecretRef": {"name": "hook", "key": "secret"},
            },
            "repositories": ["acme/payments"],
            "serviceAccountName": "agent-trigger",
            "events": [
                {"type": "IssueLabeled", "label": "agent"},
                {"type": "Command", "command": "/agent"},
                {"type": "ReviewComment"},
                {"type": "CheckFailed"},
            ],
            "authors": {"users": ["alice", "Bob"]},
            "runTemplate": {
                "metadata": {
                    "labels": {"team": "a", LABEL_TRIGGER: "forged", LABEL_PULL_REQUEST: "99"},
                    "annotations": {"note": "kept", ANNOTATION_COMMENT_ID: "1"},
                },
                "spec": TEMPLATE_SPEC,
            },
            **spec,
        },
    }
    return HarnessTrigger.model_validate(body)


def event(**fields: Any) -> ForgeEvent:
    base: dict[str, Any] = {
        "forge": "gitea",
        "kind": "IssueLabeled",
        "repository": "acme/payments",
        "number": 3,
        "is_pull_request": False,
        "title": "Rename helper",
        "body": "The helper's name is misleading.",
        "comment": "",
        "author": "alice",
        "association": None,
        "label": "agent",
        "head_branch": None,
        "head_sha": None,
        "check": None,
        "url": "http://gitea.test:3000/acme/payments/issues/3",
        "delivery_key": KEY,
        "labels": ("agent",),
    }
    return ForgeEvent(**{**base, **fields})


TRIGGER_ACCOUNT = "system:serviceaccount:team-a:agent-trigger"
PIPELINES_ACCOUNT = "system:serviceaccount:team-a:agent-pipelines"


def run(name: str, **fields: Any) -> TriggerRun:
    """A run the trigger's ServiceAccount made (author), unless the annotations say otherwise."""
    labels = {LABEL_TRIGGER: "payments-agent", LABEL_THREAD: "3", **fields.pop("labels", {})}
    annotations = {
        ANNOTATION_REPOSITORY: "acme/payments",
        ANNOTATION_THREAD_KIND: "issue",
        ANNOTATION_AUTHOR: TRIGGER_ACCOUNT,
    }
    annotations.update(fields.pop("annotations", {}))
    base: dict[str, Any] = {
        "creation_timestamp": "2026-12-07T05:00:00Z",
        "finished": True,
        "branch": None,
        "succeeded": True,
    }
    return TriggerRun(name=name, labels=labels, annotations=annotations, **{**base, **fields})


def opener(**fields: Any) -> TriggerRun:
    """The run that opened pull request #4 from issue #3 (the reporting step labelled it)."""
    return run("payments-agent-3-aaaaaaaaaa", labels={LABEL_PULL_REQUEST: "4"}, branch="agent/x", **fields)


def test_a_labelled_issue_creates_the_template_run_as_a_valid_harness_run() -> None:
    decision = decide_delivery(trigger(), event(), [])
    assert (decision.result, decision.delete) == ("created", ())
    assert decision.reason == "created run payments-agent-3-0123456789 for issue #3 of acme/payments"
    made = valid_run(decision.create)
    assert made["metadata"]["name"] == "payments-agent-3-0123456789"
    assert made["metadata"]["namespace"] == "team-a"
    assert made["metadata"]["labels"] == {
        "team": "a",
        LABEL_TRIGGER: "payments-agent",  # ours win over the template's
        LABEL_THREAD: "3",
        LABEL_MANAGED_BY: "harness-operator",
        LABEL_USER: "system_c_serviceaccount_c_team-a_c_agent-trigger",
    }
    assert made["metadata"]["annotations"] == {
        "note": "kept",
        ANNOTATION_REPOSITORY: "acme/payments",
        ANNOTATION_THREAD_KIND: "issue",
        ANNOTATION_DELIVERY: KEY,
        ANNOTATION_EVENT: "IssueLabeled",
    }
    assert type(made["metadata"]["annotations"][ANNOTATION_EVENT]) is str
    assert "ownerReferences" not in made["metadata"]
    assert made["spec"]["prompt"] == (
        "Fix issue #3 of acme/payments: Rename helper\n\nThe helper's name is misleading.\n"
        "Asked by alice:  (http://gitea.test:3000/acme/payments/issues/3) $(event.unknown)"
    )
    publish = made["spec"]["workspace"]["publish"]
    assert publish["branch"] == {"name": "agent/$(run.name)"}  # the run's own parameters stay
    assert publish["pullRequest"]["title"] == "agent: Rename helper"
    assert "resumeFrom" not in made["spec"]


def test_the_run_name_is_fixed_by_the_body_so_a_replay_is_a_duplicate() -> None:
    name = trigger_run_name("payments-agent", 3, KEY)
    assert decide_delivery(trigger(), event(), [run(name, finished=False)]).result == "duplicate"
    long = trigger_run_name("a" * 29 + "-" + "b" * 40, 12345, KEY)
    assert long == "a" * 29 + "-12345-0123456789"  # the name cut to 30, its trailing '-' dropped


def test_substitution_is_once_never_recursive() -> None:
    hostile = event(title="$(event.body)", body="$(event.title) $(run.name) $(event.comment)")
    made = decide_delivery(trigger(), hostile, []).create
    assert made is not None
    assert made["spec"]["prompt"].startswith(
        "Fix issue #3 of acme/payments: $(event.body)\n\n$(event.title) $(run.name) $(event.comment)\n"
    )
    assert substitute(
        {"a": ["$(event.x)", 1, None, {"b": "$(event.x)$(event.x)"}]}, {"x": "$(event.x)y"}
    ) == {"a": ["$(event.x)y", 1, None, {"b": "$(event.x)y$(event.x)y"}]}


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"repository": "acme/other"}, "repository acme/other is not in spec.repositories"),
        ({"labels": ("bug",), "label": "bug"}, "the issue's label is not one of spec.events' labels"),
        ({"labels": (), "label": None}, "the issue's label is not one of spec.events' labels"),
        (
            {"kind": "Command", "comment": "looks good"},
            "the comment does not start with a command of spec.events",
        ),
        (
            {"kind": "Command", "comment": "/agentx do it"},
            "the comment does not start with a command of spec.events",
        ),
        (
            {"kind": "Command", "comment": "please /agent fix"},
            "the comment does not start with a command of spec.events",
        ),
    ],
)
def test_deliveries_this_trigger_does_not_take_are_ignored(fields: dict[str, Any], reason: str) -> None:
    decision = decide_delivery(trigger(), event(**fields), [])
    assert (decision.result, decision.reason, decision.create) == ("ignored", reason, None)


def test_repositories_and_labels_compare_case_insensitively() -> None:
    assert (
        decide_delivery(trigger(), event(repository="ACME/Payments", labels=("Agent",)), []).result
        == "created"
    )


def test_an_event_type_not_in_spec_events_is_ignored() -> None:
    only_labels = trigger(events=[{"type": "IssueLabeled", "label": "agent"}])
    check = event(kind="CheckFailed", number=4, is_pull_request=True, check="ci")
    assert decide_delivery(only_labels, check, [opener()]).reason == "spec.events has no CheckFailed"
    review = event(kind="ReviewComment", number=4, is_pull_request=True, comment="rename it")
    assert decide_delivery(only_labels, review, [opener()]).result == "ignored"


def test_a_stranger_is_refused_named_and_the_comment_not_echoed() -> None:
    stranger = event(kind="Command", comment="/agent rm -rf / SECRET-PAYLOAD", author="mallory")
    decision = decide_delivery(trigger(), stranger, [])
    assert (decision.result, decision.create) == ("refused", None)
    assert decision.reason == "mallory is not allowed by spec.authors to trigger runs"
    assert "SECRET" not in decision.reason
    assert decide_delivery(trigger(), event(author=""), []).reason.startswith("an unknown author")
    assert decide_delivery(trigger(), event(author="bob"), []).result == "created"  # names fold case


def test_an_empty_allowlist_allows_nobody() -> None:
    assert decide_delivery(trigger(authors={}), event(), []).result == "refused"


def test_github_associations_allow_only_on_github() -> None:
    github = trigger(
        forge={"type": "github", "url": "https://github.com", "webhookSecretRef": {"name": "h", "key": "s"}},
        authors={"associations": ["MEMBER", "OWNER"]},
    )
    member = event(forge="github", kind="Command", comment="/agent go", author="dave", association="MEMBER")
    assert decide_delivery(github, member, []).result == "created"
    outsider = dataclasses.replace(member, association="CONTRIBUTOR")
    assert decide_delivery(github, outsider, []).result == "refused"
    # A gitea trigger that somehow holds associations (the CRD refuses them) still does not read them.
    gitea = trigger(authors={"associations": ["MEMBER"]})
    assert decide_delivery(gitea, dataclasses.replace(member, forge="gitea"), []).result == "refused"


def test_a_command_on_an_issue_passes_the_rest_of_the_comment() -> None:
    command = event(kind="Command", comment="  /agent   fix the totals\nplease ", labels=(), label=None)
    made = decide_delivery(trigger(), command, []).create
    assert made is not None
    assert "Asked by alice: fix the totals\nplease (" in made["spec"]["prompt"]


def test_a_command_on_a_pull_request_no_run_opened_is_ignored() -> None:
    command = event(kind="Command", comment="/agent go", number=9, is_pull_request=True)
    decision = decide_delivery(trigger(), command, [opener()])
    assert decision.result == "ignored"
    assert decision.reason == "pull request #9 was not opened by a run of trigger payments-agent"


def test_a_command_on_the_pull_request_a_run_opened_continues_it_on_its_branch() -> None:
    command = event(
        kind="Command",
        comment="/agent rename the function",
        number=4,
        is_pull_request=True,
        head_branch="agent/x",
        head_sha="d" * 40,
        url="http://gitea.test:3000/acme/payments/pulls/4",
    )
    decision = decide_delivery(trigger(), command, [opener()])
    assert decision.result == "created"
    assert decision.reason == "created run payments-agent-4-0123456789 for pull request #4 of acme/payments"
    made = valid_run(decision.create)
    spec, meta = made["spec"], made["metadata"]
    assert spec["resumeFrom"] == {"run": "payments-agent-3-aaaaaaaaaa"}
    assert spec["workspace"]["git"] == {"url": "http://gitea.test:3000/acme/payments.git", "ref": "agent/x"}
    assert spec["workspace"]["publish"]["branch"] == {"name": "agent/x", "ifExists": "FastForward"}
    assert spec["workspace"]["publish"]["pullRequest"]["forge"] == "gitea"
    assert meta["labels"][LABEL_PULL_REQUEST] == "4" and meta["labels"][LABEL_THREAD] == "4"
    assert meta["annotations"][ANNOTATION_THREAD_KIND] == "pull"
    assert meta["annotations"][ANNOTATION_HEAD] == "d" * 40
    assert "rename the function" in spec["prompt"]


def test_a_follow_up_resumes_the_newest_succeeded_run_of_the_pull_request() -> None:
    later = run(
        "payments-agent-4-bbbbbbbbbb",
        labels={LABEL_PULL_REQUEST: "4", LABEL_THREAD: "4"},
        annotations={ANNOTATION_THREAD_KIND: "pull"},
        creation_timestamp="2026-12-07T06:00:00Z",
        branch="agent/x",
    )
    failed_latest = dataclasses.replace(
        later, name="payments-agent-4-cccccccccc", creation_timestamp="2026-12-07T07:00:00Z", succeeded=False
    )
    review = event(kind="ReviewComment", comment="add a test", number=4, is_pull_request=True)
    made = decide_delivery(trigger(), review, [opener(), later, failed_latest]).create
    assert made is not None and made["spec"]["resumeFrom"] == {"run": "payments-agent-4-bbbbbbbbbb"}
    # The branch comes from the run's status; without one the event's head branch is used.
    bare = dataclasses.replace(opener(), branch=None)
    made = valid_run(
        decide_delivery(trigger(), dataclasses.replace(review, head_branch="agent/y"), [bare]).create
    )
    assert made["spec"]["workspace"]["git"]["ref"] == "agent/y"
    assert made["spec"]["workspace"]["publish"]["branch"]["name"] == "agent/y"
    unknown = decide_delivery(trigger(), review, [bare])
    assert (unknown.result, unknown.reason) == (
        "ignored",
        "the branch of pull request #4 is unknown: run payments-agent-3-aaaaaaaaaa reported none",
    )


def test_a_follow_up_drops_the_templates_workspace_from() -> None:
    spec = {**TEMPLATE_SPEC, "workspace": {**TEMPLATE_SPEC["workspace"], "from": {"run": "base-change"}}}
    review = event(kind="ReviewComment", comment="x", number=4, is_pull_request=True)
    made = valid_run(decide_delivery(trigger(runTemplate={"spec": spec}), review, [opener()]).create)
    assert "from" not in made["spec"]["workspace"]
    first = valid_run(decide_delivery(trigger(runTemplate={"spec": spec}), event(), []).create)
    assert first["spec"]["workspace"]["from"] == {"run": "base-change"}


def test_a_review_comment_starting_with_a_command_passes_the_rest() -> None:
    review = event(kind="ReviewComment", comment="/agent use a set here", number=4, is_pull_request=True)
    made = decide_delivery(trigger(), review, [opener()]).create
    assert made is not None and "Asked by alice: use a set here (" in made["spec"]["prompt"]
    commands_only = trigger(events=[{"type": "Command", "command": "/agent"}])
    assert decide_delivery(commands_only, review, [opener()]).result == "created"
    plain = dataclasses.replace(review, comment="nit: spacing")
    assert decide_delivery(commands_only, plain, [opener()]).result == "ignored"


def test_a_failed_check_needs_no_allowed_author_and_names_the_check() -> None:
    check = event(kind="CheckFailed", number=4, is_pull_request=True, author="ci-bot", check="unit tests")
    spec = dict(TEMPLATE_SPEC, prompt="Check $(event.check) failed on $(event.headBranch).")
    made = decide_delivery(
        trigger(runTemplate={"spec": spec}), dataclasses.replace(check, head_branch="agent/x"), [opener()]
    ).create
    assert made is not None and made["spec"]["prompt"] == "Check unit tests failed on agent/x."


def test_a_failed_commit_status_finds_its_pull_request_by_the_pushed_commit() -> None:
    status = event(kind="CheckFailed", number=0, is_pull_request=True, head_sha="d" * 40, check="ci/build")
    decision = decide_delivery(trigger(), status, [opener(commit="d" * 40)])
    assert decision.result == "created" and decision.create is not None
    assert decision.create["metadata"]["name"] == "payments-agent-4-0123456789"
    stray = decide_delivery(trigger(), status, [opener(commit="e" * 40)])
    assert stray.reason == f"commit {'d' * 40} was not pushed by a run of trigger payments-agent"
    other_repo = opener(commit="d" * 40, annotations={ANNOTATION_REPOSITORY: "acme/other"})
    assert decide_delivery(trigger(), status, [other_repo]).result == "ignored"


def test_a_failed_check_on_an_older_commit_or_after_a_check_follow_up_starts_nothing() -> None:
    """A failing CI would otherwise start runs without end: one follow-up per failure in a row."""
    check = event(kind="CheckFailed", number=4, is_pull_request=True, head_sha="d" * 40, check="ci")
    assert decide_delivery(trigger(), check, [opener(commit="d" * 40)]).result == "created"
    old = decide_delivery(trigger(), check, [opener(commit="e" * 40)])
    assert (old.result, old.reason) == (
        "ignored",
        f"the check ran on {'d' * 40}, not on the head run payments-agent-3-aaaaaaaaaa pushed",
    )
    answered = opener(commit="d" * 40, annotations={ANNOTATION_EVENT: "CheckFailed"})
    again = decide_delivery(trigger(), check, [answered])
    assert (again.result, again.reason) == (
        "ignored",
        "run payments-agent-3-aaaaaaaaaa answered a failed check already; a comment starts the next follow-up",
    )
    comment = event(kind="Command", comment="/agent try again", number=4, is_pull_request=True)
    made = decide_delivery(trigger(), comment, [answered]).create
    assert made is not None and made["metadata"]["annotations"][ANNOTATION_EVENT] == "Command"


def test_an_issue_label_without_issue_labeled_in_spec_events() -> None:
    commands = trigger(events=[{"type": "Command", "command": "/agent"}])
    assert decide_delivery(commands, event(), []).reason == "spec.events has no IssueLabeled"


def test_runs_of_other_triggers_are_not_followed_up() -> None:
    foreign = dataclasses.replace(opener(), labels={**opener().labels, LABEL_TRIGGER: "someone-else"})
    review = event(kind="ReviewComment", comment="x", number=4, is_pull_request=True)
    assert decide_delivery(trigger(), review, [foreign]).result == "ignored"


def test_forbid_skips_while_a_run_of_the_thread_is_unfinished() -> None:
    active = run("payments-agent-3-aaaaaaaaaa", finished=False, succeeded=False)
    decision = decide_delivery(trigger(), event(), [active])
    assert (decision.result, decision.create) == ("skipped", None)
    assert decision.reason == (
        "run payments-agent-3-aaaaaaaaaa of issue #3 of acme/payments is unfinished and "
        "spec.concurrencyPolicy is Forbid"
    )
    # Another issue's, or a pull request's of the same number, or another repository's run: no matter.
    others = [
        run("o1", finished=False, labels={LABEL_THREAD: "5"}),
        run("o2", finished=False, annotations={ANNOTATION_THREAD_KIND: "pull"}),
        run("o3", finished=False, annotations={ANNOTATION_REPOSITORY: "acme/other"}),
    ]
    assert decide_delivery(trigger(), event(), others).result == "created"


def test_a_pull_requests_thread_includes_the_run_that_opened_it() -> None:
    review = event(kind="ReviewComment", comment="x", number=4, is_pull_request=True)
    working = opener(finished=False, succeeded=False)
    assert decide_delivery(trigger(), review, [working]).result == "skipped"


def test_replace_deletes_the_threads_unfinished_runs_and_allow_keeps_them() -> None:
    runs = [run("r1", finished=False), run("r2", finished=True), run("r3", finished=False)]
    replace = decide_delivery(trigger(concurrencyPolicy="Replace"), event(), runs)
    assert (replace.result, replace.delete) == ("created", (("HarnessRun", "r1"), ("HarnessRun", "r3")))
    allow = decide_delivery(trigger(concurrencyPolicy="Allow"), event(), runs)
    assert (allow.result, allow.delete) == ("created", ())


def test_the_order_of_checks_ignored_then_refused_then_duplicate_then_skipped() -> None:
    name = trigger_run_name("payments-agent", 3, KEY)
    stranger = event(author="mallory")
    assert decide_delivery(trigger(), dataclasses.replace(stranger, repository="x/y"), []).result == "ignored"
    assert decide_delivery(trigger(), stranger, [run(name)]).result == "refused"
    assert decide_delivery(trigger(), event(), [run(name, finished=False)]).result == "duplicate"


def test_a_user_label_that_cannot_name_the_service_account_is_dropped() -> None:
    long_sa = trigger(serviceAccountName="s" * 60)
    made = decide_delivery(long_sa, event(), []).create
    assert made is not None and LABEL_USER not in made["metadata"]["labels"]


def test_build_trigger_run_reads_a_harness_run_object() -> None:
    body = {
        "metadata": {
            "name": "r",
            "labels": {LABEL_TRIGGER: "t"},
            "annotations": {ANNOTATION_REPOSITORY: "acme/payments"},
            "creationTimestamp": "2026-12-07T05:00:00Z",
        },
        "status": {
            "conditions": [{"type": "Succeeded", "status": "True"}],
            "changes": {"branch": "agent/x", "commit": "d" * 40},
        },
    }
    assert build_trigger_run(body) == TriggerRun(
        "r",
        {LABEL_TRIGGER: "t"},
        {ANNOTATION_REPOSITORY: "acme/payments"},
        "2026-12-07T05:00:00Z",
        True,
        "agent/x",
        True,
        "d" * 40,
    )
    running = build_trigger_run(
        {"metadata": {"name": "s"}, "status": {"conditions": [{"type": "Succeeded", "status": "Unknown"}]}}
    )
    assert (running.finished, running.succeeded, running.branch, running.commit) == (False, False, None, None)
    assert build_trigger_run({}).name == ""


TOKEN_REF = {"name": "forge-token", "key": "token"}


def with_teams(
    forge: str = "gitea", teams: tuple[str, ...] = ("acme/platform", "acme/sre")
) -> HarnessTrigger:
    url = {"github": "https://github.com", "gitlab": "https://gitlab.example"}.get(
        forge, "http://gitea.test:3000"
    )
    hook = {"name": "hook", "key": "secret"}
    return trigger(
        forge={"type": forge, "url": url, "webhookSecretRef": hook, "tokenSecretRef": TOKEN_REF},
        authors={"users": ["alice"], "teams": list(teams)},
    )


def test_teams_are_asked_only_when_users_and_associations_do_not_already_allow() -> None:
    stranger = event(kind="Command", comment="/agent go", author="carol")
    assert find_teams_to_ask(with_teams(), stranger) == ("acme/platform", "acme/sre")
    assert find_teams_to_ask(with_teams(), event(author="alice")) == ()  # a listed user: no API call
    assert find_teams_to_ask(trigger(), stranger) == ()  # no teams
    assert find_teams_to_ask(with_teams(), event(repository="acme/other", author="carol")) == ()  # ignored
    assert find_teams_to_ask(with_teams(), event(kind="Command", comment="hi", author="carol")) == ()
    assert find_teams_to_ask(with_teams(), event(author="")) == ()  # nobody to ask about
    check = event(kind="CheckFailed", number=4, is_pull_request=True, head_sha="a" * 40, author="ci")
    assert find_teams_to_ask(with_teams(), check) == ()  # a failed check is nobody's
    github = with_teams("github")
    member = event(forge="github", kind="Command", comment="/agent go", author="dave", association="MEMBER")
    allowed_by_association = trigger(
        forge=github.spec.forge.to_api(), authors={"associations": ["MEMBER"], "teams": ["acme/platform"]}
    )
    assert find_teams_to_ask(allowed_by_association, member) == ()
    assert find_teams_to_ask(github, member) == ("acme/platform", "acme/sre")


def test_gitlab_teams_need_the_events_user_id() -> None:
    gitlab = with_teams("gitlab", ("acme/platform/backend",))
    note = event(forge="gitlab", kind="Command", comment="/agent go", author="erin", author_id=42)
    assert find_teams_to_ask(gitlab, note) == ("acme/platform/backend",)
    anonymous = dataclasses.replace(note, author_id=None)
    assert find_teams_to_ask(gitlab, anonymous) == ()
    decision = decide_delivery(gitlab, anonymous, [])
    assert decision.result == "refused" and "names no user id" in decision.reason


def test_a_team_member_triggers_a_non_member_is_refused_and_an_unanswered_question_starts_nothing() -> None:
    carol = event(kind="Command", comment="/agent go", author="carol")
    made = decide_delivery(with_teams(), carol, [], TeamAnswer(member_of="acme/sre"))
    assert made.result == "created" and made.create is not None
    refused = decide_delivery(with_teams(), carol, [], TeamAnswer())
    assert (refused.result, refused.create) == ("refused", None)
    assert refused.reason.startswith("carol is not allowed by spec.authors to trigger runs nor in a team")
    failed = decide_delivery(with_teams(), carol, [], TeamAnswer(failed="acme/sre: HTTP 503"))
    assert (failed.result, failed.create) == ("error", None)
    assert "could not be asked of the forge (acme/sre: HTTP 503)" in failed.reason
    assert "redeliver" in failed.reason


def test_a_team_answer_does_not_override_the_filters_before_it() -> None:
    member = TeamAnswer(member_of="acme/platform")
    other_repo = event(repository="acme/other", author="carol")
    assert decide_delivery(with_teams(), other_repo, [], member).result == "ignored"
    name = trigger_run_name("payments-agent", 3, KEY)
    assert decide_delivery(with_teams(), event(author="carol"), [run(name)], member).result == "duplicate"


TRIGGER_SCHEMA = crd_schema_for("HarnessTrigger")


def test_the_crd_refuses_teams_without_a_token_and_a_github_team_without_its_org() -> None:
    def violations(spec_patch: dict[str, Any], name: str = "payments-agent") -> list[str]:
        body = with_teams().to_api()
        body["metadata"] = {"name": name, "namespace": "team-a"}
        body["spec"].update(spec_patch)
        return [v.message for v in check_rules(TRIGGER_SCHEMA, body)]

    assert violations({}) == []
    forge = with_teams().spec.forge.to_api()
    del forge["tokenSecretRef"]
    [message] = violations({"forge": forge})
    assert message.startswith("spec.authors.teams needs spec.forge.tokenSecretRef")
    [message] = violations({"authors": {"teams": ["platform"]}})
    assert message.startswith("spec.authors.teams: on github and gitea a team is org/team")
    gitlab = {**with_teams("gitlab").spec.forge.to_api()}
    assert violations({"forge": gitlab, "authors": {"teams": ["acme", "acme/platform/backend"]}}) == []
    [message] = violations({"forge": gitlab, "authors": {"teams": ["acme//platform"]}})
    assert message.startswith("spec.authors.teams[]: must be org/team")


def test_the_crd_refuses_a_trigger_name_longer_than_a_label_value() -> None:
    body = with_teams().to_api()
    body["metadata"] = {"name": "t" * 63, "namespace": "team-a"}
    assert check_rules(TRIGGER_SCHEMA, body) == []
    body["metadata"]["name"] = "t" * 64
    [violation] = check_rules(TRIGGER_SCHEMA, body)
    assert violation.message.startswith("metadata.name: a HarnessTrigger's name is at most 63 characters")


PIPELINE_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "a", LABEL_THREAD: "99"}, "annotations": {ANNOTATION_REPOSITORY: "x/y"}},
    "spec": {
        "serviceAccountName": "agent-pipelines",
        "steps": [
            {
                "name": "try",
                "matrix": {"providers": ["claude", "codex"]},
                "run": {"spec": {"provider": "claude", "prompt": "Fix #$(event.number): $(event.title)"}},
            },
            {
                "name": "pick",
                "after": ["try"],
                "run": {"spec": {"provider": "claude", "prompt": "Pick: $(steps.try.output)"}},
            },
        ],
    },
}
PIPELINE_SCHEMA = crd_schema_for("HarnessPipeline")


def pipeline(name: str, **fields: Any) -> TriggerRun:
    return run(name, kind=PIPELINE, **fields)


def test_an_issues_delivery_creates_the_pipeline_with_the_forge_context_and_the_event_substituted() -> None:
    decision = decide_delivery(trigger(pipelineTemplate=PIPELINE_TEMPLATE), event(), [])
    assert decision.result == "created"
    assert decision.reason == "created pipeline payments-agent-3-0123456789 for issue #3 of acme/payments"
    made = decision.create
    assert made is not None and made["kind"] == "HarnessPipeline"
    HarnessPipeline.model_validate(made)
    assert check_rules(PIPELINE_SCHEMA, made) == []
    meta = made["metadata"]
    assert meta["labels"] == {
        "team": "a",
        LABEL_TRIGGER: "payments-agent",
        LABEL_THREAD: "3",  # the template's forged thread is replaced
        LABEL_MANAGED_BY: "harness-operator",
    }
    assert meta["annotations"][ANNOTATION_REPOSITORY] == "acme/payments"
    assert meta["annotations"][ANNOTATION_EVENT] == "IssueLabeled"
    steps = made["spec"]["steps"]
    assert steps[0]["run"]["spec"]["prompt"] == "Fix #3: Rename helper"
    assert steps[1]["run"]["spec"]["prompt"] == "Pick: $(steps.try.output)"  # the pipeline's to resolve
    assert made["spec"]["serviceAccountName"] == "agent-pipelines"


def test_a_pipeline_of_the_thread_counts_for_concurrency_and_replace_deletes_it_not_its_runs() -> None:
    spec = {"pipelineTemplate": PIPELINE_TEMPLATE}
    working = pipeline("payments-agent-3-bbbbbbbbbb", finished=False)
    its_run = run("payments-agent-3-bbbbbbbbbb-try-0", finished=False, pipeline=working.name)
    forbid = decide_delivery(trigger(**spec), event(), [working, its_run])
    assert (forbid.result, forbid.reason) == (
        "skipped",
        "pipeline payments-agent-3-bbbbbbbbbb of issue #3 of acme/payments is unfinished and "
        "spec.concurrencyPolicy is Forbid",
    )
    replace = decide_delivery(trigger(concurrencyPolicy="Replace", **spec), event(), [working, its_run])
    assert (replace.result, replace.delete) == ("created", (("HarnessPipeline", working.name),))
    done = dataclasses.replace(working, finished=True)
    assert decide_delivery(trigger(**spec), event(), [done]).result == "created"


def test_a_redelivered_issue_names_the_same_pipeline() -> None:
    made = pipeline(trigger_run_name("payments-agent", 3, KEY))
    decision = decide_delivery(trigger(pipelineTemplate=PIPELINE_TEMPLATE), event(), [made])
    assert decision.result == "duplicate"
    assert decision.reason == "pipeline payments-agent-3-0123456789 exists: this delivery was received before"


def test_a_comment_on_a_pull_request_a_pipelines_run_opened_is_a_follow_up_run() -> None:
    opened = opener(
        pipeline="payments-agent-3-bbbbbbbbbb", annotations={ANNOTATION_AUTHOR: PIPELINES_ACCOUNT}
    )
    comment = event(
        kind="Command", is_pull_request=True, number=4, comment="/agent rename it too", label=None
    )
    decision = decide_delivery(trigger(pipelineTemplate=PIPELINE_TEMPLATE), comment, [opened])
    made = valid_run(decision.create)
    assert made["kind"] == "HarnessRun" and made["spec"]["resumeFrom"] == {"run": opened.name}
    assert made["spec"]["workspace"]["publish"]["branch"] == {"name": "agent/x", "ifExists": "FastForward"}


def test_without_a_run_template_a_pull_requests_comment_is_ignored_naming_the_fix() -> None:
    only = trigger(pipelineTemplate=PIPELINE_TEMPLATE, events=[{"type": "Command", "command": "/agent"}])
    only = only.model_copy(update={"spec": only.spec.model_copy(update={"run_template": None})})
    comment = event(kind="Command", is_pull_request=True, number=4, comment="/agent again", label=None)
    opened = opener(
        pipeline="payments-agent-3-bbbbbbbbbb", annotations={ANNOTATION_AUTHOR: PIPELINES_ACCOUNT}
    )
    decision = decide_delivery(only, comment, [opened])
    assert (decision.result, decision.reason) == (
        "ignored",
        "trigger payments-agent makes pipelines from issues, and a follow-up on pull request #4 is a run: "
        "set spec.runTemplate, the run that answers on it",
    )
    issue = decide_delivery(only, event(kind="Command", comment="/agent fix", label=None), [])
    assert issue.create is not None and issue.create["kind"] == "HarnessPipeline"


def test_build_trigger_run_reads_a_pipelines_run_owner_and_a_pipeline() -> None:
    body = {
        "metadata": {
            "name": "p-try-0",
            "ownerReferences": [{"kind": "HarnessPipeline", "name": "p", "controller": True, "uid": "u"}],
        },
        "status": {"conditions": [{"type": "Succeeded", "status": "Unknown"}]},
    }
    assert (build_trigger_run(body).pipeline, build_trigger_run(body).finished) == ("p", False)
    as_pipeline = build_trigger_run({"metadata": {"name": "p"}}, PIPELINE)
    assert (as_pipeline.kind, as_pipeline.pipeline) == (PIPELINE, None)


@pytest.mark.parametrize(
    "annotations",
    [
        {ANNOTATION_AUTHOR: "system:serviceaccount:team-a:intruder"},
        {ANNOTATION_AUTHOR: "alice@example.com"},
        {ANNOTATION_AUTHOR: ""},
    ],
)
def test_a_run_only_labelled_as_the_triggers_is_neither_followed_up_nor_counted(
    annotations: dict[str, str],
) -> None:
    """The labels are anyone's to set: a run another user made, labelled as the trigger's, neither gets a
    follow-up (which would resume its conversation) nor holds the thread under Forbid."""
    forged = opener(annotations=annotations)
    comment = event(kind="Command", is_pull_request=True, number=4, comment="/agent more", label=None)
    decision = decide_delivery(trigger(), comment, [forged])
    assert (decision.result, decision.reason) == (
        "ignored",
        "pull request #4 was not opened by a run of trigger payments-agent",
    )
    busy = run("payments-agent-3-cccccccccc", finished=False, annotations=annotations)
    assert decide_delivery(trigger(), event(), [busy]).result == "created"


def test_find_foreign_reason_names_the_author_or_the_repository() -> None:
    mine = {ANNOTATION_AUTHOR: TRIGGER_ACCOUNT, ANNOTATION_REPOSITORY: "ACME/payments"}
    assert find_foreign_reason(trigger(), mine) is None
    piped = trigger(pipelineTemplate=PIPELINE_TEMPLATE)
    assert find_foreign_reason(piped, {**mine, ANNOTATION_AUTHOR: PIPELINES_ACCOUNT}) is None
    assert find_foreign_reason(trigger(), {**mine, ANNOTATION_AUTHOR: PIPELINES_ACCOUNT}) == (
        "its author system:serviceaccount:team-a:agent-pipelines is not the trigger's ServiceAccount or its "
        "pipelines', so it is not the trigger's run whatever its labels say"
    )
    assert find_foreign_reason(trigger(), {**mine, ANNOTATION_REPOSITORY: "evil/repo"}) == (
        "its repository evil/repo is not one of the trigger's spec.repositories"
    )
