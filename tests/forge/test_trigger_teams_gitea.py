"""spec.authors.teams against a real Gitea: its organization's teams, asked by the receiver with a token as
the documentation says it must be (read:organization, its user a member of the org).

The receiver runs here on loopback (its HTTP server, real signatures, the team questions over HTTP to
Gitea); the webhook deliveries are Gitea's own, sent when users comment on an issue. The API server's side
is the in-memory one of the receiver's unit tests: what is judged here is the forge's answer (the
cluster's judgement of the runs is tests/integration/test_trigger_receiver.py's). Teams are made with
visibility `limited`: Gitea 1.27's default, private, hides a team from org members who are not in it. A member of the allowed
team starts a run; an org member outside it and a stranger start nothing; a token without the scope, or
whose user is not in the org, starts nothing either (fail closed).
"""

from __future__ import annotations

import asyncio
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from harness_operator.core.forge.triggering import TeamAnswer
from harness_operator.receiver.server import Receiver, build_apps
from harness_operator.receiver.teams import TeamChecker, TeamQuestion, build_team_counter
from tests.lib.gitea import Gitea, User
from tests.unit.receiver.test_server import NS, TRIGGER, ApiServer

WEBHOOK_SECRET = "webhook-" + secrets.token_hex(8)


@dataclass
class Org:
    name: str
    member: User  # in team `platform`
    outsider: User  # in the org (team `docs`), not in `platform`
    stranger: User  # in no team of the org
    token: str  # the bot's, read:organization, the bot in the org


@pytest.fixture
def org(gitea: Gitea, owner: User) -> Org:
    suffix = secrets.token_hex(3)
    name = f"acme-{suffix}"
    gitea.create_org(name, owner.name)
    users = {
        role: gitea.create_user(f"{role}-{suffix}") for role in ("member", "outsider", "stranger", "bot")
    }
    platform, docs, bots = (gitea.create_team(name, team) for team in ("platform", "docs", "bots"))
    gitea.add_team_member(gitea.create_team(name, "secret", "private"), users["member"].name)
    gitea.add_team_member(platform, users["member"].name)
    gitea.add_team_member(docs, users["outsider"].name)
    gitea.add_team_member(bots, users["bot"].name)
    token = gitea.create_token(users["bot"], ["read:organization"])
    return Org(name, users["member"], users["outsider"], users["stranger"], token)


def ask(gitea: Gitea, token: str, author: str, teams: list[str]) -> TeamAnswer:
    checker = TeamChecker(build_team_counter(CollectorRegistry()))
    question = TeamQuestion("gitea", gitea.api, token, author, None)
    return asyncio.run(checker.check(question, teams))


def test_gitea_says_who_is_in_the_team_to_a_token_with_read_organization(gitea: Gitea, org: Org) -> None:
    platform = f"{org.name}/platform"
    assert ask(gitea, org.token, org.member.name, [platform]) == TeamAnswer(member_of=platform)
    assert ask(gitea, org.token, org.member.name.upper(), [f"{org.name}/PLATFORM"]).member_of  # case folds
    assert ask(gitea, org.token, org.outsider.name, [platform]) == TeamAnswer()
    assert ask(gitea, org.token, org.stranger.name, [platform]) == TeamAnswer()
    assert ask(gitea, org.token, "nobody-" + secrets.token_hex(3), [platform]) == TeamAnswer()
    # A team the token cannot see (a typo, or Gitea's default private visibility) fails: nobody is refused
    # in silence for the platform's mistake.
    for hidden in ("no-such-team", "secret"):
        answer = ask(gitea, org.token, org.member.name, [f"{org.name}/{hidden}"])
        assert answer.member_of is None and answer.failed is not None
        assert f"the token sees no team '{hidden}' in organization {org.name}" in answer.failed
    # One team of several is enough.
    assert (
        ask(gitea, org.token, org.outsider.name, [platform, f"{org.name}/docs"]).member_of
        == f"{org.name}/docs"
    )


