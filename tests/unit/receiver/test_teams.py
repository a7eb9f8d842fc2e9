"""spec.authors.teams through the receiver's HTTP server on loopback: signed deliveries of each forge, the
membership asked over HTTP of tests/stubs/forge_threads (GitHub and GitLab are stubs because no real server
of theirs can run here; the real Gitea answers the same questions in tests/forge/test_trigger_teams_gitea.py),
with the token read from the trigger's Secret. A member starts a run, a non-member is refused, answers are
kept a minute, and a forge that does not answer or refuses the token starts nothing (503, counted)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families
from tests.lib.forge_deliveries import commented, gitea_headers
from tests.stubs.forge_threads import ForgeThreadsStub

from harness_operator.receiver.server import Receiver, build_apps

from .test_server import NS, SECRET, TRIGGER, ApiServer

TOKEN = b"forge-token-with-read-org"


@dataclass
class TeamsApiServer(ApiServer):
    """The receiver's API server with a trigger of `forge` whose authors are alice and team acme/platform,
    reported (and asked) at `forge_url` with the token Secret `forge-token`."""

    forge: str = "gitea"
    forge_url: str = ""
    teams: tuple[str, ...] = ("acme/platform",)
    token: bytes | None = TOKEN

    def fetch_trigger(self, namespace: str, name: str) -> dict[str, Any] | None:
        body = super().fetch_trigger(namespace, name)
        if body is None:
            return None
        forge = body["spec"]["forge"]
        forge.update(type=self.forge, tokenSecretRef={"name": "forge-token", "key": "token"})
        forge["url" if self.forge == "gitea" else "apiURL"] = self.forge_url
        if self.forge != "gitea":
            forge["url"] = "https://forge.example"
        body["spec"]["authors"] = {"users": ["alice"], "teams": list(self.teams)}
        return body

    def fetch_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        self.calls.append(f"get secret {namespace}/{name}")
        return self.token if name == "forge-token" else self.secret


@pytest.fixture
def stub() -> Iterator[ForgeThreadsStub]:
    with ForgeThreadsStub(token=TOKEN.decode()) as s:
        yield s


def run(
    api: TeamsApiServer, deliveries: list[tuple[bytes, dict[str, str]]]
) -> tuple[list[Any], dict[str, float]]:
    """The deliveries sent in order: each (status, answer), and the team-check counter by result."""

    async def go() -> tuple[list[Any], dict[str, float]]:
        hooks, admin = build_apps(Receiver(kube=api, max_delivery_bytes=64 * 1024))  # type: ignore[arg-type]
        answers = []
        async with TestClient(TestServer(hooks)) as h, TestClient(TestServer(admin)) as a:
            for body, headers in deliveries:
                answer = await h.post(f"/hooks/{NS}/{TRIGGER}", data=body, headers=headers)
                answers.append((answer.status, await answer.json()))
            text = await (await a.get("/metrics")).text()
        counted = {
            f"{s.labels['forge']}/{s.labels['result']}": s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "harness_trigger_team_checks_total"
        }
        return answers, counted

    return asyncio.run(go())


def gitea_comment(number: int, author: str) -> tuple[bytes, dict[str, str]]:
    body = commented(number, author, "/agent rename the helper")
    return body, gitea_headers(body, SECRET, "issue_comment")


def test_a_gitea_team_member_triggers_a_non_member_is_refused_and_answers_are_kept(
    stub: ForgeThreadsStub,
) -> None:
    stub.add_team_member("gitea", "acme/platform", "carol")
    stub.add_team_member("gitea", "acme/platform-old", "mallory")  # a team whose name only contains it
    api = TeamsApiServer(forge_url=stub.base_url)
    answers, counted = run(
        api, [gitea_comment(3, "carol"), gitea_comment(4, "mallory"), gitea_comment(5, "carol")]
    )
    [(s1, created), (s2, refused), (s3, again)] = answers
    assert (s1, created["result"]) == (202, "created")
    assert (s2, refused["result"]) == (200, "refused")
    assert refused["reason"].startswith(
        "mallory is not allowed by spec.authors to trigger runs nor in a team"
    )
    assert (s3, again["result"]) == (202, "created")
    assert counted == {"gitea/member": 1.0, "gitea/not_member": 1.0}  # carol's second answer was kept
    # carol: search + member; mallory: search (finds acme/platform, not acme/platform-old) + member (404)
    assert stub.team_questions() == 4
    assert len(api.runs) == 2


def test_a_listed_user_asks_the_forge_nothing(stub: ForgeThreadsStub) -> None:
    body = commented(3, "alice", "/agent go")
    answers, counted = run(
        TeamsApiServer(forge_url=stub.base_url), [(body, gitea_headers(body, SECRET, "issue_comment"))]
    )
    assert answers[0][1]["result"] == "created"
    assert stub.team_questions() == 0 and counted == {}


def test_a_forge_that_does_not_answer_starts_nothing_and_says_so(stub: ForgeThreadsStub) -> None:
    stub.add_team_member("gitea", "acme/platform", "carol")
    stub.release("down")
    api = TeamsApiServer(forge_url=stub.base_url)
    answers, counted = run(api, [gitea_comment(3, "carol")])
    [(status, answer)] = answers
    assert (status, answer["result"]) == (503, "error")
    assert (
        "could not be asked of the forge (acme/platform: GET /api/v1/orgs/acme/teams/search: HTTP 503"
        in (answer["reason"])
    )
    assert api.runs == {} and counted == {"gitea/failed": 1.0}
    assert api.events[-1][:2] == ("Warning", "TeamsNotChecked")
    assert api.status is not None and api.status["lastDelivery"]["result"] == "error"


def test_a_refused_token_or_a_missing_token_secret_starts_nothing(stub: ForgeThreadsStub) -> None:
    stub.add_team_member("gitea", "acme/platform", "carol")
    wrong = TeamsApiServer(forge_url=stub.base_url, token=b"another-token")
    [(status, answer)], _ = run(wrong, [gitea_comment(3, "carol")])
    assert (status, answer["result"]) == (503, "error")
    assert "the forge refused the token" in answer["reason"] and "read:organization" in answer["reason"]
    assert "another-token" not in answer["reason"] and "another-token" not in str(wrong.events)
    missing = TeamsApiServer(forge_url=stub.base_url, token=None)
    [(status, answer)], counted = run(missing, [gitea_comment(3, "carol")])
    assert (status, answer["result"]) == (503, "error")
    assert f"the token Secret {NS}/forge-token key token does not exist or is empty" in answer["reason"]
    assert counted == {} and missing.runs == {}


def test_a_forge_that_cannot_be_reached_starts_nothing() -> None:
    with ForgeThreadsStub(token=TOKEN.decode()) as gone:
        url = gone.base_url
    [(status, answer)], counted = run(TeamsApiServer(forge_url=url), [gitea_comment(3, "carol")])
    assert (status, answer["result"]) == (503, "error") and counted == {"gitea/failed": 1.0}


def github_comment(author: str, association: str = "NONE") -> tuple[bytes, dict[str, str]]:
    payload = {
        "action": "created",
        "issue": {
            "number": 3,
            "title": "Rename",
            "body": "",
            "html_url": "https://forge.example/acme/payments/3",
        },
        "comment": {"body": "/agent go", "user": {"login": author}, "author_association": association},
        "repository": {"full_name": "acme/payments"},
        "sender": {"login": author},
    }
    body = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": "issue_comment"}
    return body, {**headers, "X-Hub-Signature-256": signature}


def test_github_team_membership_through_its_api_stub(stub: ForgeThreadsStub) -> None:
    stub.add_team_member("github", "acme/platform", "Dave")
    api = TeamsApiServer(forge="github", forge_url=stub.base_url)
    answers, counted = run(api, [github_comment("dave"), github_comment("erin")])
    assert [a["result"] for _, a in answers] == ["created", "refused"]
    assert counted == {"github/member": 1.0, "github/not_member": 1.0}
    assert any(r.path == "/orgs/acme/teams/platform/memberships/dave" for r in stub.requests)


def gitlab_note(author: str, user_id: int | None) -> tuple[bytes, dict[str, str]]:
    user: dict[str, Any] = {"username": author, **({"id": user_id} if user_id else {})}
    payload = {
        "object_kind": "note",
        "user": user,
        "project": {"path_with_namespace": "acme/payments"},
        "object_attributes": {"noteable_type": "Issue", "note": "/agent go"},
        "issue": {
            "iid": 3,
            "title": "Rename",
            "description": "",
            "url": "https://forge.example/acme/payments/3",
        },
    }
    headers = {
        "Content-Type": "application/json",
        "X-Gitlab-Event": "Note Hook",
        "X-Gitlab-Token": SECRET.decode(),
    }
    return json.dumps(payload).encode(), headers


def test_gitlab_group_membership_by_user_id_through_its_api_stub(stub: ForgeThreadsStub) -> None:
    stub.add_team_member("gitlab", "acme/platform/backend", "42")
    api = TeamsApiServer(
        forge="gitlab", forge_url=stub.base_url + "/api/v4", teams=("acme/platform/backend",)
    )
    answers, counted = run(api, [gitlab_note("erin", 42), gitlab_note("frank", 43), gitlab_note("gus", None)])
    assert [a["result"] for _, a in answers] == ["created", "refused", "refused"]
    assert "names no user id" in answers[2][1]["reason"]
    assert counted == {"gitlab/member": 1.0, "gitlab/not_member": 1.0}
    assert any(r.path == "/api/v4/groups/acme%2Fplatform%2Fbackend/members/all/42" for r in stub.requests)
