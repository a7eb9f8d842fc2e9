"""The operator against plain Jobs on the local test cluster, measured side by side in one run.

    KUBECONFIG=/var/lib/harness-operator-cluster/admin.kubeconfig \\
        .venv/bin/python bench/operator_scale.py latency [--runs 50]
    KUBECONFIG=... .venv/bin/python bench/operator_scale.py burst [--runs 300]
    KUBECONFIG=... .venv/bin/python bench/operator_scale.py footprint [--runs 100] [--finished 5000]
    KUBECONFIG=... .venv/bin/python bench/operator_scale.py restart [--runs 100] [--steps 2500,5000,10000]
    KUBECONFIG=... .venv/bin/python bench/operator_scale.py pods [--runs 300]
    KUBECONFIG=... .venv/bin/python bench/operator_scale.py admission [--runs 300]
    KUBECONFIG=... .venv/bin/python bench/operator_scale.py writes [--runs 30]

`latency` alternates one run and one plain Job of the same image and agent, each created only when the
last has finished, and prints create -> Job exists and create -> done (p50/p95) for both. `burst` creates
N runs labelled for Kueue (their Jobs are created suspended: pure controller work, no pods) and, in the
same run, N plain suspended Jobs from the same client (each side once the operator's CPU has been flat
for 3 s, so the runs' tail does not slow the plain side), and prints the Jobs-per-second of each, their
ratio, the operator's CPU and memory, and the CPU the test cluster's API server and etcd spent on each
side. `footprint` measures the operator's CPU per run and RSS for
a batch of runs with suspended Jobs in an empty namespace, then again after `--finished` finished runs
were added (created while the operator is stopped, their status patched to Cancelled: no reconcile
makes them), so the two batches show whether the cost
per run is flat in the number of finished runs. `restart` restarts the operator beside each step's
number of finished runs (made as `footprint` makes them, while it is stopped, with one new run created
just before it starts) and prints, per step, the time from process start to that run's Job, the CPU
the process spent until it was idle and its RSS; then the RSS beside the last step's finished runs and
`--runs` runs in flight. `pods` creates N runs whose pods really run, then N plain
Jobs of the same image, agent and resource requests, and prints how long each side took until every
run's status said Succeeded (every plain Job completed), and their ratio. `admission` stops the operator
and creates N runs, then N plain suspended Jobs, one after another, and prints the API server's time per
create of each (its CRD schema, CEL and the chart's admission policies against a Job's) and their ratio.
`writes` runs N runs to their end, then N plain Jobs, and prints the API server's writes (its own
apiserver_request_total, by verb and resource, leases left out) per run and per plain Job: every
component's, the operator's and the kubelet's, the scheduler's and the Job controller's alike; and the
operator's reads of the runs (GET harnessruns) per run.
The operator runs as a process under the chart's RBAC, as in tests/integration; both sides' Jobs are
seen by one watch, so they are timed by the same clock.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch
from urllib3.exceptions import ProtocolError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "operator"))

from tests.integration.operator_env import (  # noqa: E402
    OperatorProcess,
    definition_body,
    install_chart_rbac_and_catalog,
    run_body,
    service_account_kubeconfig,
)

from harness_operator.api.v1alpha1 import GROUP, VERSION  # noqa: E402
from harness_operator.core.objects.naming import KUEUE_QUEUE_LABEL, LABEL_RUN  # noqa: E402
from harness_operator.core.queue.kueue import KUEUE_VERSION  # noqa: E402

BIN = Path(os.environ.get("HARNESS_CLUSTER_CACHE", "/var/cache/harness-operator/cluster")) / "bin"
PLAIN = "bench-plain"


class JobClock:
    """One watch on the namespace's Jobs: when each Job (by run name, or its own name for plain Jobs)
    was first seen and when it completed."""

    def __init__(self, batch: client.BatchV1Api, namespace: str) -> None:
        self.seen: dict[str, float] = {}
        self.done: dict[str, float] = {}
        self._changed = threading.Condition()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._follow, args=(batch, namespace), daemon=True)
        self._thread.start()

    def _follow(self, batch: client.BatchV1Api, namespace: str) -> None:
        with contextlib.suppress(ProtocolError):  # the namespace goes at the end
            self._record(self._watch.stream(batch.list_namespaced_job, namespace, timeout_seconds=0))

    def _record(self, events: Any) -> None:
        for event in events:
            job = event["object"]
            key = (job.metadata.labels or {}).get(LABEL_RUN) or job.metadata.name
            now = time.monotonic()
            with self._changed:
                self.seen.setdefault(key, now)
                if job.status and job.status.succeeded:
                    self.done.setdefault(key, now)
                self._changed.notify_all()

    def wait(self, table: dict[str, float], keys: set[str], timeout: float) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: keys <= table.keys(), timeout):
                raise SystemExit(f"timed out: {len(keys - table.keys())} of {len(keys)} never reached")

    def stop(self) -> None:
        self._watch.stop()


def process_cpu_and_rss(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) and resident MB of process `pid` (the operator's, the cluster's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    rss_pages = int(fields[21])
    return (int(fields[11]) + int(fields[12])) / ticks, rss_pages * os.sysconf("SC_PAGE_SIZE") / 1e6


# Both sides' pods request the same, so the scheduler packs as many of each on the node (a run's
# default, 250m and 1 GiB, fits five times fewer pods at once).
REQUESTS = {"cpu": "50m", "memory": "64Mi"}


def plain_job(name: str, image: str, suspend: bool) -> dict[str, Any]:
    """What a user would write instead of a run: the same image and fake agent, restricted like a sandbox."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"app": PLAIN}},
        "spec": {
            "suspend": suspend,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [
                        {
                            "name": "agent",
                            "image": image,
                            "command": ["fake-agent", "hi"],
                            "env": [{"name": "FAKE_MODE", "value": "ok"}],
                            "resources": {"requests": REQUESTS},
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                        }
                    ],
                }
            },
        },
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def row(what: str, operator: list[float], plain: list[float]) -> str:
    op50, pl50 = statistics.median(operator) * 1e3, statistics.median(plain) * 1e3
    op95, pl95 = percentile(operator, 0.95) * 1e3, percentile(plain, 0.95) * 1e3
    return (
        f"{what:<24} operator p50 {op50:7.0f} ms p95 {op95:7.0f} ms | plain Job p50 {pl50:7.0f} ms "
        f"p95 {pl95:7.0f} ms | +{op50 - pl50:.0f} ms p50"
    )


