"""One trace per run in a real Jaeger, and the audit trail (issue 55): the chart with `tracing.endpoint`
naming Jaeger's OTLP receiver and the model gateway holding the vendors' keys. A test user creates a run
whose first provider (the real Claude Code) finds its vendor overloaded and whose fallback (the real
Codex) writes a file that the publisher pushes and opens a pull request for. The run's trace holds the
admission, both attempts with their pods' steps, the runner's spans, the gateway's model requests (tokens
as metered) and the publish, in order, with no secret in any attribute; the operator's audit records name
the user, who can neither alter the status nor read the operator's log.

Needs a running Jaeger (tests/cluster/jaeger start, or `make trace-test`, which builds it from the Go
module proxy): skipped without one.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
import yaml
from kubernetes import client
from tests.lib.jaeger import SCRIPT, Jaeger, Span, script_output, wait_for_trace
from tests.servers.git_http import GitHttpServer
from tests.stubs.github import GitHubStub

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import RELEASE, RELEASE_NAMESPACE, STUB_HOST, Runs, kubectl, wait_until
from .test_agents import REPO
from .test_model_gateway import VENDOR_KEYS, gateway_with_vendors
from .test_publish import OWNER_REPO, WRITE_TOKEN, forge, git_server  # noqa: F401  (their fixtures)

pytestmark = pytest.mark.traces
USER = "trace-tester"
WRITTEN = "greeting.txt"


def running_jaeger() -> Jaeger:
    """The Jaeger tests/cluster/jaeger runs (started, and built on first use, with HARNESS_TRACES=1);
    without it the test is skipped when none answers."""
    if os.environ.get("HARNESS_TRACES") == "1":
        return Jaeger.from_cluster()
    try:
        with urllib.request.urlopen(f"{script_output('query-url')}/api/services", timeout=5):
            pass
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"no Jaeger is running: {SCRIPT} start (or make trace-test)")
    return Jaeger(script_output("url"), script_output("query-url"))


@pytest.fixture(scope="module")
def jaeger() -> Jaeger:
    return running_jaeger()


@pytest.fixture(scope="module")
def traced(release: str, kube: client.ApiClient, jaeger: Jaeger) -> Iterator[dict[str, Any]]:
    """The release sending its spans to Jaeger, the model gateway holding the vendors' keys: the stubs."""
    with gateway_with_vendors(kube, "--set", f"tracing.endpoint={jaeger.otlp_url}") as stubs:
        yield stubs


def grant_user(kube: client.ApiClient, namespace: str) -> None:
    """The test user edits the namespace, as a team member does (the chart's roles aggregate into edit)."""
    client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    )


def pod_logs(core: client.CoreV1Api, selector: str) -> list[str]:
    """Every line the release's pods matching `selector` logged (each replica's)."""
    lines = []
    for pod in core.list_namespaced_pod(RELEASE_NAMESPACE, label_selector=selector).items:
        for container in pod.spec.containers:
            log = core.read_namespaced_pod_log(pod.metadata.name, RELEASE_NAMESPACE, container=container.name)
            lines += log.splitlines()
    return lines


def audit_records(lines: list[str], uid: str) -> list[dict[str, Any]]:
    records = []
    for line in lines:
        try:
            record = json.loads(line[line.index("{") :]) if "{" in line else None
        except ValueError:
            continue
        if isinstance(record, dict) and "audit" in record and record.get("runUID") == uid:
            records.append(record)
    return records


def named(spans: list[Span], name: str) -> Span:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, (name, sorted(s.name for s in spans))
    return found[0]


def in_order(*times: int) -> bool:
    """Each time no later than the next, give or take the nanosecond Jaeger adds to a span of no length."""
    return all(earlier <= later + 1 for earlier, later in pairwise(times))


def children(spans: list[Span], parent: Span) -> list[Span]:
    return [s for s in spans if s.parent_span_id == parent.span_id]


