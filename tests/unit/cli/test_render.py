"""harnessctl render: one plan Secret per run, a NetworkPolicy and a Job per attempt, no secret values."""

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]


def render(*paths: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness_operator.cli.main", "render", *paths],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_render_a_run_with_a_fallback() -> None:
    result = render("examples/custom-cli-with-fallback.yaml")
    assert result.returncode == 0, result.stderr
    objects = list(yaml.safe_load_all(result.stdout))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("Secret", "triage-flaky-tests-plan"),
        ("NetworkPolicy", "triage-flaky-tests-a1"),
        ("Job", "triage-flaky-tests-a1"),
        ("NetworkPolicy", "triage-flaky-tests-a2"),
        ("Job", "triage-flaky-tests-a2"),
    ]
    plans = {k: json.loads(v) for k, v in objects[0]["stringData"].items()}
    assert plans["attempt-1.json"]["binary"] == "/opt/acme/bin/acme-agent"
    assert plans["attempt-1.json"]["args"][:4] == [
        "run",
        "--non-interactive",
        "--task",
        "Find the flaky tests in the attached CI log and propose a fix for each.",
    ]
    assert plans["attempt-2.json"]["binary"] == "codex"
    assert (
        plans["attempt-1.json"]["limits"]["maxOutputBytes"] == 1000000
    )  # the operator's default, as it applies it
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert (
        jobs[0]["spec"]["template"]["spec"]["containers"][0]["image"]
        == "harness.local/acme/agent-sandbox:1.4.2"
    )
    env = jobs[0]["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {
        "name": "ACME_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "acme-token", "key": "token"}},
    } in env
    assert "replace-me" not in result.stdout  # the Secret manifest's value is never read into an object


def test_render_shows_sources_as_placeholders() -> None:
    result = render("examples/chained-runs.yaml")
    assert result.returncode == 0, result.stderr
    secret = next(
        o
        for o in yaml.safe_load_all(result.stdout)
        if o["kind"] == "Secret" and o["metadata"]["name"] == "review-migration-plan-plan"
    )
    assert (
        json.loads(secret["stringData"]["attempt-1.json"])["stdin"] == "<output of HarnessRun plan-migration>"
    )


def test_render_refuses_invalid_manifests() -> None:
    result = render("tests/fixtures/bad-manifests/runs.yaml")
    assert result.returncode == 1
    assert "with.binary is not supported" in result.stderr


def test_render_reports_a_run_that_cannot_be_planned(tmp_path: Path) -> None:
    run = {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessRun",
        "metadata": {"name": "huge", "namespace": "default"},
        "spec": {"provider": "claude", "prompt": "x" * 131_072, "workspace": {"workingDir": "/w"}},
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run))
    result = render(str(path))
    assert result.returncode == 1
    assert "HarnessRun/huge: PromptTooLarge: the prompt is 131072 bytes" in result.stderr
    assert "kind: Job" not in result.stdout


def operator_deployment(env: list[dict[str, object]]) -> str:
    """An operator Deployment as `kubectl get deployment -o yaml` or `helm template` prints one."""
    container = {"name": "operator", "image": "x", "env": env}
    body = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "harness-operator"},
            "spec": {"template": {"spec": {"containers": [{"name": "sidecar"}, container]}}}}  # fmt: skip
    return yaml.safe_dump(body)


def policy_destinations(stdout: str) -> list[object]:
    objects = list(yaml.safe_load_all(stdout))
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    return [rule.get("to") for rule in policy["spec"]["egress"]]


def render_plain_and_configured(
    tmp_path: Path,
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """examples/review-run.yaml rendered without --operator, and as an operator with an egress gateway is
    (its key a Secret's value, a placeholder to render)."""
    deployment = tmp_path / "operator.yaml"
    deployment.write_text(
        operator_deployment(
            [
                {"name": "HARNESS_EGRESS_GATEWAY_SERVICE", "value": "gw.harness-system.svc"},
                {"name": "HARNESS_EGRESS_GATEWAY_NAMESPACE", "value": "harness-system"},
                {"name": "HARNESS_EGRESS_GATEWAY_POD_LABELS", "value": "app=gw"},
                {
                    "name": "HARNESS_EGRESS_GATEWAY_KEY",
                    "valueFrom": {"secretKeyRef": {"name": "k", "key": "key"}},
                },
            ]
        )
    )
    plain = render("examples/review-run.yaml")
    configured = render("--operator", str(deployment), "examples/review-run.yaml")
    assert plain.returncode == 0 and configured.returncode == 0, plain.stderr + configured.stderr
    return plain, configured


def test_render_configured_as_an_installed_operator_is(tmp_path: Path) -> None:
    """Without --operator: the built-in defaults, no gateway; with the Deployment's env (a Secret's value
    as a placeholder): the egress through its gateway."""
    plain, configured = render_plain_and_configured(tmp_path)
    gateway = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "harness-system"}},
                "podSelector": {"matchLabels": {"app": "gw"}}}]  # fmt: skip
    assert gateway in policy_destinations(configured.stdout)
    assert gateway not in policy_destinations(plain.stdout)


