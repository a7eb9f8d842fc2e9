"""The README's best of three ("### Pipelines", issue 53) on the cluster: its manifests applied with
kubectl as the README writes them, a three-way fan-out of the real Claude Code, Codex and Gemini CLI in
their shipped images, a judge whose structured output names the winner, and a publish step that starts
from the winner's change and opens the pull request; then cancel mid-way, and delete cascading.

The runs reach the vendors as the README's do: the release's model gateway holds the vendors' keys, its
upstreams the stubs (test_model_gateway's `vendors`), so no run names a base URL or an egress rule. Each
stub plays its agent: Claude Code's Writes a file, Codex's runs a command that writes it, Gemini CLI's
calls write_file, each with its own text, so the change the pull request holds says whose it is. The
forge is a stub of GitHub Enterprise's API, the git server a token-guarded one (test_readme_path's).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from tests.servers.git_http import GitHttpServer
from tests.stubs.github import GitHubStub

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.core.objects.naming import ANNOTATION_AUTHOR

from .conftest import RELEASE, RELEASE_NAMESPACE, Runs, readme_blocks, wait_until
from .test_model_gateway import vendors  # noqa: F401  (the release with the gateway holding the keys)
from .test_publish import WRITE_TOKEN, git_server  # noqa: F401  (the token-guarded git server fixture)
from .test_readme_path import README_GIT_URL, STUB_NAME, as_user, forge, substitute  # noqa: F401

PIPELINES = "### Pipelines"
OWNER_REPO = "acme/payments"
RUNNER = "pipeline-runner"
PROVIDERS = ["claude", "codex", "gemini"]
WRITTEN = "src/backoff.py"  # a new file: Claude Code's Write refuses to overwrite a file it has not read
EDITS = {p: f"# {p}'s fix: the retry waits on a fake clock, not on sleep\n" for p in PROVIDERS}
VERDICT = {"winner": "codex", "why": "the smallest change, and no sleep left"}
# Each implementing CLI edits only with an option of its own (Claude Code refuses Write unasked, Codex
# exec's sandbox is read-only, headless Gemini CLI offers no write tool): the README's matrix gives them
# in providerOptions, which the test checks it still does.
EDITING_OPTIONS = {
    "claude": {"permission-mode": "acceptEdits"},
    "codex": {"sandbox": "danger-full-access"},
    "gemini": {"approval-mode": "auto_edit"},
}


class Pipelines:
    """What a user reads of pipelines in one namespace."""

    def __init__(self, runs: Runs) -> None:
        self.runs = runs

    def get(self, name: str) -> dict[str, Any]:
        return dict(
            self.runs.custom.get_namespaced_custom_object(
                GROUP, VERSION, self.runs.ns, "harnesspipelines", name
            )
        )

    def succeeded(self, name: str) -> dict[str, Any]:
        conditions = (self.get(name).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Succeeded"), {})

    def wait_ended(self, name: str, timeout: float) -> dict[str, Any]:
        """The pipeline's status once Succeeded is True or False; its runs described when it is not."""
        try:
            wait_until(
                lambda: self.succeeded(name).get("status") in ("True", "False"),
                timeout,
                f"HarnessPipeline {self.runs.ns}/{name} to end",
            )
        except AssertionError as exc:
            described = [self.runs.describe(r["metadata"]["name"]) for r in self.owned(name)]
            raise AssertionError(
                "\n".join([str(exc), str(self.get(name).get("status")), *described])
            ) from None
        return dict(self.get(name)["status"])

    def owned(self, name: str) -> list[dict[str, Any]]:
        listed = self.runs.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.runs.ns, "harnessruns", label_selector=f"{GROUP}/pipeline={name}"
        )
        return sorted(listed["items"], key=lambda r: r["metadata"]["name"])


def operator_account(kube: client.ApiClient) -> dict[str, str]:
    """The release's operator ServiceAccount, as a RoleBinding subject."""
    deployment = client.AppsV1Api(kube).read_namespaced_deployment(RELEASE, RELEASE_NAMESPACE)
    name = deployment.spec.template.spec.service_account_name
    return {"kind": "ServiceAccount", "name": name, "namespace": RELEASE_NAMESPACE}


