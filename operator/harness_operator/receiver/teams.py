"""Whether a delivery's author is in one of a trigger's teams, asked of its forge with the trigger's token
(spec.forge.tokenSecretRef) at delivery time, answers kept a minute (I/O; the questions and what answers
say are core/forge/teams.py's).

Fail closed: an unreachable forge, a refused token or an answer that says neither yes nor no makes a
TeamAnswer with `failed`, on which nothing starts. Only a clear yes or no is kept, for CACHE_SECONDS: a
burst of deliveries (a comment and its edits, redeliveries, several triggers of one org) costs one
question, well inside GitHub's 5,000 calls an hour per token, while someone removed from a team stops
triggering within a minute. Questions about several teams go out together; the first yes decides.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import aiohttp
from prometheus_client import CollectorRegistry, Counter

from harness_operator.core.forge.report_calls import ForgeCall
from harness_operator.core.forge.teams import (
    MembershipAnswer,
    build_membership_call,
    build_team_member_call,
    read_membership_answer,
)
from harness_operator.core.forge.triggering import TeamAnswer

CACHE_SECONDS = 60.0
CACHE_ENTRIES = 4096
# The forge waits about 10 s for the receiver's answer, which also reads and creates on the API server.
CALL_TIMEOUT_SECONDS = 4.0
MAX_ANSWER_BYTES = 256 * 1024
RESULTS = ("member", "not_member", "failed")  # the counter's closed set


def build_team_counter(registry: CollectorRegistry) -> Counter:
    """Team membership questions by forge and result (RESULTS); cached answers are not counted."""
    return Counter(
        "harness_trigger_team_checks",
        "Team membership questions the trigger receiver asked a forge, by forge and result.",
        ["forge", "result"],
        registry=registry,
    )


@dataclass(frozen=True)
class TeamQuestion:
    """Who is asked about, where, with what token (never logged: __repr__ leaves it out)."""

    forge: str
    api_root: str
    token: str
    author: str
    author_id: int | None

    def __repr__(self) -> str:
        return f"TeamQuestion({self.forge} {self.api_root} {self.author})"


class TeamChecker:
    """Asks forges whether authors are in teams; keeps clear answers briefly."""

    def __init__(self, counter: Counter, clock: Callable[[], float] = time.monotonic) -> None:
        self.counter = counter
        self.clock = clock
        self._known: OrderedDict[tuple[str, ...], tuple[bool, float]] = OrderedDict()

    async def check(self, question: TeamQuestion, teams: Sequence[str]) -> TeamAnswer:
        """The first of `teams` the author is in; else, if any question failed, why; else neither."""
        timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            answers = await asyncio.gather(*(self._member(session, question, t) for t in teams))
        member = next((team for team, a in zip(teams, answers, strict=True) if a.member), None)
        if member is not None:
            return TeamAnswer(member_of=member)
        failed = [f"{team}: {a.failed}" for team, a in zip(teams, answers, strict=True) if a.member is None]
        return TeamAnswer(failed="; ".join(failed)[:600]) if failed else TeamAnswer()

    async def _member(self, session: aiohttp.ClientSession, q: TeamQuestion, team: str) -> MembershipAnswer:
        key = (
            q.forge,
            q.api_root,
            hashlib.sha256(q.token.encode()).hexdigest(),
            team.casefold(),
            q.author.casefold(),
            str(q.author_id or ""),
        )
        now = self.clock()
        known = self._known.get(key)
        if known is not None and known[1] > now:
            return MembershipAnswer(known[0])
        call = build_membership_call(q.forge, q.api_root, team, q.author, q.author_id, q.token)
        answer = await _ask(session, q.forge, call, team, search=q.forge == "gitea")
        if answer.team_id is not None:
            call = build_team_member_call(q.api_root, answer.team_id, q.author, q.token)
            answer = await _ask(session, q.forge, call, team)
        result = {True: "member", False: "not_member", None: "failed"}[answer.member]
        self.counter.labels(q.forge, result).inc()
        if answer.member is not None:
            self._known[key] = (answer.member, now + CACHE_SECONDS)
            self._known.move_to_end(key)
            while len(self._known) > CACHE_ENTRIES:
                self._known.popitem(last=False)
        return answer


async def _ask(
    session: aiohttp.ClientSession, forge: str, call: ForgeCall, team: str, *, search: bool = False
) -> MembershipAnswer:
    """One call, no redirect followed (it would carry the token elsewhere), its answer read bounded."""
    try:
        async with session.request(
            call.method, call.url, headers=call.headers, allow_redirects=False
        ) as response:
            body = await response.content.read(MAX_ANSWER_BYTES)
            status = response.status
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        where = call.url.split("?")[0]
        return MembershipAnswer(None, f"{call.method} {where}: {type(exc).__name__}: {exc}"[:300])
    return read_membership_answer(forge, call, team, status, body, search=search)
