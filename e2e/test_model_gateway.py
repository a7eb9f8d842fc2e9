"""The chart's model gateway holding the vendors' keys: every routed built-in, in its shipped image, reaches
its vendor's stub through the gateway and nothing else; the stub sees the gateway's key, never the
attempt's token; status shows the metered usage; an agent that forges its usage is billed what it
spent, in status and in its budget; and a run's retries spend from one cap, its cost what the vendor
billed.

The release is upgraded with `modelGateway.vendors` naming a key Secret per vendor and the stubs as the
vendors' base URLs (what a platform team sets, with the vendors' real URLs left at their defaults), and
given back its defaults afterwards.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes import client
from tests.stubs.run_cli import stub_class

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.contract.times import parse_time
from harness_operator.core.pod.model_grant import model_grant_name, model_key_secret_name

from .conftest import RELEASE_NAMESPACE, STUB_HOST, Runs, install_chart, wait_until

VENDOR_KEYS = {
    "anthropic": "sk-ant-e2e-gateway-held",
    "openai": "sk-openai-e2e-gateway-held",
    "gemini": "gemini-e2e-gateway-held",
}
# Per routed built-in: its vendor and what the run says besides its provider (a model the stub answers).
ROUTED: dict[str, tuple[str, dict[str, Any]]] = {
    "claude": ("anthropic", {}),
    "claude-acp": ("anthropic", {}),
    "codex": ("openai", {}),
    "codex-acp": ("openai", {}),
    "gemini": ("gemini", {"model": "gemini-2.5-flash"}),
    "gemini-acp": ("gemini", {}),
    "pi": ("anthropic", {"provider": "anthropic", "model": "claude-sonnet-4-5"}),
    "qwen": ("openai", {}),
    "opencode": ("anthropic", {"model": "anthropic/claude-sonnet-4-5"}),
    "aider": ("openai", {"model": "gpt-4o", "no_git": True}),
}
# What each stub bills per model call, as status counts it (input without cache reads and writes).
SERVED = {
    "anthropic": {"inputTokens": 1234, "outputTokens": 56, "cacheReadTokens": 100, "cacheWriteTokens": 10},
    "openai": {"inputTokens": 1134, "outputTokens": 56, "cacheReadTokens": 100, "cacheWriteTokens": 0},
    "gemini": {"inputTokens": 1134, "outputTokens": 56, "cacheReadTokens": 100, "cacheWriteTokens": 0},
}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@contextmanager
def gateway_with_vendors(kube: client.ApiClient, *extra: str) -> Iterator[dict[str, Any]]:
    """The release with the gateway holding a key per vendor, the stubs as the vendors (plus `extra` helm
    arguments); the chart's defaults again afterwards."""
    stubs = {v: stub_class(v)(mode="ok", host=STUB_HOST).start() for v in VENDOR_KEYS}
    core = client.CoreV1Api(kube)
    settings = list(extra)
    for vendor, key in VENDOR_KEYS.items():
        name = f"e2e-{vendor}-key"
        body = client.V1Secret(metadata=client.V1ObjectMeta(name=name), string_data={"api-key": key})
        try:
            core.create_namespaced_secret(RELEASE_NAMESPACE, body)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        settings += [
            "--set", f"modelGateway.vendors.{vendor}.secretName={name}",
            "--set", f"modelGateway.vendors.{vendor}.upstream={stubs[vendor].base_url}",
        ]  # fmt: skip
    install_chart(*settings)
    try:
        yield stubs
    finally:
        install_chart()
        for vendor, stub in stubs.items():
            stub.stop()
            core.delete_namespaced_secret(f"e2e-{vendor}-key", RELEASE_NAMESPACE)


@pytest.fixture(scope="module")
def vendors(release: str, kube: client.ApiClient) -> Iterator[dict[str, Any]]:
    """The release with the gateway holding a key per vendor, the stubs as the vendors."""
    with gateway_with_vendors(kube) as stubs:
        yield stubs


def gone(read: Callable[[str, str], Any], name: str) -> bool:
    """Whether the object of the release namespace `read` reads is deleted."""
    try:
        read(name, RELEASE_NAMESPACE)
    except client.ApiException as exc:
        return exc.status == 404
    return False


def model_calls_since(stub: Any, before: int) -> list[Any]:
    return [r for r in stub.requests[before:] if stub.is_model_call(r)]


