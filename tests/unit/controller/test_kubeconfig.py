"""harnessctl reads the kubeconfig as kubectl does: merged files, context, namespace, impersonation
headers on the wire, exec credentials (against a local recording server)."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.unit.controller.recording_api import RecordingApi, recording_api

from harness_operator.controller.kube import Kube
from harness_operator.controller.kubeconfig import (
    Flags,
    Impersonation,
    KubeconfigError,
    build_current_context,
    build_impersonation,
    build_impersonation_headers,
    build_kubeconfig_paths,
    load_kubeconfig,
)


def write_kubeconfig(
    path: Path, server: str, user: dict[str, Any], current: str | None = "main", namespace: str = "team-a"
) -> str:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [
            {"name": "main", "context": {"cluster": "c", "user": "u", "namespace": namespace}},
            {"name": "other", "context": {"cluster": "c", "user": "plain"}},
        ],
        "users": [{"name": "u", "user": user}, {"name": "plain", "user": {"token": "plain-token"}}],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def sent(api: RecordingApi, name: str) -> list[str]:
    """The values of header `name` in the last request, in order."""
    return [v for k, v in api.requests[-1][1] if k.lower() == name.lower()]


def test_paths_are_kubectls() -> None:
    assert build_kubeconfig_paths("/x", {"KUBECONFIG": "/a:/b"}) == ["/x"]
    assert build_kubeconfig_paths(None, {"KUBECONFIG": "/a::/b"}) == ["/a", "/b"]
    assert build_kubeconfig_paths(None, {}) == ["~/.kube/config"]


def test_the_first_file_setting_current_context_wins() -> None:
    assert build_current_context([{}, {"current-context": "a"}, {"current-context": "b"}]) == "a"
    assert build_current_context([{"current-context": ""}]) is None


def test_impersonation_from_the_user_and_the_flags_override_it_field_by_field() -> None:
    user = {"as": "viewer", "as-groups": ["g1", "g2"], "as-uid": "9", "as-user-extra": {"team/x": ["a", "b"]}}
    assert build_impersonation(user, Flags()) == Impersonation(
        "viewer", ("g1", "g2"), "9", {"team/x": ("a", "b")}
    )
    assert build_impersonation(user, Flags(as_user="ops")) == Impersonation(
        "ops", ("g1", "g2"), "9", {"team/x": ("a", "b")}
    )
    assert build_impersonation({}, Flags(as_user="ops", as_groups=("x",))) == Impersonation("ops", ("x",))
    assert build_impersonation({"token": "t"}, Flags()) is None
    with pytest.raises(KubeconfigError, match="requires a user: set --as"):
        build_impersonation({"as-groups": ["g"]}, Flags())
    headers = build_impersonation_headers(Impersonation("viewer", ("g1", "g2"), "9", {"team/x": ("a", "b")}))
    assert headers == [
        ("Impersonate-User", "viewer"),
        ("Impersonate-Group", "g1"),
        ("Impersonate-Group", "g2"),
        ("Impersonate-Uid", "9"),
        ("Impersonate-Extra-team%2Fx", "a"),
        ("Impersonate-Extra-team%2Fx", "b"),
    ]


def test_every_request_carries_the_kubeconfigs_impersonation(tmp_path: Path) -> None:
    with recording_api() as api:
        user = {"token": "admin-token", "as": "viewer", "as-groups": ["team-a", "readers"]}
        path = write_kubeconfig(tmp_path / "config", api.url, user)
        kube, namespace = Kube.from_kubeconfig(Flags(kubeconfig=path))
        assert namespace == "team-a"
        assert kube.fetch_run(namespace, "r") is None  # the recorder answers 404
        assert api.requests[-1][0].endswith("/namespaces/team-a/harnessruns/r")
        assert sent(api, "Impersonate-User") == ["viewer"]
        assert sent(api, "Impersonate-Group") == ["team-a", "readers"]  # repeated, not comma-joined
        assert sent(api, "Authorization") == ["Bearer admin-token"]

        kube, _ = Kube.from_kubeconfig(Flags(kubeconfig=path, as_user="ops", as_groups=("x",), namespace="n"))
        kube.fetch_run("n", "r")
        assert sent(api, "Impersonate-User") == ["ops"] and sent(api, "Impersonate-Group") == ["x"]

        kube, namespace = Kube.from_kubeconfig(Flags(kubeconfig=path, context="other"))
        kube.fetch_run(namespace, "r")
        assert namespace == "default" and sent(api, "Impersonate-User") == []
        assert sent(api, "Authorization") == ["Bearer plain-token"]


def test_kubeconfig_lists_merge_as_kubectl_merges_them(tmp_path: Path) -> None:
    with recording_api() as api:
        first = write_kubeconfig(tmp_path / "first", api.url, {"token": "first"}, current="other")
        second = write_kubeconfig(
            tmp_path / "second", "http://127.0.0.1:9", {"token": "second"}, current="main"
        )
        env = {"KUBECONFIG": f"{tmp_path / 'missing'}:{first}:{second}"}
        connection = load_kubeconfig(Flags(), env)
        # The first file's current-context and entries win (the official client alone would take "main").
        assert connection.namespace == "default"
        Kube(connection.api).fetch_run("default", "r")
        assert sent(api, "Authorization") == ["Bearer plain-token"]


def test_an_exec_credential_plugin_supplies_the_token(tmp_path: Path) -> None:
    plugin = tmp_path / "credential"
    plugin.write_text(
        "#!/bin/sh\n"
        'echo \'{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", '
        '"status": {"token": "from-plugin"}}\'\n'
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(plugin)}}
    with recording_api() as api:
        path = write_kubeconfig(tmp_path / "config", api.url, user)
        kube, namespace = Kube.from_kubeconfig(Flags(kubeconfig=path))
        kube.fetch_run(namespace, "r")
        assert sent(api, "Authorization") == ["Bearer from-plugin"]


def test_unusable_kubeconfigs_say_what_kubectl_says(tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "config", "http://127.0.0.1:9", {"token": "t"}, current=None)
    with pytest.raises(KubeconfigError, match='context "nope" does not exist'):
        load_kubeconfig(Flags(kubeconfig=path, context="nope"), {})
    with pytest.raises(KubeconfigError, match="current-context is not set: give --context"):
        load_kubeconfig(Flags(kubeconfig=path), {})
    with pytest.raises(KubeconfigError, match="no such file"):
        load_kubeconfig(Flags(kubeconfig=str(tmp_path / "absent")), {})
    with pytest.raises(KubeconfigError, match="no kubeconfig found"):
        load_kubeconfig(Flags(), {"KUBECONFIG": str(tmp_path / "absent")})
