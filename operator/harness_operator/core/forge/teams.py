"""Whether a delivery's author is in one of a trigger's teams: the questions put to each forge and what
its answers say (pure; receiver/teams.py sends them).

GitHub: GET {api}/orgs/{org}/teams/{slug}/memberships/{user}: 200 with state active (pending is not
        yet a member), 404 not a member (or a team the token cannot see). Token: read:org.
Gitea:  GET {api}/orgs/{org}/teams/search?q={team} for the team's id (names match exactly, ignoring
        case), then GET {api}/teams/{id}/members/{user}: 200 or 404. Token: read:organization, and its
        user a member of the org (Gitea answers 403 to anyone else) who can see the team: Gitea 1.27's
        teams are private by default (seen by their members and the org's owners only); a team made
        `limited` is seen by every member of the org. A team the token cannot find is a failure, not a
        "no": a typo or a private team would otherwise refuse everyone in silence.
GitLab: GET {api}/groups/{url-encoded path}/members/all/{user id}: 200 with state active (members of
        its parent groups too), 404 not a member. Token: read_api.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote, urlencode

from harness_operator.api.v1alpha1 import Forge
from harness_operator.core.forge.report_calls import ForgeCall, build_headers, describe_failure

SEARCH_LIMIT = 50
SCOPES = {
    Forge.github: "read:org",
    Forge.gitea: "read:organization, its user a member of the org",
    Forge.gitlab: "read_api",
}


@dataclass(frozen=True)
class MembershipAnswer:
    """What one answer says: `member` True or False, or (None) it says neither and `failed` is why; a
    Gitea search's answer gives `team_id` (the next question) instead."""

    member: bool | None
    failed: str | None = None
    team_id: int | None = None


def build_membership_call(
    forge: str, api_root: str, team: str, author: str, author_id: int | None, token: str
) -> ForgeCall:
    """The first (on GitHub and GitLab the only) question about `author` and `team`."""
    headers = build_headers(forge, token)
    if forge == Forge.gitlab:
        return ForgeCall(
            "GET", f"{api_root}/groups/{quote(team, safe='')}/members/all/{author_id or 0}", headers, None
        )
    org, _, name = team.partition("/")
    if forge == Forge.github:
        url = f"{api_root}/orgs/{quote(org, safe='')}/teams/{quote(name, safe='')}/memberships/"
        return ForgeCall("GET", url + quote(author, safe=""), headers, None)
    query = urlencode({"q": name, "include_desc": "false", "limit": SEARCH_LIMIT})
    return ForgeCall("GET", f"{api_root}/orgs/{quote(org, safe='')}/teams/search?{query}", headers, None)


def build_team_member_call(api_root: str, team_id: int, author: str, token: str) -> ForgeCall:
    """Gitea's second question: is `author` in the team with this id."""
    url = f"{api_root}/teams/{team_id}/members/{quote(author, safe='')}"
    return ForgeCall("GET", url, build_headers(Forge.gitea, token), None)


def read_membership_answer(
    forge: str, call: ForgeCall, team: str, status: int, answer: bytes, *, search: bool = False
) -> MembershipAnswer:
    """What an answer to `call` says; `search` for Gitea's team search. A refused token, a 5xx or an
    unreadable answer says neither yes nor no: the delivery is not judged on it."""
    if status in (401, 403):
        return MembershipAnswer(
            None,
            f"the forge refused the token ({describe_failure(call, status, answer)}); it needs "
            f"{SCOPES.get(Forge(forge), 'read access')}",
        )
    if search:
        return _read_search(call, team, status, answer)
    if status == 404:
        return MembershipAnswer(False)
    if status != 200:
        return MembershipAnswer(None, describe_failure(call, status, answer))
    if forge == Forge.gitea:
        return MembershipAnswer(True)
    parsed = _json(answer)
    if parsed is None:
        return MembershipAnswer(None, f"{describe_failure(call, status, b'')} is not a JSON object")
    return MembershipAnswer(parsed.get("state") == "active")


def _read_search(call: ForgeCall, team: str, status: int, answer: bytes) -> MembershipAnswer:
    """Gitea's search: the id of the team named exactly `team`'s name; none the token can see fails."""
    parsed = _json(answer) if status == 200 else None
    found = parsed.get("data") if parsed is not None else None
    if not isinstance(found, list):
        return MembershipAnswer(None, describe_failure(call, status, answer))
    name = team.partition("/")[2].casefold()
    ids = [
        t["id"]
        for t in found
        if isinstance(t, dict) and str(t.get("name", "")).casefold() == name and type(t.get("id")) is int
    ]
    if not ids:
        org = team.partition("/")[0]
        return MembershipAnswer(
            None,
            f"the token sees no team {team.partition('/')[2]!r} in organization {org}: check the name, and "
            "make the team's visibility limited (or the token's user an owner of the organization)",
        )
    return MembershipAnswer(None, team_id=ids[0])


def _json(answer: bytes) -> dict[str, object] | None:
    try:
        parsed = json.loads(answer or b"{}")
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None
