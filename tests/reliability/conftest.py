"""Fixtures of the fault tests: the integration tier's cluster fixtures, an operator process per test
module with its own settings, and the `reliability` gate (slow tests run only with HARNESS_RELIABILITY=1)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from ..integration.conftest import (
    Api,
    cluster_bin_dir,
    images,
    kube,
    kubeconfig_path,
    namespace,
    operator_settings,
)
from ..integration.operator_env import (
    OperatorProcess,
    install_chart_rbac_and_catalog,
    service_account_kubeconfig,
)

__all__ = ["cluster_bin_dir", "images", "kube", "kubeconfig_path", "namespace"]
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gate = pytest.mark.skip(reason="slow fault test: set HARNESS_RELIABILITY=1 (make reliability)")
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.integration)
            if item.get_closest_marker("reliability") and os.environ.get("HARNESS_RELIABILITY") != "1":
                item.add_marker(gate)


@pytest.fixture(scope="module")
def operator_kubeconfig(
    kube: client.ApiClient,
    kubeconfig_path: str,
    cluster_bin_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> str:
    """The chart's RBAC and catalog installed, and a kubeconfig of the chart's ServiceAccount."""
    install_chart_rbac_and_catalog(cluster_bin_dir, kubeconfig_path)
    return service_account_kubeconfig(
        kube, kubeconfig_path, tmp_path_factory.mktemp("operator-sa") / "kubeconfig"
    )


@pytest.fixture
def start_operator(
    operator_kubeconfig: str, images: dict[str, str], tmp_path: Path
) -> Iterator[Callable[..., OperatorProcess]]:
    """`start_operator(**env)`: the operator as a process under the chart's RBAC, with the integration
    tier's settings plus `env`; stopped when the test ends."""
    started: list[OperatorProcess] = []

    def start(**env: str) -> OperatorProcess:
        proc = OperatorProcess(
            kubeconfig=operator_kubeconfig,
            env={**operator_settings(images), **env},
            log_path=tmp_path / f"operator-{len(started)}.log",
        )
        proc.start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()
        print(f"operator log: {proc.log_path}")


@pytest.fixture
def api(kube: client.ApiClient, namespace: str) -> Api:
    return Api(kube, namespace)
