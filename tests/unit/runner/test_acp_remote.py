"""The ACP executor over WebSocket and Streamable HTTP, through loopback bridges to the scripted agent:
subprotocol acp.v1, headers from Secrets, bearer subprotocol, batched frames, binary frames refused;
JSON initialize with a connection id, 202 POSTs, SSE, Acp-Session-Id routing, cookies, DELETE on close;
redirects refused, bodies never shown, TLS from a private CA (wss://, https://) with verification on."""

from __future__ import annotations

import io
import subprocess
from typing import Any

import pytest
from tests.fakes.acp_bridge import AcpWebSocketBridge
from tests.fakes.acp_http_bridge import SECRET_BODY, AcpHttpBridge

from harness_operator.contract.plan import AttemptPlan
from harness_operator.runner.acp_remote import plain_header_warning
from harness_operator.runner.attempt import AttemptResult
from harness_operator.runner.executor import execute

TOKEN = "tok-3f9a1c"  # no '/' or '=': fits a subprotocol


def remote_plan(url: str, **acp: Any) -> AttemptPlan:
    return AttemptPlan.model_validate(
        {
            "attempt": 1,
            "total_attempts": 1,
            "provider": "remote",
            "credential_envs": ["HARNESS_ACP_HEADER_0", *acp.pop("credential_envs", [])],
            "acp": {
                "transport": "websocket",
                "url": url,
                "cwd": "/srv/work",
                "prompt": "hi there",
                "headers": [{"name": "Authorization", "credential_env": "HARNESS_ACP_HEADER_0"}],
                **acp,
            },
        }
    )


def run(plan: AttemptPlan, **credentials: str) -> tuple[AttemptResult, str]:
    err = io.BytesIO()
    creds = {"HARNESS_ACP_HEADER_0": f"Bearer {TOKEN}", **credentials}
    result = execute(plan, creds, base_env={}, stderr=err)
    return result, err.getvalue().decode()


