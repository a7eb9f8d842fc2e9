"""Kueue's own install manifests (its config/default, rendered by `kubectl kustomize`), fitted to the test
cluster: the locally built image, only the batch/job integration (with the webhooks of the others dropped:
their paths are not served, and a failing webhook would refuse every Pod), no visibility APIService (the
test API server has no aggregation layer), and requests that fit a two-core node.

  kueue_manifests.py RENDERED.yaml IMAGE > install.yaml
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

FRAMEWORK_PATHS = ("-batch-v1-job",)
KEPT_SUFFIXES = ("-kueue-x-k8s-io-v1beta2-", "-kueue-x-k8s-io-v1beta1-")
CONFIG = {
    "apiVersion": "config.kueue.x-k8s.io/v1beta2",
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {
        "groupKindConcurrency": {
            "Job.batch": 5,
            "Workload.kueue.x-k8s.io": 5,
            "LocalQueue.kueue.x-k8s.io": 1,
            "Cohort.kueue.x-k8s.io": 1,
            "ClusterQueue.kueue.x-k8s.io": 1,
            "ResourceFlavor.kueue.x-k8s.io": 1,
        }
    },
    "clientConnection": {"qps": 50, "burst": 100},
    "integrations": {"frameworks": ["batch/job"]},
}


def is_served(webhook: dict[str, Any]) -> bool:
    """A webhook of Kueue's own kinds or of the batch/job integration."""
    path = webhook["clientConfig"]["service"]["path"]
    return any(p in path for p in FRAMEWORK_PATHS + KEPT_SUFFIXES)


def fit(doc: dict[str, Any], image: str) -> dict[str, Any] | None:
    """The object as the test cluster installs it (None: left out)."""
    kind = doc["kind"]
    if kind == "APIService":
        return None
    if kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        doc["webhooks"] = [w for w in doc["webhooks"] if is_served(w)]
    elif kind == "ConfigMap" and "controller_manager_config.yaml" in doc.get("data", {}):
        doc["data"]["controller_manager_config.yaml"] = yaml.safe_dump(CONFIG, sort_keys=False)
    elif kind == "Deployment":
        container = doc["spec"]["template"]["spec"]["containers"][0]
        container["image"] = image
        container["imagePullPolicy"] = "IfNotPresent"
        container["resources"] = {
            "requests": {"cpu": "100m", "memory": "128Mi"},
            "limits": {"cpu": "1", "memory": "512Mi"},
        }
    return doc


def main() -> None:
    rendered, image = sys.argv[1], sys.argv[2]
    with open(rendered) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    kept = [d for d in (fit(doc, image) for doc in docs) if d is not None]
    sys.stdout.write(yaml.safe_dump_all(kept, sort_keys=False))


if __name__ == "__main__":
    main()