def test_a_run_with_a_fallback_and_a_publish_is_one_trace_and_its_audit_names_its_author(
    traced: dict[str, Any],
    jaeger: Jaeger,
    runs: Runs,
    git_server: GitHttpServer,  # noqa: F811
    forge: GitHubStub,  # noqa: F811
    kube: client.ApiClient,
) -> None:
    anthropic, openai = traced["anthropic"], traced["openai"]
    url = git_server.create_repo(OWNER_REPO, {"README.md": "hello\n"})
    runs.secret("forge-write-token", "token", WRITE_TOKEN)
    grant_user(kube, runs.ns)
    manifest = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessRun",
        "metadata": {"name": "traced", "namespace": runs.ns, "annotations": {f"{GROUP}/author": USER}},
        "spec": {
            "provider": "claude",
            "prompt": f"Write {WRITTEN}.",
            "env": [{"name": "CLAUDE_CODE_MAX_RETRIES", "value": "0"}],  # overloaded: fall back at once
            "fallback": [{"provider": "codex", "with": {"sandbox": "danger-full-access"}}],
            "limits": {"timeoutSeconds": 240},
            "workspace": {
                "workingDir": REPO,
                "git": {"url": url, "ref": "main"},
                "publish": {
                    "credentialsSecretRef": {"name": "forge-write-token", "key": "token"},
                    "pullRequest": {"forge": "github", "apiURL": forge.base_url, "repository": OWNER_REPO},
                },
            },
            "sandbox": {"egress": [{"cidr": f"{STUB_HOST}/32", "ports": [git_server.port, forge.port]}]},
        },
    }
    anthropic.mode = "overloaded"
    openai.mode, openai.command, openai.text = "shell", f"printf 'hi\\n' > {WRITTEN}", "codex: wrote it"
    try:
        kubectl("--as", USER, "create", "-f", "-", stdin=yaml.safe_dump(manifest))
        status = runs.wait_finished("traced", timeout=420)
    finally:
        for stub in (anthropic, openai):
            stub.mode = "ok"
            vars(stub).pop("text", None)

    assert status["phase"] == "Succeeded", runs.describe("traced")
    first, second = status["attempts"]
    assert (first["provider"], second["provider"]) == ("claude", "codex") and first["exitCode"] != 0
    changes = status["changes"]
    assert git_server.read(OWNER_REPO, changes["branch"], WRITTEN) == b"hi\n" and changes["pullRequestURL"]
    run = runs.get("traced")
    uid, trace_id = run["metadata"]["uid"], status["traceID"]

    # One trace: the run's span last, the operator's, the runner's and the gateway's spans in it.
    def whole() -> list[Span] | None:
        spans = wait_for_trace(jaeger.query_url, trace_id, 12, timeout=5)
        return spans if any(s.name == f"run {runs.ns}/traced" for s in spans) else None

    spans = wait_until(whole, 60, "the run's trace in Jaeger")
    assert {s.trace_id for s in spans} == {trace_id}
    root = named(spans, f"run {runs.ns}/traced")
    admission, one, two = (
        named(spans, "admission"),
        named(spans, "attempt 1 claude"),
        named(spans, "attempt 2 codex"),
    )
    assert root.parent_span_id is None and root.service == "harness-operator"
    assert {admission.parent_span_id, one.parent_span_id, two.parent_span_id} == {root.span_id}
    assert root.attributes["harness.author"] == USER and root.attributes["harness.pull_request"]
    assert one.status_code == "ERROR" and two.status_code == "UNSET", (one, two)
    # In order (the status's and the kubelet's times are whole seconds, so a step may last none; Jaeger
    # then ends it a nanosecond after its start).
    assert in_order(
        root.start_ns, admission.start_ns, admission.end_ns, one.start_ns, one.end_ns, two.start_ns
    )
    assert in_order(two.end_ns, root.end_ns)
    steps = {s.name: s for s in children(spans, two) if "harness.source" not in s.attributes}
    steps = {name: s for name, s in steps.items() if s.service == "harness-operator"}
    assert {"schedule", "clone", "runner", "agent", "publish"} <= set(steps), sorted(steps)
    publish = steps["publish"]
    assert in_order(steps["agent"].end_ns, publish.start_ns, publish.end_ns, two.end_ns), (publish, two)
    # The runner's, as the sandbox reported them, under the attempt's span.
    runner = [s for s in spans if s.attributes.get("harness.source") == "sandbox"]
    assert {"setup", "agent"} <= {s.name for s in runner if s.parent_span_id == two.span_id}, runner
    # The gateway's model requests, under each attempt, their tokens as the gateway metered them.
    calls = {
        i: [s for s in children(spans, a) if s.service == "harness-model-gateway"]
        for i, a in ((1, one), (2, two))
    }
    assert calls[1] and all(s.status_code == "ERROR" and s.attributes["error.type"] for s in calls[1]), calls[
        1
    ]
    assert calls[2] and all(s.attributes["gen_ai.provider.name"] == "openai" for s in calls[2])
    usage = second["usage"]
    assert sum(int(s.attributes["gen_ai.usage.output_tokens"]) for s in calls[2]) == usage["outputTokens"]
    metered_input = usage["inputTokens"] + usage.get("cacheReadTokens", 0) + usage.get("cacheWriteTokens", 0)
    assert sum(int(s.attributes["gen_ai.usage.input_tokens"]) for s in calls[2]) == metered_input
    # No secret in any attribute: the vendors' keys, the write token, the attempts' gateway tokens.
    values = json.dumps([s.attributes for s in spans])
    for secret in [*VENDOR_KEYS.values(), WRITE_TOKEN]:
        assert secret not in values
    assert "hmg-" not in values

    # The audit trail: the operator's records name the user; the gateway's count each request.
    operator_records = audit_records(pod_logs(runs.core, f"app.kubernetes.io/instance={RELEASE}"), uid)
    kinds = [r["audit"] for r in operator_records if r["audit"] != "model-request"]
    assert kinds.count("run-accepted") == 1 and kinds.count("attempt-ended") == 2 and "run-finished" in kinds
    accepted = next(r for r in operator_records if r["audit"] == "run-accepted")
    assert accepted["createdBy"] == USER and accepted["traceID"] == trace_id
    finished = next(r for r in operator_records if r["audit"] == "run-finished")
    assert (finished["branch"], finished["pullRequestURL"]) == (changes["branch"], changes["pullRequestURL"])
    requests = [r for r in operator_records if r["audit"] == "model-request" and r["attempt"] == 2]
    assert sum(r["outputTokens"] for r in requests) == usage["outputTokens"]
    assert WRITE_TOKEN not in json.dumps(operator_records)
    # The user can change neither what the operator recorded nor its author, nor read the operator's log.
    patched = kubectl(
        "--as", USER, "-n", runs.ns, "patch", "hrun", "traced", "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"traceID": "0" * 32}}), check=False,
    )  # fmt: skip
    assert patched.returncode != 0 and "forbidden" in patched.stderr.lower(), patched.stderr
    relabelled = kubectl(
        "--as", USER, "-n", runs.ns, "annotate", "hrun", "traced", "--overwrite",
        f"{GROUP}/author=someone-else", check=False,
    )  # fmt: skip
    assert relabelled.returncode != 0, relabelled.stdout
    logs = kubectl("--as", USER, "-n", RELEASE_NAMESPACE, "logs", f"deploy/{RELEASE}", check=False)
    assert logs.returncode != 0 and "forbidden" in logs.stderr.lower(), logs.stderr
    after = runs.get("traced")["status"]
    assert after["traceID"] == trace_id and after["audit"]["createdBy"] == USER
