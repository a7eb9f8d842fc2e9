"""spec.resumeFrom: the earlier conversation a run continues, and for each attempt whether its CLI
resumes that session or is told it again (a replay of the earlier prompt and output) (pure)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import (
    SESSION_ID_ARG,
    HarnessDefinitionSpec,
    HarnessRun,
    SessionStatus,
)
from harness_operator.core.attempt import Attempt
from harness_operator.core.plan.invocation import join_prompt_and_stdin
from harness_operator.core.resolve.resolution import (
    Reader,
    Rejection,
    Source,
    compose_inputs,
    read_run_output,
    require_succeeded,
    resolve_source,
    taken_secrets,
)

RESUME_FIELD = "spec.resumeFrom.run"
# What a replay shows instead of a Secret's value the earlier prompt took through its inputs: the
# continuing run's author may not read that Secret.
WITHHELD = "[a Secret's value, withheld]"


class SessionReader(Reader, Protocol):
    def session_archive(
        self, run: Mapping[str, Any], session: SessionStatus
    ) -> tuple[bytes | None, str | None]:
        """The run's session archive, checked against `session.sha256`, or why it cannot be had."""


@dataclass(frozen=True)
class Resumption:
    """The conversation to continue: the earlier run's name, prompt and output (for a replay), and its
    session when one can be resumed (provider, id and archive), else why not."""

    run: str
    prompt: str
    output: str
    provider: str | None = None
    session_id: str | None = None
    archive: bytes | None = None
    missing: str | None = None  # why no session can be resumed

    @cached_property
    def archive_sha256(self) -> str:
        """The SHA-256 of the archive, hashed once for all the attempts that resume it."""
        return hashlib.sha256(self.archive or b"").hexdigest()


def resolve_resumption(reader: SessionReader, run: HarnessRun) -> Resumption | None:
    """The conversation spec.resumeFrom names, once that run has succeeded (Waiting until then)."""
    source = run.spec.resume_from
    if source is None:
        return None
    raw = require_succeeded(reader, run, RESUME_FIELD, source.run)
    other = HarnessRun.model_validate(raw)
    check_secrets_named(run, other)
    output = read_run_output(reader, RESUME_FIELD, raw)
    if output is None:
        raise Rejection(
            Reason.InputUnavailable,
            f'{RESUME_FIELD}: HarnessRun "{source.run}" kept no output to continue from',
        )

    def read(field: str, value: Source) -> str:
        if value.secret_key_ref is not None:
            return WITHHELD
        return resolve_source(reader, other, field, value)

    prompt, stdin = compose_inputs(other.spec, read)
    prompt = join_prompt_and_stdin(prompt, stdin or "")
    session = other.status.session if other.status else None
    if session is None:
        return Resumption(source.run, prompt, output, missing="its CLI kept no session")
    archive, why = reader.session_archive(raw, session)
    return Resumption(
        source.run, prompt, output, session.provider, session.session_id, archive, None if archive else why
    )


def check_secrets_named(run: HarnessRun, other: HarnessRun) -> None:
    """Rejection (InputUnavailable) when the earlier run took a value from a Secret this run does not
    name itself: its session and output were made from that value, and only a Secret a run names is
    checked against its author's rights (the admission policy)."""
    named = taken_secrets(run.spec)
    for secret, field in taken_secrets(other.spec).items():
        if secret not in named:
            raise Rejection(
                Reason.InputUnavailable,
                f'{RESUME_FIELD}: HarnessRun "{other.metadata["name"]}" took a value from Secret "{secret}" '
                f"({field}); a run that resumes it must name that Secret itself, so that admission checks "
                f"its author may get it: add spec.inputs: [{{name: earlier, secretKeyRef: {{name: {secret}, "
                "key: KEY}}]",
            )


@dataclass(frozen=True)
class Continuation:
    """How one attempt continues the earlier session: its CLI's arguments (none for an ACP agent, which
    is asked with session/load), the session's id and the SHA-256 of its archive."""

    args: list[str]
    session_id: str
    sha256: str


def compute_continuation(
    resumption: Resumption | None, provider: str, definition: HarnessDefinitionSpec
) -> Continuation | None:
    """How this attempt's CLI continues the earlier session, or None when it cannot (then the attempt
    gets a replay)."""
    if resumption is None or resumption.archive is None or definition.session is None:
        return None
    if resumption.provider != provider or not resumption.session_id:
        return None
    args = [a.replace(SESSION_ID_ARG, resumption.session_id) for a in definition.session.resume_args]
    return Continuation(args, resumption.session_id, resumption.archive_sha256)


def describe_replay(
    resumption: Resumption, index: int, provider: str, definition: HarnessDefinitionSpec
) -> str:
    """Why attempt `index` is told the earlier conversation again instead of resuming it."""
    if definition.session is None:
        why = f'provider "{provider}" cannot resume a session (capabilities.sessionResume)'
    elif resumption.missing is not None:
        why = f'HarnessRun "{resumption.run}" left no session to resume: {resumption.missing}'
    else:
        why = f'its session is provider "{resumption.provider}"\'s, not "{provider}"\'s'
    return (
        f"attempt {index}: {why}; the earlier prompt and output are replayed in front of the prompt, and "
        "their tokens count like any other"
    )


def describe_replays(resumption: Resumption, targets: Sequence[Attempt]) -> list[str]:
    """A line for each provider of the chain that is told the earlier conversation again (its first
    attempt's number), in order."""
    lines, seen = [], set()
    for t in targets:
        if t.position in seen or compute_continuation(resumption, t.provider, t.definition) is not None:
            continue
        seen.add(t.position)
        lines.append(describe_replay(resumption, t.index, t.provider, t.definition))
    return lines


def build_replay_prompt(resumption: Resumption, prompt: str) -> str:
    """The prompt of an attempt told the earlier conversation again."""
    return (
        "This continues an earlier conversation.\n\n"
        f"The earlier request was:\n<earlier-request>\n{resumption.prompt}\n</earlier-request>\n\n"
        f"Your answer was:\n<earlier-answer>\n{resumption.output}\n</earlier-answer>\n\n"
        f"Now:\n{prompt}"
    )
