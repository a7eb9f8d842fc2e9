"""Retention on the real cluster: a finished run past its spec.ttlSecondsAfterFinished is deleted by the
operator and the garbage collector takes every child with it; a run with no TTL (and no default) stays."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes.client.rest import ApiException

from harness_operator.api.v1alpha1 import GROUP, VERSION

from .conftest import Api, wait_until
from .operator_env import run_body


def children(api: Api, run: str) -> dict[str, list[str]]:
    """Every object labelled as the run's, by kind (what ownerReferences must take away)."""
    selector = f"agentharness.dev/run={run}"
    listed = {
        "Job": api.batch.list_namespaced_job(api.ns, label_selector=selector).items,
        "Pod": api.core.list_namespaced_pod(api.ns, label_selector=selector).items,
        "Secret": api.core.list_namespaced_secret(api.ns, label_selector=selector).items,
        "ConfigMap": api.core.list_namespaced_config_map(api.ns, label_selector=selector).items,
        "NetworkPolicy": api.net.list_namespaced_network_policy(api.ns, label_selector=selector).items,
        "PersistentVolumeClaim": api.core.list_namespaced_persistent_volume_claim(
            api.ns, label_selector=selector
        ).items,
    }
    return {kind: [o.metadata.name for o in items] for kind, items in listed.items() if items}


def exists(api: Api, name: str) -> bool:
    try:
        api.run(name)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_finished_run_and_children_deleted_after_ttl_and_untimed_run_kept(
    api: Api, fake: Callable[..., None]
) -> None:
    fake("fake", "ok")
    fake("slow", "hang")
    api.create(run_body("kept", {"provider": "fake", "prompt": "p"}))
    kept = api.wait_finished("kept")
    api.create(run_body("brief", {"provider": "fake", "prompt": "p", "ttlSecondsAfterFinished": 3}))
    # A run-scoped claim (never bound: the test cluster has no provisioner) and a cancel end this one.
    api.create(
        run_body(
            "claimed",
            {
                "provider": "slow",
                "prompt": "p",
                "ttlSecondsAfterFinished": 1,
                "workspace": {"workingDir": "/workspace", "volume": {"scope": "run", "size": "1Mi"}},
                "limits": {"gracePeriodSeconds": 1},
            },
        )
    )
    status = api.wait_finished("brief")
    assert status["phase"] == "Succeeded", status
    made = children(api, "brief")
    assert {"Job", "Pod", "Secret", "ConfigMap", "NetworkPolicy"} <= set(made), made
    wait_until(lambda: "PersistentVolumeClaim" in children(api, "claimed"), timeout=60, what="the claim")
    api.custom.patch_namespaced_custom_object(
        GROUP, VERSION, api.ns, "harnessruns", "claimed", {"spec": {"cancel": True}}
    )

    for name in ("brief", "claimed"):
        wait_until(lambda n=name: not exists(api, n), timeout=60, what=f"run {name} deleted after its TTL")
        wait_until(
            lambda n=name: not children(api, n),
            timeout=60,
            what=f"the children of {name} collected",
            diagnose=lambda n=name: str(children(api, n)),
        )
    # `kept` finished before either was deleted: had it a TTL (or the operator a default) it would be gone.
    assert api.status("kept")["completionTime"] == kept["completionTime"]
    assert children(api, "kept")


def test_ttl_is_immutable(api: Api, fake: Callable[..., None]) -> None:
    fake("fake", "ok")
    api.create(run_body("fixed", {"provider": "fake", "prompt": "p"}))
    try:
        api.custom.patch_namespaced_custom_object(
            GROUP, VERSION, api.ns, "harnessruns", "fixed", {"spec": {"ttlSecondsAfterFinished": 5}}
        )
    except ApiException as exc:
        assert exc.status == 422
        assert "spec is immutable after creation except spec.cancel" in str(exc.body)
    else:
        raise AssertionError("the TTL of a run was changed after creation")
