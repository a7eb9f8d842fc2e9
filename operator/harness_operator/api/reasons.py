"""Every condition reason the operator and the runner write, with its meaning (pure).

The README's table of conditions and reasons is checked against this table, and a test checks that every
reason literal in the code is listed here.
"""

from __future__ import annotations

# reason -> (condition, status, meaning)
REASONS: dict[str, tuple[str, str, str]] = {
    "ProviderResolved": ("Accepted", "True", "the spec is valid and every provider resolved"),
    "UnknownProvider": ("Accepted", "False", "no HarnessDefinition or ClusterHarnessDefinition of that name"),
    "InvalidProvider": ("Accepted", "False", "the provider's definition does not parse"),
    "InputUnavailable": (
        "Accepted",
        "False",
        "promptFrom/stdinFrom or an input names a ConfigMap or Secret key that is missing or cannot be read, "
        "or a runOutput ConfigMap that run does not own",
    ),
    "RunOutputFailed": (
        "Accepted",
        "False",
        "a run named by runOutput or spec.after ended without success",
    ),
    "UnknownInput": (
        "Accepted",
        "False",
        "spec.prompt or spec.stdin references $(inputs.NAME) for a NAME spec.inputs does not declare",
    ),
    "DependsOnItself": ("Accepted", "False", "spec.after or a runOutput names the run itself"),
    "PromptTooLarge": (
        "Accepted",
        "False",
        "an arg/flag prompt is over the kernel's 131071-byte limit for one argument; use promptMode: stdin",
    ),
    "InvalidArgument": (
        "Accepted",
        "False",
        "a `with` value, prompt or env value has a NUL byte, or an argument is over the kernel's limit",
    ),
    "InvalidSpec": ("Accepted", "False", "`harnessctl run` only: the run cannot be planned"),
    "Pending": ("Succeeded", "Unknown", "the attempt's Job exists; its pod has not started"),
    "Queued": (
        "Succeeded",
        "Unknown",
        "the namespace has its most runs in flight; this one waits its turn (first come, first served)",
    ),
    "WaitingForRunOutput": (
        "Succeeded",
        "Unknown",
        "waiting for a run named by runOutput or spec.after to succeed",
    ),
    "Suspended": ("Succeeded", "Unknown", "the Job waits for Kueue to admit it"),
    "Running": ("Succeeded", "Unknown", "the agent runs"),
    "FallingBack": ("Succeeded", "Unknown", "an attempt failed; the next provider's attempt starts"),
    "Succeeded": ("Succeeded", "True", "an attempt exited 0 and its CLI reported no error"),
    "ProviderFailed": ("Succeeded", "False", "the agent exited non-zero"),
    "ProviderError": ("Succeeded", "False", "the CLI reported an error (or exited 0 without a result)"),
    "AuthFailed": ("Succeeded", "False", "the vendor API refused the credentials"),
    "RateLimited": ("Succeeded", "False", "the vendor API rate-limited the agent"),
    "MaxTurns": ("Succeeded", "False", "the agent reached maxTurns"),
    "PermissionDenied": (
        "Succeeded",
        "False",
        "an ACP agent asked for a permission that spec.acpPermission refused (deny, or no allow-once option)",
    ),
    "Truncated": ("Succeeded", "False", "the model's answer was cut off"),
    "Timeout": ("Succeeded", "False", "timeoutSeconds passed; exit 124, no fallback"),
    "Cancelled": ("Succeeded", "False", "spec.cancel was set; exit 124, no fallback"),
    "CostLimitExceeded": (
        "Succeeded",
        "False",
        "cost crossed maxCostUSD; the agent was stopped, no fallback",
    ),
    "BinaryNotFound": ("Succeeded", "False", "the CLI binary is not in the sandbox image's PATH; exit 1"),
    "CredentialsMissing": (
        "Succeeded",
        "False",
        "a credential grant that is not optional reached the sandbox unset",
    ),
    "SetupFailed": (
        "Succeeded",
        "False",
        "the runner could not prepare or start the attempt (plan, working directory, exec)",
    ),
    "NetworkNotConfined": (
        "Succeeded",
        "False",
        "the sandbox could still reach the API server, which its network policy denies, after "
        "networkPolicy.awaitEnforcementSeconds: the CNI enforces no NetworkPolicy; the agent never "
        "started, no fallback",
    ),
    "OOMKilled": ("Succeeded", "False", "the runner's or the agent's container ran out of memory"),
    "PodFailed": ("Succeeded", "False", "the Job failed without a result from the runner"),
    "ResultContradicted": (
        "Succeeded",
        "False",
        "the runner's report disagrees with what the kubelet recorded of the pod's containers (a success "
        "whose agent container did not exit as the runner saw it exit, or a runner whose exit code is not "
        "its report's)",
    ),
    "ResultUnreadable": (
        "Succeeded",
        "False",
        "the runner's result document is of a newer version than the operator reads, or malformed (exit 1 "
        "unless the container's own, fallback follows)",
    ),
    "JobLost": (
        "Succeeded",
        "False",
        "an attempt's Job or pod vanished mid-run; it is never run again (exit 1, fallback follows)",
    ),
    "ChildConflict": (
        "Succeeded",
        "False",
        "a child's name is taken by an object the run does not own, or with other content; nothing more runs",
    ),
    "Forbidden": (
        "Succeeded",
        "False",
        "the API server refused the operator (403, four times over 7 s); check its RBAC",
    ),
    "InvalidObject": ("Succeeded", "False", "the API server refused an object the operator built (400/422)"),
    "Valid": ("Ready (definitions)", "True", "the definition parses and runs can use its protocol"),
    "InvalidDefinition": (
        "Ready (definitions)",
        "False",
        "the spec does not parse (a rule the CRD schema cannot express); Stalled is True too",
    ),
    "BudgetExhausted": (
        "Succeeded",
        "Unknown",
        "a HarnessBudget covering the run is spent this period: the run waits Queued until it rolls over "
        "(or fails, Succeeded=False, under whenExhausted: Fail)",
    ),
    "CostUnknown": (
        "Event",
        "Warning",
        "an attempt under maxCostUSD ended with costSource unknown: no reported cost, no price for its model",
    ),
}


class ReasonedError(Exception):
    """An error that ends up as a condition: a CamelCase reason and a message for people."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def render_reasons_table() -> str:
    """The README's table, one row per reason."""
    rows = ["| condition | status | reason | meaning |", "|---|---|---|---|"]
    rows += [f"| {c} | {s} | `{r}` | {m} |" for r, (c, s, m) in REASONS.items()]
    return "\n".join(rows)
