"""spec.resumeFrom on the cluster: a run continues an earlier run's Claude Code session in a new pod (the
stub sees the first conversation in the second run's request, and the session id is the first run's); a
run of another provider (the ACP adapter) is told the earlier conversation instead, and says so; and the
ACP adapter continues its own session with session/load."""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

from tests.stubs.anthropic import AnthropicStub

from harness_operator.contract.frame import SESSION, decode_frame

from .conftest import STUB_HOST, Runs, wait_until
from .test_agents import ROUTES, agent_run

FIRST = "PROMPT-ONE: remember the codeword PELICAN."
ANSWER = "ANSWER-ONE: noted, the codeword is PELICAN."


def test_a_run_continues_an_earlier_runs_session_or_is_told_it_again(runs: Runs) -> None:
    model = AnthropicStub(mode="ok", host=STUB_HOST, answers=[ANSWER, "ANSWER-TWO"]).start()
    try:
        route = ROUTES["claude"](model.base_url)
        runs.create("conv-1", agent_run(runs, "claude", route, model.port, prompt=FIRST))
        first = runs.wait_finished("conv-1")
        assert first["reason"] == "Succeeded", runs.describe("conv-1")
        session = first["session"]
        assert session["sessionID"] == first["attempts"][0]["sessionID"] and session["provider"] == "claude"
        before = len(model.model_calls())
        second_spec = agent_run(
            runs, "claude", route, model.port, prompt="PROMPT-TWO: what was the codeword?"
        )
        runs.create("conv-2", {**second_spec, "resumeFrom": {"run": "conv-1"}})
        second = runs.wait_finished("conv-2")
        resumed = [json.dumps(c.body) for c in model.model_calls()[before:]]
        before = len(model.model_calls())
        acp_route = ROUTES["claude-acp"](model.base_url)
        third_spec = agent_run(runs, "claude-acp", acp_route, model.port, prompt="PROMPT-THREE: and now?")
        runs.create("conv-3", {**third_spec, "resumeFrom": {"run": "conv-1"}})
        third = runs.wait_finished("conv-3")
        replayed = [json.dumps(c.body) for c in model.model_calls()[before:]]
        before = len(model.model_calls())
        fourth_spec = agent_run(runs, "claude-acp", acp_route, model.port, prompt="PROMPT-FOUR: and then?")
        runs.create("conv-4", {**fourth_spec, "resumeFrom": {"run": "conv-3"}})
        fourth = runs.wait_finished("conv-4")
        loaded = [json.dumps(c.body) for c in model.model_calls()[before:]]
    finally:
        model.stop()
    assert second["reason"] == "Succeeded", runs.describe("conv-2")
    assert second["attempts"][0]["sessionID"] == session["sessionID"]
    assert resumed and all(text in resumed[-1] for text in ("PROMPT-ONE", "ANSWER-ONE", "PROMPT-TWO"))
    assert "earlier-request" not in resumed[-1]  # the session itself, not a replay
    assert not [e for e in runs.events("conv-2") if e[1] == "SessionReplayed"]

    assert third["reason"] == "Succeeded", runs.describe("conv-3")
    assert replayed and all(text in replayed[-1] for text in ("PROMPT-ONE", "ANSWER-ONE", "PROMPT-THREE"))
    assert "<earlier-request>" in replayed[-1]
    said = wait_until(
        lambda: [e for e in runs.events("conv-3") if e[1] == "SessionReplayed"] or None,
        60,
        "a SessionReplayed Event",
    )
    assert (
        said[0][0] == "Warning" and 'its session is provider "claude"\'s, not "claude-acp"\'s' in said[0][2]
    )

    # The ACP adapter continues its own session with session/load, in a new pod.
    assert fourth["reason"] == "Succeeded", runs.describe("conv-4")
    assert third["session"]["provider"] == "claude-acp"
    assert fourth["attempts"][0]["sessionID"] == third["session"]["sessionID"]
    assert loaded and all(text in loaded[-1] for text in ("PROMPT-THREE", "PROMPT-FOUR"))
    assert loaded[-1].count("<earlier-request>") == 1  # conv-3's own replay, not a new one
    assert not [e for e in runs.events("conv-4") if e[1] == "SessionReplayed"]


def refusal(runs: Runs, name: str) -> dict[str, Any] | None:
    accepted = runs.condition(name, "Accepted")
    return accepted if accepted and accepted["status"] == "False" else None


SECRET_PROMPT = "PROMPT-SECRET: the launch code is ZEBRA-4471-QUARTZ."


def test_a_prompt_from_a_secret_leaves_nothing_to_resume_without_the_secret(runs: Runs) -> None:
    """Issue 49, item 7: the session archive (framed in the runner's log, which `view` reads, and restored
    by resumeFrom, which `get harnessruns` allowed) held a prompt taken from a Secret. It is redacted
    there and from the output, and a run resumes such a run only if it names that Secret itself."""
    runs.secret("briefing", "prompt", SECRET_PROMPT)
    model = AnthropicStub(mode="ok", host=STUB_HOST, answers=[ANSWER, "ANSWER-TWO", "ANSWER-THREE"]).start()
    try:
        route = ROUTES["claude"](model.base_url)
        spec = agent_run(runs, "claude", route, model.port)
        del spec["prompt"]
        runs.create(
            "secret-1", {**spec, "promptFrom": {"secretKeyRef": {"name": "briefing", "key": "prompt"}}}
        )
        first = runs.wait_finished("secret-1")
        assert first["reason"] == "Succeeded", runs.describe("secret-1")
        assert any("ZEBRA-4471-QUARTZ" in json.dumps(c.body) for c in model.model_calls())  # it was asked
        session = first["session"]
        pod = first["attempts"][0]["podName"]
        log = runs.core.read_namespaced_pod_log(pod, runs.ns, container="runner")
        archive = decode_frame(log, session["sha256"], SESSION)
        assert isinstance(archive, bytes), archive
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            files = [tar.extractfile(m).read() for m in tar if m.isfile()]  # type: ignore[union-attr]
        assert files and not [f for f in files if b"ZEBRA-4471-QUARTZ" in f]
        assert any(b"[REDACTED]" in f for f in files)
        assert "ZEBRA-4471-QUARTZ" not in log

        resume = agent_run(runs, "claude", route, model.port, prompt="PROMPT-TWO: go on.")
        runs.create("secret-2", {**resume, "resumeFrom": {"run": "secret-1"}})
        refused = wait_until(lambda: runs.condition("secret-2", "Accepted"), 60, "secret-2 judged")
        named = {
            **resume,
            "inputs": [{"name": "earlier", "secretKeyRef": {"name": "briefing", "key": "prompt"}}],
        }
        runs.create("secret-3", {**named, "resumeFrom": {"run": "secret-1"}})
        third = runs.wait_finished("secret-3")
    finally:
        model.stop()
    assert refused["status"] == "False" and refused["reason"] == "InputUnavailable", refused
    assert 'Secret "briefing"' in refused["message"] and "spec.inputs" in refused["message"]
    assert third["reason"] == "Succeeded", runs.describe("secret-3")
    assert third["attempts"][0]["sessionID"] == session["sessionID"]
