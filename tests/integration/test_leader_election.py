"""Leader election on the real API server, under the chart's RBAC: electors racing for the Lease, a
hand-over on stop, expiry after a leader died, a leader whose Lease was taken stopping; and two
operator processes, of which only the leader reconciles and the standby takes over on SIGTERM."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException

from harness_operator.controller.kube import Kube
from harness_operator.controller.leader import LeaderElector

from .conftest import Api, operator_settings, wait_until
from .operator_env import (
    RELEASE_NAMESPACE,
    OperatorProcess,
    install_chart_rbac_and_catalog,
    run_body,
    service_account_kubeconfig,
)

LEASE = "harness-operator"  # the chart's: the only Lease its Role lets the operator update


@pytest.fixture(scope="module")
def operator_config(
    kube: client.ApiClient,
    kubeconfig_path: str,
    cluster_bin_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    install_chart_rbac_and_catalog(cluster_bin_dir, kubeconfig_path)
    return service_account_kubeconfig(
        kube, kubeconfig_path, tmp_path_factory.mktemp("leader-sa") / "kubeconfig"
    )


@pytest.fixture
def fresh_lease(kube: client.ApiClient) -> Iterator[None]:
    """No Lease left by an earlier test (or the e2e release): each test starts the election anew."""

    def delete() -> None:
        try:
            client.CoordinationV1Api(kube).delete_namespaced_lease(LEASE, RELEASE_NAMESPACE)
        except ApiException as exc:
            if exc.status != 404:
                raise

    delete()
    yield
    delete()


def holder(kube: client.ApiClient) -> tuple[str, int]:
    spec = client.CoordinationV1Api(kube).read_namespaced_lease(LEASE, RELEASE_NAMESPACE).spec
    return spec.holder_identity or "", spec.lease_transitions or 0


class CountingKube(Kube):
    """The real client, counting the elector's reads of the Lease (its watch is not a read)."""

    reads = 0

    def fetch_lease(self, namespace: str, name: str) -> dict | None:
        self.reads += 1
        return super().fetch_lease(namespace, name)


def elector(operator_config: str, identity: str, **timing: float) -> LeaderElector:
    api = config.new_client_from_config(config_file=operator_config)
    return LeaderElector(CountingKube(api), RELEASE_NAMESPACE, LEASE, identity, **timing)  # type: ignore[arg-type]


FAST = {"retry_seconds": 0.2, "duration_seconds": 2, "renew_deadline_seconds": 1.5}


def test_one_elector_leads_and_hands_the_lease_over_when_it_stops(
    kube: client.ApiClient, operator_config: str, fresh_lease: None
) -> None:
    a, b = elector(operator_config, "pod-a", **FAST), elector(operator_config, "pod-b", **FAST)
    a.start()
    assert a.leading.wait(10)
    b.start()
    time.sleep(3)  # longer than the Lease's duration: a leader that renews keeps it
    assert (a.leading.is_set(), b.leading.is_set(), holder(kube)) == (True, False, ("pod-a", 0))
    assert b.can_take_over() and b.watching
    # The standby watches: a few reads (its first look, a check of a quiet watch), not one per retry
    # period (15 in 3 s) while the leader renewed 15 times.
    reads = b.kube.reads  # type: ignore[attr-defined]
    print(f"\nmeasured: the standby read the Lease {reads} times in 3 s (retry period 0.2 s)")
    assert reads <= 3
    handed = time.monotonic()
    a.stop()
    assert b.leading.wait(10)
    took = time.monotonic() - handed
    print(f"\nmeasured: hand-over on stop {took:.2f}s (retry period {FAST['retry_seconds']}s)")
    assert took < FAST["duration_seconds"]  # released: no wait for expiry
    assert holder(kube) == ("pod-b", 1) and not a.lost.is_set()
    b.stop()
    assert holder(kube) == ("", 1)


