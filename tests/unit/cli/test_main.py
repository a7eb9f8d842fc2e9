"""`harnessctl validate`: the examples pass, and each bad manifest yields its message (real subprocess)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BAD = ROOT / "tests" / "fixtures" / "bad-manifests"


def harnessctl(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness_operator.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        input=stdin,
    )


def test_validate_reads_stdin_as_kubectl_does() -> None:
    runs = (ROOT / RUNS).read_text()
    from_stdin = harnessctl("validate", "-", stdin=runs)
    from_file = harnessctl("validate", RUNS)
    assert from_stdin.returncode == 1
    assert from_stdin.stdout.replace("<stdin>", RUNS) == from_file.stdout


def test_version() -> None:
    result = harnessctl("--version")
    assert (
        result.returncode == 0
        and result.stdout.startswith("harnessctl ")
        and result.stdout.split()[1][0].isdigit()
    )


def test_examples_pass() -> None:
    result = harnessctl("validate", "examples")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 errors" in result.stderr
    assert all(": warning: " in line or ": note: " in line for line in result.stdout.splitlines())


@pytest.fixture(scope="module")
def bad() -> subprocess.CompletedProcess[str]:
    return harnessctl("validate", str(BAD.relative_to(ROOT)))


def test_bad_manifests_exit_1(bad: subprocess.CompletedProcess[str]) -> None:
    assert bad.returncode == 1


RUNS = "tests/fixtures/bad-manifests/runs.yaml"
# The definitions a run there may name: the built-in catalog and the fixtures' own (broken ones too:
# their errors are reported on their own lines).
KNOWN = (
    "acp-stdio-without-binary, aider, amp, claude, claude-acp, cline, codex, codex-acp, copilot, cursor, "
    "deepseek, droid, flag-mode-without-flag, flag-without-flag-mode, gemini, gemini-acp, goose, kiro, "
    "no-binary, opencode, pi, qwen"
)
DEFS = "tests/fixtures/bad-manifests/definitions.yaml"
ADMISSION = "tests/fixtures/bad-manifests/admission.yaml"
SCHEDULES = "tests/fixtures/bad-manifests/schedules.yaml"
TRIGGERS = "tests/fixtures/bad-manifests/triggers.yaml"
NAME = "(a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit; no '/')"
WITH_VALUES = (
    "keys and values must not contain a NUL character (a command-line argument cannot carry one); a key is "
    "at most 253 characters, a string at most 8192, a list at most 64 items"
)


@pytest.mark.parametrize(
    "line",
    [
        f"{RUNS}: HarnessRun/no-prompt: spec.prompt: spec.prompt is required (or set spec.promptFrom)",
        f"{RUNS}: HarnessRun/no-provider: spec.provider: required field is missing: add `provider:` (Provider "
        "name: a HarnessDefinition in this namespace, else a ClusterHarnessDefinition)",
        f"{RUNS}: HarnessRun/inline-binary: spec.with: with.binary is not supported; define a HarnessDefinition "
        "and reference it via spec.provider",
        f"{RUNS}: HarnessRun/inline-prompt-args: spec.with: with.prompt_args is not supported; define a "
        "HarnessDefinition and reference it via spec.provider",
        f"{RUNS}: HarnessRun/nested-fallback: spec.fallback[0].fallback: fallback is not supported inside "
        "fallback providers; list every provider in spec.fallback",
        f"{RUNS}: HarnessRun/bad-env-name: spec.env[0].name: must be a valid environment variable name "
        "(letters, digits and '_', not starting with a digit)",
        f"{RUNS}: HarnessRun/env-collides-with-credential: spec.env: spec.env names must not collide with "
        "spec.credentials[].env; a secret is granted only through credentials",
        f'{RUNS}: HarnessRun/unknown-provider: spec.provider: unknown provider "no-such-agent"; known here: {KNOWN}',
        f"{RUNS}: HarnessRun/unknown-fallback: spec.fallback[0].provider: unknown fallback provider "
        f'"no-such-fallback"; known here: {KNOWN}',
        f"{RUNS}: HarnessRun/missing-run-output: spec.promptFrom.runOutput.name: warning: HarnessRun "
        '"never-created" is not among the given manifests: unless it is on the cluster, this run waits for it '
        "(WaitingForRunOutput); `validate --cluster` looks it up, `--strict` makes this an error",
        f"{RUNS}: HarnessRun/typo-field: spec.limits.timeoutSecs: unknown field 'timeoutSecs'; did you mean "
        "`timeoutSeconds`? Rename it (spec.limits takes timeoutSeconds, maxCostUSD, maxTurns, maxTokens, "
        "maxOutputBytes, gracePeriodSeconds)",
        f"{RUNS}: HarnessRun/secret-name-with-slash: spec.promptFrom.secretKeyRef.name: must be a valid Secret "
        f"name {NAME}",
        f"{RUNS}: HarnessRun/run-output-name-with-slash: spec.stdinFrom.runOutput.name: must be a valid "
        f"HarnessRun name {NAME}",
        f"{RUNS}: HarnessRun/bad-configmap-key: spec.promptFrom.configMapKeyRef.key: must be a valid ConfigMap "
        "key: letters, digits, '-', '_' and '.', not '.' or starting with '..'",
        f"{RUNS}: HarnessRun/credential-secret-name-with-slash: spec.credentials[0].secretKeyRef.name: must be a "
        f"valid Secret name {NAME}",
        f"{RUNS}: HarnessRun/claim-name-with-slash: spec.workspace.volume.persistentVolumeClaim.claimName: must "
        f"be a valid PersistentVolumeClaim name {NAME}",
        f"{RUNS}: HarnessRun/nul-in-prompt: spec.prompt: must not contain a NUL character",
        f"{RUNS}: HarnessRun/nul-in-stdin: spec.stdin: must not contain a NUL character",
        f"{RUNS}: HarnessRun/nul-in-env-value: spec.env[0].value: must not contain a NUL character",
        f"{RUNS}: HarnessRun/unknown-input-reference: spec.prompt: spec.prompt references $(inputs.PLAN), "
        "which spec.inputs does not declare; add an input of that name or correct the reference",
        f"{RUNS}: HarnessRun/malformed-input-reference: spec.stdin: spec.stdin references $(inputs.ticket, "
        "which spec.inputs does not declare; add an input of that name or correct the reference",
        f"{RUNS}: HarnessRun/input-with-two-sources: spec.inputs[0]: set exactly one of value, configMapKeyRef, "
        "secretKeyRef or runOutput",
        f"{RUNS}: HarnessRun/too-many-retries: spec.retry.limit: must be at most 5, not 9",
        f"{RUNS}: HarnessRun/output-schema-not-a-schema: spec.outputSchema.type: not a valid JSON Schema "
        "(2020-12): 'objekt' is not valid under any of the given schemas",
        f"{RUNS}: HarnessRun/fast-forward-without-its-branch: spec.workspace.publish.branch.ifExists: "
        "publish.branch.ifExists FastForward adds a commit to the branch the workspace cloned: set git.ref to "
        "the branch's name",
        f"{RUNS}: HarnessRun/fast-forward-from-a-run: spec.workspace.publish.branch.ifExists: "
        "publish.branch.ifExists FastForward takes the change against the branch's head, not another run's "
        "change: drop from (resumeFrom continues a run's conversation)",
        f"{RUNS}: HarnessRun/allows-ci-changes: spec.workspace.publish.allowCIChanges: allowCIChanges was "
        "removed: a run may not loosen the protected paths; drop the field (a platform admin can set action "
        "RequireApproval on the CI rules of the chart's publishing.protectedPaths, so that a person approves "
        "such a change)",
        f"{RUNS}: HarnessRun/protected-path-from-slash: spec.workspace.publish.protectedPaths[0].path: is "
        'relative to the repository\'s root: drop the leading "/"',
        f"{RUNS}: HarnessRun/approval-without-branch: spec.workspace.publish.approval.required: "
        "approval.required needs branch or pullRequest: an approval publishes the change there (without "
        "either, the patch is only kept in status.changes)",
        f"{RUNS}: HarnessRun/approval-timeout-too-long: spec.workspace.publish.approval.timeout: timeout must "
        "be more than 0s and at most 720h (30 days), e.g. 72h",
        f"{SCHEDULES}: HarnessSchedule/bad-cron: spec.schedule: '61 * * * *' is not a valid cron schedule: Bad "
        "minute",
        f"{SCHEDULES}: HarnessSchedule/bad-time-zone: spec.timeZone: 'Mars/Olympus' is not an IANA time zone "
        "(e.g. Europe/Berlin, America/New_York)",
        f"{SCHEDULES}: HarnessSchedule/time-zone-in-the-schedule: spec.schedule: spec.schedule: set the time "
        "zone in spec.timeZone, not with TZ= or CRON_TZ=",
        f"{SCHEDULES}: HarnessSchedule/long-history: spec.successfulRunsHistoryLimit: must be at most 100, not "
        "101",
        f"{SCHEDULES}: HarnessSchedule/template-without-prompt: spec.runTemplate.spec.prompt: spec.prompt is "
        "required (or set spec.promptFrom)",
        f"{TRIGGERS}: HarnessTrigger/label-missing: spec.events[0].label: spec.events[].label is required for "
        "type IssueLabeled: the label that starts a run",
        f"{TRIGGERS}: HarnessTrigger/command-without-slash: spec.events[0].command: spec.events[].command: "
        "must start with '/' and hold no space, e.g. /agent",
        f"{TRIGGERS}: HarnessTrigger/associations-off-github: spec.authors.associations: "
        "spec.authors.associations: only GitHub's deliveries carry an author association; with gitea or "
        "gitlab list the allowed users in spec.authors.users",
        f"{TRIGGERS}: HarnessTrigger/repository-without-owner: spec.repositories[0]: spec.repositories[]: "
        "must be owner/name, e.g. acme/payments",
        f"{TRIGGERS}: HarnessTrigger/no-events: spec.events: may not be empty: give a value or remove the field",
        f"{TRIGGERS}: HarnessTrigger/teams-without-token: spec.authors.teams: spec.authors.teams needs "
        "spec.forge.tokenSecretRef: the token the receiver asks the forge for team membership with (GitHub "
        "read:org, Gitea read:organization, GitLab read_api)",
        f"{TRIGGERS}: HarnessTrigger/team-without-org: spec.authors.teams: spec.authors.teams: on github and "
        "gitea a team is org/team (GitHub: the team's slug), e.g. acme/platform",
        f"{TRIGGERS}: HarnessTrigger/a-trigger-name-longer-than-a-label-value-{'x' * 23}: -: metadata.name: a "
        "HarnessTrigger's name is at most 63 characters: its runs carry it as the label "
        "agentharness.dev/trigger, by which the receiver and the reporting step find them; choose a shorter "
        "name",
        f"{ADMISSION}: HarnessRun/nul-in-with: spec.with: {WITH_VALUES}",
        f"{ADMISSION}: HarnessRun/nul-in-fallback-with-list: spec.fallback[1].with: {WITH_VALUES}",
        f"{ADMISSION}: HarnessRun/long-value-in-with: spec.with: {WITH_VALUES}",
        f"{ADMISSION}: HarnessRun/long-list-in-fallback-with: spec.fallback[0].with: {WITH_VALUES}",
        f"{DEFS}: HarnessDefinition/no-binary: spec.binary: spec.binary is required for protocol cli and for "
        "acp over stdio",
        f"{DEFS}: HarnessDefinition/bad-prompt-mode: spec.promptMode: 'positional' is not one of "
        "arg, flag, stdin: write one of them",
        f"{DEFS}: HarnessDefinition/flag-mode-without-flag: spec.promptFlag: spec.promptFlag is required when "
        "spec.promptMode is flag, and only then",
        f"{DEFS}: HarnessDefinition/flag-without-flag-mode: spec.promptFlag: spec.promptFlag is required when "
        "spec.promptMode is flag, and only then",
        f"{DEFS}: ClusterHarnessDefinition/acp-stdio-without-binary: spec.binary: spec.binary is required for "
        "protocol cli and for acp over stdio",
    ],
)
def test_bad_manifest_message(bad: subprocess.CompletedProcess[str], line: str) -> None:
    assert line in bad.stdout.splitlines(), bad.stdout


def test_yaml_syntax_error_is_reported(bad: subprocess.CompletedProcess[str]) -> None:
    assert any(
        line.startswith("tests/fixtures/bad-manifests/not-yaml.yaml: ?/?: -: not valid YAML")
        for line in bad.stdout.splitlines()
    ), bad.stdout


def test_nothing_crashes(bad: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in bad.stderr


def test_no_manifests_is_an_error(tmp_path: Path) -> None:
    result = harnessctl("validate", str(tmp_path))
    assert result.returncode == 1
    assert "no manifests found" in result.stderr


def test_a_number_beyond_64_bits_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    """Found by tests/reliability/test_manifests.py: CEL's integers are 64-bit, and validate crashed."""
    (tmp_path / "big.yaml").write_text(
        "apiVersion: agentharness.dev/v1alpha1\nkind: HarnessRun\nmetadata: {name: big}\n"
        "spec: {provider: claude, prompt: p, limits: {timeoutSeconds: 99999999999999999999}}\n"
    )
    result = harnessctl("validate", str(tmp_path / "big.yaml"))
    assert (result.returncode, "Traceback" in result.stderr) == (1, False), result.stderr
    assert "HarnessRun/big: spec: a number does not fit in a 64-bit integer" in result.stdout, result.stdout


