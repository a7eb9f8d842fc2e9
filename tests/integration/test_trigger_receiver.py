"""The trigger receiver as it runs: two real receiver processes (`python -m harness_operator.receiver`) on
the real cluster, each with the ServiceAccount and ClusterRole the chart renders for it, and a team's
namespace granting it (a Role) only `impersonate` on the trigger's ServiceAccount and `get` on the webhook
Secret. Gitea-shaped deliveries, signed as Gitea signs them, create runs as the trigger's ServiceAccount
(its own RBAC decides), a redelivery or two replicas given one delivery at once make one run, a bad
signature is refused and counted, a stranger's comment starts nothing; a team's member starts a run, the
membership asked (of tests/stubs/forge_threads, on loopback) with the trigger's token, which the team
grants the receiver to get, and a token it did not grant starts nothing; a commit status marks the run
that pushed its commit (and the chart's policy lets the receiver change nothing else of a run). No
operator runs: the runs are the objects the receiver made. (The whole loop against a real Gitea is e2e's;
teams against a real Gitea are tests/forge's.)"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from harness_operator.api.v1alpha1 import GROUP, VERSION
from harness_operator.core.forge.checks import ANNOTATION_CHECKS_CHANGED
from harness_operator.core.forge.events import delivery_key
from harness_operator.core.objects.naming import ANNOTATION_AUTHOR, LABEL_THREAD, LABEL_TRIGGER

from ..lib import processes
from ..lib.forge_deliveries import commented, gitea_headers, labelled, status_changed, trigger_body
from ..stubs.forge_threads import ForgeThreadsStub
from .conftest import _namespace_name, wait_until
from .operator_env import RELEASE_NAMESPACE, apply_crds, free_port, helm_install, service_account_kubeconfig

RECEIVER_SA = "harness-operator-receiver"  # the chart's, for release harness-operator
AGENT_SA = "agent-trigger"
SECRET = "gitea-webhook-secret-0123456789"
TRIGGER = "payments-agent"
TOKEN = "forge-token-0123456789"
PIPELINE_TRIGGER = "pipeline-agent"


@dataclass
class Receiver:
    proc: Any
    port: int
    admin: int
    log: Path

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}", data=body, method="POST", headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=15) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as refused:
            return refused.code, json.load(refused)

    def deliveries(self, namespace: str, trigger: str) -> dict[str, float]:
        """harness_trigger_deliveries_total of one trigger, by result."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        return {
            s.labels["result"]: s.value
            for family in text_string_to_metric_families(text)
            if family.name == "harness_trigger_deliveries"
            for s in family.samples
            if s.name.endswith("_total")
            and s.labels["namespace"] == namespace
            and s.labels["trigger"] == trigger
        }


@dataclass
class Env:
    kube: client.ApiClient
    ns: str
    receivers: list[Receiver]

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.kube)

    def runs(self, trigger: str = TRIGGER) -> list[dict[str, Any]]:
        listed = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.ns, "harnessruns", label_selector=f"{LABEL_TRIGGER}={trigger}"
        )
        return list(listed["items"])

    def events(self, trigger: str = TRIGGER) -> list[tuple[str, str, str]]:
        listed = client.CoreV1Api(self.kube).list_namespaced_event(
            self.ns, field_selector=f"involvedObject.kind=HarnessTrigger,involvedObject.name={trigger}"
        )
        return [(e.type, e.reason, e.message) for e in listed.items]

    def deliver(self, body: bytes, *, trigger: str = TRIGGER, secret: str = SECRET, replica: int = 0,
                event: str = "issue_label") -> tuple[int, dict[str, Any]]:  # fmt: skip
        headers = gitea_headers(body, secret.encode(), event)
        return self.receivers[replica].post(f"/hooks/{self.ns}/{trigger}", body, headers)


def grant(
    kube: client.ApiClient, ns: str, name: str, rules: list[dict[str, Any]], subject: dict[str, str]
) -> None:
    """A Role of `rules` in `ns`, bound to `subject`."""
    rbac = client.RbacAuthorizationV1Api(kube)
    rbac.create_namespaced_role(ns, {"metadata": {"name": name}, "rules": rules})
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    rbac.create_namespaced_role_binding(
        ns, {"metadata": {"name": name}, "roleRef": role_ref, "subjects": [subject]}
    )


@pytest.fixture(scope="module")
def forge() -> Iterator[ForgeThreadsStub]:
    """The forge's API the receiver asks about teams (a stub on loopback: the receivers run here)."""
    with ForgeThreadsStub(token=TOKEN) as stub:
        stub.add_team_member("gitea", "acme/platform", "carol")
        yield stub


