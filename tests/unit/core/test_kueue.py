"""kueue: the queue a run's label names, and why it cannot start where no Kueue is served."""

from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.core.kueue import describe_missing_kueue, queue_of


def run(labels: dict[str, str]) -> HarnessRun:
    return HarnessRun.model_validate(
        {
            "metadata": {"name": "r", "namespace": "ns", "labels": labels},
            "spec": {"provider": "p", "prompt": "x"},
        }
    )


def test_the_queue_is_the_label_and_an_empty_one_is_none() -> None:
    assert queue_of(run({"kueue.x-k8s.io/queue-name": "agents"})) == "agents"
    assert queue_of(run({"kueue.x-k8s.io/queue-name": ""})) is None
    assert queue_of(run({})) is None


def test_the_message_names_the_label_the_queue_and_both_fixes() -> None:
    message = describe_missing_kueue("agents")
    assert message.startswith('metadata.labels["kueue.x-k8s.io/queue-name"] names the queue "agents"')
    assert "install Kueue, or remove the label" in message