def create_run(bench: Bench, name: str, labels: dict[str, str] | None = None) -> None:
    spec = {"provider": "fake", "prompt": "hi", "sandbox": {"resources": {"requests": REQUESTS}}}
    body = run_body(name, spec)
    body["metadata"]["labels"] = labels or {}
    bench.custom.create_namespaced_custom_object(GROUP, VERSION, bench.ns, "harnessruns", body)


def latency(bench: Bench, runs: int) -> None:
    created: dict[str, float] = {}
    for i in range(runs):
        for key in (f"run-{i}", f"plain-{i}"):
            created[key] = time.monotonic()
            if key.startswith("run-"):
                create_run(bench, key)
            else:
                bench.batch.create_namespaced_job(bench.ns, plain_job(key, bench.image, False))
            bench.clock.wait(bench.clock.done, {key}, timeout=180)
    for what, table in (("create -> Job exists", bench.clock.seen), ("create -> done", bench.clock.done)):
        run, plain = (
            [table[k] - created[k] for k in created if k.startswith(kind)] for kind in ("run-", "plain-")
        )
        print(row(what, run, plain))


def burst(bench: Bench, runs: int) -> None:
    rates = {}
    for kind in ("run", "plain"):
        keys = {f"{kind}-{i}" for i in range(runs)}
        settle(bench.operator.proc.pid)  # type: ignore[union-attr]  # the runs' tail is not the plain side's
        cpu_before, _ = process_cpu_and_rss(bench.operator.proc.pid)  # type: ignore[union-attr]
        cluster_before = cluster_cpu()
        start = time.monotonic()
        for key in sorted(keys):
            if kind == "run":
                create_run(bench, key, {KUEUE_QUEUE_LABEL: "bench"})
            else:
                bench.batch.create_namespaced_job(bench.ns, plain_job(key, bench.image, True))
        created = time.monotonic() - start
        bench.clock.wait(bench.clock.seen, keys, timeout=max(600, runs * 2))
        elapsed = max(bench.clock.seen[k] for k in keys) - start
        cpu_after, rss = process_cpu_and_rss(bench.operator.proc.pid)  # type: ignore[union-attr]
        cluster = {k: v - cluster_before[k] for k, v in cluster_cpu().items()}
        rates[kind] = runs / elapsed
        print(
            f"{kind:<6} {runs} created in {created:6.1f}s, all Jobs exist after {elapsed:6.1f}s: "
            f"{rates[kind]:6.1f} Jobs/s; operator CPU {cpu_after - cpu_before:6.1f}s "
            f"({(cpu_after - cpu_before) / runs * 1e3:.0f} ms per object), RSS {rss:.0f} MB; API server "
            f"CPU {cluster['kube-apiserver']:.1f}s ({cluster['kube-apiserver'] / runs * 1e3:.0f} ms per "
            f"object), etcd {cluster['etcd']:.1f}s"
        )
    ratio = rates["plain"] / rates["run"]
    verdict = "met" if ratio <= 4 else "missed"
    print(f"ratio operator/plain Jobs per second: 1/{ratio:.1f} (goal at least 1/4: {verdict})")
    jobs = bench.batch.list_namespaced_job(bench.ns, label_selector=LABEL_RUN).items
    per_run: dict[str, int] = {}
    for job in jobs:
        key = job.metadata.labels[LABEL_RUN]
        per_run[key] = per_run.get(key, 0) + 1
    with_job = sum(1 for i in range(runs) if per_run.get(f"run-{i}"))
    twice = sorted(k for k, n in per_run.items() if n > 1)
    print(f"runs with their Job: {with_job}/{runs}; runs with more than one Job: {len(twice)} {twice[:5]}")