def team_trigger(name: str, url: str, token_secret: str) -> dict[str, Any]:
    """The trigger of trigger_body, allowing team acme/platform (asked with `token_secret`'s token)."""
    body = trigger_body(name, AGENT_SA, "forge-webhook")
    body["spec"]["forge"].update(url=url, tokenSecretRef={"name": token_secret, "key": "token"})
    body["spec"]["authors"] = {"teams": ["acme/platform"]}
    return body


def pipeline_trigger(name: str, account: str) -> dict[str, Any]:
    """The trigger of trigger_body making a pipeline of two steps, run as `account`, from an issue."""
    body = trigger_body(name, AGENT_SA, "forge-webhook")
    del body["spec"]["runTemplate"]
    steps = [
        {"name": "draft", "run": {"spec": {"provider": "claude", "prompt": "Fix #$(event.number): $(event.title)"}}},
        {"name": "review", "after": ["draft"], "run": {"spec": {"provider": "claude", "prompt": "$(steps.draft.output)"}}},
    ]  # fmt: skip
    body["spec"]["pipelineTemplate"] = {"spec": {"serviceAccountName": account, "steps": steps}}
    return body


@pytest.fixture(scope="module")
def env(
    forge: ForgeThreadsStub,
    kube: client.ApiClient,
    kubeconfig_path: str,
    cluster_bin_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[Env]:
    apply_crds(cluster_bin_dir, kubeconfig_path)
    # The chart's receiver ServiceAccount and ClusterRole, its Deployment at 0: the receivers run here.
    helm_install(
        cluster_bin_dir, kubeconfig_path, "replicaCount=0", "triggerReceiver.enabled=true",
        "triggerReceiver.replicas=0",
    )  # fmt: skip
    core = client.CoreV1Api(kube)
    ns = _namespace_name(request.node.name)
    core.create_namespace({"metadata": {"name": ns, "labels": {"harness-operator.test/integration": "true"}}})
    folder = tmp_path_factory.mktemp("trigger-receiver")
    started: list[Any] = []
    try:
        for account in (AGENT_SA, "not-granted"):
            core.create_namespaced_service_account(ns, {"metadata": {"name": account}})
        for secret in ("forge-webhook", "other-webhook"):
            core.create_namespaced_secret(
                ns, {"metadata": {"name": secret}, "string_data": {"secret": SECRET}}
            )
        for secret in ("forge-token", "other-token"):
            core.create_namespaced_secret(ns, {"metadata": {"name": secret}, "string_data": {"token": TOKEN}})
        # The team's grants to the receiver: its trigger's ServiceAccount, webhook Secret and (for teams)
        # forge token, by name.
        receiver = {"kind": "ServiceAccount", "name": RECEIVER_SA, "namespace": RELEASE_NAMESPACE}
        grant(kube, ns, "trigger-receiver", [
            {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["impersonate"], "resourceNames": [AGENT_SA]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["forge-webhook", "forge-token"]},
        ], receiver)  # fmt: skip
        # What the trigger's ServiceAccount may do: make runs (and, for Replace, delete them).
        agent = {"kind": "ServiceAccount", "name": AGENT_SA, "namespace": ns}
        grant(kube, ns, "agent-runs", [{"apiGroups": [GROUP], "resources": ["harnessruns", "harnesspipelines"],
                                        "verbs": ["create", "delete"]}], agent)  # fmt: skip
        custom = client.CustomObjectsApi(kube)
        for name, account, secret in (
            (TRIGGER, AGENT_SA, "forge-webhook"),
            ("ungranted-account", "not-granted", "forge-webhook"),
            ("ungranted-secret", AGENT_SA, "other-webhook"),
        ):
            custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, "harnesstriggers", trigger_body(name, account, secret)
            )
        for name, account in ((PIPELINE_TRIGGER, AGENT_SA), ("borrowing-pipelines", "not-granted")):
            custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, "harnesstriggers", pipeline_trigger(name, account)
            )
        for name, token_secret in (("team-agent", "forge-token"), ("ungranted-token", "other-token")):
            custom.create_namespaced_custom_object(
                GROUP, VERSION, ns, "harnesstriggers", team_trigger(name, forge.base_url, token_secret)
            )
        sa_config = service_account_kubeconfig(kube, kubeconfig_path, folder / "kubeconfig", RECEIVER_SA)
        receivers = []
        for index in range(2):
            port, admin = free_port(), free_port()
            environ = {
                "PATH": os.environ["PATH"],
                **{k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ},
                "KUBECONFIG": sa_config,
                "HARNESS_PORT": str(port),
                "HARNESS_ADMIN_PORT": str(admin),
            }
            log = folder / f"receiver-{index}.log"
            with log.open("wb") as out:
                proc = processes.start(
                    [sys.executable, "-m", "harness_operator.receiver"], env=environ, stdout=out, stderr=out
                )
            started.append(proc)

            def ready(proc: Any = proc, admin: int = admin, log: Path = log) -> bool:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=2) as answer:
                        return answer.status == 200
                except (urllib.error.URLError, OSError):
                    assert proc.poll() is None, log.read_text()
                    return False

            wait_until(ready, timeout=30, what=f"receiver {index}'s /readyz", diagnose=log.read_text)
            receivers.append(Receiver(proc, port, admin, log))
        yield Env(kube, ns, receivers)
    finally:
        for proc in started:
            processes.stop(proc, grace=10)
        core.delete_namespace(ns, propagation_policy="Background")


