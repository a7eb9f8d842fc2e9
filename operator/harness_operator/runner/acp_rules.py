"""ACP decisions that need no connection: permission choice, stop reasons, usage (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from harness_operator.api.v1alpha1 import ToolPolicy
from harness_operator.runner.parsers import Failure

# Stop reasons other than end_turn, as the reasons CLI runs use ("cancelled" only follows our cancel).
STOP_FAILURES: dict[str, tuple[str, str]] = {
    "max_tokens": (Failure.truncated.value, "the agent stopped at its token limit (stopReason max_tokens)"),
    "max_turn_requests": (
        Failure.max_turns.value,
        "the agent hit its turn limit (stopReason max_turn_requests)",
    ),
    "refusal": (Failure.provider_error.value, "the agent refused the prompt (stopReason refusal)"),
    "cancelled": (
        Failure.provider_error.value,
        "the agent cancelled the turn by itself (stopReason cancelled)",
    ),
}


@dataclass(frozen=True)
class OfferedOption:
    """One option of a permission request: its id and kind (allow_once, allow_always, reject_once,
    reject_always)."""

    option_id: str
    kind: str


@dataclass(frozen=True)
class PermissionChoice:
    """The option picked (None: answer `cancelled`, nothing fit) and whether it allows the tool."""

    option_id: str | None
    allowed: bool


def choose_permission(policy: str, options: Sequence[OfferedOption]) -> PermissionChoice:
    """`allow` picks an allow-once option only, never a persistent one; `deny`, or `allow` with no
    allow-once offered, picks a reject option (once before always)."""
    if policy == "allow":
        for option in options:
            if option.kind == "allow_once":
                return PermissionChoice(option.option_id, True)
    for kind in ("reject_once", "reject_always"):
        for option in options:
            if option.kind == kind:
                return PermissionChoice(option.option_id, False)
    return PermissionChoice(None, False)


# ACP tool kinds that a policy switch covers.
KIND_SWITCHES = {"edit": "edits", "delete": "edits", "move": "edits", "execute": "shell", "fetch": "network"}


def is_tool_allowed(policy: ToolPolicy, kind: str | None, title: str | None) -> bool:
    """Whether spec.tools lets an ACP agent run a tool call of `kind` titled `title`: the deny list and
    the false switches refuse (a call of no known kind, or of kind `other`, under any false switch too:
    it cannot be shown not to be what the switch refuses), then an allow list admits only what it names
    (its kind or its title)."""
    names = {name for name in (kind, title) if name}
    if names & set(policy.deny):
        return False
    switches = set(KIND_SWITCHES.values())
    if kind in (None, "other") and any(getattr(policy, s) is False for s in switches):
        return False
    switch = KIND_SWITCHES.get(kind or "")
    if switch is not None and getattr(policy, switch) is False:
        return False
    return policy.allow is None or bool(names & set(policy.allow))


def stop_outcome(stop_reason: str) -> tuple[str, str] | None:
    """None for end_turn (the only success), else (reason, message)."""
    if stop_reason == "end_turn":
        return None
    return STOP_FAILURES.get(
        stop_reason, (Failure.provider_error.value, f"unknown stopReason {stop_reason!r}")
    )
