"""The suite's own chart install (operator_env) on a cluster that already holds a release of the chart, as
e2e or a user's `helm install` leaves it: the suite stops at once (a session at its start), naming the
release and the command that removes it, before it touches the CRDs: its replace would drop their keep
policy, and its upgrade of the release (crds.enabled=false) would then delete them and every run, and no
operator it starts would become ready."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client

from .operator_env import RELEASE, RELEASE_NAMESPACE, ROOT, install_chart_rbac_and_catalog

KEEP = "helm.sh/resource-policy"


def test_a_release_installed_as_users_and_e2e_do_stops_the_suite_at_once_naming_its_removal(
    kube: client.ApiClient, kubeconfig_path: str, cluster_bin_dir: Path
) -> None:
    helm = [str(cluster_bin_dir / "helm"), "--kubeconfig", kubeconfig_path]
    subprocess.run(
        [*helm, "upgrade", "--install", RELEASE, str(ROOT / "charts" / "harness-operator"),
         "--namespace", RELEASE_NAMESPACE, "--create-namespace", "--take-ownership", "--set", "replicaCount=0"],
        capture_output=True, check=True,
    )  # fmt: skip
    try:
        started = time.monotonic()
        with pytest.raises(RuntimeError) as refused:
            install_chart_rbac_and_catalog(cluster_bin_dir, kubeconfig_path)
        print(f"\n{refused.value}\nmeasured: refused in {time.monotonic() - started:.2f}s")
        assert time.monotonic() - started < 15
        assert f'release "{RELEASE}" in "{RELEASE_NAMESPACE}"' in str(refused.value)
        assert f"helm uninstall {RELEASE} -n {RELEASE_NAMESPACE}" in str(refused.value)
        # A session of the suite ends at its start, before a module replaces the CRDs itself.
        started = time.monotonic()
        session = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/integration/test_crd_admission.py", "-q", "-p", "no:cacheprovider"],
            cwd=ROOT, env={**os.environ, "KUBECONFIG": kubeconfig_path}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        print(f"measured: session ended in {time.monotonic() - started:.2f}s")
        assert session.returncode == pytest.ExitCode.USAGE_ERROR, session.stdout + session.stderr
        assert f"helm uninstall {RELEASE} -n {RELEASE_NAMESPACE}" in session.stdout + session.stderr
        assert " passed" not in session.stdout and " failed" not in session.stdout
        crd = client.ApiextensionsV1Api(kube).read_custom_resource_definition("harnessruns.agentharness.dev")
        assert (crd.metadata.annotations or {}).get(KEEP) == "keep", "the release's CRDs are untouched"
    finally:
        subprocess.run(
            [*helm, "uninstall", RELEASE, "--namespace", RELEASE_NAMESPACE, "--wait"], capture_output=True
        )
    install_chart_rbac_and_catalog(cluster_bin_dir, kubeconfig_path)  # the command given was enough
    crd = client.ApiextensionsV1Api(kube).read_custom_resource_definition("harnessruns.agentharness.dev")
    assert crd.spec.names.kind == "HarnessRun"