def test_a_signed_labelled_issue_creates_one_run_as_the_triggers_service_account(env: Env) -> None:
    status, answer = env.deliver(labelled(3))
    assert (status, answer["result"]) == (202, "created"), answer
    (run,) = env.runs()
    assert run["metadata"]["name"] == answer["run"]
    assert run["metadata"]["labels"][LABEL_THREAD] == "3"
    assert run["spec"]["prompt"] == "Fix #3: Rename helper 3"
    # Created as the trigger's ServiceAccount, recorded as its author (admission takes no other): the
    # receiver itself may not create runs at all.
    assert run["metadata"]["annotations"][ANNOTATION_AUTHOR] == f"system:serviceaccount:{env.ns}:{AGENT_SA}"
    review = client.AuthorizationV1Api(env.kube).create_subject_access_review(
        {
            "spec": {
                "user": f"system:serviceaccount:{RELEASE_NAMESPACE}:{RECEIVER_SA}",
                "resourceAttributes": {
                    "group": GROUP,
                    "resource": "harnessruns",
                    "verb": "create",
                    "namespace": env.ns,
                },
            }
        }
    )
    assert review.status.allowed is False
    assert ("Normal", "RunCreated") in {(t, r) for t, r, _ in env.events()}
    last = env.custom.get_namespaced_custom_object(GROUP, VERSION, env.ns, "harnesstriggers", TRIGGER)
    assert last["status"]["lastDelivery"] | {"time": None} == {
        "time": None,
        "event": "issue_label",
        "result": "created",
        "reason": answer["reason"],
        "run": answer["run"],
    }

    # The forge redelivers it (or an attacker replays it): the same run, nothing new.
    status, again = env.deliver(labelled(3), replica=1)
    assert (status, again["result"]) == (200, "duplicate"), again
    assert [r["metadata"]["name"] for r in env.runs()] == [answer["run"]]


def test_an_issue_creates_the_triggers_pipeline_as_its_account_and_a_borrowed_account_is_refused(
    env: Env,
) -> None:
    status, answer = env.deliver(labelled(8), trigger=PIPELINE_TRIGGER)
    assert (status, answer["result"]) == (202, "created"), answer
    assert answer["reason"].startswith(f"created pipeline {answer['run']} for issue #8")
    made = env.custom.get_namespaced_custom_object(GROUP, VERSION, env.ns, "harnesspipelines", answer["run"])
    meta = made["metadata"]
    assert (meta["labels"][LABEL_TRIGGER], meta["labels"][LABEL_THREAD]) == (PIPELINE_TRIGGER, "8")
    # The account names itself as the pipeline's: no grant to impersonate itself is needed.
    assert meta["annotations"][ANNOTATION_AUTHOR] == f"system:serviceaccount:{env.ns}:{AGENT_SA}"
    assert made["spec"]["steps"][0]["run"]["spec"]["prompt"] == "Fix #8: Rename helper 8"
    assert made["spec"]["steps"][1]["run"]["spec"]["prompt"] == "$(steps.draft.output)"
    status, again = env.deliver(labelled(8), trigger=PIPELINE_TRIGGER, replica=1)
    assert (status, again["result"]) == (200, "duplicate"), again
    # A pipeline run as an account the trigger's may not act as: admission refuses the pipeline.
    status, refused = env.deliver(labelled(9), trigger="borrowing-pipelines")
    assert (status, refused["result"]) == (422, "error"), refused
    assert (
        f'spec.serviceAccountName: user "system:serviceaccount:{env.ns}:{AGENT_SA}" may not act as '
        'ServiceAccount "not-granted"' in refused["reason"]
    )