def readme_manifests(namespace: str, git_url: str, api_url: str) -> list[dict[str, Any]]:
    """The README block's objects with the substitutions a test cannot avoid, each asserted to find its
    target: the namespace `team-a` is the test's; the git URL is the test git server's; the publish
    step's pull request gets `apiURL`, the forge stub's (api.github.com is not reachable here)."""
    [block, *_] = readme_blocks(PIPELINES, "yaml")
    block = substitute(block, "namespace: team-a", f"namespace: {namespace}")
    objects = list(yaml.safe_load_all(substitute(block, README_GIT_URL, git_url)))
    [pipeline] = [o for o in objects if o["kind"] == "HarnessPipeline"]
    [publish] = [s for s in pipeline["spec"]["steps"] if s["name"] == "publish"]
    pull_request = publish["run"]["spec"]["workspace"]["publish"]["pullRequest"]
    assert "apiURL" not in pull_request and pull_request["repository"] == OWNER_REPO, pull_request
    pull_request["apiURL"] = api_url
    return objects


@contextmanager
def agents_that_edit(stubs: dict[str, Any], working_dir: str) -> Iterator[None]:
    """The gateway's stubs as the pipeline's agents: each implementing CLI writes WRITTEN with its own
    EDITS text and ends with its own summary; Claude Code then judges (VERDICT, as the StructuredOutput
    its --json-schema offers) and, publishing, says the change needs nothing more. Reset afterwards."""
    anthropic, openai, gemini = stubs["anthropic"], stubs["openai"], stubs["gemini"]
    anthropic.mode, anthropic.call = (
        "call",
        ("Write", {"file_path": f"{working_dir}/{WRITTEN}", "content": EDITS["claude"]}),
    )
    anthropic.answers = [
        "claude: the retry waits on a fake clock",
        json.dumps(VERDICT),
        "Checked: nothing broken.",
    ]
    anthropic.rearm()
    printf = EDITS["codex"].replace("'", "'\\''").replace("\n", "\\n")
    openai.mode, openai.command, openai.text = (
        "shell",
        f"printf '{printf}' > {WRITTEN}",
        "codex: a fake clock",
    )
    gemini.mode, gemini.text = "call", "gemini: a fake clock"
    gemini.call = ("write_file", {"file_path": f"{working_dir}/{WRITTEN}", "content": EDITS["gemini"]})
    try:
        yield
    finally:
        for stub in (anthropic, openai, gemini):
            stub.mode, stub.call = "ok", None
            vars(stub).pop("text", None)
        anthropic.answers = []


