"""`harnessctl run` (local_run.run_paths) end to end with real fake-agent processes: fallback,
no fallback after timeout, retries of any failure, missing fallback binary, secrets from manifests or the environment,
validation first, chaining, the status file, and the demo."""

import base64
import os
import stat
import sys
from pathlib import Path
from typing import Any

import yaml

from harness_operator.api.v1alpha1 import HarnessRunStatus
from harness_operator.cli.local_run import run_paths

AGENT = str(Path(__file__).parents[2] / "fakes" / "agent.py")
ROOT = Path(__file__).parents[3]


def definition(name: str, mode: str, binary: str = sys.executable, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessDefinition",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "binary": binary,
            "prefixArgs": [AGENT] if binary == sys.executable else [],
            "output": {"format": "claude-stream-json"},
            "env": [{"name": "FAKE_MODE", "value": mode}],
            **spec,
        },
    }


def harness_run(name: str, provider: str, tmp_path: Path, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessRun",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "provider": provider,
            "prompt": f"prompt of {name}",
            "workspace": {"workingDir": str(tmp_path / "work")},
            **spec,
        },
    }


def manifests(tmp_path: Path, *docs: dict[str, Any]) -> str:
    for doc in docs:  # prompt=None in a helper call means "no prompt key"
        if "spec" in doc:
            doc["spec"] = {k: v for k, v in doc["spec"].items() if v is not None}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    return str(path)


def statuses(path: Path) -> list[HarnessRunStatus]:
    return [HarnessRunStatus.model_validate(d) for d in yaml.safe_load_all(path.read_text())]


def test_fallback_after_a_non_zero_exit(tmp_path, capfd):
    status_file = tmp_path / "status.yaml"
    files = manifests(
        tmp_path,
        definition("broken", "fail"),
        definition("good", "ok"),
        harness_run("r", "broken", tmp_path, fallback=[{"provider": "good"}]),
    )
    assert run_paths([files], str(status_file)) == 0
    out, err = capfd.readouterr()
    assert out == "answer from agent.py: prompt of r"
    assert "harness: attempt 1/2 with broken failed; trying fallback 2/2 with good\n" in err
    [status] = statuses(status_file)
    assert status.phase == "Succeeded" and [a.exit_code for a in status.attempts] == [3, 0]
    assert [a.provider for a in status.attempts] == ["broken", "good"]
    assert status.output is not None and status.output.sha256 is not None
    assert status.conditions[1].reason == "Succeeded"


def test_no_fallback_after_timeout(tmp_path, capfd):
    status_file = tmp_path / "status.yaml"
    files = manifests(
        tmp_path,
        definition("hangs", "hang"),
        definition("good", "ok"),
        harness_run(
            "r",
            "hangs",
            tmp_path,
            fallback=[{"provider": "good"}],
            limits={"timeoutSeconds": 1, "gracePeriodSeconds": 1},
        ),
    )
    assert run_paths([files], str(status_file)) == 124
    out, err = capfd.readouterr()
    assert out == "" and "trying fallback" not in err
    [status] = statuses(status_file)
    assert (status.phase, status.reason, len(status.attempts)) == ("Failed", "Timeout", 1)


def test_retry_on_any_runs_a_failed_provider_again_before_its_fallback(tmp_path, capfd):
    status_file = tmp_path / "status.yaml"
    retry = {"limit": 1, "retryOn": "Any", "backoffSeconds": 0}
    docs = (definition("broken", "fail"), definition("good", "ok"))
    chain = {"fallback": [{"provider": "good"}]}
    files = manifests(tmp_path, *docs, harness_run("r", "broken", tmp_path, retry=retry, **chain))
    assert run_paths([files], str(status_file)) == 0
    err = capfd.readouterr().err
    line = "attempt 1/4 with broken failed (ProviderFailed); retry 1/1 with broken as attempt 2/4 in 0s"
    assert line in err
    [status] = statuses(status_file)
    assert [(a.index, a.provider, a.exit_code) for a in status.attempts] == [
        (1, "broken", 3),
        (2, "broken", 3),
        (3, "good", 0),
    ]
    # Only the exit codes listed: the fake agent's 3 is not, so the fallback follows at once.
    other = {**retry, "exitCodes": [2]}
    files = manifests(tmp_path, *docs, harness_run("r", "broken", tmp_path, retry=other, **chain))
    assert run_paths([files], str(status_file)) == 0
    assert "trying fallback 3/4 with good" in capfd.readouterr().err
    [status] = statuses(status_file)
    assert [a.index for a in status.attempts] == [1, 3]