def test_a_token_without_the_scope_or_outside_the_org_fails_closed(gitea: Gitea, org: Org) -> None:
    platform = f"{org.name}/platform"
    no_scope = gitea.create_token(org.stranger, ["read:repository"])
    answer = ask(gitea, no_scope, org.member.name, [platform])
    assert answer.member_of is None and answer.failed is not None
    assert "refused the token" in answer.failed and "read:organization" in answer.failed
    outside = gitea.create_token(org.stranger, ["read:organization"])
    answer = ask(gitea, outside, org.member.name, [platform])
    assert answer.member_of is None and answer.failed is not None
    assert "Must be an organization member" in answer.failed


@dataclass
class GiteaTrigger(ApiServer):
    """The API server's side in memory: a gitea trigger on `repository` allowing team `team` only."""

    url: str = ""
    repository: str = ""
    team: str = ""
    token: bytes = b""

    def fetch_trigger(self, namespace: str, name: str) -> dict[str, Any] | None:
        body = super().fetch_trigger(namespace, name)
        if body is not None:
            spec = body["spec"]
            spec["forge"].update(url=self.url, tokenSecretRef={"name": "forge-token", "key": "token"})
            spec["repositories"] = [self.repository]
            spec["authors"] = {"teams": [self.team]}
        return body

    def fetch_secret_key(self, namespace: str, name: str, key: str) -> bytes | None:
        return self.token if name == "forge-token" else WEBHOOK_SECRET.encode()


@pytest.fixture
def served(gitea: Gitea, org: Org, owner: User) -> Iterator[tuple[GiteaTrigger, str]]:
    """The receiver on loopback and a repository whose Gitea webhook delivers to it."""
    gitea.create_repo(owner.name, "widgets", {"README.md": "hello\n"})
    repository = f"{owner.name}/widgets"
    api = GiteaTrigger(
        url=gitea.base_url, repository=repository, team=f"{org.name}/platform", token=org.token.encode()
    )
    loop = asyncio.new_event_loop()
    hooks, _ = build_apps(Receiver(kube=api))  # type: ignore[arg-type]
    runner = web.AppRunner(hooks)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    gitea.create_webhook(repository, f"http://127.0.0.1:{port}/hooks/{NS}/{TRIGGER}", WEBHOOK_SECRET)
    try:
        yield api, repository
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


def wait_for_events(
    api: GiteaTrigger, count: int, timeout: float = 30
) -> list[tuple[str, str, str, str | None]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in list(api.events) if e[1] in ("RunCreated", "DeliveryRefused", "TeamsNotChecked")]
        if len(found) >= count:
            return found
        time.sleep(0.2)
    raise AssertionError(f"{count} decided deliveries expected within {timeout}s; got {api.events}")


def test_a_team_members_command_starts_a_run_and_others_start_nothing(
    gitea: Gitea, org: Org, served: tuple[GiteaTrigger, str]
) -> None:
    api, repository = served
    issue = gitea.as_user(org.outsider.name).create_issue(repository, "Greet everyone", "Say hello.")
    number = issue["number"]
    gitea.as_user(org.outsider.name).comment(repository, number, "/agent fix the greeting")
    gitea.as_user(org.stranger.name).comment(repository, number, "/agent delete everything")
    first_two = wait_for_events(api, 2)
    assert [e[1] for e in first_two] == ["DeliveryRefused", "DeliveryRefused"]
    assert api.runs == {}
    gitea.as_user(org.member.name).comment(repository, number, "/agent fix the greeting")
    decided = wait_for_events(api, 3)
    assert decided[2][1] == "RunCreated"
    [made] = api.runs.values()
    assert made["metadata"]["annotations"]["agentharness.dev/forge-repository"] == repository
    assert f"Fix #{number}" in made["spec"]["prompt"]
