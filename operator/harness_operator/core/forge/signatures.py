"""Whether a webhook delivery comes from the forge: GitHub's and Gitea's HMAC, GitLab's token (pure)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping


def _header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by name, case-insensitively (HTTP servers differ in how they spell them)."""
    wanted = name.lower()
    return next((v for k, v in headers.items() if k.lower() == wanted), None)


def verify_delivery(forge: str, headers: Mapping[str, str], body: bytes, secret: bytes) -> bool:
    """True when the delivery carries the secret's signature (or token); a missing header is False."""
    if not secret:
        return False
    if forge == "gitlab":
        token = _header(headers, "X-Gitlab-Token")
        return token is not None and hmac.compare_digest(token.encode(), secret)
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    if forge == "github":
        signature = _header(headers, "X-Hub-Signature-256")
        prefix = "sha256="
    elif forge == "gitea":
        signature = _header(headers, "X-Gitea-Signature")
        prefix = ""
    else:
        return False
    if signature is None or not signature.startswith(prefix):
        return False
    return hmac.compare_digest(signature[len(prefix) :].strip().lower().encode(), expected.encode())
