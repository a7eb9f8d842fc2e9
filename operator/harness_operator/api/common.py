"""The API's shared pieces: group and version, the CEL rule helpers, the base model, references to
Secrets and ConfigMaps, env, credential grants, egress rules, conditions."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel
from pydantic.config import JsonDict

GROUP = "agentharness.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

ENV_NAME_RULE = r"^[A-Za-z_][A-Za-z0-9_]*$"
# An object name as Kubernetes checks it (DNS-1123 subdomain); `[.]` rather than an escaped dot, because
# CEL string literals and Python's regex read backslashes differently.
DNS_SUBDOMAIN_RULE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DATA_KEY_RULE = r"^[-._a-zA-Z0-9]+$"  # a ConfigMap or Secret key
NUL = "\\u0000"  # CEL's escape for the NUL character, which no argv, env or pipe of the runner carries


def rule(
    expr: str,
    message: str,
    field_path: str | None = None,
    reason: str | None = None,
    message_expression: str | None = None,
) -> JsonDict:
    """One CEL `x-kubernetes-validations` entry; `message_expression` (CEL) names what failed."""
    out: JsonDict = {"rule": expr, "message": message}
    if message_expression:
        out["messageExpression"] = message_expression
    if field_path:
        out["fieldPath"] = field_path
    if reason:
        out["reason"] = reason
    return out


def validations(*rules: JsonDict) -> JsonDict:
    return {"x-kubernetes-validations": list(rules)}


FREE_FORM: JsonDict = {"x-kubernetes-preserve-unknown-fields": True}

# Marks a field whose schema keeps only the CEL rules that walk no string or list (crd.py drops the others):
# for a run template repeated in a list, whose scans the API server's CEL cost budget cannot afford.
WITHOUT_SCANS_KEY = "x-harness-without-scans"
WITHOUT_SCANS: JsonDict = {WITHOUT_SCANS_KEY: True}


def object_name(kind: str) -> JsonDict:
    """The rule for a field that names an object of `kind`: its name as Kubernetes would accept it."""
    return validations(
        rule(
            f"self.matches('{DNS_SUBDOMAIN_RULE}')",
            f"must be a valid {kind} name (a DNS-1123 subdomain: lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit; no '/')",
        )
    )


def data_key(kind: str) -> JsonDict:
    """The rule for a field that names a key of a ConfigMap or Secret."""
    return validations(
        rule(
            f"self.matches('{DATA_KEY_RULE}') && self != '.' && !self.startsWith('..')",
            f"must be a valid {kind} key: letters, digits, '-', '_' and '.', not '.' or starting with '..'",
        )
    )


NO_NUL = rule(f"!self.contains('{NUL}')", "must not contain a NUL character")


class Model(BaseModel):
    """Base: camelCase on the wire, unknown fields rejected, enums kept as strings."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", use_enum_values=True
    )

    def to_api(self) -> dict[str, Any]:
        """The object as the API server stores it (camelCase, unset fields omitted)."""
        return self.model_dump(by_alias=True, exclude_none=True, exclude_unset=True, mode="json")


# --- shared pieces -------------------------------------------------------------------------------


class SecretKeySelector(Model):
    """A key of a Secret in the run's namespace."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the Secret.",
        json_schema_extra=object_name("Secret"),
    )
    key: str = Field(
        min_length=1,
        max_length=253,
        description="Key within the Secret.",
        json_schema_extra=data_key("Secret"),
    )


class ConfigMapKeySelector(Model):
    """A key of a ConfigMap in the run's namespace."""

    name: str = Field(
        min_length=1,
        max_length=253,
        description="Name of the ConfigMap.",
        json_schema_extra=object_name("ConfigMap"),
    )
    key: str = Field(
        min_length=1,
        max_length=253,
        description="Key within the ConfigMap.",
        json_schema_extra=data_key("ConfigMap"),
    )


class EnvVar(Model):
    """A plain, non-secret environment variable for the agent."""

    name: str = Field(
        min_length=1,
        max_length=256,
        description="Variable name: letters, digits and underscores, not starting with a digit.",
        json_schema_extra=validations(
            rule(
                f"self.matches('{ENV_NAME_RULE}')",
                "must be a valid environment variable name (letters, digits and '_', "
                "not starting with a digit)",
            )
        ),
    )
    value: str = Field(
        default="",
        max_length=32768,
        description="Variable value (not secret).",
        json_schema_extra=validations(NO_NUL),
    )


class CredentialGrant(Model):
    """A Secret key that reaches the agent only as the environment variable `env`."""

    env: str = Field(
        min_length=1,
        max_length=256,
        description="Environment variable the agent reads the secret from.",
        json_schema_extra=validations(
            rule(
                f"self.matches('{ENV_NAME_RULE}')",
                "must be a valid environment variable name (letters, digits and '_', "
                "not starting with a digit)",
            )
        ),
    )
    secret_key_ref: SecretKeySelector = Field(description="The Secret key holding the value.")
    optional: bool | None = Field(
        default=None, description="When true, a missing Secret or key leaves the variable unset."
    )


class EgressRule(Model):
    """One network destination: a CIDR or a host name, and its ports."""

    cidr: str | None = Field(default=None, max_length=64, description="Destination CIDR, e.g. 10.0.0.0/8.")
    host: str | None = Field(
        default=None,
        max_length=253,
        description="Destination host name, enforced by name through the chart's egress gateway (the "
        "sandbox gets HTTPS_PROXY and a per-run credential), or as Cilium toFQDNs without it; with "
        "neither, only its ports are opened, to every public address (a Warning Event says so).",
    )
    ports: list[Annotated[int, Field(ge=1, le=65535)]] = Field(
        default_factory=list, max_length=32, description="TCP ports; empty means all ports."
    )

    model_config = ConfigDict(
        json_schema_extra=validations(
            rule("has(self.cidr) != has(self.host)", "set exactly one of cidr or host")
        )
    )


class Condition(Model):
    """A Kubernetes-style condition."""

    type: str = Field(description="Accepted, Succeeded, Ready, Reconciling or Stalled.")
    status: str = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="CamelCase reason.")
    message: str = Field(default="", description="Human-readable detail.")
    last_transition_time: str | None = Field(default=None, description="When status last changed.")
    observed_generation: int | None = Field(default=None, description="Generation this reflects.")
