"""The agentharness.dev/v1alpha1 API as pydantic models: the single source of truth (pure), one module per
kind (common.py holds the shared pieces), re-exported here.

Field descriptions feed `kubectl explain`; `x-kubernetes-validations` attached here become CEL rules in
the generated CRDs (api/crd.py) and are evaluated offline by `harnessctl validate` (cel.py).
"""

from __future__ import annotations

from harness_operator.api.budget import (
    BudgetLimits as BudgetLimits,
)
from harness_operator.api.budget import (
    BudgetPeriod as BudgetPeriod,
)
from harness_operator.api.budget import (
    HarnessBudget as HarnessBudget,
)
from harness_operator.api.budget import (
    HarnessBudgetSpec as HarnessBudgetSpec,
)
from harness_operator.api.budget import (
    HarnessBudgetStatus as HarnessBudgetStatus,
)
from harness_operator.api.budget import (
    LabelSelector as LabelSelector,
)
from harness_operator.api.budget import (
    WhenExhausted as WhenExhausted,
)
from harness_operator.api.common import (
    API_VERSION as API_VERSION,
)
from harness_operator.api.common import (
    DATA_KEY_RULE as DATA_KEY_RULE,
)
from harness_operator.api.common import (
    DNS_SUBDOMAIN_RULE as DNS_SUBDOMAIN_RULE,
)
from harness_operator.api.common import (
    ENV_NAME_RULE as ENV_NAME_RULE,
)
from harness_operator.api.common import (
    FREE_FORM as FREE_FORM,
)
from harness_operator.api.common import (
    GROUP as GROUP,
)
from harness_operator.api.common import (
    NO_NUL as NO_NUL,
)
from harness_operator.api.common import (
    NUL as NUL,
)
from harness_operator.api.common import (
    VERSION as VERSION,
)
from harness_operator.api.common import (
    Condition as Condition,
)
from harness_operator.api.common import (
    ConfigMapKeySelector as ConfigMapKeySelector,
)
from harness_operator.api.common import (
    CredentialGrant as CredentialGrant,
)
from harness_operator.api.common import (
    EgressRule as EgressRule,
)
from harness_operator.api.common import (
    EnvVar as EnvVar,
)
from harness_operator.api.common import (
    Model as Model,
)
from harness_operator.api.common import (
    SecretKeySelector as SecretKeySelector,
)
from harness_operator.api.common import (
    data_key as data_key,
)
from harness_operator.api.common import (
    object_name as object_name,
)
from harness_operator.api.common import (
    rule as rule,
)
from harness_operator.api.common import (
    validations as validations,
)
from harness_operator.api.definition import (
    BUILTIN as BUILTIN,
)
from harness_operator.api.definition import (
    LABEL_CATALOG as LABEL_CATALOG,
)
from harness_operator.api.definition import (
    MODEL_GATEWAY_TOKEN as MODEL_GATEWAY_TOKEN,
)
from harness_operator.api.definition import (
    MODEL_GATEWAY_URL as MODEL_GATEWAY_URL,
)
from harness_operator.api.definition import (
    AcpHeader as AcpHeader,
)
from harness_operator.api.definition import (
    AcpTransport as AcpTransport,
)
from harness_operator.api.definition import (
    Capabilities as Capabilities,
)
from harness_operator.api.definition import (
    ClusterHarnessDefinition as ClusterHarnessDefinition,
)
from harness_operator.api.definition import (
    FlagStyle as FlagStyle,
)
from harness_operator.api.definition import (
    HarnessDefinition as HarnessDefinition,
)
from harness_operator.api.definition import (
    HarnessDefinitionSpec as HarnessDefinitionSpec,
)
from harness_operator.api.definition import (
    HarnessDefinitionStatus as HarnessDefinitionStatus,
)
from harness_operator.api.definition import (
    HeaderValueSource as HeaderValueSource,
)
from harness_operator.api.definition import (
    ModelPricing as ModelPricing,
)
from harness_operator.api.definition import (
    ModelRoute as ModelRoute,
)
from harness_operator.api.definition import (
    ModelVendor as ModelVendor,
)
from harness_operator.api.definition import (
    OutputFormat as OutputFormat,
)
from harness_operator.api.definition import (
    OutputSchemaOption as OutputSchemaOption,
)
from harness_operator.api.definition import (
    OutputSpec as OutputSpec,
)
from harness_operator.api.definition import (
    PromptMode as PromptMode,
)
from harness_operator.api.definition import (
    PromptPosition as PromptPosition,
)
from harness_operator.api.definition import (
    Protocol as Protocol,
)
from harness_operator.api.definition import (
    SchemaForm as SchemaForm,
)
from harness_operator.api.definition import (
    StdinMode as StdinMode,
)
from harness_operator.api.mcp import (
    MCP_SERVERS_MAX as MCP_SERVERS_MAX,
)
from harness_operator.api.mcp import (
    McpFormat as McpFormat,
)
from harness_operator.api.mcp import (
    McpHeader as McpHeader,
)
from harness_operator.api.mcp import (
    McpServer as McpServer,
)
from harness_operator.api.mcp import (
    McpSupport as McpSupport,
)
from harness_operator.api.pipeline import (
    ContinueOn as ContinueOn,
)
from harness_operator.api.pipeline import (
    HarnessPipeline as HarnessPipeline,
)
from harness_operator.api.pipeline import (
    HarnessPipelineSpec as HarnessPipelineSpec,
)
from harness_operator.api.pipeline import (
    HarnessPipelineStatus as HarnessPipelineStatus,
)
from harness_operator.api.pipeline import (
    PipelineRunRef as PipelineRunRef,
)
from harness_operator.api.pipeline import (
    PipelineStep as PipelineStep,
)
from harness_operator.api.pipeline import (
    StepMatrix as StepMatrix,
)
from harness_operator.api.pipeline import (
    StepPhase as StepPhase,
)
from harness_operator.api.pipeline import (
    StepStatus as StepStatus,
)
from harness_operator.api.pipeline import (
    StepWorkspace as StepWorkspace,
)
from harness_operator.api.run import (
    INLINE_INPUT_MAX_BYTES as INLINE_INPUT_MAX_BYTES,
)
from harness_operator.api.run import (
    INPUT_NAME_RULE as INPUT_NAME_RULE,
)
from harness_operator.api.run import (
    INPUT_REFERENCE_PATTERN as INPUT_REFERENCE_PATTERN,
)
from harness_operator.api.run import (
    INPUT_VALUE_MAX_BYTES as INPUT_VALUE_MAX_BYTES,
)
from harness_operator.api.run import (
    INPUTS_MAX as INPUTS_MAX,
)
from harness_operator.api.run import (
    RETRY_LIMIT_MAX as RETRY_LIMIT_MAX,
)
from harness_operator.api.run import (
    SPEC_IMMUTABLE_RULE as SPEC_IMMUTABLE_RULE,
)
from harness_operator.api.run import (
    TTL_MAX_SECONDS as TTL_MAX_SECONDS,
)
from harness_operator.api.run import (
    WITH_KEY_MAX as WITH_KEY_MAX,
)
from harness_operator.api.run import (
    WITH_LIST_MAX as WITH_LIST_MAX,
)
from harness_operator.api.run import (
    WITH_MAX_KEYS as WITH_MAX_KEYS,
)
from harness_operator.api.run import (
    WITH_RULES as WITH_RULES,
)
from harness_operator.api.run import (
    WITH_SCHEMA as WITH_SCHEMA,
)
from harness_operator.api.run import (
    WITH_STRING_MAX as WITH_STRING_MAX,
)
from harness_operator.api.run import (
    WITH_VALUES_CHECK as WITH_VALUES_CHECK,
)
from harness_operator.api.run import (
    WITH_VALUES_MESSAGE as WITH_VALUES_MESSAGE,
)
from harness_operator.api.run import (
    AcpPermission as AcpPermission,
)
from harness_operator.api.run import (
    FallbackProvider as FallbackProvider,
)
from harness_operator.api.run import (
    HarnessRun as HarnessRun,
)
from harness_operator.api.run import (
    HarnessRunSpec as HarnessRunSpec,
)
from harness_operator.api.run import (
    Limits as Limits,
)
from harness_operator.api.run import (
    RetryOn as RetryOn,
)
from harness_operator.api.run import (
    RetryPolicy as RetryPolicy,
)
from harness_operator.api.run import (
    RunInput as RunInput,
)
from harness_operator.api.run import (
    RunOutputRef as RunOutputRef,
)
from harness_operator.api.run import (
    RunTemplate as RunTemplate,
)
from harness_operator.api.run import (
    RunTemplateMetadata as RunTemplateMetadata,
)
from harness_operator.api.run import (
    ValueSource as ValueSource,
)
from harness_operator.api.run import (
    immutable_except as immutable_except,
)
from harness_operator.api.run import (
    input_references_rule as input_references_rule,
)
from harness_operator.api.run_status import (
    ApprovalDecision as ApprovalDecision,
)
from harness_operator.api.run_status import (
    ApprovalStatus as ApprovalStatus,
)
from harness_operator.api.run_status import (
    Attempt as Attempt,
)
from harness_operator.api.run_status import (
    AttemptOutcome as AttemptOutcome,
)
from harness_operator.api.run_status import (
    AuditStatus as AuditStatus,
)
from harness_operator.api.run_status import (
    BudgetCharge as BudgetCharge,
)
from harness_operator.api.run_status import (
    ChangesStatus as ChangesStatus,
)
from harness_operator.api.run_status import (
    ChargeBasis as ChargeBasis,
)
from harness_operator.api.run_status import (
    ChecksState as ChecksState,
)
from harness_operator.api.run_status import (
    ChecksStatus as ChecksStatus,
)
from harness_operator.api.run_status import (
    CostSource as CostSource,
)
from harness_operator.api.run_status import (
    HarnessRunStatus as HarnessRunStatus,
)
from harness_operator.api.run_status import (
    OutputStatus as OutputStatus,
)
from harness_operator.api.run_status import (
    Phase as Phase,
)
from harness_operator.api.run_status import (
    Progress as Progress,
)
from harness_operator.api.run_status import (
    RunBudget as RunBudget,
)
from harness_operator.api.run_status import (
    Usage as Usage,
)
from harness_operator.api.sandbox import (
    PATCH_LIMIT_BYTES as PATCH_LIMIT_BYTES,
)
from harness_operator.api.sandbox import (
    BranchIfExists as BranchIfExists,
)
from harness_operator.api.sandbox import (
    EmptyDir as EmptyDir,
)
from harness_operator.api.sandbox import (
    Forge as Forge,
)
from harness_operator.api.sandbox import (
    GitSource as GitSource,
)
from harness_operator.api.sandbox import (
    NetworkPolicyMode as NetworkPolicyMode,
)
from harness_operator.api.sandbox import (
    PersistentVolumeClaimRef as PersistentVolumeClaimRef,
)
from harness_operator.api.sandbox import (
    ProtectedPathAction as ProtectedPathAction,
)
from harness_operator.api.sandbox import (
    ProtectedPathRule as ProtectedPathRule,
)
from harness_operator.api.sandbox import (
    PublishApproval as PublishApproval,
)
from harness_operator.api.sandbox import (
    PublishBranch as PublishBranch,
)
from harness_operator.api.sandbox import (
    PullRequest as PullRequest,
)
from harness_operator.api.sandbox import (
    Resources as Resources,
)
from harness_operator.api.sandbox import (
    Sandbox as Sandbox,
)
from harness_operator.api.sandbox import (
    Toleration as Toleration,
)
from harness_operator.api.sandbox import (
    VolumeScope as VolumeScope,
)
from harness_operator.api.sandbox import (
    Workspace as Workspace,
)
from harness_operator.api.sandbox import (
    WorkspaceFrom as WorkspaceFrom,
)
from harness_operator.api.sandbox import (
    WorkspacePublish as WorkspacePublish,
)
from harness_operator.api.sandbox import (
    WorkspaceVolume as WorkspaceVolume,
)
from harness_operator.api.sandbox import (
    parse_duration_seconds as parse_duration_seconds,
)
from harness_operator.api.schedule import (
    ConcurrencyPolicy as ConcurrencyPolicy,
)
from harness_operator.api.schedule import (
    HarnessSchedule as HarnessSchedule,
)
from harness_operator.api.schedule import (
    HarnessScheduleSpec as HarnessScheduleSpec,
)
from harness_operator.api.schedule import (
    HarnessScheduleStatus as HarnessScheduleStatus,
)
from harness_operator.api.schedule import (
    PipelineTemplate as PipelineTemplate,
)
from harness_operator.api.schedule import (
    ScheduledRunRef as ScheduledRunRef,
)
from harness_operator.api.session import (
    SESSION_ID_ARG as SESSION_ID_ARG,
)
from harness_operator.api.session import (
    ResumeFrom as ResumeFrom,
)
from harness_operator.api.session import (
    SessionSpec as SessionSpec,
)
from harness_operator.api.session import (
    SessionStatus as SessionStatus,
)
from harness_operator.api.tools import (
    DENIED_TOOLS_MAX as DENIED_TOOLS_MAX,
)
from harness_operator.api.tools import (
    TOOLS_PLACEHOLDER as TOOLS_PLACEHOLDER,
)
from harness_operator.api.tools import (
    ToolControl as ToolControl,
)
from harness_operator.api.tools import (
    ToolControls as ToolControls,
)
from harness_operator.api.tools import (
    ToolEnforcement as ToolEnforcement,
)
from harness_operator.api.tools import (
    ToolPolicy as ToolPolicy,
)
from harness_operator.api.tools import (
    ToolRules as ToolRules,
)
from harness_operator.api.trigger import (
    AuthorAssociation as AuthorAssociation,
)
from harness_operator.api.trigger import (
    HarnessTrigger as HarnessTrigger,
)
from harness_operator.api.trigger import (
    HarnessTriggerSpec as HarnessTriggerSpec,
)
from harness_operator.api.trigger import (
    HarnessTriggerStatus as HarnessTriggerStatus,
)
from harness_operator.api.trigger import (
    TriggerAuthors as TriggerAuthors,
)
from harness_operator.api.trigger import (
    TriggerDelivery as TriggerDelivery,
)
from harness_operator.api.trigger import (
    TriggerEvent as TriggerEvent,
)
from harness_operator.api.trigger import (
    TriggerEventType as TriggerEventType,
)
from harness_operator.api.trigger import (
    TriggerForge as TriggerForge,
)
from harness_operator.api.trigger import (
    TriggerReport as TriggerReport,
)

KINDS: dict[
    str,
    type[HarnessRun]
    | type[HarnessDefinition]
    | type[ClusterHarnessDefinition]
    | type[HarnessBudget]
    | type[HarnessSchedule]
    | type[HarnessTrigger]
    | type[HarnessPipeline],
] = {
    "HarnessRun": HarnessRun,
    "HarnessDefinition": HarnessDefinition,
    "ClusterHarnessDefinition": ClusterHarnessDefinition,
    "HarnessBudget": HarnessBudget,
    "HarnessSchedule": HarnessSchedule,
    "HarnessTrigger": HarnessTrigger,
    "HarnessPipeline": HarnessPipeline,
}
