"""harnessctl's kubeconfig, read as kubectl reads it: files, context, namespace, impersonation (I/O; the
choices pure)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.kube_config import KubeConfigLoader, KubeConfigMerger
from urllib3 import HTTPHeaderDict

DEFAULT_KUBECONFIG = "~/.kube/config"


class KubeconfigError(Exception):
    """The kubeconfig cannot be used as asked (no file, no such context); the message is kubectl's."""


@dataclass(frozen=True)
class Flags:
    """kubectl's connection flags, as given on the command line (None: not given)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    as_user: str | None = None
    as_groups: Sequence[str] = ()
    as_uid: str | None = None


@dataclass(frozen=True)
class Impersonation:
    """Whom the requests act as (the API server checks the caller may impersonate them)."""

    user: str | None = None
    groups: tuple[str, ...] = ()
    uid: str | None = None
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def build_kubeconfig_paths(flag: str | None, env: Mapping[str, str]) -> list[str]:
    """The files to merge, as kubectl picks them: --kubeconfig alone, else $KUBECONFIG's list (':'
    between them; empty entries skipped), else ~/.kube/config."""
    if flag:
        return [flag]
    listed = [p for p in env.get("KUBECONFIG", "").split(os.pathsep) if p]
    return listed or [DEFAULT_KUBECONFIG]


def build_current_context(files: Sequence[Mapping[str, Any]]) -> str | None:
    """The merged current-context: the first file that sets one wins (kubectl's rule; the official client
    lets the last win)."""
    return next((str(f["current-context"]) for f in files if f.get("current-context")), None)


def build_impersonation(user: Mapping[str, Any], flags: Flags) -> Impersonation | None:
    """The kubeconfig user's `as`, `as-groups`, `as-uid` and `as-user-extra`, each overridden by its flag
    (--as, --as-group, --as-uid) as kubectl does; None when nobody is impersonated."""
    extra = {str(k): tuple(str(v) for v in vs or ()) for k, vs in (user.get("as-user-extra") or {}).items()}
    chosen = Impersonation(
        user=flags.as_user or user.get("as") or None,
        groups=tuple(flags.as_groups) or tuple(str(g) for g in user.get("as-groups") or ()),
        uid=flags.as_uid or user.get("as-uid") or None,
        extra=extra,
    )
    if chosen == Impersonation():
        return None
    if chosen.user is None:
        # The API server refuses groups, uid or extras without a user; say which flag fixes it.
        raise KubeconfigError(
            "requesting uid, groups or user-extra for impersonation requires a user: set --as or the "
            "kubeconfig user's `as:`"
        )
    return chosen


def build_impersonation_headers(impersonation: Impersonation) -> list[tuple[str, str]]:
    """The Impersonate-* headers, one per group and per extra value (the API server reads repeated
    headers, never a comma-separated list); extra keys escaped as client-go escapes them."""
    headers = [("Impersonate-User", impersonation.user or "")]
    headers += [("Impersonate-Group", group) for group in impersonation.groups]
    if impersonation.uid:
        headers.append(("Impersonate-Uid", impersonation.uid))
    for key, values in sorted(impersonation.extra.items()):
        headers += [(f"Impersonate-Extra-{quote(key, safe='')}", value) for value in values]
    return headers


class ImpersonatingPool:
    """A urllib3 pool manager that adds the Impersonate-* headers to every request (the official client
    has no setting for them, and its default headers cannot repeat a name)."""

    def __init__(self, pool: Any, headers: Sequence[tuple[str, str]]) -> None:
        self._pool = pool
        self._headers = list(headers)

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        headers = HTTPHeaderDict(kwargs.pop("headers", None) or {})
        for name, value in self._headers:
            headers.add(name, value)
        return self._pool.request(method, url, headers=headers, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pool, name)


@dataclass(frozen=True)
class Connection:
    """An API client configured from the kubeconfig, the namespace to use and whom it impersonates."""

    api: client.ApiClient
    namespace: str
    impersonation: Impersonation | None


def load_kubeconfig(flags: Flags, env: Mapping[str, str]) -> Connection:
    """An API client as kubectl would make it from `flags` and the environment: the merged files, the
    context (exec credential plugins run by the official client), the namespace (-n, else the context's,
    else default) and the impersonation headers. Never writes the kubeconfig back."""
    paths = [os.path.expanduser(p) for p in build_kubeconfig_paths(flags.kubeconfig, env)]
    if flags.kubeconfig and not os.path.exists(paths[0]):
        raise KubeconfigError(f"stat {flags.kubeconfig}: no such file or directory")
    try:
        merged = KubeConfigMerger(os.pathsep.join(paths))  # type: ignore[no-untyped-call]
    except (OSError, ValueError, ConfigException) as exc:
        raise KubeconfigError(f"cannot read the kubeconfig: {exc}") from exc
    if merged.config is None:
        raise KubeconfigError(
            f"no kubeconfig found (looked for {', '.join(paths)}): give --kubeconfig or set $KUBECONFIG"
        )
    root = merged.config.value
    root["current-context"] = build_current_context(list(merged.config_files.values()))
    name = flags.context or root["current-context"]
    if not name:
        raise KubeconfigError(
            "current-context is not set: give --context or run `kubectl config use-context`"
        )
    contexts = {str(c.value.get("name")): c.value.get("context") or {} for c in root["contexts"]}
    if name not in contexts:
        raise KubeconfigError(f'context "{name}" does not exist')
    context = contexts[name]
    users = {str(u.value.get("name")): u.value.get("user") or {} for u in root["users"]}
    settings = client.Configuration()
    try:
        loader = KubeConfigLoader(config_dict=merged.config, active_context=name)  # type: ignore[no-untyped-call]
        loader.load_and_set(settings)  # type: ignore[no-untyped-call]
    except ConfigException as exc:
        raise KubeconfigError(f"context {name!r}: {exc}") from exc
    impersonation = build_impersonation(users.get(str(context.get("user")), {}), flags)
    api = client.ApiClient(settings)
    if impersonation is not None:
        pool = api.rest_client.pool_manager
        headers = build_impersonation_headers(impersonation)
        api.rest_client.pool_manager = ImpersonatingPool(pool, headers)  # type: ignore[assignment]
    namespace = flags.namespace or str(context.get("namespace") or "default")
    return Connection(api, namespace, impersonation)
