"""Where a run's agent works: its workspace (volume, git source) and its sandbox (network policy,
scheduling, resources)."""

from __future__ import annotations

from enum import StrEnum

from pydantic import ConfigDict, Field

from harness_operator.api.common import (
    EgressRule,
    Model,
    SecretKeySelector,
    object_name,
    rule,
    validations,
)


class VolumeScope(StrEnum):
    run = "run"
    agent = "agent"
    agent_user = "agentUser"


class PersistentVolumeClaimRef(Model):
    """An existing PersistentVolumeClaim."""

    claim_name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the claim.",
        json_schema_extra=object_name("PersistentVolumeClaim"),
    )


class EmptyDir(Model):
    """A scratch volume, as in a pod's emptyDir."""

    medium: str | None = Field(default=None, description="Empty for disk, or Memory for tmpfs.")
    size_limit: str | None = Field(
        default=None, max_length=32, description="Most space it may use, e.g. 10Gi."
    )


class WorkspaceVolume(Model):
    """Where the workspace lives; emptyDir when nothing is set."""

    empty_dir: EmptyDir | None = Field(
        default=None, description="A scratch volume for the run (the default)."
    )
    persistent_volume_claim: PersistentVolumeClaimRef | None = Field(
        default=None, description="An existing claim."
    )
    scope: VolumeScope | None = Field(
        default=None,
        description="A claim the operator creates: run (owned by the run), agent (one per provider, kept) "
        "or agentUser (one per provider and user label, kept).",
    )
    size: str | None = Field(default=None, max_length=32, description="Size of an operator-created claim.")
    storage_class_name: str | None = Field(
        default=None,
        max_length=253,
        description="Storage class of an operator-created claim.",
        json_schema_extra=object_name("StorageClass"),
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule(
                "[has(self.emptyDir), has(self.persistentVolumeClaim), has(self.scope)]"
                ".filter(x, x).size() <= 1",
                "set at most one of emptyDir, persistentVolumeClaim or scope",
            ),
            rule(
                "has(self.scope) || !(has(self.size) || has(self.storageClassName))",
                "size and storageClassName apply only with scope",
            ),
        )
    )


class GitSource(Model):
    """A git repository cloned into the working directory by an init container."""

    url: str = Field(min_length=1, max_length=2048, description="Repository URL.")
    ref: str | None = Field(default=None, max_length=256, description="Branch, tag or commit.")
    credentials_secret_ref: SecretKeySelector | None = Field(
        default=None, description="Secret key with a token for the clone (never placed in argv)."
    )


class Workspace(Model):
    """The agent's working directory and the volume behind it."""

    working_dir: str | None = Field(
        default=None,
        max_length=4096,
        description="Absolute working directory in the sandbox (created if missing).",
        json_schema_extra=validations(rule("self.startsWith('/')", "must be an absolute path")),
    )
    volume: WorkspaceVolume | None = Field(default=None, description="The workspace volume.")
    git: GitSource | None = Field(default=None, description="A repository cloned into workingDir.")


class NetworkPolicyMode(StrEnum):
    none = "none"
    provider = "provider"
    allowlist = "allowlist"
    unrestricted = "unrestricted"


class Toleration(Model):
    """A pod toleration, passed through."""

    key: str | None = Field(default=None, description="Taint key.")
    operator: str | None = Field(default=None, description="Exists or Equal.")
    value: str | None = Field(default=None, description="Taint value.")
    effect: str | None = Field(default=None, description="NoSchedule, PreferNoSchedule or NoExecute.")
    toleration_seconds: int | None = Field(default=None, description="For NoExecute: how long to stay.")


class Resources(Model):
    """Container resource requests and limits (quantities)."""

    requests: dict[str, str | int] = Field(
        default_factory=dict,
        description="Requests, e.g. {cpu: 500m, memory: 1Gi}.",
        json_schema_extra={"additionalProperties": {"x-kubernetes-int-or-string": True}},
    )
    limits: dict[str, str | int] = Field(
        default_factory=dict,
        description="Limits, e.g. {memory: 2Gi}.",
        json_schema_extra={"additionalProperties": {"x-kubernetes-int-or-string": True}},
    )


class Sandbox(Model):
    """Isolation and placement of the sandbox pod."""

    network_policy: NetworkPolicyMode = Field(
        default=NetworkPolicyMode.provider,
        description="Egress: none (nothing, not even DNS), provider (DNS and the definition's egress), "
        "allowlist (DNS and sandbox.egress) or unrestricted.",
    )
    egress: list[EgressRule] = Field(
        default_factory=list, max_length=32, description="Destinations for networkPolicy allowlist."
    )
    resources: Resources | None = Field(default=None, description="Container resources.")
    runtime_class_name: str | None = Field(
        default=None,
        max_length=253,
        description="RuntimeClass, e.g. gvisor.",
        json_schema_extra=object_name("RuntimeClass"),
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node selector, passed through.")
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32, description="Tolerations.")
    image: str | None = Field(default=None, max_length=1024, description="Sandbox image override.")