def test_two_replicas_given_one_delivery_at_once_make_one_run(env: Env) -> None:
    body = labelled(5)
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda replica: env.deliver(body, replica=replica), [0, 1]))
    assert sorted(a["result"] for _, a in answers) == ["created", "duplicate"], answers
    assert len([r for r in env.runs() if r["metadata"]["labels"][LABEL_THREAD] == "5"]) == 1


def test_a_bad_signature_is_refused_counted_and_starts_nothing(env: Env) -> None:
    before = env.receivers[0].deliveries(env.ns, TRIGGER).get("bad_signature", 0.0)
    runs = len(env.runs())
    status, answer = env.deliver(labelled(7), secret="not-the-secret")
    assert (status, answer["result"]) == (401, "bad_signature"), answer
    assert "X-Gitea-Signature" in answer["reason"]
    assert len(env.runs()) == runs
    assert env.receivers[0].deliveries(env.ns, TRIGGER)["bad_signature"] == before + 1
    assert ("Warning", "BadSignature") in {(t, r) for t, r, _ in env.events()}
    unsigned = env.receivers[0].post(
        f"/hooks/{env.ns}/{TRIGGER}",
        labelled(7),
        {"X-Gitea-Event": "issues", "X-Gitea-Event-Type": "issue_label"},
    )
    assert unsigned[0] == 401


def test_a_strangers_command_starts_nothing(env: Env) -> None:
    runs = len(env.runs())
    status, answer = env.deliver(commented(9, "mallory", "/agent delete the tests"), event="issue_comment")
    assert (status, answer["result"]) == (200, "refused"), answer
    assert "mallory" in answer["reason"] and "delete the tests" not in json.dumps(answer)
    assert len(env.runs()) == runs
    assert ("Warning", "DeliveryRefused") in {(t, r) for t, r, _ in env.events()}
    # alice's command on the same issue does start one
    status, answer = env.deliver(commented(9, "alice", "/agent rename it"), event="issue_comment")
    assert (status, answer["result"]) == (202, "created"), answer


def test_the_triggers_service_account_decides_a_run_it_may_not_create_is_refused_with_the_apis_reason(
    env: Env,
) -> None:
    rbac = client.RbacAuthorizationV1Api(env.kube)
    rbac.delete_namespaced_role_binding("agent-runs", env.ns)
    try:
        status, answer = env.deliver(labelled(11))
    finally:
        role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "agent-runs"}
        subject = {"kind": "ServiceAccount", "name": AGENT_SA, "namespace": env.ns}
        rbac.create_namespaced_role_binding(
            env.ns, {"metadata": {"name": "agent-runs"}, "roleRef": role_ref, "subjects": [subject]}
        )
    assert (status, answer["result"]) == (422, "error"), answer
    warnings = [m for t, r, m in env.events() if (t, r) == ("Warning", "RunNotCreated")]
    assert any("forbidden" in m and f"system:serviceaccount:{env.ns}:{AGENT_SA}" in m for m in warnings), (
        warnings
    )
    assert not [r for r in env.runs() if r["metadata"]["labels"][LABEL_THREAD] == "11"]


def test_a_service_account_the_team_did_not_grant_is_not_impersonated(env: Env) -> None:
    status, answer = env.deliver(labelled(13), trigger="ungranted-account")
    assert (status, answer["result"]) == (422, "error"), answer
    warnings = [m for t, r, m in env.events("ungranted-account") if r == "RunNotCreated"]
    assert any("cannot impersonate" in m for m in warnings), warnings
    assert env.runs("ungranted-account") == []


def test_a_webhook_secret_the_team_did_not_grant_verifies_nothing(env: Env) -> None:
    status, answer = env.deliver(labelled(15), trigger="ungranted-secret")
    assert (status, answer["result"]) == (503, "error"), answer
    assert f"{env.ns}/other-webhook" in answer["reason"] and SECRET not in json.dumps(answer)
    assert ("Warning", "WebhookSecretUnreadable") in {(t, r) for t, r, _ in env.events("ungranted-secret")}
    assert env.runs("ungranted-secret") == []


def test_unknown_triggers_and_oversized_deliveries_are_refused_unread(env: Env) -> None:
    assert env.deliver(labelled(17), trigger="no-such-trigger")[0] == 404
    assert env.receivers[0].post("/hooks/Not_A_Namespace/x", b"{}", {})[0] == 404
    huge = json.dumps({"padding": "x" * (1024 * 1024)}).encode()
    status, answer = env.deliver(huge)
    assert (status, answer["result"]) == (413, "error"), answer


