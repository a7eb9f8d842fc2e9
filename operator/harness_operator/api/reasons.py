"""Every condition reason the operator and the runner write, with its meaning (pure).

The README's table of conditions and reasons is checked against this table, and a test checks that every
reason literal in the code is listed here.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Every reason a condition, a result or an Event of ours carries."""

    ProviderResolved = "ProviderResolved"
    UnknownProvider = "UnknownProvider"
    InvalidProvider = "InvalidProvider"
    InputUnavailable = "InputUnavailable"
    RunOutputFailed = "RunOutputFailed"
    UnknownInput = "UnknownInput"
    DependsOnItself = "DependsOnItself"
    PromptTooLarge = "PromptTooLarge"
    PlanTooLarge = "PlanTooLarge"
    InvalidArgument = "InvalidArgument"
    InvalidSpec = "InvalidSpec"
    Pending = "Pending"
    Queued = "Queued"
    WaitingForRunOutput = "WaitingForRunOutput"
    Suspended = "Suspended"
    QueueUnavailable = "QueueUnavailable"
    Running = "Running"
    FallingBack = "FallingBack"
    Retrying = "Retrying"
    Succeeded = "Succeeded"
    ProviderFailed = "ProviderFailed"
    ProviderError = "ProviderError"
    AuthFailed = "AuthFailed"
    RateLimited = "RateLimited"
    ProviderUnavailable = "ProviderUnavailable"
    MaxTurns = "MaxTurns"
    PermissionDenied = "PermissionDenied"
    Truncated = "Truncated"
    Timeout = "Timeout"
    Cancelled = "Cancelled"
    CostLimitExceeded = "CostLimitExceeded"
    BinaryNotFound = "BinaryNotFound"
    CredentialsMissing = "CredentialsMissing"
    SetupFailed = "SetupFailed"
    NetworkNotConfined = "NetworkNotConfined"
    OOMKilled = "OOMKilled"
    PodFailed = "PodFailed"
    ResultContradicted = "ResultContradicted"
    ResultUnreadable = "ResultUnreadable"
    JobLost = "JobLost"
    Preempted = "Preempted"
    ChildConflict = "ChildConflict"
    Forbidden = "Forbidden"
    InvalidObject = "InvalidObject"
    Valid = "Valid"
    Scheduled = "Scheduled"
    InvalidSchedule = "InvalidSchedule"
    MissedSchedule = "MissedSchedule"
    RunAlreadyActive = "RunAlreadyActive"
    RunCreated = "RunCreated"
    RunNameTaken = "RunNameTaken"
    InvalidPipeline = "InvalidPipeline"
    StepFailed = "StepFailed"
    InvalidDefinition = "InvalidDefinition"
    BudgetExhausted = "BudgetExhausted"
    CostUnknown = "CostUnknown"
    OutputInvalid = "OutputInvalid"
    OutputUnavailable = "OutputUnavailable"
    EgressNotEnforcedByName = "EgressNotEnforcedByName"
    ModelKeyInSandbox = "ModelKeyInSandbox"
    GatewayNotOnWorker = "GatewayNotOnWorker"
    UnknownOption = "UnknownOption"
    ToolPolicyUnenforceable = "ToolPolicyUnenforceable"
    ToolPolicyConflict = "ToolPolicyConflict"
    ToolPolicyNotEnforced = "ToolPolicyNotEnforced"
    ToolDenied = "ToolDenied"
    McpUnsupported = "McpUnsupported"
    SessionReplayed = "SessionReplayed"
    UsageMismatch = "UsageMismatch"
    NoImage = "NoImage"
    MeterLost = "MeterLost"
    ChangesUnavailable = "ChangesUnavailable"
    WorkspaceNotGit = "WorkspaceNotGit"
    ChangeHoldsCredential = "ChangeHoldsCredential"
    ChangeTouchesSubmodule = "ChangeTouchesSubmodule"
    ChangeHoldsSecret = "ChangeHoldsSecret"
    SecretScanFailed = "SecretScanFailed"
    ChangeTouchesProtectedPath = "ChangeTouchesProtectedPath"
    ChangeLinksOutOfTree = "ChangeLinksOutOfTree"
    PatchTooLarge = "PatchTooLarge"
    PushRejected = "PushRejected"
    SigningFailed = "SigningFailed"
    BranchMoved = "BranchMoved"
    PullRequestFailed = "PullRequestFailed"
    PublishLost = "PublishLost"
    AwaitingApproval = "AwaitingApproval"
    Approved = "Approved"
    Rejected = "Rejected"
    Publishing = "Publishing"
    ApprovalRejected = "ApprovalRejected"
    ApprovalTimedOut = "ApprovalTimedOut"
    KeptChangeMismatch = "KeptChangeMismatch"
    ForgeReportFailed = "ForgeReportFailed"
    Updated = "Updated"