def test_render_builds_the_plans_as_the_operator_does_and_says_when_it_has_no_operator(
    tmp_path: Path,
) -> None:
    """The plans come from the operator's own path: configured with a gateway, an attempt whose host
    rules go through it is told the proxy variables; without --operator, render says what it used."""
    plain, configured = render_plain_and_configured(tmp_path)

    def first_plan(stdout: str) -> dict[str, Any]:
        secret = next(o for o in yaml.safe_load_all(stdout) if o["kind"] == "Secret")
        return dict(json.loads(secret["stringData"]["attempt-1.json"]))

    assert "HTTPS_PROXY" in first_plan(configured.stdout)["credentialEnvs"]
    assert "HTTPS_PROXY" not in first_plan(plain.stdout).get("credentialEnvs", [])
    assert "rendered without --operator" in plain.stderr
    assert "rendered without --operator" not in configured.stderr


def test_render_names_a_file_without_an_operator_deployment(tmp_path: Path) -> None:
    empty = tmp_path / "none.yaml"
    empty.write_text(operator_deployment([]).replace("name: operator", "name: other"))
    result = render("--operator", str(empty), "examples/review-run.yaml")
    assert result.returncode == 2
    assert "holds no Deployment with an `operator` container" in result.stderr


def test_render_a_pipeline_prints_its_first_runs_and_when_the_rest_come(tmp_path: Path) -> None:
    """The runs of every step that runs after none, one per matrix combination, as the operator creates
    them; a comment line for each later step; a Secret's value is never read into them."""
    run = {"provider": "claude", "prompt": "Review as $(matrix.tone)", "workspace": {"workingDir": "/w"}}
    token = {"name": "token", "secretKeyRef": {"name": "tok", "key": "t"}}
    axes = {"params": [{"name": "tone", "values": ["kind", "blunt"]}]}
    steps = [
        {"name": "review", "matrix": axes, "run": {"spec": {**run, "inputs": [token]}}},
        {"name": "lint", "run": {"spec": {**run, "prompt": "Lint"}}},
        {
            "name": "judge",
            "after": ["review", "lint"],
            "run": {"spec": {**run, "prompt": "$(steps.review.output)"}},
        },
        {"name": "report", "after": ["judge"], "run": {"spec": {**run, "prompt": "Report"}}},
    ]
    pipeline = {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessPipeline",
        "metadata": {"name": "pr", "namespace": "team"},
        "spec": {"serviceAccountName": "runner", "steps": steps},
    }
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tok", "namespace": "team"},
              "stringData": {"t": "replace-me"}}  # fmt: skip
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump_all([pipeline, secret]))
    result = render(str(path))
    assert result.returncode == 0, result.stderr
    runs = list(yaml.safe_load_all(result.stdout))
    assert [(r["kind"], r["metadata"]["name"], r["spec"]["prompt"]) for r in runs] == [
        ("HarnessRun", "pr-review-0", "Review as kind"),
        ("HarnessRun", "pr-review-1", "Review as blunt"),
        ("HarnessRun", "pr-lint", "Lint"),
    ]
    assert runs[0]["metadata"]["ownerReferences"][0]["kind"] == "HarnessPipeline"
    assert runs[0]["spec"]["inputs"] == [token]
    assert result.stdout.splitlines()[-2:] == [
        "# HarnessPipeline team/pr: step judge: its run is created when steps review, lint end",
        "# HarnessPipeline team/pr: step report: its run is created when step judge ends",
    ]
    assert "replace-me" not in result.stdout