def test_best_of_three_as_the_readme_writes_it(
    vendors: dict[str, Any],  # noqa: F811
    runs: Runs,
    git_server: GitHttpServer,  # noqa: F811
    forge: GitHubStub,  # noqa: F811
    kube: client.ApiClient,
    tmp_path: Path,
) -> None:
    """The README's block applied with kubectl (readme_manifests' three substitutions; the operator's
    ServiceAccount is the release's, asserted, not substituted), beside what the README leaves to the
    team: the Secret its publish step names. The judge names codex: the pull request holds Codex's
    change."""
    started = time.monotonic()
    git_url = f"http://{STUB_NAME}:{git_server.port}/git/{OWNER_REPO}.git"
    git_server.create_repo(
        OWNER_REPO,
        {
            "src/__init__.py": "",
            "tests/test_retry.py": "import time\n\ndef test_retry():\n    time.sleep(5)\n",
        },
    )
    objects = readme_manifests(runs.ns, git_url, f"http://{STUB_NAME}:{forge.port}/api/v3")
    [binding] = [o for o in objects if o["metadata"]["name"] == "harness-operator-acts-as-pipeline-runner"
                 and o["kind"] == "RoleBinding"]  # fmt: skip
    assert binding["subjects"] == [operator_account(kube)], binding
    [pipeline] = [o for o in objects if o["kind"] == "HarnessPipeline"]
    name, spec = pipeline["metadata"]["name"], pipeline["spec"]
    assert spec["serviceAccountName"] == RUNNER and spec["steps"][0]["matrix"]["providers"] == PROVIDERS
    credentials = spec["steps"][2]["run"]["spec"]["workspace"]["publish"]["credentialsSecretRef"]
    runs.secret(credentials["name"], credentials["key"], WRITE_TOKEN)
    assert spec["steps"][0]["matrix"]["providerOptions"] == EDITING_OPTIONS
    working_dir = spec["steps"][0]["run"]["spec"]["workspace"]["workingDir"]
    (tmp_path / "best-of-three.yaml").write_text(yaml.safe_dump_all(objects))
    pipelines = Pipelines(runs)
    with agents_that_edit(vendors, working_dir):
        as_user("kubectl apply -f best-of-three.yaml", cwd=tmp_path)
        status = pipelines.wait_ended(name, timeout=900)
    print(f"\nmeasured: best of three, applied to ended, {time.monotonic() - started:.1f}s")

    steps = {s["name"]: s for s in status["steps"]}
    assert status["phase"] == "Succeeded", status
    assert {s: steps[s]["phase"] for s in steps} == dict.fromkeys(
        ["implement", "judge", "publish"], "Succeeded"
    )
    owned = {r["metadata"]["name"]: r for r in pipelines.owned(name)}
    implement = [f"{name}-implement-{i}" for i in range(3)]
    assert sorted(owned) == sorted([*implement, f"{name}-judge", f"{name}-publish"]), sorted(owned)
    for run in owned.values():  # created as the pipeline's account, owned by the pipeline
        assert (
            run["metadata"]["annotations"][ANNOTATION_AUTHOR] == f"system:serviceaccount:{runs.ns}:{RUNNER}"
        )
        assert run["metadata"]["ownerReferences"][0]["name"] == name
    # Three runs, one per provider, each keeping its own change as a patch.
    assert [(r["name"], r["provider"], r["matrix"]) for r in steps["implement"]["runs"]] == [
        (run, p, {"provider": p}) for run, p in zip(implement, PROVIDERS, strict=True)
    ]
    for run, provider in zip(implement, PROVIDERS, strict=True):
        changes = owned[run]["status"].get("changes") or {}
        assert changes.get("files") == 1 and "branch" not in changes, runs.describe(run)
        patch = runs.core.read_namespaced_config_map(changes["patchConfigMapName"], runs.ns).data[
            "changes.patch"
        ]
        assert f"+{EDITS[provider].rstrip()}" in patch and WRITTEN in patch, patch
    prompts = [json.dumps(r.body) for r in vendors["anthropic"].model_calls()]
    # The judge read the three outputs under their headings, and its structured output names codex.
    judge = owned[f"{name}-judge"]
    for provider in PROVIDERS:
        assert f"### implement (provider: {provider})" in judge["spec"]["prompt"], judge["spec"]["prompt"]
    summaries = ["claude: the retry waits on a fake clock", "codex: a fake clock", "gemini: a fake clock"]
    assert any(all(t in p for t in summaries) for p in prompts), "the judge's prompt"
    verdict = runs.core.read_namespaced_config_map(judge["status"]["output"]["configMapName"], runs.ns)
    assert json.loads(verdict.data["output.json"]) == VERDICT, verdict.data
    # The publish step started from codex's run and opened the pull request with Codex's change.
    publish = owned[f"{name}-publish"]
    assert publish["spec"]["workspace"]["from"] == {"run": implement[PROVIDERS.index("codex")]}, publish[
        "spec"
    ]
    reads = [i["runOutput"] for i in publish["spec"]["inputs"]]
    assert reads == [{"name": f"{name}-judge", "path": "why"}], publish["spec"]
    assert any(f"A reviewer said: {VERDICT['why']}" in p for p in prompts), "the publish step's prompt"
    changes = publish["status"]["changes"]
    assert git_server.branches(OWNER_REPO)[changes["branch"]] == changes["commit"], changes
    assert git_server.read(OWNER_REPO, changes["branch"], WRITTEN) == EDITS["codex"].encode()
    [opened] = forge.pull_requests()
    assert (opened["repository"], opened["status"], opened["body"]["head"]) == (
        OWNER_REPO, 201, changes["branch"]
    ), opened  # fmt: skip
    assert changes["pullRequestURL"].endswith(f"/{OWNER_REPO}/pull/1"), changes
    # The cost is the runs' together; `kubectl get -o wide` shows what the README's console block shows.
    costs = [r.get("costUSD") for s in status["steps"] for r in s["runs"]]
    assert status["costUSD"] > 0 and status["costUSD"] == round(sum(c for c in costs if c), 6), status
    [console] = readme_blocks(PIPELINES, "console")
    command, header, row = console.splitlines()[:3]
    wide = as_user(substitute(command.removeprefix("$ "), "-n team-a", f"-n {runs.ns}"), cwd=tmp_path)
    got_header, got_row = wide.stdout.splitlines()[:2]
    assert got_header.split() == header.split(), wide.stdout
    readme_row, got = row.split(), got_row.split()
    assert got[:3] == readme_row[:3] and got[5:] == readme_row[5:], wide.stdout  # not COST, AGE
    assert float(got[3]) == pytest.approx(status["costUSD"]), wide.stdout


