"""spec.resumeFrom: the earlier conversation (waiting for its run, its output and its session, checked),
which attempts resume it and which are told it again, the plans, the Secret and the Job that carry it,
and status.session of the run that left one."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from harness_operator.api.v1alpha1 import HarnessRun, SessionStatus
from harness_operator.catalog import load_builtin_catalog
from harness_operator.contract.plan import SESSION_DIR, SESSION_KEY, load_plan
from harness_operator.contract.result import ResultDocument
from harness_operator.core.attempt import decide_attempt, decide_attempts
from harness_operator.core.config import OperatorConfig
from harness_operator.core.plan.plans import build_plans
from harness_operator.core.plan.resumption import (
    WITHHELD,
    Continuation,
    Resumption,
    build_replay_prompt,
    compute_continuation,
    describe_replays,
    resolve_resumption,
)
from harness_operator.core.pod.job import build_job
from harness_operator.core.pod.run_data import build_resume_secret
from harness_operator.core.resolve.resolution import AttemptTarget, Rejection, Waiting, resolve_targets
from harness_operator.core.status.observed import FINISHED, Observed, ObservedAttempt
from harness_operator.core.status.status import compute_status

NOW = datetime(2026, 12, 1, tzinfo=UTC)
CATALOG = {d.metadata["name"]: d.spec for d in load_builtin_catalog()}
ARCHIVE = b"\x1f\x8b session archive"
SESSION = SessionStatus(
    attempt=1,
    provider="claude",
    session_id="s-1",
    bytes=len(ARCHIVE),
    sha256=hashlib.sha256(ARCHIVE).hexdigest(),
)
SUCCEEDED = {"type": "Succeeded", "status": "True", "reason": "Succeeded"}


def earlier(session: SessionStatus | None = SESSION, **spec: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [SUCCEEDED],
        "attempts": [{"index": 1, "provider": "claude", "podName": "review-a1-x"}],
    }
    if session is not None:
        status["session"] = session.to_api()
    return {
        "metadata": {"name": "review", "namespace": "team", "uid": "u-1"},
        "spec": {"provider": "claude", "prompt": "Review the branch.", **spec},
        "status": status,
    }


def later(**spec: Any) -> HarnessRun:
    body = {
        "provider": "claude",
        "prompt": "Now fix what you found.",
        "resumeFrom": {"run": "review"},
        **spec,
    }
    return HarnessRun.model_validate(
        {"metadata": {"name": "fix", "namespace": "team", "uid": "u-2"}, "spec": body}
    )


class Reader:
    """The SessionReader over dicts; `archive` what the earlier pod's log holds (None: why)."""

    def __init__(self, runs: Mapping[str, Any], archive: bytes | None = ARCHIVE) -> None:
        self.runs, self.archive = runs, archive
        self.asked: list[str] = []

    def definition(self, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        spec = CATALOG.get(name) if namespace is None else None
        return {"spec": spec.to_api()} if spec else None

    def config_map_key(self, namespace: str, name: str, key: str) -> str | None:
        return {"diffs": "the diff"}.get(name)

    def secret_key(self, namespace: str, name: str, key: str) -> str | None:
        raise AssertionError("a Secret the earlier prompt took is never read for a replay")

    def run(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.runs.get(name)

    def run_output(self, run: Mapping[str, Any]) -> str | None:
        return "Found: the cache is never invalidated."

    def session_archive(
        self, run: Mapping[str, Any], session: SessionStatus
    ) -> tuple[bytes | None, str | None]:
        self.asked.append(f"{run['metadata']['name']}#{session.attempt}")
        return (
            (self.archive, None) if self.archive else (None, "pod review-a1-x is gone, and its log with it")
        )


INPUTS = [
    {"name": "DIFF", "configMapKeyRef": {"name": "diffs", "key": "d"}},
    {"name": "KEY", "secretKeyRef": {"name": "deploy-key", "key": "k"}},
]


def test_the_earlier_conversation_with_its_session_and_no_secret_of_its_prompt() -> None:
    reader = Reader({"review": earlier(inputs=INPUTS, prompt="Review $(inputs.DIFF) with key $(inputs.KEY)")})
    resumption = resolve_resumption(reader, later(inputs=INPUTS[1:]))
    assert resumption == Resumption(
        run="review",
        prompt=f"Review the diff with key {WITHHELD}",
        output="Found: the cache is never invalidated.",
        provider="claude",
        session_id="s-1",
        archive=ARCHIVE,
    )
    assert reader.asked == ["review#1"]
    assert (
        resolve_resumption(
            reader, HarnessRun.model_validate({**later().to_api(), "spec": {"provider": "c", "prompt": "p"}})
        )
        is None
    )


def test_a_run_that_took_a_secret_is_resumed_only_by_a_run_that_names_it() -> None:
    """The earlier session and output were made from the Secret's value: only a run whose author the
    admission policy let name that Secret may continue them."""
    reader = Reader({"review": earlier(inputs=INPUTS, prompt="Review $(inputs.DIFF) with key $(inputs.KEY)")})
    for spec in ({}, {"inputs": INPUTS[:1]}, {"promptFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}):
        with pytest.raises(Rejection) as caught:
            resolve_resumption(reader, later(**spec))
        assert caught.value.reason == "InputUnavailable"
        assert 'took a value from Secret "deploy-key" (spec.inputs[1].secretKeyRef)' in caught.value.message
        assert "secretKeyRef: {name: deploy-key" in caught.value.message
    assert reader.asked == []  # refused before its session is read
    named = {"stdinFrom": {"secretKeyRef": {"name": "deploy-key", "key": "other-key"}}}
    assert resolve_resumption(reader, later(**named)) is not None


def test_a_run_waits_for_the_one_it_continues_and_fails_with_it() -> None:
    with pytest.raises(Waiting) as waiting:
        resolve_resumption(Reader({}), later())
    assert waiting.value.message == 'spec.resumeFrom.run: waiting for HarnessRun "review" to exist'
    failed = earlier()
    failed["status"]["conditions"] = [{"type": "Succeeded", "status": "False", "reason": "ProviderFailed"}]
    with pytest.raises(Rejection) as refused:
        resolve_resumption(Reader({"review": failed}), later())
    assert refused.value.message == 'spec.resumeFrom.run: HarnessRun "review" did not succeed'


def test_without_a_session_to_resume_it_says_why() -> None:
    gone = resolve_resumption(Reader({"review": earlier()}, archive=None), later())
    assert gone is not None and gone.archive is None
    assert gone.missing == "pod review-a1-x is gone, and its log with it"
    none = resolve_resumption(Reader({"review": earlier(session=None)}), later())
    assert none is not None and none.missing == "its CLI kept no session" and none.provider is None


def targets_of(run: HarnessRun) -> list[AttemptTarget]:
    return resolve_targets(Reader({}), run)


def test_the_same_provider_resumes_and_a_fallback_is_told_the_conversation_again() -> None:
    run = later(fallback=[{"provider": "codex"}], retry={"limit": 1})
    resumption = resolve_resumption(Reader({"review": earlier()}), run)
    assert resumption is not None
    targets = targets_of(run)
    digest = hashlib.sha256(ARCHIVE).hexdigest()
    assert [compute_continuation(resumption, t.provider, t.definition) for t in targets] == [
        Continuation(["--resume", "s-1"], "s-1", digest),
        Continuation(["--resume", "s-1"], "s-1", digest),
        None,
        None,
    ]
    plans = [
        load_plan(json.dumps(p))
        for p in build_plans(
            run,
            decide_attempts(run, targets, OperatorConfig()),
            "Now fix what you found.",
            None,
            NOW,
            OperatorConfig(),
            resumption=resumption,
        )
    ]
    first, retry, fallback = plans[0], plans[1], plans[2]
    assert first.args[:4] == ["--resume", "s-1", "-p", "Now fix what you found."]
    assert first.session_sha256 == hashlib.sha256(ARCHIVE).hexdigest() == retry.session_sha256
    assert first.session_paths == [".claude/projects"]
    assert fallback.session_sha256 is None and "--resume" not in fallback.args
    replayed = build_replay_prompt(resumption, "Now fix what you found.")
    assert fallback.args[:2] == ["exec", replayed]
    assert "Found: the cache is never invalidated." in replayed and replayed.endswith(
        "Now:\nNow fix what you found."
    )
    assert describe_replays(resumption, targets) == [
        'attempt 3: its session is provider "claude"\'s, not "codex"\'s; the earlier prompt and output are '
        "replayed in front of the prompt, and their tokens count like any other"
    ]
    aider = describe_replays(resumption, targets_of(later(provider="aider")))
    assert aider == [
        'attempt 1: provider "aider" cannot resume a session (capabilities.sessionResume); the earlier prompt '
        "and output are replayed in front of the prompt, and their tokens count like any other"
    ]


def test_an_acp_agent_continues_its_own_session_with_session_load_and_no_arguments() -> None:
    acp_session = SESSION.model_copy(update={"provider": "claude-acp"})
    run = later(provider="claude-acp", fallback=[{"provider": "claude"}])
    resumption = resolve_resumption(Reader({"review": earlier(session=acp_session)}), run)
    assert resumption is not None
    targets = targets_of(run)
    digest = hashlib.sha256(ARCHIVE).hexdigest()
    assert compute_continuation(resumption, "claude-acp", targets[0].definition) == Continuation(
        [], "s-1", digest
    )
    acp, cli = [
        load_plan(json.dumps(p))
        for p in build_plans(
            run,
            decide_attempts(run, targets, OperatorConfig()),
            "Go on.",
            None,
            NOW,
            OperatorConfig(),
            resumption=resumption,
        )
    ]
    assert acp.acp is not None and acp.acp.load_session == "s-1" and acp.acp.prompt == "Go on."
    assert acp.session_sha256 == digest and acp.session_paths == [".claude/projects"]
    assert acp.args == []  # the adapter takes no flags: session/load carries the id
    # claude cannot load claude-acp's session: it is told the conversation again.
    assert cli.session_sha256 is None and cli.args[1].startswith("This continues an earlier conversation.")
    assert describe_replays(resumption, targets) == [
        'attempt 2: its session is provider "claude-acp"\'s, not "claude"\'s; the earlier prompt and output '
        "are replayed in front of the prompt, and their tokens count like any other"
    ]


def test_another_providers_session_or_none_kept_is_replayed_and_said() -> None:
    run = later()
    targets = targets_of(run)
    elsewhere = Resumption("review", "p", "o", provider="qwen", session_id="q-1", archive=ARCHIVE)
    assert compute_continuation(elsewhere, "claude", CATALOG["claude"]) is None
    assert describe_replays(elsewhere, targets) == [
        'attempt 1: its session is provider "qwen"\'s, not "claude"\'s; the earlier prompt and output are '
        "replayed in front of the prompt, and their tokens count like any other"
    ]
    gone = Resumption("review", "p", "o", provider="claude", session_id="s-1", missing="pod x is gone")
    assert describe_replays(gone, targets)[0].startswith(
        'attempt 1: HarnessRun "review" left no session to resume: pod x is gone'
    )
    plan = load_plan(
        json.dumps(
            build_plans(
                run,
                decide_attempts(run, targets, OperatorConfig()),
                "Go.",
                None,
                NOW,
                OperatorConfig(),
                resumption=gone,
            )[0]
        )
    )
    assert plan.session_sha256 is None and plan.args[1] == build_replay_prompt(gone, "Go.")


def test_the_continuing_run_owns_the_archive_and_its_runner_mounts_it() -> None:
    run = later()
    secret = build_resume_secret(run, ARCHIVE)
    assert secret["metadata"]["name"] == "fix-resume"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "u-2"
    assert base64.b64decode(secret["stringData"][SESSION_KEY]) == ARCHIVE
    job = build_job(run, decide_attempt(run, targets_of(run)[0], OperatorConfig()), OperatorConfig())
    pod = job["spec"]["template"]["spec"]
    assert {
        "name": "resume",
        "secret": {"secretName": "fix-resume", "optional": True, "defaultMode": 0o440},
    } in pod["volumes"]
    runner = next(c for c in pod["containers"] if c["name"] == "runner")
    assert {"name": "resume", "mountPath": SESSION_DIR, "readOnly": True} in runner["volumeMounts"]
    agent = next(c for c in pod["containers"] if c["name"] == "agent")
    assert all(m["name"] != "resume" for m in agent["volumeMounts"])
    plain = build_job(
        later(resumeFrom=None),
        decide_attempt(later(resumeFrom=None), targets_of(run)[0], OperatorConfig()),
        OperatorConfig(),
    )
    assert all(v["name"] != "resume" for v in plain["spec"]["template"]["spec"]["volumes"])


def test_status_names_the_session_a_later_run_can_continue() -> None:
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": "review", "namespace": "team", "generation": 1},
            "spec": {"provider": "claude", "prompt": "p"},
        }
    )
    doc = ResultDocument.model_validate(
        {
            "attempt": 1,
            "provider": "claude",
            "exitCode": 0,
            "sessionID": "s-1",
            "session": {"bytes": len(ARCHIVE), "sha256": SESSION.sha256},
            "output": {"sha256": "ab" * 32, "bytes": 1},
        }
    )
    attempt = ObservedAttempt(1, "claude", "review-a1", state=FINISHED, result=doc, pod_name="review-a1-x")
    status = compute_status(run, Observed(["claude"], [attempt], b"x"), NOW)
    assert status.session == SESSION
    without = ObservedAttempt(
        1, "claude", "review-a1", state=FINISHED, result=doc.model_copy(update={"session": None})
    )
    assert compute_status(run, Observed(["claude"], [without], b"x"), NOW).session is None
