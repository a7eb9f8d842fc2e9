"""Runs whose agent prints its own credentials (a Secret granted as env): the value, plain or encoded, is
nowhere in status, Events, the namespace's ConfigMaps or the operator's log, end to end on the cluster."""

from __future__ import annotations

import base64
import json
import secrets
import urllib.parse
from collections.abc import Callable

from kubernetes import client

from ..integration.conftest import Api
from ..integration.operator_env import OperatorProcess, definition_body, run_body
from .checks import log_problems


def test_printed_credentials_leak_nowhere(
    api: Api, images: dict[str, str], start_operator: Callable[..., OperatorProcess]
) -> None:
    operator = start_operator()
    value = f"tok-{secrets.token_hex(12)}"
    raw = value.encode()
    forms = {
        "plain": value,
        "base64": base64.b64encode(raw).decode(),
        "hex": raw.hex(),
        "url": urllib.parse.quote(raw, safe=""),
    }
    api.core.create_namespaced_secret(
        api.ns, client.V1Secret(metadata=client.V1ObjectMeta(name="agent-token"), string_data={"t": value})
    )
    grant = [{"env": "FAKE_TOKEN", "secretKeyRef": {"name": "agent-token", "key": "t"}}]
    for mode in ("secret", "secret-encoded", "secret-fail"):
        api.create(definition_body(mode, images["test"], mode))
    api.create(run_body("secret", {"provider": "secret", "prompt": "p", "credentials": grant}))
    api.create(
        run_body("secret-encoded", {"provider": "secret-encoded", "prompt": "p", "credentials": grant})
    )
    # Printed, then failed: the failure path's excerpts and the fallback see it as well.
    api.create(
        run_body(
            "fails-first",
            {
                "provider": "secret-fail",
                "prompt": "p",
                "credentials": grant,
                "fallback": [{"provider": "secret"}],
            },
        )
    )

    finished = {name: api.wait_finished(name) for name in ("secret", "secret-encoded", "fails-first")}
    # The agent did print it: the redacted output came through, so the check below is not vacuous.
    assert "[REDACTED]" in finished["secret"]["output"]["excerpt"], finished["secret"]
    assert "[REDACTED]" in finished["secret-encoded"]["output"]["excerpt"], finished["secret-encoded"]
    assert [a["exitCode"] for a in finished["fails-first"]["attempts"]] == [2, 0], finished["fails-first"]

    runs = api.custom.list_namespaced_custom_object("agentharness.dev", "v1alpha1", api.ns, "harnessruns")
    places = {
        "status": json.dumps([r.get("status") for r in runs["items"]]),
        "events": json.dumps(
            [(e.reason, e.message) for e in api.core.list_namespaced_event(api.ns).items], default=str
        ),
        "configmaps": json.dumps([cm.data for cm in api.core.list_namespaced_config_map(api.ns).items]),
        "operator log": operator.log_path.read_text(),
    }
    leaks = [
        f"{form} form in {place}" for place, text in places.items() for form, v in forms.items() if v in text
    ]
    assert leaks == []
    assert log_problems(places["operator log"]) == []