@pytest.fixture(scope="module")
def private_ca(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A CA and a server certificate for 127.0.0.1 that it signed (openssl)."""
    d = tmp_path_factory.mktemp("ca")

    def ssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)

    ssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "2",
        "-subj",
        "/CN=harness test CA",
    )
    ssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    ssl(
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.crt",
        "-days",
        "2",
        "-extfile",
        "san.ext",
    )
    return {"ca": (d / "ca.crt").read_text(), "cert": str(d / "server.crt"), "key": str(d / "server.key")}


def test_websocket_session_with_subprotocol_and_secret_header() -> None:
    with AcpWebSocketBridge() as bridge:
        result, err = run(remote_plan(bridge.url))
    assert result.succeeded, err
    assert result.output == b"answer from acp_agent: hi there"
    assert result.usage.input_tokens == 100
    [seen] = bridge.seen
    assert seen["subprotocol"] == "acp.v1"
    assert seen["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in err


def test_bearer_subprotocol_carries_the_token_instead_of_the_header() -> None:
    with AcpWebSocketBridge() as bridge:
        result, err = run(remote_plan(bridge.url, bearer_subprotocol=True))
    assert result.succeeded, err
    [seen] = bridge.seen
    assert seen["headers"]["Sec-WebSocket-Protocol"] == f"acp.v1, bearer.{TOKEN}"
    assert "Authorization" not in seen["headers"]


def test_a_bearer_token_with_slash_or_equals_is_refused_for_the_subprotocol() -> None:
    with AcpWebSocketBridge() as bridge:
        result, err = run(
            remote_plan(bridge.url, bearer_subprotocol=True), HARNESS_ACP_HEADER_0="Bearer a/b="
        )
    assert (result.exit_code, result.reason) == (1, "SetupFailed")
    assert "cannot carry" in err and "a/b=" not in err + result.message
    assert bridge.seen == []  # nothing was sent


def test_newline_batched_frames_are_split_into_messages() -> None:
    with AcpWebSocketBridge(frames="batch") as bridge:
        result, err = run(remote_plan(bridge.url))
    assert result.succeeded, err
    assert result.output == b"answer from acp_agent: hi there"
    assert result.usage.cost_usd == 0.0123  # the usage_update came batched with the answer


def test_a_binary_frame_ends_the_connection() -> None:
    with AcpWebSocketBridge(frames="binary") as bridge:
        result, err = run(remote_plan(bridge.url))
    assert (result.exit_code, result.reason) == (1, "ProviderFailed")
    assert "binary WebSocket frame" in err


def test_redirects_are_refused_and_bodies_never_shown() -> None:
    with AcpWebSocketBridge() as target, AcpWebSocketBridge(redirect_to="ws://127.0.0.1:1/acp") as bridge:
        result, err = run(remote_plan(bridge.url))
        assert target.seen == []
    assert (result.exit_code, result.reason) == (1, "ProviderFailed")
    assert "HTTP 302 (a redirect); redirects are refused" in err
    assert "secret body" not in err + result.message


def test_wss_verifies_against_the_private_ca(private_ca: dict[str, str]) -> None:
    with AcpWebSocketBridge(tls=(private_ca["cert"], private_ca["key"])) as bridge:
        plan = remote_plan(
            bridge.url, ca_bundle_env="HARNESS_ACP_CA_BUNDLE", credential_envs=["HARNESS_ACP_CA_BUNDLE"]
        )
        result, err = run(plan, HARNESS_ACP_CA_BUNDLE=private_ca["ca"])
        assert result.succeeded, err
        untrusted, err2 = run(remote_plan(bridge.url))  # system roots only: verification stays on
    assert (untrusted.exit_code, untrusted.reason) == (1, "ProviderFailed")
    assert "TLS failed" in err2


@pytest.mark.parametrize(
    ("url", "headers", "warned"),
    [
        ("ws://10.1.2.3:8080/acp", {"Authorization": "x"}, "10.1.2.3 (ws://)"),
        ("http://agents.example:80/acp", {"X-Key": "x"}, "agents.example (http://)"),
        ("ws://127.0.0.1:8080/acp", {"Authorization": "x"}, None),
        ("http://[::1]:8080/acp", {"Authorization": "x"}, None),
        ("http://localhost/acp", {"Authorization": "x"}, None),
        ("wss://10.1.2.3/acp", {"Authorization": "x"}, None),
        ("https://10.1.2.3/acp", {"Authorization": "x"}, None),
        ("ws://10.1.2.3/acp", {}, None),
    ],
)
def test_headers_over_plain_ws_or_http_to_another_host_are_warned(
    url: str, headers: dict[str, str], warned: str | None
) -> None:
    warning = plain_header_warning(url, headers)
    if warned is None:
        assert warning is None
    else:
        assert warning == f"harness: warning: ACP headers go unencrypted to {warned}"


def test_headers_to_loopback_are_not_warned() -> None:
    with AcpWebSocketBridge() as bridge:
        result, err = run(remote_plan(bridge.url))
    assert result.succeeded, err
    assert "warning" not in err


def http_plan(url: str, **acp: Any) -> AttemptPlan:
    return remote_plan(url, transport="http", **acp)


def test_http_session_over_sse_routed_by_session_id_and_released_by_delete() -> None:
    with AcpHttpBridge() as bridge:
        result, err = run(http_plan(bridge.url))
    assert result.succeeded, err
    assert result.output == b"answer from acp_agent: hi there"  # chunks arrived on the session's SSE stream
    assert (result.usage.input_tokens, result.usage.cost_usd) == (100, 0.0123)
    assert bridge.acp_methods() == ["initialize", "session/new", "session/prompt"]
    first, *later = bridge.seen
    assert "Acp-Connection-Id" not in first["headers"]
    [connection] = {s["headers"]["Acp-Connection-Id"] for s in later}
    assert all(s["headers"]["Authorization"] == f"Bearer {TOKEN}" for s in bridge.seen)
    assert all("acp-affinity=" in s["headers"]["Cookie"] for s in later)  # the cookie was kept
    [prompt] = [s for s in later if s["acp"] == "session/prompt"]
    assert prompt["headers"]["Acp-Session-Id"] == result.report.session_id
    streams = [s["headers"] for s in later if s["http"] == "GET"]
    assert [h.get("Acp-Session-Id") for h in streams] == [None, result.report.session_id]
    assert all(h["Accept"] == "text/event-stream" for h in streams)
    assert bridge.deleted == [connection]
    assert TOKEN not in err


def test_http_permission_request_arrives_on_sse_and_is_answered_by_post() -> None:
    with AcpHttpBridge(mode="permission") as bridge:
        result, err = run(http_plan(bridge.url, permission="allow"))
    assert result.succeeded, err
    assert result.output == b"permission outcome: yes-once"
    answers = [s for s in bridge.seen if s["http"] == "POST" and s["acp"] is None]
    assert len(answers) == 1  # the JSON-RPC response to the agent's request


def test_http_stop_past_the_grace_cancels_then_deletes_the_connection() -> None:
    with AcpHttpBridge(mode="deaf") as bridge:  # ignores session/cancel
        plan = http_plan(bridge.url)
        plan.limits.timeout_seconds, plan.limits.grace_period_seconds = 1, 1
        result, err = run(plan)
    assert (result.exit_code, result.reason, result.fallback_allowed) == (124, "Timeout", False)
    assert bridge.acp_methods()[-1] == "session/cancel"
    assert "did not end within 1s; closing" in err
    assert len(bridge.deleted) == 1


@pytest.mark.parametrize(
    ("bridge_args", "said"),
    [
        (
            {"redirect_to": "http://127.0.0.1:1/acp"},
            "the endpoint answered HTTP 307 (a redirect); redirects are refused",
        ),
        ({"fail_status": 500}, "the endpoint answered HTTP 500"),
    ],
)
def test_http_redirects_and_errors_are_stated_without_bodies_or_credentials(
    bridge_args: dict[str, Any], said: str
) -> None:
    with AcpHttpBridge(**bridge_args) as bridge:
        result, err = run(http_plan(bridge.url))
    assert (result.exit_code, result.reason) == (1, "ProviderFailed")
    assert f"harness: the ACP endpoint failed: {said}" in err
    assert [s["http"] for s in bridge.seen] == ["POST"]  # the redirect was not followed
    for secret in (SECRET_BODY, TOKEN):
        assert secret not in err + result.message


def test_https_verifies_against_the_private_ca(private_ca: dict[str, str]) -> None:
    with AcpHttpBridge(tls=(private_ca["cert"], private_ca["key"])) as bridge:
        plan = http_plan(
            bridge.url, ca_bundle_env="HARNESS_ACP_CA_BUNDLE", credential_envs=["HARNESS_ACP_CA_BUNDLE"]
        )
        result, err = run(plan, HARNESS_ACP_CA_BUNDLE=private_ca["ca"])
        assert result.succeeded, err
        assert len(bridge.deleted) == 1
        untrusted, err2 = run(http_plan(bridge.url))  # system roots only: verification stays on
    assert (untrusted.exit_code, untrusted.reason) == (1, "ProviderFailed")
    assert "harness: the ACP endpoint failed: TLS failed: CERTIFICATE_VERIFY_FAILED" in err2
