"""ACP runs on the real cluster, reconciled like CLI runs: the scripted ACP agent (test image) succeeds
and is cancelled with session/cancel (or, deaf to it, killed after the grace period); the real Zed Claude adapter (catalog `claude-acp`, its own image)
answers from the Anthropic stub on the node's address."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.stubs.anthropic import TEXT, AnthropicStub

from .conftest import Api, wait_until
from .operator_env import run_body

ROOT = Path(__file__).resolve().parents[2]
NODE = "10.88.0.1"  # pods reach the host here


def acp_definition(name: str, image: str, mode: str) -> dict[str, Any]:
    return {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessDefinition",
        "metadata": {"name": name},
        "spec": {
            "protocol": "acp",
            "binary": "acp-agent",
            "image": image,
            "env": [{"name": "ACP_MODE", "value": mode}],
        },
    }


@pytest.fixture(scope="module")
def claude_acp_image() -> str:
    """The claude-acp agent image, built from sandbox-image/Dockerfile and loaded on the node."""
    out = subprocess.run(
        [str(ROOT / "sandbox-image" / "build"), "--only", "claude-acp"],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    )
    return out.stdout.split()[-1]


@pytest.fixture
def anthropic_stub() -> Iterator[AnthropicStub]:
    with AnthropicStub(mode="ok", host=NODE) as stub:
        yield stub


def test_scripted_acp_agent_succeeds_in_the_sandbox(api: Api, images: dict[str, str]) -> None:
    api.create(acp_definition("scripted", images["test"], "ok"))
    api.create(run_body("acp-ok", {"provider": "scripted", "prompt": "hi", "stdin": "there"}))
    status = api.wait_finished("acp-ok")
    assert status["phase"] == "Succeeded", status
    assert status["output"]["excerpt"] == "answer from acp_agent: hi\n\nthere"
    assert status["usage"]["inputTokens"] == 100 and status["usage"]["costSource"] == "reported"
    assert status["attempts"][0]["cliVersion"] == "9.8.7"


def test_scripted_acp_agent_is_cancelled_without_fallback(api: Api, images: dict[str, str]) -> None:
    api.create(acp_definition("hangs", images["test"], "hang"))
    api.create(acp_definition("never", images["test"], "ok"))
    api.create(
        run_body("acp-cancel", {"provider": "hangs", "prompt": "x", "fallback": [{"provider": "never"}]})
    )
    wait_until(
        lambda: api.condition("acp-cancel", "Succeeded").get("reason") == "Running",
        timeout=120,
        what="the turn",
    )
    api.custom.patch_namespaced_custom_object(
        "agentharness.dev", "v1alpha1", api.ns, "harnessruns", "acp-cancel", {"spec": {"cancel": True}}
    )
    status = api.wait_finished("acp-cancel")
    assert (status["phase"], status["reason"], status["exitCode"]) == ("Cancelled", "Cancelled", 124), status
    assert len(status["attempts"]) == 1


def test_an_acp_agent_deaf_to_cancel_is_killed_past_the_grace_period(
    api: Api, images: dict[str, str]
) -> None:
    api.create(acp_definition("deaf", images["test"], "deaf"))  # ignores session/cancel for 600 s
    api.create(acp_definition("never", images["test"], "ok"))
    api.create(
        run_body(
            "acp-deaf",
            {
                "provider": "deaf",
                "prompt": "x",
                "limits": {"gracePeriodSeconds": 2},
                "fallback": [{"provider": "never"}],
            },
        )
    )
    wait_until(
        lambda: api.condition("acp-deaf", "Succeeded").get("reason") == "Running",
        timeout=120,
        what="the turn",
    )
    api.custom.patch_namespaced_custom_object(
        "agentharness.dev", "v1alpha1", api.ns, "harnessruns", "acp-deaf", {"spec": {"cancel": True}}
    )
    # The run ends long before the agent's 600 s: its process group was killed after the grace period.
    status = api.wait_finished("acp-deaf")
    assert (status["phase"], status["reason"], status["exitCode"]) == ("Cancelled", "Cancelled", 124), status
    assert len(status["attempts"]) == 1  # no fallback after a cancel


def test_real_claude_acp_adapter_in_its_catalog_image(
    api: Api, claude_acp_image: str, anthropic_stub: AnthropicStub, kube: client.ApiClient
) -> None:
    api.core.create_namespaced_secret(
        api.ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="anthropic-api-key"), string_data={"api-key": "sk-test"}
        ),
    )
    port = int(anthropic_stub.base_url.rsplit(":", 1)[1])
    api.create(
        run_body(
            "claude-acp",
            {
                "provider": "claude-acp",
                "prompt": "Say hello.",
                "env": [
                    {"name": "ANTHROPIC_BASE_URL", "value": anthropic_stub.base_url},
                    {"name": "CLAUDE_CODE_MAX_RETRIES", "value": "0"},
                ],
                "sandbox": {
                    "networkPolicy": "allowlist",
                    "egress": [{"cidr": f"{NODE}/32", "ports": [port]}],
                },
                "limits": {"timeoutSeconds": 180},
            },
        )
    )
    status = api.wait_finished("claude-acp", timeout=240)
    assert status["phase"] == "Succeeded", status
    assert anthropic_stub.model_calls(), "the adapter never reached the stub"
    assert status["output"]["excerpt"] == TEXT
    attempt = status["attempts"][0]
    assert attempt["cliVersion"] == "0.16.2" and attempt["sessionID"]
    pod = api.core.read_namespaced_pod(attempt["podName"], api.ns)
    assert pod.spec.containers[0].image == claude_acp_image
