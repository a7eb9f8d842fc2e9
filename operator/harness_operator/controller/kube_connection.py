"""How the operator's API client connects: configuration, the API groups, discovery, 404 as None (I/O)."""

from __future__ import annotations

import os
import time
from typing import Any, Self

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from harness_operator.controller.kubeconfig import Flags, load_kubeconfig

FIELD_MANAGER = "harness-operator"
RUNS = "harnessruns"
GROUP_RECHECK_SECONDS = 60.0
CONNECTIONS = 32


class KubeConnection:
    """The official client's API groups over one connection pool; Kube's parts (kube.py, kube_streams.py)
    share it."""

    def __init__(self, api_client: client.ApiClient | None = None, cluster: str = "") -> None:
        if api_client is None:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            settings = client.Configuration.get_default_copy()
            # Every worker keeps its connection: with the default pool of 10, a burst's workers and
            # watch threads discarded connections and paid a new TLS handshake per request.
            settings.connection_pool_maxsize = CONNECTIONS
            api_client = client.ApiClient(settings)
        self.api = api_client
        self.cluster = cluster  # a MultiKueue worker's name (controller/workers); "": this cluster
        self._served: set[str] = set()
        self._unserved: dict[str, float] = {}
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.net = client.NetworkingV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.extensions = client.ApiextensionsV1Api(api_client)

    @classmethod
    def for_cluster(cls, name: str, path: str) -> Self:
        """A client of another cluster (a MultiKueue worker, `name`) from its kubeconfig file, leaving this
        process's own configuration alone."""
        settings = client.Configuration()
        config.load_kube_config(config_file=path, client_configuration=settings)
        settings.connection_pool_maxsize = CONNECTIONS
        return cls(client.ApiClient(settings), cluster=name)

    @classmethod
    def from_kubeconfig(cls, flags: Flags) -> tuple[Self, str]:
        """harnessctl's client, made from kubectl's flags and $KUBECONFIG as kubectl makes it
        (kubeconfig.py), and the namespace to use."""
        connection = load_kubeconfig(flags, os.environ)
        return cls(connection.api), connection.namespace

    def serves_api_group(self, group: str) -> bool:
        """Whether the API server serves `group` (discovery); a yes is kept, a no asked again after
        GROUP_RECHECK_SECONDS (the group may be installed later)."""
        now = time.monotonic()
        if group in self._served or self._unserved.get(group, float("-inf")) > now:
            return group in self._served
        groups = client.ApisApi(self.api).get_api_versions().groups or []
        if any(g.name == group for g in groups):
            self._served.add(group)
            return True
        self._unserved[group] = now + GROUP_RECHECK_SECONDS
        return False


def none_if_missing(call: Any) -> Any:
    """`call()`, or None when the API server answers 404 (the object does not exist)."""
    try:
        return call()
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
