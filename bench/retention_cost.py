"""What keeping N finished runs' expiries costs: the operator's one heap against one asyncio task per run
(the floor of a kopf.daemon or kopf.timer per run, which kopf keeps as a task plus its own state)."""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc
from datetime import UTC, datetime, timedelta

from harness_operator.controller.retention import ExpiryQueue, compute_expiry


def heap_cost(n: int) -> tuple[int, float]:
    now = datetime.now(UTC)
    finished = (now - timedelta(seconds=5)).isoformat()
    runs = [
        {
            "metadata": {"namespace": "ns", "name": f"run-{i}", "uid": f"uid-{i}"},
            "spec": {"ttlSecondsAfterFinished": 86400},
            "status": {"completionTime": finished},
        }
        for i in range(n)
    ]
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    started = time.process_time()
    queue = ExpiryQueue(lambda ns, name, uid: None)
    for run in runs:
        delay = compute_expiry(run, None, now)
        assert delay is not None
        queue.schedule("ns", run["metadata"]["name"], run["metadata"]["uid"], delay)
    cpu = time.process_time() - started
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(queue) == n
    return size, cpu


async def _tasks(n: int) -> int:
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tasks = [asyncio.create_task(asyncio.sleep(86400)) for _ in range(n)]
    await asyncio.sleep(0)
    size = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5000)
    n = parser.parse_args().runs
    heap, cpu = heap_cost(n)
    tasks = asyncio.run(_tasks(n))
    print(f"{n} finished runs with a TTL")
    print(
        f"  expiry heap:        {heap / n:8.0f} bytes per run, {cpu / n * 1e6:6.1f} us CPU per run scheduled"
    )
    print(f"  a task per run:     {tasks / n:8.0f} bytes per run (floor of kopf.daemon/timer per run)")
    print(f"  ratio task / heap:  {tasks / heap:8.1f}")


if __name__ == "__main__":
    main()