# reason -> (condition, status, meaning)
REASONS: dict[Reason, tuple[str, str, str]] = {
    Reason.ProviderResolved: ("Accepted", "True", "the spec is valid and every provider resolved"),
    Reason.UnknownProvider: (
        "Accepted",
        "False",
        "no HarnessDefinition or ClusterHarnessDefinition of that name",
    ),
    Reason.InvalidProvider: ("Accepted", "False", "the provider's definition does not parse"),
    Reason.InputUnavailable: (
        "Accepted",
        "False",
        "promptFrom/stdinFrom or an input names a ConfigMap or Secret key that is missing or cannot be read, "
        "or a runOutput ConfigMap that run does not own",
    ),
    Reason.RunOutputFailed: (
        "Accepted",
        "False",
        "a run named by runOutput, spec.after or workspace.from ended without success",
    ),
    Reason.UnknownInput: (
        "Accepted",
        "False",
        "spec.prompt or spec.stdin references $(inputs.NAME) for a NAME spec.inputs does not declare",
    ),
    Reason.DependsOnItself: ("Accepted", "False", "spec.after or a runOutput names the run itself"),
    Reason.PromptTooLarge: (
        "Accepted",
        "False",
        "an arg/flag prompt is over the kernel's 131071-byte limit for one argument; use promptMode: stdin",
    ),
    Reason.PlanTooLarge: (
        "Accepted",
        "False",
        "the attempts' plans (each with the prompt and stdin, one per fallback and retry) are more than "
        "the plan Secret holds",
    ),
    Reason.InvalidArgument: (
        "Accepted",
        "False",
        "a `with` value, prompt or env value has a NUL byte, or an argument is over the kernel's limit",
    ),
    Reason.InvalidSpec: ("Accepted", "False", "`harnessctl run` only: the run cannot be planned"),
    Reason.Pending: (
        "Succeeded",
        "Unknown",
        "the attempt's Job exists; its pod has not started. A pod the scheduler cannot place, or whose "
        "container cannot start (ErrImagePull, ImagePullBackOff, CreateContainerConfigError), says why in "
        "the message (`the scheduler cannot place pod ... (Unschedulable): 0/1 nodes are available: 1 "
        "Insufficient cpu.`)",
    ),
    Reason.Queued: (
        "Succeeded",
        "Unknown",
        "the namespace has its most runs in flight; this one waits its turn (first come, first served)",
    ),
    Reason.WaitingForRunOutput: (
        "Succeeded",
        "Unknown",
        "waiting for a run named by runOutput, spec.after or workspace.from to succeed",
    ),
    Reason.Suspended: (
        "Succeeded",
        "Unknown",
        "Kueue holds the Job and has said why: the message gives Kueue's reason (LocalQueue, ClusterQueue, "
        "the quota short, the admission checks not ready); until Kueue says why, the run is Pending",
    ),
    Reason.QueueUnavailable: (
        "Succeeded",
        "False",
        "the run's Kueue queue cannot run it: the cluster serves no Kueue API (its Job would wait suspended "
        "forever), or MultiKueue dispatched it to a worker cluster the operator has no kubeconfig for "
        "(multiKueue.workers); no fallback follows",
    ),
    Reason.Running: ("Succeeded", "Unknown", "the agent runs"),
    Reason.FallingBack: ("Succeeded", "Unknown", "an attempt failed; the next provider's attempt starts"),
    Reason.Retrying: (
        "Succeeded",
        "Unknown",
        "an attempt failed in a way spec.retry retries (retryOn, exitCodes); the same provider's next "
        "attempt starts after its backoff",
    ),
    Reason.Succeeded: ("Succeeded", "True", "an attempt exited 0 and its CLI reported no error"),
    Reason.ProviderFailed: ("Succeeded", "False", "the agent exited non-zero"),
    Reason.ProviderError: ("Succeeded", "False", "the CLI reported an error (or exited 0 without a result)"),
    Reason.AuthFailed: ("Succeeded", "False", "the vendor API refused the credentials"),
    Reason.RateLimited: ("Succeeded", "False", "the vendor API rate-limited the agent"),
    Reason.ProviderUnavailable: (
        "Succeeded",
        "False",
        "the vendor API was overloaded or unavailable (HTTP 500, 502, 503, 504 or 529), or a destination the "
        "agent needs did not answer before it started (named)",
    ),
    Reason.MaxTurns: ("Succeeded", "False", "the agent reached maxTurns"),
    Reason.PermissionDenied: (
        "Succeeded",
        "False",
        "an ACP agent asked for a permission that spec.acpPermission refused (deny, or no allow-once option)",
    ),
    Reason.Truncated: ("Succeeded", "False", "the model's answer was cut off"),
    Reason.Timeout: ("Succeeded", "False", "timeoutSeconds passed; exit 124, no fallback"),
    Reason.Cancelled: ("Succeeded", "False", "spec.cancel was set; exit 124, no fallback"),
    Reason.CostLimitExceeded: (
        "Succeeded",
        "False",
        "cost crossed maxCostUSD; the agent was stopped, no fallback. When the model gateway refused a "
        "request at a cap, the message names the one cap (limits.maxCostUSD, limits.maxTokens or a "
        "HarnessBudget's reservation), what the run spent, what was left and the fix",
    ),
    Reason.BinaryNotFound: (
        "Succeeded",
        "False",
        "the CLI binary is not in the sandbox image's PATH; exit 1",
    ),
    Reason.CredentialsMissing: (
        "Succeeded",
        "False",
        "a credential grant that is not optional reached the sandbox unset",
    ),
    Reason.SetupFailed: (
        "Succeeded",
        "False",
        "the runner could not prepare or start the attempt (plan, working directory, exec)",
    ),
    Reason.NetworkNotConfined: (
        "Succeeded",
        "False",
        "the sandbox could still reach the API server, which its network policy denies, after "
        "networkPolicy.awaitEnforcementSeconds: the CNI enforces no NetworkPolicy; the agent never "
        "started, no fallback",
    ),
    Reason.OOMKilled: ("Succeeded", "False", "the runner's or the agent's container ran out of memory"),
    Reason.PodFailed: ("Succeeded", "False", "the Job failed without a result from the runner"),
    Reason.ResultContradicted: (
        "Succeeded",
        "False",
        "the runner's report disagrees with what the kubelet recorded of the pod's containers (a success "
        "whose agent container did not exit as the runner saw it exit, or a runner whose exit code is not "
        "its report's)",
    ),
    Reason.ResultUnreadable: (
        "Succeeded",
        "False",
        "the runner's result document is of a newer version than the operator reads, or malformed (exit 1 "
        "unless the container's own, fallback follows)",
    ),
    Reason.JobLost: (
        "Succeeded",
        "False",
        "an attempt's Job or pod vanished mid-run; it is never run again (exit 1, fallback follows)",
    ),
    Reason.Preempted: (
        "Succeeded",
        "False",
        "Kueue took an attempt's Job back after its pod started (preempted or evicted); its Job is deleted "
        "and the attempt is never run again (exit 1, a retry or fallback follows)",
    ),
    Reason.ChildConflict: (
        "Succeeded",
        "False",
        "a child's name is taken by an object the run does not own, or with other content; nothing more runs",
    ),
    Reason.Forbidden: (
        "Succeeded",
        "False",
        "the API server refused the operator (403, four times over 7 s); check its RBAC",
    ),
    Reason.InvalidObject: (
        "Succeeded",
        "False",
        "the API server refused an object the operator built (400/422)",
    ),
    Reason.Valid: ("Ready (definitions)", "True", "the definition parses and runs can use its protocol"),
    Reason.Scheduled: (
        "Ready (schedules)",
        "True",
        "the schedule and its time zone parse; runs are created on it",
    ),
    Reason.InvalidSchedule: (
        "Ready (schedules)",
        "False",
        "spec.schedule is not five cron fields or a descriptor, or spec.timeZone is not an IANA zone",
    ),
    Reason.MissedSchedule: (
        "Event (schedules)",
        "Warning",
        "a scheduled time passed more than startingDeadlineSeconds ago (operator down, or Forbid waited); "
        "its run is not created",
    ),
    Reason.RunAlreadyActive: (
        "Event (schedules)",
        "Normal",
        "concurrencyPolicy Forbid: the scheduled time waits for the schedule's unfinished run",
    ),
    Reason.RunCreated: (
        "Event (schedules, pipelines)",
        "Normal",
        "the schedule created its run for a scheduled time; the pipeline created a step's run",
    ),
    Reason.RunNameTaken: (
        "Event (schedules)",
        "Warning",
        "the name of a scheduled time's run is held by a run the schedule does not own; that time is "
        "skipped, the run is never adopted",
    ),
    Reason.InvalidPipeline: (
        "Succeeded (pipelines)",
        "False",
        "a step runs after itself, fans out to more than 16 runs, or references a step it does not run after "
        "or a matrix axis it does not have; the message names each field and the fix",
    ),
    Reason.StepFailed: (
        "Succeeded (pipelines)",
        "False",
        "a step's run failed, or the API server refused it (the step's message says why); the steps after "
        "it were skipped unless it has continueOn.failure",
    ),
    Reason.InvalidDefinition: (
        "Ready (definitions)",
        "False",
        "the spec does not parse (a rule the CRD schema cannot express); Stalled is True too",
    ),
    Reason.BudgetExhausted: (
        "Succeeded",
        "Unknown",
        "a HarnessBudget covering the run is spent this period: the run waits Queued until it rolls over "
        "(or fails, Succeeded=False, under whenExhausted: Fail)",
    ),
    Reason.CostUnknown: (
        "Event",
        "Warning",
        "an attempt under maxCostUSD ended with costSource unknown: no reported cost, no price for its model",
    ),
    Reason.OutputInvalid: (
        "Succeeded",
        "False",
        "spec.outputSchema: the agent succeeded but its output is not one JSON value matching the schema; "
        "the message names the failing path and keyword, never the output (kept in the output ConfigMap)",
    ),
    Reason.OutputUnavailable: (
        "Event",
        "Warning",
        "a succeeded attempt's output frame could not be read from its log (after four tries): the run keeps "
        "its result, without its output",
    ),
    Reason.EgressNotEnforcedByName: (
        "Event",
        "Warning",
        "an attempt's host egress rules are not enforced by name: no egress gateway and no Cilium",
    ),
    Reason.ModelKeyInSandbox: (
        "Event",
        "Warning",
        "an attempt is not routed through the model gateway (its CLI cannot be, or the run sets the route's "
        "variables itself): its vendor key is in the sandbox and its usage is the sandbox's word",
    ),
    Reason.GatewayNotOnWorker: (
        "Event",
        "Warning",
        "an attempt MultiKueue dispatched to a worker cluster is routed through the model gateway or the "
        "egress gateway, Services of this cluster that its pod there reaches only where the platform makes "
        "them reachable",
    ),
    Reason.UnknownOption: (
        "Event",
        "Warning",
        "an attempt's options hold a key its definition's knownOptions lack: the CLI will likely refuse it",
    ),
    Reason.ToolPolicyUnenforceable: (
        "Accepted",
        "False",
        "spec.tools is strict and a provider's CLI cannot enforce a part of it (its definition's "
        "toolControls, or an ACP agent without permissionHooks)",
    ),
    Reason.ToolPolicyConflict: (
        "Accepted",
        "False",
        "an attempt's `with` sets an option that would loosen the tool policy (the definition's "
        "toolControls guard it)",
    ),
    Reason.ToolPolicyNotEnforced: (
        "Event",
        "Warning",
        "spec.tools is advisory and the attempt's CLI cannot enforce a part of it: that part is not held",
    ),
    Reason.ToolDenied: (
        "Event",
        "Warning",
        "the agent asked for tools its tool policy refused; they did not run (status.attempts[].deniedTools)",
    ),
    Reason.McpUnsupported: (
        "Accepted",
        "False",
        "the run attaches MCP servers a provider's CLI cannot take (its definition has no spec.mcp, or a "
        "header the CLI cannot send)",
    ),
    Reason.SessionReplayed: (
        "Event",
        "Warning",
        "spec.resumeFrom: an attempt cannot resume the earlier session (its CLI cannot, another provider's, "
        "or none kept), so the earlier prompt and output are replayed in its prompt",
    ),
    Reason.UsageMismatch: (
        "Event",
        "Warning",
        "the usage the sandbox reported differs from what the model gateway metered (which counts)",
    ),
    Reason.NoImage: (
        "Ready",
        "False",
        "a built-in no sandbox image ships: its runs end BinaryNotFound unless they name an image with "
        "the CLI",
    ),
    Reason.MeterLost: (
        "Event",
        "Warning",
        "the model gateway's store lost its meters during the attempt: its usage is what the sandbox "
        "reported",
    ),
    Reason.ChangesUnavailable: (
        "Accepted",
        "False",
        "workspace.from names a run that published no change of this run's repository",
    ),
    Reason.WorkspaceNotGit: (
        "Succeeded",
        "False",
        "the agent succeeded but its working directory is no longer the cloned repository (replaced, or a "
        "link): no change is taken",
    ),
    Reason.ChangeHoldsCredential: (
        "Succeeded",
        "False",
        "the agent's change holds the value of a granted credential: nothing is kept, pushed or opened",
    ),
    Reason.ChangeTouchesSubmodule: (
        "Succeeded",
        "False",
        "the agent's change reaches into a nested repository (a submodule it changed, replaced or added, or "
        "a folder holding .git): nothing is kept, pushed or opened",
    ),
    Reason.ChangeHoldsSecret: (
        "Succeeded",
        "False",
        "the secret scanner (gitleaks) found a secret in a line the agent's change adds, which the platform "
        "does not allow (publishing.secretScan.allow): nothing is kept, pushed or opened",
    ),
    Reason.SecretScanFailed: (
        "Succeeded",
        "False",
        "the publisher could not scan the agent's change for secrets (no gitleaks in the image, a failure, "
        "out of time): nothing unscanned is kept, pushed or opened",
    ),
    Reason.ChangeTouchesProtectedPath: (
        "Succeeded",
        "False",
        "the agent's change touches a path the publish policy refuses (CI configuration, CODEOWNERS, agent "
        "instruction files by default; the chart's publishing.protectedPaths, the namespace's, the run's): "
        "its patch is kept, nothing is pushed or opened",
    ),
    Reason.ChangeLinksOutOfTree: (
        "Succeeded",
        "False",
        "the agent's change adds or edits a symbolic link whose target is outside the repository (absolute, "
        "or .. past its root): nothing is kept, pushed or opened",
    ),
    Reason.PatchTooLarge: (
        "Succeeded",
        "False",
        "the patch is larger than a ConfigMap holds and no branch was asked for to keep it",
    ),
    Reason.PushRejected: ("Succeeded", "False", "the origin refused the push of the run's branch"),
    Reason.SigningFailed: (
        "Succeeded",
        "False",
        "the publisher could not sign the commit with the platform's SSH key (publishing.signing): nothing "
        "is pushed or opened",
    ),
    Reason.BranchMoved: (
        "Succeeded",
        "False",
        "publish.branch.ifExists FastForward: the branch moved on the origin (a push, or deleted) after the "
        "workspace cloned it, so nothing is pushed (never forced); the patch is kept when it fits",
    ),
    Reason.PullRequestFailed: ("Succeeded", "False", "the forge's API refused to open the pull request"),
    Reason.PublishLost: (
        "Succeeded",
        "False",
        "the publishing container ended without a report (stopped at the pod's grace period, or killed)",
    ),
    Reason.AwaitingApproval: (
        "Succeeded",
        "Unknown",
        "the agent succeeded and its change is kept (status.changes, its patch in the changes ConfigMap); "
        "no pod runs while a person decides (`harnessctl approve` or `reject`); also the AwaitingApproval "
        "condition's reason while it is True",
    ),
    Reason.Approved: (
        "AwaitingApproval",
        "False",
        "an approver approved the change (status.approval: who, when); also the Normal Event then",
    ),
    Reason.Rejected: ("Event", "Warning", "an approver rejected the change (the run ends ApprovalRejected)"),
    Reason.Publishing: (
        "Succeeded",
        "Unknown",
        "the change was approved: a pod of its own (the publisher, no agent) pushes it and opens the pull "
        "request",
    ),
    Reason.ApprovalRejected: (
        "Succeeded",
        "False",
        "an approver rejected the change: nothing is pushed or opened (status.approval: who, when, why)",
    ),
    Reason.ApprovalTimedOut: (
        "Succeeded",
        "False",
        "nobody decided before workspace.publish.approval.timeout: nothing is pushed or opened",
    ),
    Reason.KeptChangeMismatch: (
        "Succeeded",
        "False",
        "the approved change's publisher found the kept patch edited, missing, or not giving the approved "
        "tree: nothing is pushed",
    ),
    Reason.ForgeReportFailed: (
        "Event",
        "Warning",
        "a trigger's run could not be reported on the forge (its trigger, token Secret or the forge's API): "
        "the run goes on, unreported",
    ),
    Reason.Updated: ("Event", "Normal", "the run's status changed without a reason of its own"),
}


class ReasonedError(Exception):
    """An error that ends up as a condition: a CamelCase reason and a message for people."""

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def render_reasons_table() -> str:
    """The README's table, one row per reason."""
    rows = ["| condition | status | reason | meaning |", "|---|---|---|---|"]
    rows += [f"| {c} | {s} | `{r}` | {m} |" for r, (c, s, m) in REASONS.items()]
    return "\n".join(rows)