def admission(bench: Bench, runs: int) -> None:
    """What the API server alone spends accepting a run (CRD schema, CEL, the chart's admission
    policies) against a suspended plain Job: the operator is stopped, so nothing else competes."""
    bench.operator.stop()
    took = {}
    for kind in ("run", "plain"):
        start = time.monotonic()
        for i in range(runs):
            if kind == "run":
                create_run(bench, f"adm-run-{i}")
            else:
                bench.batch.create_namespaced_job(bench.ns, plain_job(f"adm-plain-{i}", bench.image, True))
        took[kind] = (time.monotonic() - start) / runs * 1e3
        print(
            f"{kind:<6} {runs} created one after another, no operator running: {took[kind]:.1f} ms per create"
        )
    ratio = took["run"] / took["plain"]
    verdict = "met" if ratio <= 3 else "missed"
    print(f"ratio run/plain time per create: {ratio:.1f}x (goal at most 3x: {verdict})")


def succeeded_runs(bench: Bench, keys: set[str], timeout: float) -> float:
    """Watch the runs until every one of `keys` reports phase Succeeded; the monotonic time it did."""
    left = set(keys)
    deadline = time.monotonic() + timeout
    stream = watch.Watch()
    while left and time.monotonic() < deadline:
        listed = bench.custom.list_namespaced_custom_object(GROUP, VERSION, bench.ns, "harnessruns")
        for item in listed["items"]:
            if (item.get("status") or {}).get("phase") == "Succeeded":
                left.discard(item["metadata"]["name"])
        events = stream.stream(
            bench.custom.list_namespaced_custom_object, GROUP, VERSION, bench.ns, "harnessruns",
            resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=60,
        )  # fmt: skip
        for event in events:
            if (event["object"].get("status") or {}).get("phase") == "Succeeded":
                left.discard(event["object"]["metadata"]["name"])
            if not left:
                stream.stop()
    if left:
        raise SystemExit(f"timed out: {len(left)} of {len(keys)} runs never Succeeded")
    return time.monotonic()


def pods(bench: Bench, runs: int) -> None:
    elapsed = {}
    for kind in ("run", "plain"):
        keys = {f"{kind}-{i}" for i in range(runs)}
        settle(bench.operator.proc.pid)  # type: ignore[union-attr]
        start = time.monotonic()
        for key in sorted(keys):
            if kind == "run":
                create_run(bench, key)
            else:
                bench.batch.create_namespaced_job(bench.ns, plain_job(key, bench.image, False))
        timeout = max(1800, runs * 6)
        if kind == "run":
            done = succeeded_runs(bench, keys, timeout)
            bench.clock.wait(bench.clock.done, keys, timeout)
            pods_done = max(bench.clock.done[k] for k in keys) - start
            lag = done - start - pods_done
            print(
                f"run    {runs}: every pod done after {pods_done:6.1f}s, every run Succeeded after "
                f"{done - start:6.1f}s (status {lag:+.1f}s after the last pod)"
            )
            elapsed[kind] = done - start
        else:
            bench.clock.wait(bench.clock.done, keys, timeout)
            elapsed[kind] = max(bench.clock.done[k] for k in keys) - start
            print(f"plain  {runs}: every Job complete after {elapsed[kind]:6.1f}s")
    ratio = elapsed["run"] / elapsed["plain"]
    verdict = "met" if ratio <= 1.3 else "missed"
    print(f"ratio operator/plain time to done: {ratio:.2f} (goal at most 1.3: {verdict})")


WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")
CLUSTER_PROCESSES = ("kube-apiserver", "etcd")


def api_requests() -> dict[tuple[str, str], float]:
    """The API server's requests so far by (verb, resource[/subresource]), leases left out (every
    component renews its own, whatever runs)."""
    from prometheus_client.parser import text_string_to_metric_families

    text = subprocess.run(
        [str(BIN / "kubectl"), "get", "--raw", "/metrics"], capture_output=True, text=True, check=True
    ).stdout
    counts: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if not sample.name.endswith("_total") or labels.get("resource") == "leases":
                continue
            what = labels.get("resource", "") + (
                f"/{labels['subresource']}" if labels.get("subresource") else ""
            )
            key = (labels["verb"], what)
            counts[key] = counts.get(key, 0.0) + sample.value
    return counts


def cluster_cpu() -> dict[str, float]:
    """CPU seconds so far of the test cluster's API server and etcd (processes of this machine)."""
    spent = dict.fromkeys(CLUSTER_PROCESSES, 0.0)
    for proc in Path("/proc").iterdir():
        try:
            if not proc.name.isdigit() or (comm := (proc / "comm").read_text().strip()) not in spent:
                continue
            spent[comm] += process_cpu_and_rss(int(proc.name))[0]
        except OSError:  # it ended meanwhile
            continue
    return spent


def writes(bench: Bench, runs: int) -> None:
    per: dict[str, dict[tuple[str, str], float]] = {}
    for kind in ("run", "plain"):
        keys = {f"{kind}-{i}" for i in range(runs)}
        settle(bench.operator.proc.pid)  # type: ignore[union-attr]
        before = api_requests()
        for key in sorted(keys):
            if kind == "run":
                create_run(bench, key)
            else:
                bench.batch.create_namespaced_job(bench.ns, plain_job(key, bench.image, False))
        if kind == "run":
            succeeded_runs(bench, keys, max(600, runs * 6))
        bench.clock.wait(bench.clock.done, keys, max(600, runs * 6))
        settle(bench.operator.proc.pid)  # type: ignore[union-attr]  # the last status writes, Events
        after = api_requests()
        per[kind] = {k: (after.get(k, 0.0) - before.get(k, 0.0)) / runs for k in after}
    reads = per["run"].get(("GET", "harnessruns"), 0.0)
    per = {kind: {k: v for k, v in side.items() if k[0] in WRITE_VERBS} for kind, side in per.items()}
    rows = sorted({k for side in per.values() for k, v in side.items() if v >= 0.05})
    print(f"API writes per run and per plain Job ({runs} each, to their end):")
    for verb, what in rows:
        run, plain = (per[kind].get((verb, what), 0.0) for kind in ("run", "plain"))
        print(f"  {verb:<6} {what:<40} run {run:6.2f}  plain {plain:6.2f}")
    total = {kind: sum(v for v in side.values() if v > 0) for kind, side in per.items()}
    ratio = total["run"] / total["plain"]
    print(f"  total{'':43} run {total['run']:6.2f}  plain {total['plain']:6.2f}  ratio {ratio:.2f}")
    print(f"and reads: GET harnessruns {reads:.2f} per run (the operator's reads of a run, quorum reads)")


def finished_runs(bench: Bench, count: int, first: int = 0) -> None:
    """`count` runs that ended (numbered from `first`), made without the operator: created, then
    their status patched."""
    ended = {
        "phase": "Cancelled",
        "reason": "Cancelled",
        "conditions": [{"type": "Succeeded", "status": "False", "reason": "Cancelled", "message": "bench"}],
    }

    def make(index: int) -> None:
        name = f"done-{index}"
        body = run_body(name, {"provider": "fake", "prompt": "hi"})
        bench.custom.create_namespaced_custom_object(GROUP, VERSION, bench.ns, "harnessruns", body)
        bench.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, bench.ns, "harnessruns", name, {"status": ended}
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make, range(first, first + count)))


