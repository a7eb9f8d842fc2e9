"""`harnessctl triggers [NAME]` against the real API server (the CRDs of this tree; no operator or receiver
is needed: it reads a trigger, the Events on it and the runs labelled with its name)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from kubernetes import client

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .operator_env import apply_crds

ROOT = Path(__file__).resolve().parents[2]
HARNESSCTL = str(Path(sys.executable).parent / "harnessctl")


def harnessctl(*args: str, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([HARNESSCTL, *args, "--kubeconfig", kubeconfig], capture_output=True, text=True)


def post_event(core: client.CoreV1Api, trigger: dict, reason: str, message: str, minutes_ago: int) -> None:
    meta = trigger["metadata"]
    stamp = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    core.create_namespaced_event(
        meta["namespace"],
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{meta['name']}."),
            involved_object=client.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}",
                kind="HarnessTrigger",
                name=meta["name"],
                namespace=meta["namespace"],
                uid=meta["uid"],
            ),
            type="Normal" if reason != "BadSignature" else "Warning",
            reason=reason,
            message=message,
            first_timestamp=stamp,
            last_timestamp=stamp,
            count=1,
            source=client.V1EventSource(component="harness-trigger-receiver"),
        ),
    )


def test_triggers_lists_and_shows_deliveries_and_runs(
    kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path, namespace: str
) -> None:
    apply_crds(cluster_bin_dir, kubeconfig_path)
    custom, core = client.CustomObjectsApi(kube), client.CoreV1Api(kube)

    empty = harnessctl("triggers", "-n", namespace, kubeconfig=kubeconfig_path)
    assert (empty.returncode, empty.stdout, empty.stderr) == (
        0,
        "",
        f"No resources found in {namespace} namespace.\n",
    )

    example = next(
        d
        for d in yaml.safe_load_all((ROOT / "examples" / "forge-loop" / "gitea.yaml").read_text())
        if d["kind"] == "HarnessTrigger"
    )
    example["metadata"] = {"name": "payments"}
    trigger = custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "harnesstriggers", example)
    post_event(core, trigger, "RunCreated", "created payments-12-0a1b2c3d4e for issue 12", minutes_ago=5)
    post_event(core, trigger, "BadSignature", "refused: the signature does not match", minutes_ago=1)

    def make_run(name: str, thread: str, kind: str, labelled: bool = True) -> None:
        labels = {"agentharness.dev/forge-thread": thread}
        if labelled:
            labels["agentharness.dev/trigger"] = "payments"
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "HarnessRun",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": {
                    "agentharness.dev/forge-thread-kind": kind,
                    "agentharness.dev/forge-event": "IssueLabeled",
                },
            },
            "spec": {"provider": "claude", "prompt": "Fix issue 12."},
        }
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "harnessruns", body)

    make_run("payments-12-0a1b2c3d4e", "12", "issue")
    custom.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        namespace,
        "harnessruns",
        "payments-12-0a1b2c3d4e",
        {
            "status": {
                "phase": "Succeeded",
                "usage": {"costUSD": 0.0421},
                "changes": {"pullRequestURL": "http://gitea.example:3000/acme/payments/pulls/13"},
            }
        },
    )
    make_run("unrelated", "12", "issue", labelled=False)  # another trigger's or a person's: not shown

    shown = harnessctl("triggers", "payments", "-n", namespace, kubeconfig=kubeconfig_path)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert "Forge:           gitea http://gitea.example:3000" in lines
    assert "Events:          IssueLabeled(agent), Command(/agent), ReviewComment, CheckFailed" in lines
    deliveries = lines[lines.index("Deliveries:") + 1 : lines.index("Runs:")]
    assert [line.split()[2] for line in deliveries] == [
        "Reason",
        "BadSignature",
        "RunCreated",
    ]  # newest first
    assert deliveries[1].split()[:2] == ["1m", "Warning"]
    runs = lines[lines.index("Runs:") + 1 :]
    assert runs[0].split() == ["Name", "Thread", "Event", "Phase", "PR", "Cost", "Age"]
    assert runs[1].split()[:7] == [
        "payments-12-0a1b2c3d4e",
        "issue",
        "12",
        "IssueLabeled",
        "Succeeded",
        "http://gitea.example:3000/acme/payments/pulls/13",
        "$0.0421",
    ]
    assert len(runs) == 2 and "unrelated" not in shown.stdout

    listed = harnessctl("triggers", "-n", namespace, kubeconfig=kubeconfig_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:4] == ["payments", "gitea", "acme/payments", "1"]

    missing = harnessctl("triggers", "nope", "-n", namespace, kubeconfig=kubeconfig_path)
    assert (missing.returncode, missing.stderr) == (
        3,
        'Error from server (NotFound): harnesstriggers.agentharness.dev "nope" not found\n',
    )