def test_missing_fallback_binary_matters_only_when_reached(tmp_path, capfd):
    files = manifests(
        tmp_path,
        definition("good", "ok"),
        definition("absent", "ok", binary="no-such-agent-cli"),
        harness_run("r", "good", tmp_path, fallback=[{"provider": "absent"}]),
    )
    assert run_paths([files], None) == 0
    assert "no-such-agent-cli" not in capfd.readouterr().err

    files = manifests(
        tmp_path,
        definition("broken", "fail"),
        definition("absent", "ok", binary="no-such-agent-cli"),
        harness_run("r", "broken", tmp_path, fallback=[{"provider": "absent"}]),
    )
    assert run_paths([files], None) == 1
    err = capfd.readouterr().err
    assert "trying fallback 2/2 with absent" in err
    assert 'harness: "no-such-agent-cli" CLI not found in PATH; install it first: ' in err


def test_secret_from_a_secret_manifest_is_granted_and_redacted(tmp_path, capfd):
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "tok", "namespace": "default"},
        "data": {"token": base64.b64encode(b"file-secret-123").decode()},
    }
    files = manifests(
        tmp_path,
        secret,
        definition("s", "secret"),
        harness_run(
            "r",
            "s",
            tmp_path,
            credentials=[{"env": "FAKE_TOKEN", "secretKeyRef": {"name": "tok", "key": "token"}}],
        ),
    )
    assert run_paths([files], None) == 0
    out, err = capfd.readouterr()
    assert out == "output has [REDACTED]"
    assert "file-secret-123" not in out + err and "stderr has [REDACTED]" in err


