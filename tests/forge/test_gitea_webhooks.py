"""What a real Gitea delivers to a trigger's webhook: for each event the loop starts runs from (an issue
opened with a label or given one, a `/agent` comment on an issue or a pull request, a review comment, a
failed commit status), the headers that name the event and sign the body, and the payload's fields a
receiver reads. The facts core/forge/events.py and signatures.py are written against, checked on the
server itself rather than on its documentation.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.lib.gitea import Gitea, GiteaError, User

SECRET = "webhook-secret-" + secrets.token_hex(8)


class Delivery:
    def __init__(self, headers: dict[str, str], body: bytes) -> None:
        self.headers = headers
        self.body = body
        self.payload: dict[str, Any] = json.loads(body)

    @property
    def number(self) -> int | None:
        """The issue's or pull request's number the delivery is about."""
        about = self.payload.get("issue") or self.payload.get("pull_request") or {}
        return about.get("number")

    @property
    def kind(self) -> tuple[str, str]:
        """(X-Gitea-Event, X-Gitea-Event-Type)."""
        return self.headers["x-gitea-event"], self.headers["x-gitea-event-type"]


class Receiver:
    """A webhook endpoint on loopback (Gitea runs on this machine) that records every delivery."""

    def __init__(self) -> None:
        self.deliveries: list[Delivery] = []
        lock = threading.Lock()
        received = self.deliveries

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    received.append(Delivery({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/team-a/fix-issues"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, event_type: str, number: int | None = None, timeout: float = 30) -> Delivery:
        """The first delivery of X-Gitea-Event-Type `event_type` (about issue or pull request `number`, if
        given); Gitea delivers from a queue."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [
                d for d in list(self.deliveries) if d.kind[1] == event_type and number in (None, d.number)
            ]
            if found:
                return found[0]
            time.sleep(0.2)
        seen = [d.kind for d in self.deliveries]
        raise AssertionError(f"no {event_type} delivery within {timeout}s; got {seen}")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    rec = Receiver()
    yield rec
    rec.server.shutdown()
    rec.server.server_close()


@pytest.fixture
def hooked(gitea: Gitea, owner: User, receiver: Receiver) -> str:
    """owner/widgets with a Gitea webhook to the receiver, signed with SECRET."""
    gitea.create_repo(
        owner.name, "widgets", {"README.md": "hello\n", "app.py": "def greet():\n    return 1\n"}
    )
    repository = f"{owner.name}/widgets"
    gitea.create_webhook(repository, receiver.url, SECRET)
    return repository


def assert_signed(delivery: Delivery) -> None:
    """Gitea signs the body with HMAC-SHA256 in two headers: its own (bare hex) and GitHub's (sha256=hex)."""
    digest = hmac.new(SECRET.encode(), delivery.body, hashlib.sha256).hexdigest()
    assert delivery.headers["x-gitea-signature"] == digest
    assert delivery.headers["x-hub-signature-256"] == f"sha256={digest}"
    assert delivery.headers["x-gitea-delivery"]  # a UUID per delivery
    assert delivery.headers["content-type"].startswith("application/json")


def test_an_issue_opened_with_a_label_and_a_label_given_later(
    gitea: Gitea, owner: User, hooked: str, receiver: Receiver
) -> None:
    opened = gitea.as_user(owner.name).create_issue(hooked, "Greet everyone", "Say hello.", labels=["agent"])

    delivery = receiver.wait("issues")
    assert_signed(delivery)
    assert delivery.kind == ("issues", "issues")
    payload = delivery.payload
    assert payload["action"] == "opened"
    assert payload["repository"]["full_name"] == hooked
    issue = payload["issue"]
    assert (issue["number"], issue["title"], issue["body"]) == (
        opened["number"],
        "Greet everyone",
        "Say hello.",
    )
    assert [label["name"] for label in issue["labels"]] == ["agent"]
    assert issue["html_url"].endswith(f"/{hooked}/issues/{opened['number']}")
    assert payload["sender"]["login"] == owner.name and issue["user"]["login"] == owner.name
    assert issue["pull_request"] is None

    # Opened with a label, the issue is also delivered as labelled: two deliveries, two bodies, one event
    # for the user (a trigger on IssueLabeled must start one run, not two).
    also = receiver.wait("issue_label", opened["number"])
    assert also.payload["action"] == "label_updated" and also.body != delivery.body

    later = gitea.as_user(owner.name).create_issue(hooked, "Another one")
    gitea.as_user(owner.name).add_labels(hooked, later["number"], ["agent"])
    labelled = receiver.wait("issue_label", later["number"])
    assert_signed(labelled)
    assert labelled.kind == ("issues", "issue_label")
    assert labelled.payload["action"] == "label_updated"
    assert labelled.payload["issue"]["number"] == later["number"]
    assert [label["name"] for label in labelled.payload["issue"]["labels"]] == ["agent"]