@pytest.mark.parametrize("provider", sorted(ROUTED))
def test_routed_builtin_reaches_its_vendor_only_through_the_gateway(
    provider: str, vendors: dict[str, Any], runs: Runs, kube: client.ApiClient
) -> None:
    vendor, options = ROUTED[provider]
    stub = vendors[vendor]
    before = len(stub.requests)
    runs.create("routed", {"provider": provider, "prompt": "Say hello.", "with": options,
                           "limits": {"timeoutSeconds": 180}})  # fmt: skip
    status = runs.wait_finished("routed")
    assert status["phase"] == "Succeeded", runs.describe("routed")
    assert "Hello from the" in status["output"]["excerpt"]
    calls = model_calls_since(stub, before)
    assert calls, f"{provider} made no model call through the gateway"
    # The vendor saw the key the gateway holds, on every request; the attempt's token never left it.
    assert {tuple(r.auth_sha256) for r in stub.requests[before:]} == {(sha(VENDOR_KEYS[vendor]),)}
    usage = status["usage"]
    assert {k: usage.get(k) for k in SERVED[vendor]} == {k: v * len(calls) for k, v in SERVED[vendor].items()}
    assert usage["costSource"] in ("metered", "unknown"), usage  # unknown: a model the table has no price for
    if usage["costSource"] == "metered":
        assert usage["costUSD"] > 0 and "model gateway" in usage["priceSource"]
    assert "reportedUsage" in status["attempts"][0]  # the sandbox's own figures, kept beside
    pod = runs.core.read_namespaced_pod(status["attempts"][0]["podName"], runs.ns)
    secrets = {
        e.value_from.secret_key_ref.name
        for c in pod.spec.containers + (pod.spec.init_containers or [])
        for e in c.env or []
        if e.value_from and e.value_from.secret_key_ref
    }
    assert secrets <= {"routed-plan"}, secrets  # no vendor key Secret is referenced by the sandbox
    policy = client.NetworkingV1Api(kube).read_namespaced_network_policy("routed-a1", runs.ns)
    assert not any(peer.ip_block for rule in policy.spec.egress or [] for peer in rule.to or []), (
        "a routed attempt's policy opens no address: DNS and the gateway only"
    )
    warnings = [r for t, r, _ in runs.events("routed") if t == "Warning"]
    assert "ModelKeyInSandbox" not in warnings
    # The runner waited for the gateway before it started the agent, wherever the CLI reads its URL from
    # (env; Codex's options, OpenCode's JSON variable, Pi's file: the plan's model destination).
    log = runs.core.read_namespaced_pod_log(pod.metadata.name, runs.ns, container="runner")
    ready = re.search(rf"network ready: \S+\.{RELEASE_NAMESPACE}\.svc:\d+ \(([^)]+)\) answered after", log)
    assert ready, log[-3000:]
    assert ready.group(1).endswith(("_BASE_URL", "_API_BASE")) or ready.group(1) == "model destination", log


# The agent of the forgery test: it spends tokens through the gateway, looks for the vendor's key in
# everything the sandbox lets it read, then claims it spent nothing (Claude's stream-json, zero usage).
FORGER = r"""
import json, os, stat, urllib.request
key = os.environ["LOOK_FOR"][::-1].encode()  # given reversed: the variable itself does not hold it
prompt = [{"role": "user", "content": "hi " * 600}]
body = {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": prompt}
headers = {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"}
for _ in range(3):
    url = os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages"
    urllib.request.urlopen(urllib.request.Request(url, json.dumps(body).encode(), headers), timeout=30).read()


def holds(path):
    try:  # regular files only: the runner's channel is FIFOs, which an open would wait on
        if not stat.S_ISREG(os.stat(path).st_mode) and not path.startswith("/proc/"):
            return False
        with open(path, "rb") as handle:
            return key in handle.read()
    except OSError:
        return False


found = [k for k, v in os.environ.items() if key in v.encode()]
procs = [f"/proc/{p}/{f}" for p in os.listdir("/proc") for f in ("environ", "cmdline")]
found += [path for path in procs if holds(path)]
for top in ("/workspace", "/home", "/tmp", "/etc", "/var/run", "/run"):
    for folder, _, names in os.walk(top):
        found += [os.path.join(folder, n) for n in names if holds(os.path.join(folder, n))]
usage = {"input_tokens": 0, "output_tokens": 0}
said = "key found in: " + (", ".join(found) or "nothing")
print(json.dumps({"type": "result", "subtype": "success", "is_error": False, "result": said,
                  "total_cost_usd": 0, "usage": usage, "num_turns": 1}))
"""