def test_a_dead_leaders_lease_is_taken_once_it_expired(
    kube: client.ApiClient, operator_config: str, fresh_lease: None
) -> None:
    # A retry period half the Lease: a standby reading the Lease every period would take it up to
    # two periods late (its clock starting at the read after the last renewal, its look after expiry).
    timing = {**FAST, "retry_seconds": 1.0}
    a, b = elector(operator_config, "pod-a", **timing), elector(operator_config, "pod-b", **timing)
    a.start()
    assert a.leading.wait(10)
    b.start()
    time.sleep(1.5)
    a.stopping.set()  # its thread ends without a release, as when its process is SIGKILLed
    a.thread.join()
    assert b.leading.wait(10)
    took = time.monotonic() - a.renewed_at
    print(f"\nmeasured: last renewal -> the standby leads {took:.2f}s (lease 2 s, retry period 1 s)")
    assert 1.9 <= took < 2.5  # not before the Lease expired, and without a retry period's delay
    assert holder(kube) == ("pod-b", 1)
    b.stop()


def test_a_leader_whose_lease_another_took_stops_leading(
    kube: client.ApiClient, operator_config: str, fresh_lease: None
) -> None:
    a = elector(operator_config, "pod-a", **FAST)
    a.start()
    assert a.leading.wait(10)
    leases = client.CoordinationV1Api(kube)
    lease = leases.read_namespaced_lease(LEASE, RELEASE_NAMESPACE)
    lease.spec.holder_identity = "pod-elsewhere"
    leases.replace_namespaced_lease(LEASE, RELEASE_NAMESPACE, lease)
    assert a.lost.wait(10) and not a.leading.is_set()
    a.stop()  # not the holder: the Lease stays the other's
    assert holder(kube)[0] == "pod-elsewhere"


def role(proc: OperatorProcess) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{proc.health_port}/readyz", timeout=2) as resp:
            return resp.status, resp.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()


def leader_gauge(proc: OperatorProcess) -> float:
    (line,) = [ln for ln in proc.metrics().splitlines() if ln.startswith("harness_operator_leader ")]
    return float(line.split()[1])


def test_only_the_leader_reconciles_and_the_standby_takes_over_on_sigterm(
    api: Api,
    fake: Callable[..., None],
    kube: client.ApiClient,
    operator_config: str,
    images: dict[str, str],
    tmp_path: Path,
    fresh_lease: None,
) -> None:
    def replica(name: str) -> OperatorProcess:
        env = {
            **operator_settings(images),
            "HARNESS_LEADER_ELECTION_LEASE": LEASE,
            "HARNESS_LEADER_ELECTION_NAMESPACE": RELEASE_NAMESPACE,
            "HARNESS_POD_NAME": name,
        }
        proc = OperatorProcess(kubeconfig=operator_config, env=env, log_path=tmp_path / f"{name}.log")
        proc.start()  # returns once /readyz answers 200: a leader's kopf is ready, a standby reads the Lease
        return proc

    first = replica("operator-a")
    second = replica("operator-b")
    try:
        assert (role(first), role(second)) == ((200, "leader"), (200, "standby"))
        assert (leader_gauge(first), leader_gauge(second)) == (1.0, 0.0)
        fake("fake", "ok")
        api.create(run_body("before", {"provider": "fake", "prompt": "hi"}))
        assert api.wait_finished("before")["phase"] == "Succeeded"
        assert "before" not in (tmp_path / "operator-b.log").read_text()  # the standby reconciled nothing
        stopped = time.monotonic()
        first.stop()  # SIGTERM: kopf stops, the Lease is released
        assert first.proc is not None and first.proc.returncode == 0
        wait_until(lambda: role(second) == (200, "leader"), timeout=30, what="the standby to lead")
        took = time.monotonic() - stopped
        print(f"\nmeasured: SIGTERM of the leader -> the standby leads and kopf is ready {took:.2f}s")
        identity, transitions = holder(kube)
        assert identity.startswith("operator-b_") and transitions == 1 and leader_gauge(second) == 1.0
        api.create(run_body("after", {"provider": "fake", "prompt": "hi"}))
        assert api.wait_finished("after")["phase"] == "Succeeded"
        assert len(api.jobs("before")) == 1  # the new leader resumed the ended run without a second Job
    finally:
        first.stop()
        second.stop()
