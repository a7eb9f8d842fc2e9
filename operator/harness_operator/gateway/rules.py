"""The gateway's decisions: who a proxy user is, what its grant opens, what an access-log line says (pure).

A grant is the JSON the operator writes (`egress.build_egress_grant`), keyed here by its ConfigMap's name;
a proxy user is `<grant name>.<slot>` (the attempt, or `<attempt>-git` for the clone and the publisher,
which opens only the run's git host and forge API) and its password the slot's token, of which the grant
holds only the sha256.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Grants = Mapping[str, Mapping[str, Any]]
_SLOT = re.compile(r"[0-9]+(-git)?")
# The Squid logformat the exporter reads (gateway/squid.conf): user, method, host, port, status, action.
LOGFORMAT_FIELDS = ("user", "method", "host", "port", "status", "action")
VERDICT_ALLOWED = "allowed"
VERDICT_REFUSED = "refused"
VERDICT_UNAUTHENTICATED = "unauthenticated"


def split_user(user: str) -> tuple[str, str] | None:
    """(grant name, slot) of a proxy user name, or None when it is not one of ours. The slot is an
    attempt (the sandbox's credential) or `<attempt>-git` (the clone's and the publisher's)."""
    name, dot, slot = user.rpartition(".")
    return (name, slot) if dot and name and _SLOT.fullmatch(slot) else None


def find_attempt(grants: Grants, user: str) -> Mapping[str, Any] | None:
    parts = split_user(user)
    if parts is None:
        return None
    grant = grants.get(parts[0])
    attempts = (grant or {}).get("attempts") or {}
    found = attempts.get(parts[1])
    return found if isinstance(found, Mapping) else None


def is_authentic(grants: Grants, user: str, password: str) -> bool:
    """The password is the attempt's token: its sha256 is what the grant holds (compared in constant time)."""
    attempt = find_attempt(grants, user)
    if attempt is None:
        return False
    digest = hashlib.sha256(password.encode()).hexdigest()
    return hmac.compare_digest(digest, str(attempt.get("tokenSha256", "")))


def is_granted(grants: Grants, user: str, host: str, port: str) -> bool:
    """Whether the attempt's grant names host:port (or host:* for every port); names compare without case
    and a trailing dot, so `Example.COM.` is `example.com`."""
    attempt = find_attempt(grants, user)
    if attempt is None:
        return False
    name = host.lower().rstrip(".")
    hosts = set(attempt.get("hosts") or [])
    return f"{name}:{port}" in hosts or f"{name}:*" in hosts


def parse_grant(text: str) -> dict[str, Any] | None:
    """A grant's JSON, or None when it does not parse as one (the gateway then ignores it)."""
    try:
        grant = json.loads(text)
    except ValueError:
        return None
    return grant if isinstance(grant, dict) and isinstance(grant.get("attempts"), dict) else None


def run_of(grants: Grants, user: str) -> str:
    """`namespace/run` of a proxy user for logs and metrics; the user name itself when no grant has it."""
    parts = split_user(user)
    grant = grants.get(parts[0]) if parts else None
    if grant is None:
        return user
    return f"{grant.get('namespace')}/{grant.get('run')}"


@dataclass(frozen=True)
class Access:
    """One request as Squid logged it."""

    user: str
    method: str
    host: str
    port: str
    status: int
    action: str

    @property
    def verdict(self) -> str:
        if self.status == 407:
            return VERDICT_UNAUTHENTICATED
        if self.status == 403 and "DENIED" in self.action:
            return VERDICT_REFUSED
        return VERDICT_ALLOWED

    @property
    def attempt(self) -> str | None:
        parts = split_user(self.user)
        return parts[1] if parts else None


def parse_access(line: str) -> Access | None:
    """An access-log line in our logformat, or None for anything else."""
    fields = line.split()
    if len(fields) != len(LOGFORMAT_FIELDS) or not fields[4].isdigit():
        return None
    user, method, host, port, status, action = fields
    return Access(user, method, host, port, int(status), action)


def build_metric_key(run: str, host: str, verdict: str) -> tuple[str, str, str]:
    """(namespace, host, verdict) of one request: the host only when allowed (a granted host:port, so
    the grants bound the set); a refused one's host is the agent's choice and stays in the log line."""
    namespace = run.split("/", 1)[0] if "/" in run else "-"
    return namespace, host if verdict == VERDICT_ALLOWED else "-", verdict


def render_metrics(counts: Mapping[tuple[str, str, str], int]) -> str:
    """Prometheus text: requests per namespace, allowed host:port and verdict."""
    lines = [
        "# HELP harness_gateway_requests_total Requests through the egress gateway by namespace, verdict and "
        "(allowed only) host.",
        "# TYPE harness_gateway_requests_total counter",
    ]
    for (namespace, host, verdict), count in sorted(counts.items()):
        labels = f'namespace="{_escape(namespace)}",host="{_escape(host)}",verdict="{verdict}"'
        lines.append(f"harness_gateway_requests_total{{{labels}}} {count}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