def test_a_command_comment_on_an_issue_and_on_a_pull_request(
    gitea: Gitea, owner: User, hooked: str, receiver: Receiver
) -> None:
    issue = gitea.as_user(owner.name).create_issue(hooked, "Greet everyone")
    gitea.as_user(owner.name).comment(hooked, issue["number"], "/agent fix the greeting")
    on_issue = receiver.wait("issue_comment")
    assert_signed(on_issue)
    assert on_issue.kind == ("issue_comment", "issue_comment")
    assert on_issue.payload["action"] == "created"
    assert on_issue.payload["comment"]["body"] == "/agent fix the greeting"
    assert on_issue.payload["comment"]["user"]["login"] == owner.name
    assert on_issue.payload["is_pull"] is False and on_issue.payload["issue"]["number"] == issue["number"]

    pull = open_pull_request(gitea, owner, hooked)
    gitea.as_user(owner.name).comment(hooked, pull["number"], "/agent rename the function")
    on_pull = receiver.wait("pull_request_comment")
    assert_signed(on_pull)
    # A comment on a pull request is an issue_comment event, its type and is_pull telling it apart.
    assert on_pull.kind == ("issue_comment", "pull_request_comment")
    payload = on_pull.payload
    assert payload["is_pull"] is True and payload["issue"]["number"] == pull["number"]
    assert payload["comment"]["body"] == "/agent rename the function"
    assert payload["pull_request"]["head"]["ref"] == "feature"
    assert payload["pull_request"]["head"]["sha"] == pull["head"]["sha"]


def test_a_review_comment_on_a_pull_request(
    gitea: Gitea, owner: User, hooked: str, receiver: Receiver
) -> None:
    pull = open_pull_request(gitea, owner, hooked)
    reviewer = gitea.create_user(f"reviewer-{secrets.token_hex(4)}")
    gitea.add_collaborator(hooked, reviewer.name, "write")
    gitea.as_user(reviewer.name).review_comment(
        hooked, pull["number"], "app.py", 2, "Return 2 instead.", summary="/agent keep it at 1"
    )

    delivery = receiver.wait("pull_request_review_comment")
    assert_signed(delivery)
    assert delivery.kind == ("pull_request_comment", "pull_request_review_comment")
    # Gitea also sends GitHub's event header, with a value GitHub never sends: the forge is the trigger's
    # forge.type, never guessed from the headers.
    assert delivery.headers["x-github-event"] == "pull_request_comment"
    payload = delivery.payload
    assert payload["action"] == "reviewed"
    assert payload["pull_request"]["number"] == pull["number"]
    assert payload["pull_request"]["head"]["ref"] == "feature"
    assert payload["sender"]["login"] == reviewer.name
    # The review's own text is review.content; its line comments' text is not in the delivery at all.
    assert payload["review"] == {"type": "pull_request_review_comment", "content": "/agent keep it at 1"}
    assert b"Return 2 instead." not in delivery.body


def test_a_failed_commit_status(gitea: Gitea, owner: User, hooked: str, receiver: Receiver) -> None:
    pull = open_pull_request(gitea, owner, hooked)
    sha = pull["head"]["sha"]
    gitea.as_user(owner.name).set_status(hooked, sha, "failure", "ci/tests", "2 tests failed")

    delivery = receiver.wait("status")
    assert_signed(delivery)
    assert delivery.kind == ("status", "status")
    payload = delivery.payload
    assert (payload["sha"], payload["state"], payload["context"]) == (sha, "failure", "ci/tests")
    assert payload["description"] == "2 tests failed"
    assert payload["repository"]["full_name"] == hooked
    # The status names a commit, no pull request and no branch: the receiver finds the PR from its head.
    assert "pull_request" not in payload and "branches" not in payload
    # Gitea's /commits/{sha}/pull finds no pull request from its head commit (it answers 404 here); the open
    # pull requests' head.sha does.
    with pytest.raises(GiteaError) as refused:
        gitea.call("GET", f"/repos/{hooked}/commits/{sha}/pull")
    assert refused.value.status == 404
    assert [p["number"] for p in gitea.pull_requests(hooked, "open") if p["head"]["sha"] == sha] == [
        pull["number"]
    ]
    combined = gitea.combined_status(hooked, sha)
    assert combined["state"] == "failure"


def open_pull_request(gitea: Gitea, owner: User, repository: str) -> dict[str, Any]:
    """Branch `feature` with a change to app.py, and a pull request from it into main."""
    me = gitea.as_user(owner.name)
    me.update_file(
        repository, "app.py", "def greet():\n    return 2\n", "main", "Return 2", new_branch="feature"
    )
    return me.create_pull_request(repository, "feature", "main", "Return 2")
