"""Squid's helpers for the egress gateway: `auth` checks a proxy user's password, `acl` whether its grant
opens the requested host:port (I/O: stdin/stdout with Squid, the API server for grants).

Grants are the ConfigMaps labelled agentharness.dev/egress-grant=true in the gateway's own namespace,
read with the pod's ServiceAccount (a Role that may only list ConfigMaps there). They are listed again
when the copy is older than REFRESH_SECONDS, or on an unknown user when older than MISS_SECONDS: the
operator writes a run's grant before its Job, so a new run is known on its first request.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import time
import urllib.parse
import urllib.request
from typing import Any, Protocol

from harness_operator.gateway.rules import find_attempt, is_authentic, is_granted, parse_grant

REFRESH_SECONDS = 5.0
MISS_SECONDS = 0.5
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
SELECTOR = "agentharness.dev/egress-grant=true"
GRANT_KEY = "grant.json"


class GrantStore:
    """The grants of the gateway's namespace, listed through the API server and kept for a few seconds."""

    def __init__(self) -> None:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        namespace = os.environ.get("POD_NAMESPACE") or _read(f"{SERVICE_ACCOUNT}/namespace")
        query = urllib.parse.urlencode({"labelSelector": SELECTOR})
        self.url = f"https://{host}:{port}/api/v1/namespaces/{namespace}/configmaps?{query}"
        self.context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT}/ca.crt")
        self.grants: dict[str, dict[str, Any]] = {}
        self.fetched = float("-inf")

    def current(self, user: str) -> dict[str, dict[str, Any]]:
        age = time.monotonic() - self.fetched
        if age > REFRESH_SECONDS or (age > MISS_SECONDS and find_attempt(self.grants, user) is None):
            self.refresh()
        return self.grants

    def refresh(self) -> None:
        # The token is read each time: the kubelet rotates it.
        token = _read(f"{SERVICE_ACCOUNT}/token")
        request = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=5) as response:
                listed = json.load(response)
        except OSError as exc:  # keep the last copy; Squid asks again on the next request
            print(f"harness-gateway: listing grants failed: {exc}", file=sys.stderr, flush=True)
            return
        grants = {}
        for item in listed.get("items", []):
            grant = parse_grant((item.get("data") or {}).get(GRANT_KEY, ""))
            if grant is not None:
                grants[item["metadata"]["name"]] = grant
        self.grants, self.fetched = grants, time.monotonic()


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


class Store(Protocol):
    def current(self, user: str) -> dict[str, dict[str, Any]]: ...


def answer(mode: str, store: Store, line: str) -> str:
    """One helper reply: Squid sends URL-escaped, space-separated fields."""
    fields = [urllib.parse.unquote(f) for f in line.split()]
    if mode == "auth" and len(fields) == 2:
        user, password = fields
        return "OK" if is_authentic(store.current(user), user, password) else "ERR"
    if mode == "acl" and len(fields) >= 3:  # Squid appends the ACL's arguments ("-" for none)
        user, host, port = fields[:3]
        return "OK" if is_granted(store.current(user), user, host, port) else "ERR"
    return "BH message=bad-request" if mode == "acl" else "ERR"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args not in (["auth"], ["acl"]):
        print("usage: python3 -m harness_operator.gateway.helper auth|acl", file=sys.stderr)
        return 2
    store = GrantStore()
    for line in sys.stdin:
        print(answer(args[0], store, line), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
