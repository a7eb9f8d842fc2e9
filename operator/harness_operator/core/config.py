"""OperatorConfig: typed, frozen, read once from the environment at startup and passed down."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import TypeAdapter, ValidationError

from harness_operator import __version__
from harness_operator.api.v1alpha1 import ProtectedPathRule

# OperatorConfig.fqdn_policy: how `host:` egress rules are enforced when there is no egress gateway.
FQDN_AUTO = "auto"  # Cilium when its CiliumNetworkPolicy API is served, else none
FQDN_CILIUM = "cilium"
FQDN_NONE = "none"  # not by name: a Warning Event on the run says so
# OperatorConfig.await_network_policy: what a sandbox does before its agent starts.
AWAIT_REQUIRE = "require"  # wait until the API server is refused; fail the attempt when it never is
AWAIT_WARN = "warn"  # wait the same, then start the agent anyway, saying so in the log
AWAIT_OFF = "off"  # start the agent at once


def split_address(address: str) -> tuple[str, int]:
    """`host:port` or `[v6]:port` into its parts; ValueError naming the address when it is neither."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


# The chart's publishing.protectedPaths, all Refuse: what a forge runs with the repository's secrets (CI
# definitions), who must review (CODEOWNERS), and what agents read as instructions or run as hooks and
# MCP servers (their instruction and settings files). A namespace or a run adds to it, never removes.
DEFAULT_PROTECTED_PATHS: tuple[str, ...] = (
    *(".github/", ".gitea/", ".forgejo/", ".gitlab/", ".circleci/", ".buildkite/", ".woodpecker/"),
    *(".gitlab-ci.yml", ".travis.yml", ".drone.yml", ".woodpecker.yml", "Jenkinsfile"),
    *("azure-pipelines.yml", "bitbucket-pipelines.yml"),
    "CODEOWNERS",
    *("AGENTS.md", "AGENT.md", "CLAUDE.md", "CLAUDE.local.md", "GEMINI.md", "QWEN.md"),
    *(".cursorrules", ".clinerules", ".windsurfrules", ".goosehints"),
    *(".claude/", ".cursor/", ".gemini/", ".qwen/", ".kiro/", ".factory/", ".amazonq/", ".codex/"),
    *(".mcp.json", ".aider.conf.yml", "opencode.json"),
)
OPTIONAL_INTS = frozenset({"default_ttl_seconds_after_finished"})  # empty or unset: None
# Lists whose entries may hold commas (regular expressions, paths): one entry a line.
LINE_LISTS = frozenset(
    {"secret_scan_allow_paths", "secret_scan_allow_rules", "secret_scan_allow_fingerprints"}
)
FINGERPRINT = re.compile(r"^.+:[^:\s]+:[0-9]+$")


