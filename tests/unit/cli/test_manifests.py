"""What `harnessctl rerun` creates from a run: its author is the caller, its approval is not copied."""

from harness_operator.cli.manifests import build_rerun


def test_a_rerun_copies_the_spec_labels_and_own_annotations_but_not_cancel_its_canceller_nor_the_approval() -> (
    None
):
    run = {
        "apiVersion": "agentharness.dev/v1alpha1",
        "kind": "HarnessRun",
        "metadata": {
            "name": "r" * 63,
            "namespace": "team-a",
            "uid": "u",
            "resourceVersion": "9",
            "labels": {"team": "a"},
            "annotations": {
                "ticket": "T-1",
                "kopf.zalando.org/last-handled-configuration": "{}",
                "agentharness.dev/author": "alice",
                "approval.agentharness.dev/decision": "Approved",
                "approval.agentharness.dev/user": "bob",
                "approval.agentharness.dev/reason": "fine",
                "agentharness.dev/cancelled-by": "dave",
            },
        },
        "spec": {"provider": "claude", "prompt": "Go.", "cancel": True},
        "status": {"phase": "Cancelled"},
    }
    again = build_rerun(run, "carol")
    assert again["metadata"] == {
        "generateName": "r" * 57 + "-",
        "namespace": "team-a",
        "labels": {"team": "a"},
        "annotations": {"ticket": "T-1", "agentharness.dev/author": "carol"},
    }
    assert again["spec"] == {"provider": "claude", "prompt": "Go."} and "status" not in again