RUN = """apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {name: implement, namespace: team-a}
spec:
  provider: claude
  prompt: Implement the plan.
  workspace: {workingDir: /w}
"""


def test_a_with_typo_that_would_fail_the_attempt_fails_validate(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(RUN + "  with: {modle: opus}\n")
    result = harnessctl("validate", str(tmp_path / "run.yaml"))
    assert result.returncode == 1, result.stdout
    assert 'spec.with.modle: provider "claude" has no option --modle' in result.stdout
    assert "did you mean `model`?" in result.stdout


def test_a_run_in_another_file_warns_and_strict_makes_it_an_error(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(RUN + "  after: [plan]\n")
    relaxed = harnessctl("validate", str(tmp_path / "run.yaml"))
    assert relaxed.returncode == 0, relaxed.stdout
    assert 'spec.after[0]: warning: HarnessRun "plan" is not among the given manifests' in relaxed.stdout
    strict = harnessctl("validate", "--strict", str(tmp_path / "run.yaml"))
    assert strict.returncode == 1
    assert 'spec.after[0]: HarnessRun "plan" is not among the given manifests' in strict.stdout


def operator_deployment(env: dict[str, str]) -> str:
    variables = "".join(f"        - {{name: {k}, value: {v!r}}}\n" for k, v in env.items())
    return (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: harness-operator}\nspec:\n  template:\n"
        "    spec:\n      containers:\n      - name: operator\n        env:\n" + variables
    )


GATEWAY = {
    "HARNESS_MODEL_GATEWAY_SERVICE": "model-gateway.harness-system.svc",
    "HARNESS_MODEL_GATEWAY_NAMESPACE": "harness-system",
    "HARNESS_MODEL_GATEWAY_KEY": "from-a-secret",
}


def test_the_operator_file_says_whether_the_vendor_key_is_the_teams(tmp_path: Path) -> None:
    (tmp_path / "run.yaml").write_text(RUN)
    routed = tmp_path / "routed.yaml"
    routed.write_text(operator_deployment({**GATEWAY, "HARNESS_MODEL_GATEWAY_VENDORS": "anthropic,openai"}))
    result = harnessctl("validate", "--operator", str(routed), str(tmp_path / "run.yaml"))
    assert (result.returncode, result.stdout) == (0, "")
    unrouted = tmp_path / "unrouted.yaml"
    unrouted.write_text(operator_deployment({**GATEWAY, "HARNESS_MODEL_GATEWAY_VENDORS": "openai"}))
    result = harnessctl("validate", "--operator", str(unrouted), str(tmp_path / "run.yaml"))
    assert "this operator does not route anthropic through the model gateway" in result.stdout, result.stdout
    assert "create that Secret in namespace team-a" in result.stdout
    result = harnessctl("validate", "--operator", str(tmp_path / "run.yaml"), str(tmp_path / "run.yaml"))
    assert result.returncode == 2 and "holds no Deployment with an `operator` container" in result.stderr


PUBLISHING = """\
apiVersion: agentharness.dev/v1alpha1
kind: HarnessRun
metadata: {name: fix, namespace: team-a}
spec:
  provider: claude
  prompt: Fix it.
  credentials: [{env: ANTHROPIC_API_KEY, secretKeyRef: {name: anthropic, key: api-key}}]
  workspace:
    workingDir: /workspace/repo
    git: {url: "https://host.example.com/git/acme/payments.git", ref: main}
    publish:
      credentialsSecretRef: {name: forge, key: token}
      pullRequest: {forge: gitea}
"""


def test_validate_says_where_the_pull_request_goes_and_how_the_publisher_gets_there() -> None:
    """The issue's trial: a Gitea under /git; validate names the repository and the API the publisher
    will call, and the way out the clone and the publisher get, without failing the manifest."""
    result = harnessctl("validate", "-", stdin=PUBLISHING)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "<stdin>: HarnessRun/fix: spec.workspace.publish.pullRequest: note: opens a pull request on gitea "
        "repository acme/payments through https://host.example.com/git/api/v1",
        "<stdin>: HarnessRun/fix: spec.workspace.git.url: note: the clone and the publisher reach "
        "host.example.com:443 through the egress gateway, which opens it for no other container; without a "
        "gateway the operator refuses the run unless its egress opens it ({host: host.example.com, ports: "
        "[443]} in spec.sandbox.egress, networkPolicy: allowlist)",
    ]
    assert "0 errors, 0 warnings" in result.stderr
    ssh = PUBLISHING.replace("https://host.example.com/git/", "git@host.example.com:")
    said = harnessctl("validate", "-", stdin=ssh).stdout
    assert (
        "spec.workspace.git.url: warning: the clone and the publisher reach host.example.com:22 over ssh"
        in said
    )
