"""From an issue to a reviewed pull request against a real Gitea (issue 51): the chart with the trigger
receiver on, `examples/forge-loop/gitea.yaml` applied as a team applies it, and Gitea's own webhook
delivering to the receiver's Service. A developer labels an issue: a run of the real Claude Code (its
shipped image, the model gateway's Anthropic the stub) starts, a pull request appears in Gitea with the
change, the issue gets the run's comment with the PR link and cost, and the PR's head a commit status; a
CI's status on the head shows in the run's status.changes.checks and `kubectl get -o wide`. A
stranger's `/agent` comment starts nothing; the developer's `/agent rename the function` on the PR starts a
run that resumes the first one's conversation and pushes a second commit onto the same PR. The delivery
Gitea sent, sent again, starts nothing twice; one with a bad signature is refused and counted.

Needs a running Gitea (tests/cluster/gitea start, or `make forge-test`, which builds it from the Go module
proxy): skipped without one. The substitutions in the example, each asserted to find its target: the
namespace, Gitea's URL, the repository, the allowed users, and the receiver's ServiceAccount's namespace.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from tests.lib.gitea import SCRIPT, Gitea

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import RELEASE, RELEASE_NAMESPACE, ROOT, Runs, kubectl, wait_until
from .test_model_gateway import gateway_with_vendors
from .test_pipelines import EDITS, VERDICT, WRITTEN, agents_that_edit

EXAMPLE = ROOT / "examples" / "forge-loop" / "gitea.yaml"
BEST_OF_THREE = ROOT / "examples" / "forge-loop" / "gitea-best-of-three.yaml"
TRIGGER = "payments"
RECEIVER = f"{RELEASE}-receiver"
BOT_SCOPES = ["write:repository", "write:issue", "read:user"]
# The forge tier (make forge-test), not make test: Gitea's build does not fit its time.
pytestmark = pytest.mark.forge
# Where tests/cluster/gitea keeps Gitea's data (its SQLite database holds the requests it sent).
GITEA_STATE = Path(os.environ.get("HARNESS_CLUSTER_STATE", "/var/lib/harness-operator-cluster")) / "gitea"


def running_gitea() -> Gitea:
    """The admin's client of the Gitea tests/cluster/gitea runs (started, and built on first use, with
    HARNESS_FORGE=1: `make forge-test`); without it the test is skipped when none answers."""
    if os.environ.get("HARNESS_FORGE") == "1":
        return Gitea.from_cluster()
    done = subprocess.run([str(SCRIPT), "url"], capture_output=True, text=True, check=False)
    url = done.stdout.strip()
    try:
        with urllib.request.urlopen(f"{url}/api/v1/version", timeout=5):
            pass
    except (OSError, ValueError):
        pytest.skip("no Gitea is running: tests/cluster/gitea start (or make forge-test)")
    return Gitea.from_cluster()


def substitute(text: str, target: str, replacement: str) -> str:
    assert target in text, f"the example no longer holds {target!r}"
    return text.replace(target, replacement)


@pytest.fixture(scope="module")
def loop_release(release: str, kube: client.ApiClient) -> Iterator[dict[str, Any]]:
    """The release with the receiver on and the model gateway holding the vendors' keys: the vendors'
    stubs, by vendor."""
    with gateway_with_vendors(kube, "--set", "triggerReceiver.enabled=true") as stubs:
        yield stubs


def receiver_address(core: client.CoreV1Api) -> str:
    service = core.read_namespaced_service(RECEIVER, RELEASE_NAMESPACE)
    port = next(p.port for p in service.spec.ports if p.name == "hooks")
    return f"{service.spec.cluster_ip}:{port}"


def trigger_runs(runs: Runs) -> list[dict[str, Any]]:
    listed = runs.custom.list_namespaced_custom_object(
        GROUP, VERSION, runs.ns, "harnessruns", label_selector=f"{GROUP}/trigger={TRIGGER}"
    )
    return sorted(listed["items"], key=lambda r: r["metadata"]["creationTimestamp"])


def trigger_events(runs: Runs) -> list[tuple[str, str]]:
    listed = runs.core.list_namespaced_event(runs.ns, field_selector=f"involvedObject.name={TRIGGER}")
    return [(e.reason, e.message) for e in listed.items]


def delivered(gitea_state: Path, number: int) -> list[dict[str, Any]]:
    """The requests Gitea sent for issue or PR `number`, as it stored them (headers and body), oldest
    first: what its "Replay" sends again."""
    with sqlite3.connect(f"file:{gitea_state / 'data' / 'gitea.db'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT request_content FROM hook_task WHERE is_delivered ORDER BY id").fetchall()
    requests = [json.loads(row[0]) for row in rows if row[0]]
    return [r for r in requests if (json.loads(r["body"]).get("issue") or {}).get("number") == number]


def post(url: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=15) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def bad_signatures_counted() -> float:
    """harness_trigger_deliveries_total{result="bad_signature"} of this trigger, summed over the receiver's
    pods (each counts its own; read inside each pod, as the admin port is open to scrapers only)."""
    total = 0.0
    selector = "app.kubernetes.io/component=trigger-receiver"
    listed = kubectl(
        "get", "pods", "-n", RELEASE_NAMESPACE, "-l", selector, "-o", "jsonpath={.items[*].metadata.name}"
    )
    pods = listed.stdout.split()
    assert pods, "no receiver pod"
    read = (
        "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:9103/metrics').read().decode())"
    )
    for pod in pods:
        metrics = kubectl("exec", "-n", RELEASE_NAMESPACE, pod, "--", "python3", "-c", read).stdout
        for line in metrics.splitlines():
            ours = line.startswith("harness_trigger_deliveries_total{") and f'trigger="{TRIGGER}"' in line
            if ours and 'result="bad_signature"' in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_an_issue_labelled_in_gitea_ends_with_a_reviewed_pull_request(
    loop_release: dict[str, Any], runs: Runs, tmp_path: Path
) -> None:
    gitea = running_gitea()
    model = loop_release["anthropic"]
    suffix = secrets.token_hex(3)
    developer, stranger, bot = (gitea.create_user(f"{who}-{suffix}") for who in ("dev", "stranger", "bot"))
    repository = f"{developer.name}/payments"
    gitea.create_repo(developer.name, "payments", {"app.py": "def greet():\n    return 'hello'\n"})
    gitea.add_collaborator(repository, bot.name, "write")
    push_token = gitea.create_token(bot, ["write:repository", "write:issue"])
    report_token = gitea.create_token(bot, BOT_SCOPES)
    webhook_secret = secrets.token_hex(32)

    # The team's setup: its three Secrets, then the example with the test's names.
    runs.secret("forge-webhook", "secret", webhook_secret)
    runs.secret("payments-push-token", "token", push_token)
    runs.secret("forge-report-token", "token", report_token)
    text = EXAMPLE.read_text()
    text = substitute(text, "namespace: team-a", f"namespace: {runs.ns}")
    text = substitute(text, "http://gitea.example:3000", gitea.base_url.rstrip("/"))
    text = substitute(text, "acme/payments", repository)
    text = substitute(text, "users: [alice, bob]", f"users: [{developer.name}]")
    # The receiver's ServiceAccount is the release's as the example names it (harness-system's).
    assert f"kind: ServiceAccount, name: {RECEIVER}, namespace: {RELEASE_NAMESPACE}" in text, (
        "the example names the release's receiver"
    )
    (tmp_path / "loop.yaml").write_text(text)
    kubectl("apply", "-f", str(tmp_path / "loop.yaml"))
    receiver = receiver_address(runs.core)
    hook = f"http://{receiver}/hooks/{runs.ns}/{TRIGGER}"
    gitea.create_webhook(repository, hook, webhook_secret)

    # A developer labels an issue: a run starts, its change becomes a pull request.
    trigger = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "HarnessTrigger")
    app = f"{trigger['spec']['runTemplate']['spec']['workspace']['workingDir']}/app.py"
    model.mode, model.call = (
        "call",
        ("Write", {"file_path": app, "content": "def greet():\n    return 'hi'\n"}),
    )
    model.rearm()
    as_developer = gitea.as_user(developer.name)
    issue = as_developer.create_issue(repository, "Greet with hi", "greet() should say hi.")
    as_developer.add_labels(repository, issue["number"], ["agent"])
    first = wait_until(lambda: (trigger_runs(runs) or [None])[0], 60, "the labelled issue's run")
    name = first["metadata"]["name"]
    status = runs.wait_finished(name)
    assert status["phase"] == "Succeeded", runs.describe(name)
    changes = status["changes"]
    [pull] = gitea.pull_requests(repository)
    assert changes["pullRequestURL"] == pull["html_url"] and changes["pullRequestNumber"] == pull["number"]
    assert pull["head"]["ref"] == changes["branch"] and pull["head"]["sha"] == changes["commit"], pull
    assert gitea.file(repository, changes["branch"], "app.py") == b"def greet():\n    return 'hi'\n"

    # The issue's one comment says how it went, with the PR and the cost; the PR's head has a status.
    def reported() -> dict[str, Any] | None:
        mine = [c for c in gitea.comments(repository, issue["number"]) if c["user"]["login"] == bot.name]
        return mine[0] if len(mine) == 1 and pull["html_url"] in mine[0]["body"] else None

    comment = wait_until(reported, 60, "the run's comment on the issue, with its PR")
    assert f"`{runs.ns}/{name}` succeeded" in comment["body"], comment["body"]
    assert re.search(r"tokens: [\d,]+ · cost: \$\d+\.\d+ \(metered\)", comment["body"]), comment["body"]
    assert f"kubectl -n {runs.ns} get hrun {name}" in comment["body"], comment["body"]

    def head_status() -> dict[str, Any] | None:
        found = [
            s for s in gitea.statuses(repository, changes["commit"]) if s["context"] == f"harness/{TRIGGER}"
        ]
        return found[0] if found and found[0]["status"] == "success" else None

    wait_until(head_status, 60, "a success status on the PR's head")

    # A CI reports on the PR's head with a token of its own: Gitea's status delivery reaches the receiver,
    # the operator reads the head's checks from Gitea (its own harness/ status not among them), and
    # `kubectl get -o wide` shows them in the Checks column.
    ci = gitea.create_user(f"ci-{suffix}")
    gitea.add_collaborator(repository, ci.name, "write")
    Gitea(gitea.base_url, gitea.create_token(ci, ["write:repository"])).set_status(
        repository, changes["commit"], "success", "ci/tests", "all passed"
    )

    def checks_column() -> str | None:
        header, row = kubectl("get", "hrun", name, "-n", runs.ns, "-o", "wide").stdout.splitlines()[:2]
        # kubectl aligns columns; an empty one (Approval) leaves no word, so the column is read by place.
        start = header.index("CHECKS")
        end = header.find(" ", start + len("CHECKS") + 1)
        after = header[end:].lstrip()
        cell = row[start : header.index(after, end) if after else None].strip()
        return cell if cell == "success" else None

    wait_until(checks_column, 60, "the CI's success in the run's Checks column")
    checks = runs.custom.get_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnessruns", name)["status"][
        "changes"
    ]["checks"]
    assert (checks["sha"], checks["total"], checks["passed"]) == (changes["commit"], 1, 1), checks

    # A stranger's command on the PR starts nothing; the developer's continues the run on the same PR.
    gitea.as_user(stranger.name).comment(repository, pull["number"], "/agent delete everything")
    model.call = ("Write", {"file_path": app, "content": "def welcome():\n    return 'hi'\n"})
    model.rearm()
    before = len(model.requests)
    as_developer.comment(repository, pull["number"], "/agent rename the function")
    second = wait_until(lambda: (trigger_runs(runs)[1:] or [None])[0], 60, "the PR comment's run")
    second_name = second["metadata"]["name"]
    assert second["spec"]["resumeFrom"]["run"] == name, second["spec"]
    follow = runs.wait_finished(second_name)
    assert follow["phase"] == "Succeeded", runs.describe(second_name)
    # It continued the conversation: its first model call carries the first run's turns.
    calls = [r for r in model.requests[before:] if model.is_model_call(r)]
    assert calls and "Greet with hi" in json.dumps(calls[0].body), "the follow-up did not resume the session"
    commits = gitea.commits(repository, changes["branch"])
    assert [c["sha"] for c in commits[:2]] == [follow["changes"]["commit"], changes["commit"]], commits
    assert gitea.file(repository, changes["branch"], "app.py").startswith(b"def welcome")
    assert follow["changes"]["pullRequestNumber"] == pull["number"]
    assert len(gitea.pull_requests(repository)) == 1, "a second pull request was opened"

    # The follow-up's checks are its own commit's, read when it ended: none yet (the CI's were the first's).
    def follow_checks() -> dict[str, Any] | None:
        got = runs.custom.get_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnessruns", second_name)
        return got["status"]["changes"].get("checks")

    later = wait_until(follow_checks, 60, "the follow-up's checks read at its end")
    assert (later["state"], later["sha"]) == ("none", follow["changes"]["commit"]), later
    refused = [m for reason, m in trigger_events(runs) if reason == "DeliveryRefused"]
    assert any(stranger.name in m for m in refused), trigger_events(runs)
    assert "delete everything" not in json.dumps(trigger_events(runs)), "the stranger's comment was echoed"

    # The developer's delivery sent again (Gitea's Replay sends the stored request) starts nothing twice;
    # one whose signature is wrong is refused and counted.
    [*_, command] = [r for r in delivered(GITEA_STATE, pull["number"]) if "rename" in r["body"]]
    body = command["body"].encode()
    status_code, answer = post(hook, command["headers"], body)
    assert status_code == 200 and answer.get("result") == "duplicate", answer
    assert len(trigger_runs(runs)) == 2
    counted = bad_signatures_counted()
    forged = {**command["headers"], "X-Gitea-Signature": hmac.new(b"wrong", body, hashlib.sha256).hexdigest()}
    assert post(hook, forged, body)[0] == 401
    assert bad_signatures_counted() == counted + 1
    assert len(trigger_runs(runs)) == 2


def test_an_issue_labelled_best_of_3_ends_with_the_judges_pick_as_a_pull_request(
    loop_release: dict[str, Any], runs: Runs, tmp_path: Path
) -> None:
    """`examples/forge-loop/gitea-best-of-three.yaml` applied as a team applies it: Gitea's webhook for an
    issue labelled best-of-3 makes a HarnessPipeline (as the trigger's account); the real Claude Code,
    Codex and Gemini CLI each write their fix, the judge names Codex, and the last step opens the pull
    request in Gitea with Codex's change; each of the pipeline's runs is reported on the issue, and the
    pull request's head gets the trigger's commit status."""
    gitea = running_gitea()
    suffix = secrets.token_hex(3)
    developer, bot = (gitea.create_user(f"{who}-{suffix}") for who in ("dev", "bot"))
    repository = f"{developer.name}/payments"
    gitea.create_repo(developer.name, "payments", {"src/__init__.py": "", "README.md": "payments\n"})
    gitea.add_collaborator(repository, bot.name, "write")
    webhook_secret = secrets.token_hex(32)
    runs.secret("forge-webhook", "secret", webhook_secret)
    runs.secret("payments-push-token", "token", gitea.create_token(bot, ["write:repository", "write:issue"]))
    runs.secret("forge-report-token", "token", gitea.create_token(bot, BOT_SCOPES))
    text = BEST_OF_THREE.read_text()
    text = substitute(text, "namespace: team-a", f"namespace: {runs.ns}")
    text = substitute(text, "http://gitea.example:3000", gitea.base_url.rstrip("/"))
    text = substitute(text, "acme/payments", repository)
    text = substitute(text, "users: [alice, bob]", f"users: [{developer.name}]")
    (tmp_path / "best-of-three.yaml").write_text(text)
    kubectl("apply", "-f", str(tmp_path / "best-of-three.yaml"))
    trigger = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == "HarnessTrigger")
    name = trigger["metadata"]["name"]
    hook = f"http://{receiver_address(runs.core)}/hooks/{runs.ns}/{name}"
    gitea.create_webhook(repository, hook, webhook_secret)
    steps = trigger["spec"]["pipelineTemplate"]["spec"]["steps"]
    working_dir = steps[0]["run"]["spec"]["workspace"]["workingDir"]

    with agents_that_edit(loop_release, working_dir):
        as_developer = gitea.as_user(developer.name)
        issue = as_developer.create_issue(repository, "Retry without sleeping", "The retry test sleeps.")
        as_developer.add_labels(repository, issue["number"], ["best-of-3"])

        def made() -> dict[str, Any] | None:
            listed = runs.custom.list_namespaced_custom_object(
                GROUP, VERSION, runs.ns, "harnesspipelines", label_selector=f"{GROUP}/trigger={name}"
            )["items"]
            return listed[0] if listed else None

        pipeline = wait_until(made, 60, "the labelled issue's pipeline")
        pipeline_name = pipeline["metadata"]["name"]
        author = pipeline["metadata"]["annotations"][f"{GROUP}/author"]
        assert author == f"system:serviceaccount:{runs.ns}:agent-trigger", author

        def ended() -> dict[str, Any] | None:
            got = runs.custom.get_namespaced_custom_object(
                GROUP, VERSION, runs.ns, "harnesspipelines", pipeline_name
            )
            conditions = (got.get("status") or {}).get("conditions") or []
            done = any(c["type"] == "Succeeded" and c["status"] in ("True", "False") for c in conditions)
            return got["status"] if done else None

        status = wait_until(ended, 900, "the pipeline to end")
    assert status["phase"] == "Succeeded", status
    [pull] = gitea.pull_requests(repository)
    publish = f"{pipeline_name}-publish"
    changes = runs.wait_finished(publish)["changes"]
    assert changes["pullRequestNumber"] == pull["number"] and pull["head"]["sha"] == changes["commit"]
    assert gitea.file(repository, changes["branch"], WRITTEN).decode() == EDITS[VERDICT["winner"]]

    # Each run of the pipeline is reported on the issue, one comment each; the PR's head gets a status.
    owned = [f"{pipeline_name}-implement-{i}" for i in range(3)] + [f"{pipeline_name}-judge", publish]

    def reported() -> list[str] | None:
        bodies = [
            c["body"] for c in gitea.comments(repository, issue["number"]) if c["user"]["login"] == bot.name
        ]
        told = [run for run in owned if any(f"`{runs.ns}/{run}` succeeded" in b for b in bodies)]
        return told if len(told) == len(owned) and len(bodies) == len(owned) else None

    wait_until(reported, 120, "one comment per run of the pipeline on the issue")
    statuses = gitea.statuses(repository, changes["commit"])
    assert any(s["context"] == f"harness/{name}" and s["status"] == "success" for s in statuses), statuses