def footprint_batch(bench: Bench, prefix: str, runs: int) -> tuple[float, float]:
    """CPU ms per run and RSS MB for `runs` runs with suspended Jobs, until every Job exists."""
    pid = bench.operator.proc.pid  # type: ignore[union-attr]
    keys = {f"{prefix}-{i}" for i in range(runs)}
    cpu_before, _ = process_cpu_and_rss(pid)
    for key in sorted(keys):
        create_run(bench, key, {KUEUE_QUEUE_LABEL: "bench"})
    bench.clock.wait(bench.clock.seen, keys, timeout=max(600, runs * 2))
    cpu_after, rss = process_cpu_and_rss(pid)
    return (cpu_after - cpu_before) / runs * 1e3, rss


def settle(pid: int) -> tuple[float, float]:
    """Wait until the operator's CPU stays flat for 3 s (its startup done); its CPU and RSS then."""
    last = process_cpu_and_rss(pid)
    while True:
        time.sleep(3)
        now = process_cpu_and_rss(pid)
        if now[0] - last[0] < 0.05:
            return now
        last = now


def footprint(bench: Bench, runs: int, finished: int) -> None:
    pid = bench.operator.proc.pid  # type: ignore[union-attr]
    _, idle = settle(pid)
    empty_cpu, empty_rss = footprint_batch(bench, "first", runs)
    bench.operator.stop()
    made = time.monotonic()
    finished_runs(bench, finished)
    print(f"{finished} finished runs made in {time.monotonic() - made:.0f}s (operator stopped)")
    bench.operator.start()
    pid = bench.operator.proc.pid  # type: ignore[union-attr]
    startup_cpu, startup_rss = settle(pid)
    full_cpu, full_rss = footprint_batch(bench, "second", runs)
    print(f"operator idle RSS {idle:.0f} MB before any run")
    print(f"{runs} runs, namespace empty:          {empty_cpu:5.1f} ms CPU per run, RSS {empty_rss:.0f} MB")
    restart = f"restart with {finished} finished + {runs} in flight"
    print(f"{restart}: {startup_cpu:5.1f} s CPU, RSS {startup_rss:.0f} MB")
    print(f"{runs} runs beside {finished} finished: {full_cpu:5.1f} ms CPU per run, RSS {full_rss:.0f} MB")
    verdict = "met" if full_rss < 200 and full_cpu < 30 else "missed"
    print(f"goal RSS < 200 MB and CPU per run < 30 ms, flat in the finished runs: {verdict}")


def restart(bench: Bench, runs: int, steps: list[int]) -> None:
    made, rows = 0, []
    for step in steps:
        bench.operator.stop()
        began = time.monotonic()
        finished_runs(bench, step - made, first=made)
        print(f"{step - made} finished runs made in {time.monotonic() - began:.0f}s (operator stopped)")
        made, probe = step, f"probe-{step}"
        create_run(bench, probe, {KUEUE_QUEUE_LABEL: "bench"})
        started = time.monotonic()
        bench.operator.start()
        pid = bench.operator.proc.pid  # type: ignore[union-attr]
        bench.clock.wait(bench.clock.seen, {probe}, timeout=1800)
        to_job = bench.clock.seen[probe] - started
        cpu, rss = settle(pid)
        rows.append((step, to_job, cpu, rss))
        print(f"restart beside {step}: process start -> the new run's Job {to_job:.1f}s, {cpu:.1f}s CPU")
    per_run_cpu, rss = footprint_batch(bench, "beside", runs)
    print("finished runs | start -> new run's Job | startup CPU | CPU per 1,000 finished | RSS idle")
    for step, to_job, cpu, idle in rows:
        print(f"{step:>13} | {to_job:>19.1f}s | {cpu:>10.1f}s | {cpu / step * 1e3:>21.2f}s | {idle:.0f} MB")
    print(f"{runs} runs in flight beside {made} finished: {per_run_cpu:.1f} ms CPU per run, RSS {rss:.0f} MB")
    print("goals: start -> Job <= 10 s, CPU linear in the finished runs, RSS < 150 MB")


# The operator hands a Kueue-labelled run's Job to Kueue only where the API server serves Kueue's group
# (else the run says QueueUnavailable). No Kueue controller runs here, so the Jobs stay suspended, which is
# what `burst` and `footprint` measure: two CRDs of that group, the LocalQueues and Workloads the operator
# watches, stand in for Kueue's API while they run.
def build_kueue_stand_in(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.kueue.x-k8s.io"},
        "spec": {
            "group": "kueue.x-k8s.io",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": KUEUE_VERSION,  # the version the operator reads
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                }
            ],
        },
    }


KUEUE_STAND_IN = [
    build_kueue_stand_in("LocalQueue", "localqueues"),
    build_kueue_stand_in("Workload", "workloads"),
]


