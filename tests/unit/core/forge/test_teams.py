"""The team membership questions put to each forge and what their answers say (pure): the paths, the
token in the forge's own header, and every answer that is neither yes nor no read as a failure (closed)."""

import json

import pytest

from harness_operator.core.forge.teams import (
    MembershipAnswer,
    build_membership_call,
    build_team_member_call,
    read_membership_answer,
)

TOKEN = "t0k-secret"


def test_github_asks_the_teams_membership_of_the_login() -> None:
    call = build_membership_call(
        "github", "https://api.github.com", "acme/platform-team", "dave", None, TOKEN
    )
    assert call.method == "GET"
    assert call.url == "https://api.github.com/orgs/acme/teams/platform-team/memberships/dave"
    assert call.headers["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in repr(call)


def test_gitea_searches_the_team_then_asks_its_member() -> None:
    call = build_membership_call("gitea", "http://gitea:3000/api/v1", "acme/Platform", "carol", None, TOKEN)
    assert (
        call.url == "http://gitea:3000/api/v1/orgs/acme/teams/search?q=Platform&include_desc=false&limit=50"
    )
    assert call.headers["Authorization"] == f"token {TOKEN}"
    listed = {"ok": True, "data": [{"id": 7, "name": "platform-old"}, {"id": 9, "name": "platform"}]}
    found = read_membership_answer(
        "gitea", call, "acme/Platform", 200, json.dumps(listed).encode(), search=True
    )
    assert found == MembershipAnswer(None, team_id=9)  # the exact name, case folded; not a substring
    none = {"ok": True, "data": [{"id": 7, "name": "platform-old"}]}
    unseen = read_membership_answer(
        "gitea", call, "acme/Platform", 200, json.dumps(none).encode(), search=True
    )
    assert unseen.member is None and unseen.failed is not None
    assert unseen.failed.startswith("the token sees no team 'Platform' in organization acme")
    member = build_team_member_call("http://gitea:3000/api/v1", 9, "carol", TOKEN)
    assert member.url == "http://gitea:3000/api/v1/teams/9/members/carol"
    assert read_membership_answer("gitea", member, "acme/Platform", 200, b"{}").member is True
    assert read_membership_answer("gitea", member, "acme/Platform", 404, b"{}").member is False


def test_gitlab_asks_the_group_by_its_encoded_path_and_the_users_id() -> None:
    call = build_membership_call("gitlab", "https://gl/api/v4", "acme/platform/backend", "erin", 42, TOKEN)
    assert call.url == "https://gl/api/v4/groups/acme%2Fplatform%2Fbackend/members/all/42"
    assert call.headers["PRIVATE-TOKEN"] == TOKEN
    active = json.dumps({"id": 42, "state": "active"}).encode()
    awaiting = json.dumps({"id": 42, "state": "awaiting"}).encode()
    assert read_membership_answer("gitlab", call, "acme/platform/backend", 200, active).member is True
    assert read_membership_answer("gitlab", call, "acme/platform/backend", 200, awaiting).member is False


@pytest.mark.parametrize(
    ("forge", "status", "body", "said"),
    [
        ("github", 401, b'{"message": "Bad credentials"}', "refused the token"),
        ("github", 403, b'{"message": "Resource not accessible"}', "it needs read:org"),
        ("gitea", 403, b'{"message": "Must be an organization member"}', "its user a member of the org"),
        ("gitlab", 401, b'{"message": "401 Unauthorized"}', "it needs read_api"),
        ("github", 502, b"bad gateway", "HTTP 502"),
        ("github", 302, b"", "HTTP 302"),  # a redirect is not followed, nor believed
        ("github", 200, b"not json", "is not a JSON object"),
    ],
)
def test_answers_that_say_neither_yes_nor_no_fail_closed(
    forge: str, status: int, body: bytes, said: str
) -> None:
    call = build_membership_call(forge, "https://api", "acme/platform", "dave", 3, TOKEN)
    answer = read_membership_answer(forge, call, "acme/platform", status, body)
    assert answer.member is None and answer.failed is not None and said in answer.failed
    assert TOKEN not in answer.failed


def test_a_github_pending_invitation_is_not_membership() -> None:
    call = build_membership_call("github", "https://api", "acme/platform", "dave", None, TOKEN)
    pending = json.dumps({"state": "pending", "role": "member"}).encode()
    assert read_membership_answer("github", call, "acme/platform", 200, pending).member is False
    assert read_membership_answer("github", call, "acme/platform", 404, b"{}").member is False
