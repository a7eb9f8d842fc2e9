"""Every installable built-in runs inside its catalog image on the cluster, against a stub of its vendor's
API, and ends Succeeded with the stub's tokens in status (and the cost the CLI reported, where it does).

The runs name only the provider: the image comes from the ClusterHarnessDefinition the chart installed.
Per CLI, only the vendor routing is added (base URL of the stub, a model the stub answers), as a user
routes a CLI through a gateway; the key comes from the Secret the catalog entry grants.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.catalog import load_builtin_catalog

from .conftest import STUB_HOST, Runs

FAKE_KEY = "sk-e2e-not-a-real-key"
# What each stub bills per model call, as the CLI's parser reads it into status.usage: the Anthropic
# stub's 1234 input tokens are on top of its 100 cache reads and 10 cache writes; the OpenAI and Gemini
# stubs' 1234 include their 100 cached ones, which the Codex and Gemini parsers count apart.
ANTHROPIC = {"inputTokens": 1234, "outputTokens": 56, "cacheReadTokens": 100, "cacheWriteTokens": 10}
NET_OF_CACHE = {"inputTokens": 1134, "outputTokens": 56, "cacheReadTokens": 100}


@dataclass(frozen=True)
class Route:
    """How one CLI reaches its stub: vendor, env, options, the Secret its grant names, the usage expected."""

    vendor: str
    env: dict[str, str]
    options: dict[str, Any] = field(default_factory=dict)
    cost_reported: bool = False
    # The CLI reports tokens but no cost, for a model the pinned price table knows: status computes it.
    cost_computed: bool = False
    # Tokens per model call the stub answered; None: the CLI reports no usage (status shows none).
    usage: dict[str, int] | None = field(default_factory=lambda: {"inputTokens": 1234, "outputTokens": 56})
    # The CLI reports the usage of its answer only, not of side calls it may make (a session title).
    answer_only: bool = False
    credentials: list[tuple[str, str, str]] = field(default_factory=list)  # (env, secret, key) run grants
    # Files the CLI's configuration needs, committed to the run's git workspace (cloned to REPO).
    files: dict[str, str] = field(default_factory=dict)


REPO = "/workspace/repo"


def codex_options(base_url: str) -> dict[str, Any]:
    provider = f'{{name="stub", base_url="{base_url}/v1", env_key="OPENAI_API_KEY", wire_api="responses"}}'
    return {"config": ["model_provider=stub", f"model_providers.stub={provider}"]}


ROUTES: dict[str, Callable[[str], Route]] = {
    "claude": lambda url: Route(
        "anthropic",
        {"ANTHROPIC_BASE_URL": url, "CLAUDE_CODE_MAX_RETRIES": "0"},
        cost_reported=True,
        usage=ANTHROPIC,
    ),
    # Zed's ACP adapter for Claude (0.16.2) reports no usage over ACP: status shows none, never 0.
    "claude-acp": lambda url: Route(
        "anthropic", {"ANTHROPIC_BASE_URL": url, "CLAUDE_CODE_MAX_RETRIES": "0"}, usage=None
    ),
    "codex": lambda url: Route("openai", {}, codex_options(url), usage=NET_OF_CACHE),
    # Zed's ACP adapter for Codex (0.16.0) reports no usage over ACP either.
    "codex-acp": lambda url: Route("openai", {}, codex_options(url), usage=None),
    # Gemini CLI picks a gateway auth type when its base URL is set, unless settings select the key.
    "gemini": lambda url: Route(
        "gemini",
        {
            "GOOGLE_GEMINI_BASE_URL": url,
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH": f"{REPO}/.gemini/settings.json",
        },
        {"model": "gemini-2.5-flash"},
        usage=NET_OF_CACHE,
        cost_computed=True,
        files={
            ".gemini/settings.json": json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
        },
    ),
    # Gemini CLI's ACP mode (`gemini --acp`, the gemini image) reports no usage over ACP.
    "gemini-acp": lambda url: Route(
        "gemini",
        {
            "GOOGLE_GEMINI_BASE_URL": url,
            "GEMINI_CLI_SYSTEM_SETTINGS_PATH": f"{REPO}/.gemini/settings.json",
        },
        usage=None,
        files={
            ".gemini/settings.json": json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
        },
    ),
    "qwen": lambda url: Route(
        "openai",
        {"OPENAI_BASE_URL": f"{url}/v1"},
        usage={"inputTokens": 1234, "outputTokens": 56, "cacheReadTokens": 100},
    ),
    "opencode": lambda url: Route(
        "anthropic",
        {
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_CONFIG_CONTENT": json.dumps(
                {"provider": {"anthropic": {"options": {"baseURL": f"{url}/v1"}}}}
            ),
        },
        {"model": "anthropic/claude-sonnet-4-5"},
        cost_reported=True,
        usage=ANTHROPIC,
        answer_only=True,  # it may also ask the model for a session title, and does not count that
    ),
    # Pi takes a provider's base URL only from its models.json (ANTHROPIC_BASE_URL is ignored).
    "pi": lambda url: Route(
        "anthropic",
        {"PI_OFFLINE": "1", "PI_CODING_AGENT_DIR": f"{REPO}/.pi/agent"},
        {"provider": "anthropic", "model": "claude-sonnet-4-5"},
        cost_reported=True,
        usage={"inputTokens": 1234, "outputTokens": 56},
        files={".pi/agent/models.json": json.dumps({"providers": {"anthropic": {"baseUrl": url}}})},
    ),
    "copilot": lambda url: Route(
        "openai",
        {"COPILOT_OFFLINE": "true", "COPILOT_PROVIDER_BASE_URL": f"{url}/v1", "COPILOT_MODEL": "gpt-4.1"},
        credentials=[("COPILOT_PROVIDER_API_KEY", "copilot-provider-key", "api-key")],
        usage=None,  # its usage file is not read yet: the catalog declares usageReporting false
    ),
    # aider prints its own token counts, rounded ("Tokens: 1.2k sent, 56 received. Cost: ...").
    "aider": lambda url: Route(
        "openai",
        {"OPENAI_API_BASE": f"{url}/v1"},
        {"model": "gpt-4o", "no_git": True},
        cost_reported=True,
        usage={"inputTokens": 1200, "outputTokens": 56},
    ),
}


def catalog_grants(provider: str) -> list[tuple[str, str]]:
    """(Secret, key) of every credential the catalog entry grants."""
    for entry in load_builtin_catalog():
        if entry.metadata["name"] == provider:
            return [(c.secret_key_ref.name, c.secret_key_ref.key) for c in entry.spec.credentials]
    raise AssertionError(f"no built-in {provider}")


def declares(provider: str, capability: str) -> bool:
    for entry in load_builtin_catalog():
        if entry.metadata["name"] == provider:
            return bool(entry.spec.capabilities.model_dump(by_alias=True)[capability])
    raise AssertionError(f"no built-in {provider}")


def agent_run(
    runs: Runs, provider: str, route: Route, stub_port: int, git: tuple[str, int] | None = None, **spec: Any
) -> dict[str, Any]:
    """A run as a user writes it for `provider`, routed to the stub (and cloning `git`, a (URL, port) of
    a repository with the route's files); its Secrets created first."""
    for secret, key in catalog_grants(provider) + [(s, k) for _, s, k in route.credentials]:
        try:
            runs.secret(secret, key, FAKE_KEY)
        except client.ApiException as exc:
            if exc.status != 409:
                raise
    body: dict[str, Any] = {
        "provider": provider,
        "prompt": "Say hello.",
        "with": route.options,
        "env": [{"name": k, "value": v} for k, v in sorted(route.env.items())],
        "credentials": [{"env": e, "secretKeyRef": {"name": s, "key": k}} for e, s, k in route.credentials],
        # The stub is the only destination: an enforcing CNI lets exactly this through.
        "sandbox": {
            "networkPolicy": "allowlist",
            "egress": [{"cidr": f"{STUB_HOST}/32", "ports": [stub_port]}],
        },
        "limits": {"timeoutSeconds": 180},
    }
    if git is not None:
        body["workspace"] = {"workingDir": REPO, "git": {"url": git[0], "ref": "main"}}
        body["sandbox"]["egress"].append({"cidr": f"{STUB_HOST}/32", "ports": [git[1]]})
    body.update(spec)
    return body


def test_every_installable_builtin_is_covered() -> None:
    with_image = {e.metadata["name"] for e in load_builtin_catalog() if e.spec.image}
    assert with_image == set(ROUTES)


@pytest.mark.parametrize("provider", sorted(ROUTES))
def test_builtin_runs_in_its_catalog_image(
    provider: str, runs: Runs, stub: Callable[..., Any], git_repo: Callable[..., Any], kube: client.ApiClient
) -> None:
    server = stub(ROUTES[provider]("").vendor)
    route = ROUTES[provider](server.base_url)
    git = git_repo(route.files) if route.files else None
    runs.create("hello", agent_run(runs, provider, route, server.port, git))
    status = runs.wait_finished("hello")
    assert status["phase"] == "Succeeded", runs.describe("hello")
    assert server.model_calls(), f"{provider} made no model call to the stub"
    assert "Hello from the" in status["output"]["excerpt"]
    usage, calls = status.get("usage") or {}, 1 if route.answer_only else len(server.model_calls())
    if route.usage is None:
        assert not declares(provider, "usageReporting")
        assert "inputTokens" not in usage and "costUSD" not in usage, usage
    else:
        assert {k: usage.get(k) for k in route.usage} == {k: v * calls for k, v in route.usage.items()}, usage
    if route.cost_reported:
        assert usage["costSource"] == "reported" and usage["costUSD"] > 0, usage
    elif route.cost_computed:
        assert usage["costSource"] == "computed" and usage["costUSD"] > 0 and usage["priceSource"], usage
    else:
        assert usage.get("costSource", "unknown") == "unknown" and "costUSD" not in usage, usage
    chdef = client.CustomObjectsApi(kube).get_cluster_custom_object(
        GROUP, VERSION, "clusterharnessdefinitions", provider
    )
    pod = client.CoreV1Api(kube).read_namespaced_pod(status["attempts"][0]["podName"], runs.ns)
    assert pod.spec.containers[0].image == chdef["spec"]["image"]
    assert FAKE_KEY not in str(status), "a granted secret reached the status"