def serve_kueue_group(admin: client.ApiClient) -> bool:
    """Create the stand-in CRDs unless Kueue's group is served already; True when this created them."""
    ext = client.ApiextensionsV1Api(admin)
    groups = client.ApisApi(admin).get_api_versions().groups or []
    if any(g.name == "kueue.x-k8s.io" for g in groups):
        return False
    for crd in KUEUE_STAND_IN:
        ext.create_custom_resource_definition(crd)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        groups = client.ApisApi(admin).get_api_versions().groups or []
        if any(g.name == "kueue.x-k8s.io" for g in groups):
            return True
        time.sleep(0.5)
    raise RuntimeError("the stand-in Kueue CRD was not served within 60 s")


class Bench:
    """The cluster side of a benchmark: a fresh namespace, the fake provider, the operator process."""

    def __init__(self, folder: Path, kueue: bool) -> None:
        kubeconfig = os.environ["KUBECONFIG"]
        self.admin = config.new_client_from_config(config_file=kubeconfig)
        self.custom, self.batch = client.CustomObjectsApi(self.admin), client.BatchV1Api(self.admin)
        # Only `burst` wants Kueue's group served (its runs' Jobs stay suspended): with the stand-in, the
        # operator waits for Kueue's Workloads, which it does not serve, and starts no other run.
        self.kueue_stand_in = serve_kueue_group(self.admin) if kueue else False
        built = subprocess.run(
            [str(ROOT / "sandbox-image" / "build"), "--test", "--only", "sandbox,test"],
            stdout=subprocess.PIPE, text=True, check=True,
        ).stdout.split()  # fmt: skip
        self.image = next(tag for tag in built if "sandbox-test" in tag)
        sandbox = next(tag for tag in built if "/sandbox:" in tag)
        install_chart_rbac_and_catalog(BIN, kubeconfig)
        self.ns = f"bench-{uuid.uuid4().hex[:6]}"
        client.CoreV1Api(self.admin).create_namespace({"metadata": {"name": self.ns}})
        self.operator = OperatorProcess(
            kubeconfig=service_account_kubeconfig(self.admin, kubeconfig, folder / "kubeconfig"),
            env={
                "HARNESS_SANDBOX_IMAGE": sandbox,
                "HARNESS_MAX_RUNS_PER_NAMESPACE": "100000",
                "HARNESS_DEFAULT_CPU_REQUEST": "50m",
                "HARNESS_DEFAULT_MEMORY_REQUEST": "64Mi",
            },
            log_path=folder / "operator.log",
        )
        self.operator.start()
        self.custom.create_namespaced_custom_object(
            GROUP, VERSION, self.ns, "harnessdefinitions", definition_body("fake", self.image, "ok")
        )
        self.clock = JobClock(self.batch, self.ns)

    def close(self) -> None:
        self.clock.stop()
        self.operator.stop()
        client.CoreV1Api(self.admin).delete_namespace(self.ns)
        if self.kueue_stand_in:
            for crd in KUEUE_STAND_IN:
                client.ApiextensionsV1Api(self.admin).delete_custom_resource_definition(
                    crd["metadata"]["name"]
                )
        print(f"operator log: {self.operator.log_path}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "mode", choices=("latency", "burst", "footprint", "restart", "pods", "admission", "writes")
    )
    parser.add_argument(
        "--runs", type=int, default=None, help="runs (and as many plain Jobs); 50 / 300 / 100 / 300 / 300"
    )
    parser.add_argument("--finished", type=int, default=5000, help="footprint: finished runs to add")
    parser.add_argument(
        "--steps", default="2500,5000,10000", help="restart: the numbers of finished runs to restart beside"
    )
    args = parser.parse_args()
    bench = Bench(Path(tempfile.mkdtemp(prefix="bench-")), kueue=args.mode == "burst")
    try:
        if args.mode == "latency":
            latency(bench, args.runs or 50)
        elif args.mode == "burst":
            burst(bench, args.runs or 300)
        elif args.mode == "pods":
            pods(bench, args.runs or 300)
        elif args.mode == "admission":
            admission(bench, args.runs or 300)
        elif args.mode == "writes":
            writes(bench, args.runs or 30)
        elif args.mode == "restart":
            restart(bench, args.runs or 100, [int(step) for step in args.steps.split(",")])
        else:
            footprint(bench, args.runs or 100, args.finished)
    finally:
        bench.close()


if __name__ == "__main__":
    main()
