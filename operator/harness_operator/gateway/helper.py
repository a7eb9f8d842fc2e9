"""Squid's helpers for the egress gateway: `auth` checks a proxy user's password, `acl` whether its grant
opens the requested host:port (I/O: stdin/stdout with Squid, the API server for grants).

Grants are the ConfigMaps labelled agentharness.dev/egress-grant=true in the gateway's own namespace,
read with the pod's ServiceAccount (a Role that may only list and watch ConfigMaps there): listed once,
then kept by a watch, so a revoked grant closes as soon as the API server says so. While the watch is
down, and on an unknown user, they are listed again when the last list is older than MISS_SECONDS: the
operator writes a run's grant before its Job, so a new run is known on its first request.
"""

from __future__ import annotations

import json
import os
import ssl
import sys
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, Protocol

from harness_operator.gateway.rules import find_attempt, is_authentic, is_granted, parse_grant

MISS_SECONDS = 0.5
WATCH_SECONDS = 300  # how long the API server keeps one watch open before the helper opens the next
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
SELECTOR = "agentharness.dev/egress-grant=true"
GRANT_KEY = "grant.json"


class GrantStore:
    """The grants of the gateway's namespace: listed through the API server, then kept by a watch in a
    daemon thread."""

    def __init__(self) -> None:
        host = os.environ["KUBERNETES_SERVICE_HOST"]
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        namespace = os.environ.get("POD_NAMESPACE") or _read(f"{SERVICE_ACCOUNT}/namespace")
        self.url = f"https://{host}:{port}/api/v1/namespaces/{namespace}/configmaps"
        self.context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT}/ca.crt")
        self.grants: dict[str, dict[str, Any]] = {}
        self.fetched = float("-inf")
        self.version: str | None = None
        self.watching = False
        self.lock = threading.Lock()
        threading.Thread(target=self._watch_forever, daemon=True).start()

    def current(self, user: str) -> dict[str, dict[str, Any]]:
        age = time.monotonic() - self.fetched
        if age > MISS_SECONDS and (not self.watching or find_attempt(self.grants, user) is None):
            self.refresh()
        return self.grants

    def _open(self, **query: str) -> Any:
        # The token is read each time: the kubelet rotates it.
        token = _read(f"{SERVICE_ACCOUNT}/token")
        url = f"{self.url}?{urllib.parse.urlencode({'labelSelector': SELECTOR, **query})}"
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        timeout = WATCH_SECONDS + 30 if "watch" in query else 5
        return urllib.request.urlopen(request, context=self.context, timeout=timeout)

    def refresh(self) -> None:
        try:
            with self._open() as response:
                listed = json.load(response)
        except OSError as exc:  # keep the last copy; Squid asks again on the next request
            print(f"harness-gateway: listing grants failed: {exc}", file=sys.stderr, flush=True)
            return
        grants = {}
        for item in listed.get("items", []):
            grant = parse_grant((item.get("data") or {}).get(GRANT_KEY, ""))
            if grant is not None:
                grants[item["metadata"]["name"]] = grant
        with self.lock:
            self.grants, self.fetched = grants, time.monotonic()
            self.version = (listed.get("metadata") or {}).get("resourceVersion")

    def _watch_forever(self) -> None:
        while True:
            if self.version is None:
                self.refresh()
            try:
                self._watch(self.version or "")
            except (OSError, ValueError) as exc:
                print(f"harness-gateway: watching grants failed: {exc}", file=sys.stderr, flush=True)
                self.version = None
            self.watching = False
            if self.version is None:
                time.sleep(1)

    def _watch(self, version: str) -> None:
        query = {"watch": "1", "resourceVersion": version, "timeoutSeconds": str(WATCH_SECONDS)}
        with self._open(allowWatchBookmarks="true", **query) as response:
            self.watching = True
            for line in response:
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # 410 Gone: the version is too old; list again
                    self.version = None
                    return
                meta = obj.get("metadata") or {}
                with self.lock:
                    grants = dict(self.grants)
                    grant = parse_grant((obj.get("data") or {}).get(GRANT_KEY, ""))
                    if kind == "DELETED" or grant is None:
                        grants.pop(meta.get("name", ""), None)
                    elif kind in ("ADDED", "MODIFIED"):
                        grants[meta["name"]] = grant
                    self.grants, self.version = grants, meta.get("resourceVersion") or self.version


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