def test_a_forged_usage_report_is_billed_what_the_gateway_metered(
    vendors: dict[str, Any], runs: Runs
) -> None:
    definition = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessDefinition",
        "metadata": {"name": "forger"},
        "spec": {
            "binary": "python3",
            "prefixArgs": ["-c", FORGER],
            "output": {"format": "claude-stream-json"},
            "capabilities": {"usageReporting": True, "costReporting": True},
            "env": [{"name": "LOOK_FOR", "value": VENDOR_KEYS["anthropic"][::-1]}],
            "credentials": [
                {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "none", "key": "k"}, "optional": True}
            ],
            "modelRoute": {
                "vendor": "anthropic",
                "env": [
                    {"name": "ANTHROPIC_BASE_URL", "value": "$(HARNESS_MODEL_GATEWAY_URL)"},
                    {"name": "ANTHROPIC_API_KEY", "value": "$(HARNESS_MODEL_GATEWAY_TOKEN)"},
                ],
            },
        },
    }  # fmt: skip
    runs.custom.create_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnessdefinitions", definition)
    budget = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessBudget",
        "metadata": {"name": "team"},
        "spec": {"period": "daily", "limits": {"maxCostUSD": 5}},
    }
    runs.custom.create_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnessbudgets", budget)
    stub = vendors["anthropic"]
    before = len(stub.requests)
    runs.create("forged", {"provider": "forger", "prompt": "go", "limits": {"timeoutSeconds": 120}})
    status = runs.wait_finished("forged")
    assert status["phase"] == "Succeeded", runs.describe("forged")
    assert "key found in: nothing" in runs.output("forged"), runs.output("forged")
    assert len(model_calls_since(stub, before)) == 3
    usage, reported = status["usage"], status["attempts"][0]["reportedUsage"]
    assert reported["costUSD"] == 0 and reported["inputTokens"] == 0  # what the agent claimed
    assert usage["costSource"] == "metered" and usage["inputTokens"] == 3 * 1234 and usage["costUSD"] > 0.01
    mismatch = [m for t, r, m in runs.events("forged") if r == "UsageMismatch"]
    assert mismatch and "metered" in mismatch[0], runs.events("forged")

    def spent() -> float | None:
        got = runs.custom.get_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnessbudgets", "team")
        value = (got.get("status") or {}).get("spentUSD")
        return value if value and value >= usage["costUSD"] - 1e-6 else None

    assert wait_until(spent, 60, "the budget to show the metered spend") == pytest.approx(usage["costUSD"])


def test_an_ended_runs_grant_is_gone(vendors: dict[str, Any], runs: Runs) -> None:
    """Once the run has ended its grant is deleted: the gateway refuses its tokens from then on
    (tests/integration/test_model_gateway.py measures the refusal)."""
    runs.create("ended", {"provider": "claude", "prompt": "Say hello.", "limits": {"timeoutSeconds": 180}})
    status = runs.wait_finished("ended")
    assert status["phase"] == "Succeeded", runs.describe("ended")
    assert "model-env-1-ANTHROPIC_API_KEY" in (
        runs.core.read_namespaced_secret("ended-plan", runs.ns).data or {}
    )
    name = model_grant_name(runs.ns, "ended")
    assert wait_until(lambda: gone(runs.core.read_namespaced_config_map, name), 30, f"the grant {name} to go")


def test_a_refused_platform_key_ends_in_seconds_naming_its_secret(
    vendors: dict[str, Any], runs: Runs
) -> None:
    """The vendor refuses the platform's key: Claude Code stops at the gateway's answer instead of retrying
    for minutes, and the run fails AuthFailed naming the platform's Secret, not a key of the team's."""
    stub = vendors["anthropic"]
    before = len(stub.requests)
    stub.mode = "unauthorized"
    try:
        spec = {"provider": "claude", "prompt": "Say hello.", "limits": {"timeoutSeconds": 180}}
        runs.create("refused", spec)
        status = runs.wait_finished("refused")
    finally:
        stub.mode = "ok"
    assert (status["phase"], status["reason"]) == ("Failed", "AuthFailed"), runs.describe("refused")
    assert f"Secret {RELEASE_NAMESPACE}/e2e-anthropic-key" in status["message"], status["message"]
    assert "platform's key" in status["message"] and len(status["attempts"]) == 1
    # No retry storm: one model call (Claude Code retried a 401 ten times, over minutes, before).
    assert len(model_calls_since(stub, before)) <= 2, stub.requests[before:]
    took = parse_time(status["completionTime"]) - parse_time(status["startTime"])
    print(f"refused key: Failed AuthFailed {took.total_seconds():.1f} s after the run started")
    assert took.total_seconds() < 120


