"""Gitea 1.27's webhook deliveries as the receiver's tests send them (an issue given a label, an issue
comment, a commit status), signed as Gitea signs them, and a HarnessTrigger that takes them (pure)."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from harness_operator.api.v1alpha1 import GROUP, VERSION

REPO = {"full_name": "acme/payments", "html_url": "http://gitea.test:3000/acme/payments"}


def labelled(number: int, labeller: str = "alice") -> bytes:
    """An issue given the label `agent` (X-Gitea-Event: issues, X-Gitea-Event-Type: issue_label)."""
    issue = {
        "id": 1000 + number,
        "number": number,
        "title": f"Rename helper {number}",
        "body": "The helper's name is misleading.",
        "html_url": f"http://gitea.test:3000/acme/payments/issues/{number}",
        "user": {"login": "alice"},
        "labels": [{"id": 2, "name": "agent"}],
        "pull_request": None,
    }
    payload = {
        "action": "label_updated",
        "number": number,
        "issue": issue,
        "repository": REPO,
        "sender": {"login": labeller},
    }
    return json.dumps(payload).encode()


def commented(number: int, author: str, text: str) -> bytes:
    """A new comment on an issue (X-Gitea-Event and X-Gitea-Event-Type: issue_comment)."""
    issue = {
        "id": 1000 + number,
        "number": number,
        "title": "Rename helper",
        "body": "",
        "user": {"login": author},
        "html_url": f"http://gitea.test:3000/acme/payments/issues/{number}",
        "labels": [],
        "pull_request": None,
    }
    comment = {"id": 7000 + number, "body": text, "user": {"login": author}}
    payload = {
        "action": "created",
        "issue": issue,
        "comment": comment,
        "repository": REPO,
        "sender": {"login": author},
        "is_pull": False,
    }
    return json.dumps(payload).encode()


def status_changed(sha: str, state: str, context: str, repository: dict[str, str] = REPO) -> bytes:
    """A commit status set on `sha` (X-Gitea-Event and X-Gitea-Event-Type: status): it names a commit,
    no pull request."""
    payload = {
        "id": 9001,
        "sha": sha,
        "state": state,
        "context": context,
        "description": f"{context} {state}",
        "target_url": "http://ci.test/build/1",
        "repository": repository,
        "sender": {"login": "ci-bot"},
    }
    return json.dumps(payload).encode()


def gitea_headers(body: bytes, secret: bytes, event_type: str) -> dict[str, str]:
    """The headers Gitea sends: the event, its precise type (an issue's labels: issues / issue_label) and
    the body's HMAC-SHA256 with the webhook's secret."""
    return {
        "Content-Type": "application/json",
        "X-Gitea-Event": {"issue_label": "issues"}.get(event_type, event_type),
        "X-Gitea-Event-Type": event_type,
        "X-Gitea-Signature": hmac.new(secret, body, hashlib.sha256).hexdigest(),
    }


def trigger_body(name: str, account: str, secret_name: str = "forge-webhook") -> dict[str, Any]:
    """A Gitea trigger on acme/payments: the label `agent` or `/agent` by alice starts a run as `account`."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HarnessTrigger",
        "metadata": {"name": name},
        "spec": {
            "forge": {
                "type": "gitea",
                "url": "http://gitea.test:3000",
                "webhookSecretRef": {"name": secret_name, "key": "secret"},
            },
            "repositories": ["acme/payments"],
            "serviceAccountName": account,
            "events": [{"type": "IssueLabeled", "label": "agent"}, {"type": "Command", "command": "/agent"}],
            "authors": {"users": ["alice"]},
            "runTemplate": {"spec": {"provider": "claude", "prompt": "Fix #$(event.number): $(event.title)"}},
        },
    }