@dataclass(frozen=True)
class OperatorConfig:
    """Settings of one operator process; every field has an env var HARNESS_<NAME>."""

    sandbox_image: str = f"harness.local/sandbox:{__version__}"
    image_pull_policy: str = "IfNotPresent"
    image_pull_secrets: tuple[str, ...] = ()  # Secret names in each run's namespace (private registries)
    max_runs_per_namespace: int = 10
    # The Kueue LocalQueue of runs whose label names none (chart kueue.defaultQueueName); "": none.
    kueue_default_queue: str = ""
    default_cpu_request: str = "250m"
    default_memory_request: str = "1Gi"
    default_memory_limit: str = "2Gi"
    default_grace_period_seconds: int = 30
    scratch_size_limit: str = "4Gi"  # the agent's /tmp and home, each
    sandbox_uid: int = 65532
    # The runner's container runs as another user than the agent's, so the agent cannot write its report.
    runner_uid: int = 65531
    dns_namespace_labels: dict[str, str] = field(
        default_factory=lambda: {"kubernetes.io/metadata.name": "kube-system"}
    )
    dns_pod_labels: dict[str, str] = field(default_factory=lambda: {"k8s-app": "kube-dns"})
    metrics_port: int = 8080
    health_port: int = 8081
    namespaces: tuple[str, ...] = ()
    progress_interval_seconds: int = 5  # 0: no in-flight progress (no pod log reads while runs run)
    # The egress gateway (the chart's egressGateway): its Service's host name (empty: no gateway), port,
    # namespace (where the operator writes grants), pod labels (the sandbox policy's peer) and the key
    # the per-run proxy credentials are derived from.
    egress_gateway_service: str = ""
    egress_gateway_port: int = 3128
    egress_gateway_namespace: str = ""
    egress_gateway_pod_labels: dict[str, str] = field(
        default_factory=lambda: {"app.kubernetes.io/component": "egress-gateway"}
    )
    egress_gateway_key: str = field(default="", repr=False)
    fqdn_policy: str = FQDN_AUTO
    # Where remote MCP servers may be beyond public addresses and names (the chart's mcp.allowedCIDRs and
    # mcp.allowedHosts): core/access/mcp.find_mcp_destination_problem refuses the rest.
    mcp_allowed_cidrs: tuple[str, ...] = ()
    mcp_allowed_hosts: tuple[str, ...] = ()
    # The model gateway (the chart's modelGateway): its Service's host name (empty: none), the vendors'
    # and the admin port, its namespace (grants), pod labels (the sandbox policy's peer), the vendors it
    # holds a key for (only those CLIs are routed) and the key the attempts' tokens are derived from.
    model_gateway_service: str = ""
    model_gateway_port: int = 8080
    model_gateway_admin_port: int = 9102
    model_gateway_namespace: str = ""
    model_gateway_pod_labels: dict[str, str] = field(
        default_factory=lambda: {"app.kubernetes.io/component": "model-gateway"}
    )
    model_gateway_vendors: tuple[str, ...] = ()
    # Each vendor's key Secret in the gateway's namespace (vendor=name,...): named when a vendor refuses it.
    model_gateway_key_secrets: dict[str, str] = field(default_factory=dict)
    model_gateway_key: str = field(default="", repr=False)
    # Enforcers program a pod's policy after it starts: the runner waits until this host:port (the API
    # server; empty: found at startup) is refused before starting the agent.
    await_network_policy: str = AWAIT_REQUIRE
    await_network_policy_seconds: int = 30
    api_server_address: str = ""

    # MultiKueue worker clusters the operator reaches (core/queue/multikueue): each MultiKueueCluster's
    # name and a kubeconfig file for that worker (the chart mounts multiKueue.workers' Secrets).
    multikueue_workers: dict[str, str] = field(default_factory=dict)

    # Where the budgets' ledgers are kept: the operator's own namespace (the chart's release namespace).
    ledger_namespace: str = "harness-system"
    # The Job deadline of an attempt whose run sets no limits.timeoutSeconds: none runs forever.
    max_run_seconds: int = 86400
    # How long the publishing container may take (fetch, push, pull request) once the agent has ended;
    # the pod's grace period and the Job's deadline grow by it for runs that publish.
    publish_timeout_seconds: int = 120
    # The platform's protected paths (HARNESS_PROTECTED_PATHS: a JSON list of {path, action}).
    protected_paths: tuple[ProtectedPathRule, ...] = tuple(
        ProtectedPathRule(path=path) for path in DEFAULT_PROTECTED_PATHS
    )
    # The publisher's secret scan of a change (the chart's publishing.secretScan): on, and the findings
    # the platform allows (runner/secret_scan.py): path regexes, gitleaks rule ids, fingerprints.
    secret_scan: bool = True
    secret_scan_allow_paths: tuple[str, ...] = ()
    secret_scan_allow_rules: tuple[str, ...] = ()
    secret_scan_allow_fingerprints: tuple[str, ...] = ()
    # Signing the pushed commits (the chart's publishing.signing): the Secret, in each run's namespace, and
    # its key holding the SSH private key; whether runs sign by default and may opt out; the committer
    # a forge matches with the key's owner (empty: the commit's author).
    signing_secret_name: str = ""
    signing_secret_key: str = "ssh-privatekey"
    signing_enabled: bool = False
    signing_allow_unsigned: bool = False
    signing_committer_name: str = ""
    signing_committer_email: str = ""
    # Retention of finished runs without spec.ttlSecondsAfterFinished; None keeps them until deleted.
    default_ttl_seconds_after_finished: int | None = None
    # The default spares runs a GitOps tool or Helm applied (it would apply them again, and they would run).
    default_ttl_spares_applied: bool = True

    # Leader election (the chart's leaderElection): the Lease's name (empty: no election, this process
    # leads), its namespace (the operator's own) and this replica's identity (the pod's name).
    # Traces (the chart's tracing): the collector's OTLP/HTTP base URL (empty: none), the share of runs
    # traced, decided by each run's trace id (contract/tracing.is_sampled), and whether spans carry content.
    tracing_endpoint: str = ""
    tracing_sampling: float = 1.0
    tracing_record_content: bool = False  # the run's prompt and output excerpt on its span

    leader_election_lease: str = ""
    leader_election_namespace: str = ""
    pod_name: str = ""

    def __post_init__(self) -> None:
        if self.leader_election_lease and not (self.leader_election_namespace and self.pod_name):
            raise ValueError(
                "HARNESS_LEADER_ELECTION_LEASE is set: HARNESS_LEADER_ELECTION_NAMESPACE and "
                "HARNESS_POD_NAME must be set too (the chart sets all three)"
            )
        if self.egress_gateway_service and not (self.egress_gateway_key and self.egress_gateway_namespace):
            raise ValueError(
                "HARNESS_EGRESS_GATEWAY_SERVICE is set: HARNESS_EGRESS_GATEWAY_KEY and "
                "HARNESS_EGRESS_GATEWAY_NAMESPACE must be set too (the chart sets all three)"
            )
        if self.model_gateway_service and not (self.model_gateway_key and self.model_gateway_namespace):
            raise ValueError(
                "HARNESS_MODEL_GATEWAY_SERVICE is set: HARNESS_MODEL_GATEWAY_KEY and "
                "HARNESS_MODEL_GATEWAY_NAMESPACE must be set too (the chart sets all three)"
            )
        if self.signing_enabled and not self.signing_secret_name:
            raise ValueError(
                "HARNESS_SIGNING_ENABLED is set: HARNESS_SIGNING_SECRET_NAME must name the Secret of the SSH "
                "signing key (the chart's publishing.signing.secretName)"
            )
        if self.fqdn_policy not in (FQDN_AUTO, FQDN_CILIUM, FQDN_NONE):
            raise ValueError(
                f"HARNESS_FQDN_POLICY={self.fqdn_policy!r} is not valid: use auto, cilium or none"
            )
        for cidr in self.mcp_allowed_cidrs:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise ValueError(f"HARNESS_MCP_ALLOWED_CIDRS: {cidr!r} is not a CIDR ({exc})") from exc
        if self.await_network_policy not in (AWAIT_REQUIRE, AWAIT_WARN, AWAIT_OFF):
            raise ValueError(
                f"HARNESS_AWAIT_NETWORK_POLICY={self.await_network_policy!r} is not valid: "
                "use require, warn or off"
            )
        if self.await_network_policy_seconds < 1:
            raise ValueError("HARNESS_AWAIT_NETWORK_POLICY_SECONDS must be at least 1")
        for pattern in self.secret_scan_allow_paths:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"HARNESS_SECRET_SCAN_ALLOW_PATHS (publishing.secretScan.allow.paths): {pattern!r} is "
                    f"not a regular expression ({exc})"
                ) from exc
        for fingerprint in self.secret_scan_allow_fingerprints:
            if not FINGERPRINT.match(fingerprint):
                raise ValueError(
                    "HARNESS_SECRET_SCAN_ALLOW_FINGERPRINTS (publishing.secretScan.allow.fingerprints): "
                    f"{fingerprint!r} is not a fingerprint PATH:RULE:LINE such as tests/fixtures/key.json:"
                    "github-pat:3 (the refusal's message names it)"
                )
        if not 0.0 <= self.tracing_sampling <= 1.0:
            raise ValueError(
                f"HARNESS_TRACING_SAMPLING={self.tracing_sampling} is not a share from 0 to 1, e.g. 0.25"
            )
        if self.api_server_address:
            try:
                split_address(self.api_server_address)
            except ValueError as exc:
                raise ValueError(f"HARNESS_API_SERVER_ADDRESS: {exc}") from exc

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorConfig:
        """Read HARNESS_* variables; a bad value fails startup with a message naming the variable."""
        env = os.environ if env is None else env
        defaults = cls()
        values: dict[str, object] = {}
        for name in cls.__dataclass_fields__:
            key = f"HARNESS_{name.upper()}"
            if key not in env:
                continue
            raw = env[key]
            current = getattr(defaults, name)
            try:
                if name == "protected_paths":
                    values[name] = tuple(_protected_paths(raw))
                elif name in OPTIONAL_INTS:
                    values[name] = _seconds(raw) if raw.strip() else None
                elif isinstance(current, bool):
                    values[name] = raw.lower() in ("1", "true", "yes")
                elif isinstance(current, float):
                    values[name] = float(raw)
                elif isinstance(current, int):
                    values[name] = int(raw)
                elif isinstance(current, tuple):
                    entries = raw.splitlines() if name in LINE_LISTS else raw.split(",")
                    values[name] = tuple(n.strip() for n in entries if n.strip())
                elif isinstance(current, dict):
                    values[name] = dict(pair.split("=", 1) for pair in raw.split(",") if pair.strip())
                else:
                    values[name] = raw
            except ValueError as exc:
                raise ValueError(f"{key}={raw!r} is not valid: {exc}") from exc
        return cls(**values)  # type: ignore[arg-type]


def _seconds(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError("must be 0 or more seconds, or empty for none")
    return value


def _protected_paths(raw: str) -> list[ProtectedPathRule]:
    try:
        rules = TypeAdapter(list[ProtectedPathRule]).validate_json(raw)
    except ValidationError as exc:
        raise ValueError(f"a JSON list of {{path, action: Refuse|RequireApproval}}: {exc}") from None
    for rule in rules:
        if rule.path.startswith("/"):
            raise ValueError(f'"{rule.path}" is relative to the repository\'s root: drop the leading "/"')
    return rules