def test_a_status_marks_the_run_that_pushed_its_commit_and_the_receiver_may_change_nothing_else(
    env: Env,
) -> None:
    status, answer = env.deliver(labelled(21))
    assert (status, answer["result"]) == (202, "created"), answer
    name, sha = answer["run"], "c" * 40
    # The run pushed `sha` and opened a pull request, as the operator's status would say.
    changes = {
        "commit": sha,
        "branch": "harness/fix-21",
        "pullRequestURL": "http://gitea.test:3000/acme/payments/pulls/22",
    }
    env.custom.patch_namespaced_custom_object_status(
        GROUP, VERSION, env.ns, "harnessruns", name, {"status": {"changes": changes}}
    )
    body = status_changed(sha, "success", "ci/tests")
    status, answer = env.deliver(body, event="status", replica=1)
    assert (status, answer["result"]) == (200, "ignored"), answer
    assert answer["reason"].endswith(f"; the checks of run {name} will be read again")
    run = env.custom.get_namespaced_custom_object(GROUP, VERSION, env.ns, "harnessruns", name)
    assert run["metadata"]["annotations"][ANNOTATION_CHECKS_CHANGED] == f"{sha}@{delivery_key(body)[:12]}"
    # The harness's own status marks nothing.
    env.deliver(status_changed(sha, "success", "harness/payments-agent"), event="status")
    again = env.custom.get_namespaced_custom_object(GROUP, VERSION, env.ns, "harnessruns", name)
    assert again["metadata"]["resourceVersion"] == run["metadata"]["resourceVersion"]

    # As the receiver's ServiceAccount: RBAC lets it patch runs, the chart's policy only the mark.
    receiver = {"Impersonate-User": f"system:serviceaccount:{RELEASE_NAMESPACE}:{RECEIVER_SA}"}

    def patch_as_receiver(patch: dict[str, Any]) -> None:
        env.custom.patch_namespaced_custom_object(
            GROUP, VERSION, env.ns, "harnessruns", name, patch, _headers=receiver
        )

    patch_as_receiver({"metadata": {"annotations": {ANNOTATION_CHECKS_CHANGED: f"{sha}@000000000000"}}})
    for refused in (
        {"spec": {"cancel": True}},
        {"metadata": {"annotations": {"agentharness.dev/forge-repository": "acme/other"}}},
        {"metadata": {"annotations": {"agentharness.dev/checks-read": "x"}}},
        {"metadata": {"labels": {LABEL_THREAD: "99"}}},
        {"metadata": {"finalizers": ["example.com/hold"]}},
    ):
        with pytest.raises(client.ApiException) as denied:
            patch_as_receiver(refused)
        assert denied.value.status in (403, 422), refused
        assert "may change only a run's annotation agentharness.dev/checks-changed" in str(denied.value.body)
    kept = env.custom.get_namespaced_custom_object(GROUP, VERSION, env.ns, "harnessruns", name)
    assert kept["spec"].get("cancel") is not True
    assert kept["metadata"]["annotations"][ANNOTATION_CHECKS_CHANGED] == f"{sha}@000000000000"


def test_a_teams_member_starts_a_run_asked_with_the_token_the_team_granted(
    env: Env, forge: ForgeThreadsStub
) -> None:
    comment = commented(21, "carol", "/agent rename it")
    status, answer = env.deliver(comment, trigger="team-agent", event="issue_comment")
    assert (status, answer["result"]) == (202, "created"), answer
    assert [r["metadata"]["name"] for r in env.runs("team-agent")] == [answer["run"]]
    status, answer = env.deliver(
        commented(22, "mallory", "/agent go"), trigger="team-agent", event="issue_comment"
    )
    assert (status, answer["result"]) == (200, "refused"), answer
    assert "nor in a team of spec.authors.teams" in answer["reason"]
    assert forge.team_questions() >= 3  # carol: the team's search and her membership; mallory's


def test_a_token_the_team_did_not_grant_starts_nothing(env: Env) -> None:
    status, answer = env.deliver(
        commented(23, "carol", "/agent go"), trigger="ungranted-token", event="issue_comment"
    )
    assert (status, answer["result"]) == (503, "error"), answer
    assert f"the token Secret {env.ns}/other-token key token cannot be read" in answer["reason"]
    assert "grant the receiver get on it" in answer["reason"] and TOKEN not in json.dumps(answer)
    assert ("Warning", "TeamsNotChecked") in {(t, r) for t, r, _ in env.events("ungranted-token")}
    assert env.runs("ungranted-token") == []