def test_a_runs_own_key_is_held_by_the_gateway_too(vendors: dict[str, Any], runs: Runs) -> None:
    """A run granting its own key where the token goes is still routed: the operator copies the key
    for the gateway, the sandbox gets the token, the vendor sees the run's key."""
    team_key = "sk-ant-the-teams-own"
    runs.secret("team-key", "api-key", team_key)
    stub = vendors["anthropic"]
    before = len(stub.requests)
    credentials = [{"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "team-key", "key": "api-key"}}]
    runs.create("own", {"provider": "claude", "prompt": "Say hello.", "credentials": credentials,
                        "limits": {"timeoutSeconds": 180}})  # fmt: skip
    status = runs.wait_finished("own")
    assert status["phase"] == "Succeeded", runs.describe("own")
    assert {tuple(r.auth_sha256) for r in stub.requests[before:]} == {(sha(team_key),)}
    assert status["usage"]["costSource"] == "metered"
    pod = runs.core.read_namespaced_pod(status["attempts"][0]["podName"], runs.ns)
    refs = {
        e.value_from.secret_key_ref.name for c in pod.spec.containers for e in c.env or [] if e.value_from
    }
    assert refs == {"own-plan"}, refs  # the team's Secret is not the sandbox's
    name = model_key_secret_name(runs.ns, "own")
    assert wait_until(
        lambda: gone(runs.core.read_namespaced_secret, name), 30, f"the copy of the key, {name}, to go"
    )


VERDICT_SCHEMA = {"type": "object", "properties": {"verdict": {"enum": ["approve", "reject"]}},
                  "required": ["verdict"]}  # fmt: skip
MAYBE, APPROVE = '{"verdict": "maybe"}', '{"verdict": "approve"}'


@pytest.mark.parametrize(
    ("provider", "spec"),
    [
        ("claude", {}),  # --json-schema: the CLI refuses "maybe" and re-prompts its model itself
        ("codex", {}),  # --output-schema: a file in the sandbox's home, the Responses API's strict format
        ("pi", {"with": ROUTED["pi"][1], "outputReprompts": 1}),  # the runner re-prompts, in Pi's session
    ],
)
def test_structured_output_in_the_shipped_image_through_the_gateway(
    provider: str, spec: dict[str, Any], vendors: dict[str, Any], runs: Runs
) -> None:
    stub = vendors[ROUTED[provider][0]]
    before = len(stub.requests)
    if provider == "codex":
        stub.text = APPROVE  # strict json_schema: a vendor holding the model to the schema answers in it
    else:
        stub.answers = [MAYBE, APPROVE]
    try:
        body = {"provider": provider, "prompt": "Give a verdict.", "outputSchema": VERDICT_SCHEMA}
        runs.create("verdict", {**body, "limits": {"timeoutSeconds": 180}, **spec})
        status = runs.wait_finished("verdict")
    finally:
        stub.text, stub.answers = type(stub).text, []
    assert status["phase"] == "Succeeded", runs.describe("verdict")
    cm = runs.core.read_namespaced_config_map(status["output"]["configMapName"], runs.ns)
    assert cm.data["output.json"] == '{"verdict":"approve"}'
    calls = model_calls_since(stub, before)
    first = calls[0].body
    if provider == "claude":
        tool = next(t for t in first["tools"] if t["name"] == "StructuredOutput")
        assert tool["input_schema"]["properties"] == VERDICT_SCHEMA["properties"]
        assert "Output does not match required schema" in json.dumps(calls[1].body["messages"][-1])
    elif provider == "codex":
        assert first["text"]["format"]["type"] == "json_schema"
        assert first["text"]["format"]["schema"]["properties"] == VERDICT_SCHEMA["properties"]
    else:
        assert len(calls) == 2 and "was refused" in json.dumps(calls[1].body["messages"][-1])
        pod = status["attempts"][0]["podName"]
        log = runs.core.read_namespaced_pod_log(pod, runs.ns, container="runner")
        assert "re-prompt 1/1 with pi" in log
    assert status["usage"]["inputTokens"] == SERVED[ROUTED[provider][0]]["inputTokens"] * len(calls)


# The agent of the cap test: it spends through the gateway, five answers or until refused at the cap, then
# fails as a rate-limited Claude does (a retry cures that), or stops at the cap (a refusal ends the run).
SPENDER = r"""
import json, os, sys, urllib.error, urllib.request
body = {"model": "claude-sonnet-4-5", "max_tokens": 1024,
        "messages": [{"role": "user", "content": "word " * 1000}]}
headers = {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"}
statuses = []
for _ in range(5):
    url = os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages"
    try:
        request = urllib.request.Request(url, json.dumps(body).encode(), headers)
        urllib.request.urlopen(request, timeout=30).read()
        statuses.append(200)
    except urllib.error.HTTPError as exc:
        statuses.append(exc.code)
        break
print(json.dumps({"type": "result", "subtype": "error", "is_error": True, "api_error_status": 429,
                  "result": f"answers: {statuses}", "total_cost_usd": 0, "num_turns": 1}))
sys.exit(1)
"""
SONNET_USD_PER_MTOK = {"input_tokens": 3.0, "output_tokens": 15.0, "cache_read_input_tokens": 0.3,
                       "cache_creation_input_tokens": 3.75}  # fmt: skip


def test_a_runs_cap_binds_its_retries_together_and_its_cost_is_what_the_vendor_billed(
    vendors: dict[str, Any], runs: Runs
) -> None:
    """Red team 49, item 5: each attempt's grant carried the whole maxCostUSD, so a run's retries spent it
    again and again. Here each attempt spends five answers (0.023 USD) and fails as rate limited: three
    attempts would spend 0.069 of the run's 0.05; the second is refused at the cap, which ends the run."""
    definition = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessDefinition",
        "metadata": {"name": "spender"},
        "spec": {
            "binary": "python3",
            "prefixArgs": ["-c", SPENDER],
            "output": {"format": "claude-stream-json"},
            "capabilities": {"usageReporting": True, "costReporting": True},
            "credentials": [
                {"env": "ANTHROPIC_API_KEY", "secretKeyRef": {"name": "none", "key": "k"}, "optional": True}
            ],
            "modelRoute": {
                "vendor": "anthropic",
                "env": [
                    {"name": "ANTHROPIC_BASE_URL", "value": "$(HARNESS_MODEL_GATEWAY_URL)"},
                    {"name": "ANTHROPIC_API_KEY", "value": "$(HARNESS_MODEL_GATEWAY_TOKEN)"},
                ],
            },
        },
    }  # fmt: skip
    runs.custom.create_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnessdefinitions", definition)
    stub = vendors["anthropic"]
    before = len(stub.requests)
    cap = 0.05
    runs.create("capped", {"provider": "spender", "prompt": "go", "retry": {"limit": 2, "backoffSeconds": 1},
                           "limits": {"timeoutSeconds": 120, "maxCostUSD": cap}})  # fmt: skip
    status = runs.wait_finished("capped")
    assert status["reason"] == "CostLimitExceeded", runs.describe("capped")
    attempts = status["attempts"]
    assert [a.get("reason") for a in attempts] == ["RateLimited", "CostLimitExceeded"], attempts
    # What the vendor billed: each answer's usage (its output at most the max_tokens the gateway sent).
    billed = 0.0
    for request in model_calls_since(stub, before):
        usage = {"input_tokens": 1234, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 10,
                 "output_tokens": min(56, request.body["max_tokens"])}  # fmt: skip
        billed += sum(usage[kind] * usd for kind, usd in SONNET_USD_PER_MTOK.items()) / 1e6
    assert len(model_calls_since(stub, before)) >= 6  # both attempts spent
    usage = status["usage"]
    assert usage["costSource"] == "metered" and usage["costUSD"] == pytest.approx(billed, abs=1e-6)
    assert cap - 0.01 < usage["costUSD"] <= cap + 1e-9  # the two attempts together, at the run's cap
    assert sum(a["usage"]["costUSD"] for a in attempts) == pytest.approx(usage["costUSD"], abs=1e-6)