def running(pipelines: Pipelines, name: str) -> list[str]:
    """The pipeline's runs whose Succeeded condition says Running."""
    return [
        r["metadata"]["name"]
        for r in pipelines.owned(name)
        for c in (r.get("status") or {}).get("conditions") or []
        if c["type"] == "Succeeded" and c["reason"] == "Running"
    ]


def test_cancel_mid_way_cancels_every_run_and_delete_cascades(
    vendors: dict[str, Any],  # noqa: F811
    runs: Runs,
    tmp_path: Path,
) -> None:
    """A step of two runs whose model never answers, and a step after it: spec.cancel (the README's
    command) cancels both runs, creates no third, and ends the pipeline Cancelled; deleting it deletes
    its runs. The account and its Roles are the README's."""
    objects = [o for o in readme_manifests(runs.ns, "unused", "unused") if o["kind"] != "HarnessPipeline"]
    (tmp_path / "account.yaml").write_text(yaml.safe_dump_all(objects))
    as_user("kubectl apply -f account.yaml", cwd=tmp_path)

    def run(prompt: str) -> dict[str, Any]:
        return {"spec": {"provider": "claude", "prompt": prompt, "limits": {"timeoutSeconds": 600}}}

    steps = [
        {
            "name": "wait",
            "matrix": {"params": [{"name": "n", "values": ["one", "two"]}]},
            "run": run("$(matrix.n)"),
        },
        {"name": "never", "after": ["wait"], "run": run("Never asked.")},
    ]
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "HarnessPipeline", "metadata": {"name": "long"},
            "spec": {"serviceAccountName": RUNNER, "steps": steps}}  # fmt: skip
    pipelines = Pipelines(runs)
    model = vendors["anthropic"]
    model.mode = "hang"
    try:
        runs.custom.create_namespaced_custom_object(GROUP, VERSION, runs.ns, "harnesspipelines", body)
        both = ["long-wait-0", "long-wait-1"]
        try:
            wait_until(lambda: running(pipelines, "long") == both, 240, "both runs of step wait to run")
        except AssertionError as exc:
            owned = [(r["metadata"]["name"], r.get("status")) for r in pipelines.owned("long")]
            raise AssertionError(f"{exc}\n{pipelines.get('long').get('status')}\n{owned}") from None
        as_user(
            f'kubectl patch hpipe long -n {runs.ns} --type merge -p \'{{"spec":{{"cancel":true}}}}\'',
            cwd=tmp_path,
        )
        status = pipelines.wait_ended("long", timeout=180)
    finally:
        model.mode = "ok"
    assert (status["phase"], pipelines.succeeded("long")["reason"]) == ("Cancelled", "Cancelled"), status
    assert [s["phase"] for s in status["steps"]] == ["Cancelled", "Cancelled"], status
    owned = pipelines.owned("long")
    assert [r["metadata"]["name"] for r in owned] == ["long-wait-0", "long-wait-1"]
    for run_body in owned:
        assert run_body["spec"]["cancel"] is True, run_body
        assert runs.condition(run_body["metadata"]["name"], "Succeeded")["reason"] == "Cancelled"
    as_user(f"kubectl delete hpipe long -n {runs.ns} --wait=true", cwd=tmp_path)
    wait_until(lambda: not pipelines.owned("long"), 60, "the pipeline's runs to go with it")
