#!/usr/bin/env python3
"""A scripted ACP agent on the SDK's own agent side (stdio), for the ACP executor's edge cases.

ACP_MODE selects the script:
  ok                 a thought, a tool call, then the answer "answer from acp_agent: <prompt>" in two
                     chunks; cost 0.0123 USD on a usage_update; end_turn with token usage
  argv               answers its own argv after the program name, space-joined
  permission         asks permission for a tool call (allow_once, allow_always, reject_once,
                     reject_always offered) and answers with the outcome it got
  permission-always  the same, but offers only allow_always and reject_always
  permission-kindless
                     announce a shell call (kind execute) in a tool_call update, then ask permission
                     for it without its kind, as Claude's adapter does, and answer with the outcome
  refusal, max_tokens, max_turn_requests, cancelled-by-itself
                     answer a chunk, then end with that stop reason
  hang               answer nothing until session/cancel, then stop with `cancelled`
  deaf               ignore session/cancel too; if ACP_PIDFILE is set, it gets "<pid> <child pid>" of a
                     child it leaves
  expensive          report cost 5 USD, then hang like `hang`
  disconnect         send one chunk, then exit 0 mid-turn
  malformed          write a line that is not JSON before the answer, then answer as ok
  tokens             answer as ok, but report no cost: only the token usage at end_turn
  invalid-answer     answer session/prompt with a result that has no stopReason
  secret             put $FAKE_TOKEN in the answer and on stderr
  session            offers session/load: each session's prompts are kept in $HOME/.acp-agent/<id>; a
                     loaded session is replayed (a user and an agent chunk) and the answer names the
                     earlier prompts: "answer from acp_agent: <prompt>; earlier: <prompts or none>";
                     it does not exit when its stdin closes (as Claude's and Codex's adapters)
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from typing import Any

from acp import (
    PROTOCOL_VERSION,
    Agent,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    run_agent,
    update_agent_message_text,
    update_agent_thought_text,
    update_user_message_text,
)
from acp.interfaces import Client
from acp.schema import (
    AgentCapabilities,
    Cost,
    Implementation,
    PermissionOption,
    ToolCallStart,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)

MODE = os.environ.get("ACP_MODE", "ok")
ALL_OPTIONS = [
    PermissionOption(option_id="yes-once", name="Allow once", kind="allow_once"),
    PermissionOption(option_id="yes-always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="no-once", name="Reject", kind="reject_once"),
    PermissionOption(option_id="no-always", name="Always reject", kind="reject_always"),
]


def session_file(session_id: str) -> str:
    return os.path.join(os.environ["HOME"], ".acp-agent", session_id)


class ScriptedAgent(Agent):
    def __init__(self, mode: str = MODE) -> None:
        self.mode = mode
        self.client: Client | None = None
        self.cancelled = asyncio.Event()
        self.earlier: list[str] = []  # a loaded session's prompts

    def on_connect(self, conn: Client) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(load_session=self.mode == "session"),
            agent_info=Implementation(name="acp-agent", version="9.8.7"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        return NewSessionResponse(session_id=f"scripted-{os.getpid()}")

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        assert self.client is not None
        try:
            with open(session_file(session_id)) as fh:
                self.earlier = fh.read().splitlines()
        except FileNotFoundError:
            raise RequestError.invalid_params({"sessionId": f"no session {session_id}"}) from None
        await self.client.session_update(session_id, update_user_message_text(self.earlier[-1]))
        await self.say(session_id, "the earlier answer")
        return LoadSessionResponse()

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self.cancelled.set()

    async def say(self, session_id: str, text: str) -> None:
        assert self.client is not None
        await self.client.session_update(session_id=session_id, update=update_agent_message_text(text))

    async def prompt(self, prompt: list[Any], session_id: str, **kwargs: Any) -> PromptResponse | Any:
        assert self.client is not None
        text = "".join(getattr(block, "text", "") for block in prompt)
        if self.mode in ("ok", "malformed", "tokens"):
            if self.mode == "malformed":
                os.write(1, b"this is not json\n")
            await self.client.session_update(session_id, update_agent_thought_text("thinking hard"))
            await self.client.session_update(
                session_id,
                ToolCallStart(
                    session_update="tool_call", tool_call_id="t1", title="Read file", status="pending"
                ),
            )
            await self.say(session_id, "answer from acp_agent: ")
            await self.say(session_id, text)
            cost = None if self.mode == "tokens" else Cost(amount=0.0123, currency="USD")
            await self.client.session_update(
                session_id, UsageUpdate(session_update="usage_update", used=10, size=1000, cost=cost)
            )
            usage = Usage(
                total_tokens=175,
                input_tokens=100,
                output_tokens=50,
                cached_read_tokens=20,
                cached_write_tokens=5,
            )
            return PromptResponse(stop_reason="end_turn", usage=usage)
        if self.mode == "session":
            os.makedirs(os.path.dirname(session_file(session_id)), exist_ok=True)
            with open(session_file(session_id), "a") as fh:
                fh.write(text + "\n")
            await self.say(
                session_id, f"answer from acp_agent: {text}; earlier: {', '.join(self.earlier) or 'none'}"
            )
            return PromptResponse(stop_reason="end_turn")
        if self.mode == "argv":
            await self.say(session_id, " ".join(sys.argv[1:]))
            return PromptResponse(stop_reason="end_turn")
        if self.mode in ("permission", "permission-always", "permission-kindless"):
            options = ALL_OPTIONS if self.mode != "permission-always" else [ALL_OPTIONS[1], ALL_OPTIONS[3]]
            call = ToolCallUpdate(tool_call_id="t2", title="Write notes.txt", kind="edit")
            if self.mode == "permission-kindless":
                start = ToolCallStart(
                    session_update="tool_call", tool_call_id="t3", title="Run printf", kind="execute"
                )
                await self.client.session_update(session_id, start)
                call = ToolCallUpdate(tool_call_id="t3", title="Run printf")
            answer = await self.client.request_permission(
                session_id=session_id, tool_call=call, options=options
            )
            outcome = answer.outcome
            picked = getattr(outcome, "option_id", outcome.outcome)
            print(f"acp_agent: permission outcome: {picked}", file=sys.stderr, flush=True)
            await self.say(session_id, f"permission outcome: {picked}")
            return PromptResponse(stop_reason="end_turn")
        if self.mode in ("refusal", "max_tokens", "max_turn_requests"):
            await self.say(session_id, "partial")
            return PromptResponse(stop_reason=self.mode)
        if self.mode == "cancelled-by-itself":
            return PromptResponse(stop_reason="cancelled")
        if self.mode in ("hang", "expensive"):
            if self.mode == "expensive":
                await self.client.session_update(
                    session_id,
                    UsageUpdate(
                        session_update="usage_update",
                        used=10,
                        size=1000,
                        cost=Cost(amount=5.0, currency="USD"),
                    ),
                )
            print("acp_agent: in the turn", file=sys.stderr, flush=True)
            await self.cancelled.wait()
            return PromptResponse(stop_reason="cancelled")
        if self.mode == "deaf":
            if "ACP_PIDFILE" in os.environ:
                child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
                with open(os.environ["ACP_PIDFILE"], "w") as fh:
                    fh.write(f"{os.getpid()} {child.pid}\n")
            await asyncio.sleep(600)
        if self.mode == "disconnect":
            await self.say(session_id, "half an answ")
            await asyncio.sleep(0.2)  # let the chunk reach the client
            os._exit(0)
        if self.mode == "invalid-answer":
            return {"notAStopReason": True}
        if self.mode == "secret":
            token = os.environ.get("FAKE_TOKEN", "")
            print(f"stderr has {token}", file=sys.stderr, flush=True)
            await self.say(session_id, f"the token is {token}")
            return PromptResponse(stop_reason="end_turn")
        raise ValueError(f"unknown ACP_self.mode {self.mode}")


if __name__ == "__main__":
    asyncio.run(run_agent(ScriptedAgent()))
    if MODE == "session":  # as Claude's and Codex's adapters: still running when its stdin has closed
        time.sleep(600)