def test_secret_falls_back_to_the_environment_and_says_so(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("FAKE_TOKEN", "env-secret-456")
    files = manifests(
        tmp_path,
        definition("s", "secret"),
        harness_run(
            "r",
            "s",
            tmp_path,
            credentials=[{"env": "FAKE_TOKEN", "secretKeyRef": {"name": "tok", "key": "k"}}],
        ),
    )
    assert run_paths([files], None) == 0
    out, err = capfd.readouterr()
    assert "using $FAKE_TOKEN from this environment" in err
    assert out == "output has [REDACTED]" and "env-secret-456" not in err


def test_invalid_manifests_are_refused(tmp_path, capfd):
    files = manifests(tmp_path, harness_run("r", "no-such-provider", tmp_path))
    assert run_paths([files], None) == 1
    err = capfd.readouterr().err
    assert 'unknown provider "no-such-provider"' in err and "nothing was run" in err
    assert not (tmp_path / "work").exists()


def test_chained_run_reads_the_earlier_output(tmp_path, capfd):
    status_file = tmp_path / "status.yaml"
    files = manifests(
        tmp_path,
        definition("good", "ok"),
        harness_run("first", "good", tmp_path),
        harness_run("second", "good", tmp_path, prompt=None, promptFrom={"runOutput": {"name": "first"}}),
    )
    assert run_paths([files], str(status_file)) == 0
    out, _ = capfd.readouterr()
    assert (
        out
        == "answer from agent.py: prompt of first"
        + "answer from agent.py: answer from agent.py: prompt of first"
    )
    assert [s.phase for s in statuses(status_file)] == ["Succeeded", "Succeeded"]


def test_the_demo_prints_output_and_a_usage_summary(tmp_path, capfd, monkeypatch):
    shim = tmp_path / "bin" / "harness-demo-agent"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m harness_operator.cli.demo_agent "$@"\n')
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{shim.parent}:{os.environ['PATH']}")
    status_file = tmp_path / "status.yaml"
    assert run_paths([str(ROOT / "examples" / "demo" / "demo-run.yaml")], str(status_file)) == 0
    out, err = capfd.readouterr()
    assert "This is harness-demo-agent, not a real model." in out
    assert "this is a demo agent" in err
    assert "costSource: reported" in err and "tokens in " in err
    [status] = statuses(status_file)
    assert status.usage is not None and status.usage.cost_usd is not None and status.usage.cost_usd > 0
    assert status.attempts[0].session_id


def test_no_manifests(tmp_path, capfd):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert run_paths([str(empty)], None) == 1
    assert "no manifests found" in capfd.readouterr().err


def test_an_arg_prompt_over_the_kernel_limit_is_refused_before_anything_runs(tmp_path, capfd):
    status_file = tmp_path / "status.yaml"
    files = manifests(
        tmp_path, definition("good", "ok"), harness_run("big", "good", tmp_path, prompt="x" * 131_072)
    )
    assert run_paths([files], str(status_file)) == 1
    err = capfd.readouterr().err
    assert "spec.prompt: warning: the prompt is 131072 bytes" in err  # validate warns first
    [status] = statuses(status_file)
    assert (status.reason, status.phase) == ("PromptTooLarge", "Failed")
    assert not (tmp_path / "work").exists()


def test_an_acp_adapter_that_exits_0_without_answering_is_a_failure(tmp_path, capfd):
    """Started as a CLI, an ACP adapter exits 0 and looked like a success; as ACP it must answer."""
    status_file = tmp_path / "status.yaml"
    marker = tmp_path / "started"
    files = manifests(
        tmp_path,
        definition("acp", "ok", protocol="acp", prefixArgs=["-c", f"open({str(marker)!r}, 'w')"]),
        harness_run("r", "acp", tmp_path),
    )
    assert run_paths([files], str(status_file)) == 1
    out, err = capfd.readouterr()
    assert out == ""
    assert "harness: the agent closed the connection before the turn ended" in err
    [status] = statuses(status_file)
    assert status.phase == "Failed" and status.reason == "ProviderFailed"
    assert [a.exit_code for a in status.attempts] == [1] and marker.exists()


def test_runs_go_in_dependency_order_with_inputs_substituted(tmp_path, capfd):
    status_file = tmp_path / "status.yaml"
    files = manifests(
        tmp_path,
        definition("good", "ok"),
        harness_run(
            "implement",
            "good",
            tmp_path,
            prompt="Implement this plan: $(inputs.PLAN) for $(inputs.who)",
            inputs=[{"name": "PLAN", "runOutput": {"name": "plan"}}, {"name": "who", "value": "team-a"}],
            after=["setup"],
        ),
        harness_run("plan", "good", tmp_path, after=["setup"]),
        harness_run("setup", "good", tmp_path),
    )
    assert run_paths([files], str(status_file)) == 0
    out, err = capfd.readouterr()
    assert out == (
        "answer from agent.py: prompt of setup"
        "answer from agent.py: prompt of plan"
        "answer from agent.py: Implement this plan: answer from agent.py: prompt of plan for team-a"
    )
    assert [line.split(":")[1].strip() for line in err.splitlines() if ": attempt 1/1" in line] == [
        "HarnessRun default/setup",
        "HarnessRun default/plan",
        "HarnessRun default/implement",
    ]
    assert [s.phase for s in statuses(status_file)] == ["Succeeded"] * 3


def test_a_failed_dependency_stops_the_runs_after_it(tmp_path, capfd):
    files = manifests(
        tmp_path,
        definition("good", "ok"),
        definition("broken", "fail"),
        harness_run("second", "good", tmp_path, after=["first"]),
        harness_run("first", "broken", tmp_path),
    )
    assert run_paths([files], None) == 3
    out, err = capfd.readouterr()
    assert out == ""
    assert "harness: 1 remaining HarnessRun(s) not run after a failure" in err


def test_a_routed_cli_run_locally_uses_the_users_own_key_and_says_so(tmp_path, capfd, monkeypatch):
    """No gateway on a laptop: the route is not applied, the key the user has is granted as written."""
    monkeypatch.setenv("FAKE_TOKEN", "env-secret-789")
    route = {
        "vendor": "anthropic",
        "env": [{"name": "FAKE_TOKEN", "value": "$(HARNESS_MODEL_GATEWAY_TOKEN)"}],
    }
    files = manifests(
        tmp_path,
        definition(
            "s",
            "secret",
            credentials=[{"env": "FAKE_TOKEN", "secretKeyRef": {"name": "tok", "key": "k"}}],
            modelRoute=route,
        ),
        harness_run("r", "s", tmp_path),
    )
    assert run_paths([files], None) == 0
    out, err = capfd.readouterr()
    assert "no model gateway on this machine: the CLI uses your key directly" in err
    assert out == "output has [REDACTED]"  # the fake agent printed the user's key: it was granted
