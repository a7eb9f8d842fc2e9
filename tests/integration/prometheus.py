"""A real Prometheus (Debian's) on loopback for the monitoring checks: installed when missing, scraping
the given targets every second, optionally with a rules file."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from ..lib import processes
from .conftest import wait_until
from .operator_env import free_port


def ensure_prometheus() -> tuple[str, str]:
    """Debian's prometheus and promtool, installed with apt when missing (a fresh CI machine)."""
    if shutil.which("prometheus") is None or shutil.which("promtool") is None:
        subprocess.run(
            ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"],
            check=True,
            capture_output=True,
            env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    assert prometheus and promtool
    return prometheus, promtool


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1"

    def get(self, path: str, **params: str) -> Any:
        url = f"{self.base}/{path}?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.loads(resp.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.get("query", query=expr)["result"])

    def empty(self, queries: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The (title, query) pairs that return no series."""
        return [(title, q) for title, q in queries if not self.query(q)]


@contextmanager
def prometheus(
    folder: Path,
    jobs: dict[str, list[str]],
    rules: list[Path] | None = None,
    labels: dict[str, str] | None = None,
) -> Iterator[Prometheus]:
    """Prometheus scraping each job's targets (host:port, /metrics) every second, once every target is
    up. As the chart's ServiceMonitor: the job is the Service's name (`<release>-metrics`, `-egress`,
    `-model`), a series' own labels win over the target's `labels` (its `namespace`)."""
    binary, _ = ensure_prometheus()
    config: dict[str, Any] = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": True,
                "static_configs": [{"targets": targets, "labels": labels or {}}],
            }
            for job, targets in jobs.items()
        ],
    }
    if rules is not None:
        config["rule_files"] = [str(r) for r in rules]
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    argv = [
        binary,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    prom = Prometheus(port)

    def scraping() -> bool:
        try:
            active = prom.get("targets")["activeTargets"]
        except OSError:
            return False
        count = sum(len(targets) for targets in jobs.values())
        return len(active) == count and all(t["health"] == "up" for t in active)

    with (
        (folder / "prometheus.log").open("wb") as log,
        processes.running(argv, grace=30, stdout=log, stderr=subprocess.STDOUT),
    ):
        wait_until(scraping, timeout=60, what=f"Prometheus to scrape {jobs}")
        yield prom
