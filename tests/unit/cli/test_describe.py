"""`harnessctl describe`'s text: spec summary, status, conditions, attempts, inputs (never a Secret's value)
and Events, oldest first."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.cli.describe import build_age, build_description

NOW = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def make_run() -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "apiVersion": "agentharness.dev/v1alpha1",
            "kind": "HarnessRun",
            "metadata": {
                "name": "review",
                "namespace": "team-a",
                "uid": "u-2",
                "creationTimestamp": "2026-12-07T11:00:00Z",
            },
            "spec": {
                "provider": "claude",
                "fallback": [{"provider": "codex"}],
                "prompt": "Review $(inputs.diff) with $(inputs.token) for $(inputs.ticket) after $(inputs.plan)",
                "inputs": [
                    {"name": "ticket", "value": "T-1"},
                    {"name": "diff", "configMapKeyRef": {"name": "pr", "key": "diff"}},
                    {"name": "token", "secretKeyRef": {"name": "creds", "key": "token"}},
                    {"name": "plan", "runOutput": {"name": "planner"}},
                ],
            },
            "status": {
                "phase": "Failed",
                "reason": "ProviderFailed",
                "message": "every provider failed",
                "conditions": [
                    {"type": "Succeeded", "status": "False", "reason": "ProviderFailed", "message": "m"}
                ],
                "attempts": [
                    {
                        "index": 1,
                        "provider": "claude",
                        "exitCode": 1,
                        "reason": "ProviderFailed",
                        "model": "sonnet",
                        "usage": {"costUSD": 0.0123, "costSource": "metered"},
                        "deniedTools": ["Bash"],
                    },
                ],
                "usage": {"costUSD": 0.0123, "costSource": "metered"},
            },
        }
    )


def test_describe_shows_the_run_its_inputs_sizes_and_its_events() -> None:
    events = [
        {
            "type": "Warning",
            "reason": "ProviderFailed",
            "message": "every provider failed",
            "lastTimestamp": "2026-12-07T11:59:00Z",
        },
        {
            "type": "Normal",
            "reason": "Started",
            "message": "attempt 1",
            "lastTimestamp": "2026-12-07T11:00:00Z",
        },
    ]
    text = build_description(make_run(), {"ticket": "T-1", "diff": "d" * 1200}, events, NOW)
    lines = text.splitlines()
    assert "Providers:    claude, codex" in lines
    assert "Phase:        Failed" in lines and "Reason:       ProviderFailed" in lines
    assert "Cost:         $0.0123 (metered)" in lines
    assert "Prompt:       84 bytes before substitution (it takes an input harnessctl does not read)" in lines
    inputs = lines[lines.index("Inputs:") + 1 : lines.index("Conditions:")]
    assert [line.split()[0] for line in inputs] == ["Name", "ticket", "diff", "token", "plan"]
    assert inputs[1].split()[1:] == ["value", "3", "bytes"]
    assert inputs[2].split()[1:] == ["ConfigMap", "pr/diff", "1200", "bytes"]
    assert inputs[3].split()[1:] == ["Secret", "creds/token", "(value", "not", "shown)", "-"]
    assert inputs[4].split()[1:] == ["output", "of", "HarnessRun", "planner", "-"]
    attempts = lines[lines.index("Attempts:") + 1 : lines.index("Events:")]
    assert attempts[1].split() == ["1", "claude", "1", "ProviderFailed", "sonnet", "$0.0123", "Bash"]
    shown = lines[lines.index("Events:") + 1 :]
    assert [line.split()[:3] for line in shown] == [
        ["Type", "Reason", "Age"],
        ["Normal", "Started", "1h"],
        ["Warning", "ProviderFailed", "1m"],
    ]


def test_a_new_run_says_none_where_nothing_is_known() -> None:
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "n", "uid": "u"},
            "spec": {"provider": "claude", "prompt": "Hi."},
        }
    )
    text = build_description(run, {}, [], NOW)
    for line in (
        "Phase:        Pending",
        "Inputs:       <none>",
        "Attempts:     <none>",
        "Events:       <none>",
    ):
        assert line in text.splitlines()


def test_the_prompt_after_substitution_is_told_by_size_and_digest_unless_it_takes_a_secret() -> None:
    run = make_run()
    run.spec.inputs = [i for i in run.spec.inputs if i.name in ("ticket", "diff")]
    run.spec.prompt = "Review $(inputs.diff) for $(inputs.ticket)."
    text = build_description(run, {"ticket": "T-1", "diff": "abc"}, [], NOW)
    digest = hashlib.sha256(b"Review abc for T-1.").hexdigest()[:16]
    assert f"Prompt:       19 bytes after substitution, sha256:{digest} (the inputs as they read now)" in text


def test_age_reads_as_kubectls() -> None:
    assert [
        build_age(s, NOW)
        for s in (
            "2026-12-07T11:59:30Z",
            "2026-12-07T11:58:00Z",
            "2026-12-07T09:00:00Z",
            "2026-12-04T12:00:00Z",
            None,
        )
    ] == ["30s", "2m", "3h", "3d", "<unknown>"]


def test_the_approval_says_who_decided_when_and_why_or_until_when_it_waits() -> None:
    data = make_run().model_dump(by_alias=True, exclude_none=True)
    data["status"]["approval"] = {"deadline": "2026-12-10T12:00:00Z"}
    text = build_description(HarnessRun.model_validate(data), {}, [], NOW)
    assert "Approval:     awaiting a decision until 2026-12-10T12:00:00Z" in text.splitlines()
    data["status"]["approval"] |= {
        "decision": "Rejected",
        "user": "bob",
        "time": "2026-12-07T11:30:00Z",
        "reason": "touches CI",
    }
    text = build_description(HarnessRun.model_validate(data), {}, [], NOW)
    assert "Approval:     Rejected by bob at 2026-12-07T11:30:00Z: touches CI" in text.splitlines()
    assert "Approval:" not in build_description(make_run(), {}, [], NOW)
