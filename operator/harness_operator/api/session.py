"""Conversations that go on: a run continuing an earlier run's session (spec.resumeFrom), how a CLI keeps
and resumes its sessions (a definition's spec.session), and where a run's session is kept
(status.session)."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from harness_operator.api.common import Model, object_name, rule, validations
from harness_operator.api.sizes import SESSION_ARCHIVE_MAX_BYTES

# What stands for the earlier session's id in a definition's resumeArgs.
SESSION_ID_ARG = "$(HARNESS_SESSION_ID)"

SessionPath = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        json_schema_extra=validations(
            rule(
                "!self.startsWith('/') && !self.contains('..')",
                "session paths are relative to the agent's home, without '..'",
            )
        ),
    ),
]


class ResumeFrom(Model):
    """The earlier run whose conversation this one continues."""

    run: str = Field(
        min_length=1,
        max_length=253,
        description="A HarnessRun of this namespace; this run waits until it has succeeded. An attempt whose "
        "provider is that run's, and whose CLI can resume (capabilities.sessionResume), continues its "
        "session; any other gets the earlier prompt and output in front of its own (a Warning Event "
        "SessionReplayed says so).",
        json_schema_extra=object_name("HarnessRun"),
    )


class SessionSpec(Model):
    """Where the CLI keeps a conversation and how it continues one by id (capabilities.sessionResume): its
    resumeArgs, or for an ACP agent session/load."""

    paths: list[SessionPath] = Field(
        min_length=1,
        max_length=8,
        description="Files or folders under the agent's home that hold the CLI's sessions: kept (at most "
        f"{SESSION_ARCHIVE_MAX_BYTES} bytes compressed) after a successful attempt and restored before a "
        "continuing one.",
    )
    resume_args: list[str] = Field(
        default_factory=list,
        max_length=8,
        description=f"Arguments after prefixArgs that continue a session; {SESSION_ID_ARG} stands for its id "
        "(e.g. --resume $(HARNESS_SESSION_ID)). Protocol cli only: an ACP agent is asked with "
        "session/load.",
    )

    cumulative_usage: bool = Field(
        default=False,
        description="A resumed session's reported tokens are the whole session's, not the attempt's (Codex, "
        "Qwen Code): the runner then keeps none of them (the model gateway meters a routed attempt). A "
        "resumed attempt's reported cost is never kept: CLIs report the session's.",
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                f"!has(self.resumeArgs) || size(self.resumeArgs) == 0 || "
                f"self.resumeArgs.exists(a, a.contains('{SESSION_ID_ARG}'))",
                f"spec.session.resumeArgs must name the session, as {SESSION_ID_ARG}",
                field_path=".resumeArgs",
            )
        )
    )


class SessionStatus(Model):
    """The conversation a later run can continue: the successful attempt's session, whose files stay in
    its pod's log as long as the pod does (the run's Jobs and pods go with it)."""

    attempt: int = Field(description="The attempt whose session it is.")
    provider: str = Field(description="Its provider.")
    session_id: str = Field(alias="sessionID", description="The session id its CLI reported.")
    bytes: int = Field(description="Size of its files' archive, framed in the attempt's pod log.")
    sha256: str = Field(description="SHA-256 of that archive.")
