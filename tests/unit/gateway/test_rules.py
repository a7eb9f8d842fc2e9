"""The egress gateway's decisions: proxy users, passwords, granted host:ports, access-log lines, metrics;
and the grant the operator writes is the one the gateway reads."""

import ast
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.unit.core.access.test_egress import CIDR_ONLY, GATEWAY, make_run, target

from harness_operator.core.attempt import decide_attempts
from harness_operator.core.pod.egress_grant import build_egress_grant, build_proxy_token, build_proxy_urls
from harness_operator.gateway import rules
from harness_operator.gateway.exporter import Exporter
from harness_operator.gateway.helper import answer
from harness_operator.gateway.rules import (
    Access,
    is_authentic,
    is_granted,
    parse_access,
    parse_grant,
    render_metrics,
    run_of,
    split_user,
)

TOKEN_1 = build_proxy_token("k3y", "uid-1", 1)
TOKEN_2 = build_proxy_token("k3y", "uid-1", 2)


def grants_of(*runs: tuple[Any, list[Any]]) -> dict[str, dict[str, Any]]:
    """The gateway's view of the grants the operator builds for these runs."""
    out = {}
    for run, targets in runs:
        grant = build_egress_grant(run, decide_attempts(run, targets, GATEWAY), GATEWAY)
        assert grant is not None
        parsed = parse_grant(grant["data"]["grant.json"])
        assert parsed is not None
        out[grant["metadata"]["name"]] = parsed
    return out


REVIEW = make_run()
OTHER = make_run({"networkPolicy": "allowlist", "egress": [{"host": "other.example", "ports": [443]}]})
OTHER.metadata.update(name="other", uid="uid-9")
GRANTS = grants_of((REVIEW, [target(1), target(2)]), (OTHER, [target(1)]))
OTHER_TOKEN = build_proxy_token("k3y", "uid-9", 1)


@pytest.mark.parametrize(
    ("user", "parts"),
    [
        ("team-a.review.1", ("team-a.review", "1")),
        ("team-a.run.v2.12", ("team-a.run.v2", "12")),
        ("team-a.review.1-git", ("team-a.review", "1-git")),  # the clone's and the publisher's
        ("team-a.review.1-gitx", None),
        ("team-a.review.-git", None),
        ("team-a.review.git", None),
        ("team-a.review", None),
        ("review.x", None),
        (".1", None),
        ("-", None),
    ],
)
def test_split_user(user: str, parts: tuple[str, str] | None) -> None:
    assert split_user(user) == parts


@pytest.mark.parametrize(
    ("user", "password", "ok"),
    [
        ("team-a.review.1", TOKEN_1, True),
        ("team-a.review.2", TOKEN_2, True),
        ("team-a.review.2", TOKEN_1, False),  # one attempt's password does not open another's
        ("team-a.review.3", TOKEN_1, False),  # no such attempt
        ("team-a.other.1", TOKEN_1, False),  # one run's password does not open another run
        ("team-a.other.1", OTHER_TOKEN, True),
        ("team-a.review.1", "", False),
        ("nobody.1", TOKEN_1, False),
    ],
)
def test_is_authentic(user: str, password: str, ok: bool) -> None:
    assert is_authentic(GRANTS, user, password) is ok


@pytest.mark.parametrize(
    ("user", "host", "port", "ok"),
    [
        ("team-a.review.1", "api.anthropic.com", "443", True),
        ("team-a.review.1", "API.Anthropic.com.", "443", True),
        ("team-a.review.1", "api.anthropic.com", "80", False),  # not the granted port
        ("team-a.review.1", "other.example", "443", False),  # another run's host
        ("team-a.other.1", "other.example", "443", True),
        ("team-a.other.1", "api.anthropic.com", "443", False),
        ("team-a.review.1", "10.20.0.1", "8443", False),  # CIDR rules are direct, never via the gateway
        ("team-a.nobody.1", "api.anthropic.com", "443", False),
    ],
)
def test_is_granted(user: str, host: str, port: str, ok: bool) -> None:
    assert is_granted(GRANTS, user, host, port) is ok


def test_a_host_rule_without_ports_opens_every_port_of_that_host_only() -> None:
    run = make_run({"networkPolicy": "allowlist", "egress": [{"host": "any.example"}]})
    grants = grants_of((run, [target(1, CIDR_ONLY)]))
    assert is_granted(grants, "team-a.review.1", "any.example", "8080")
    assert not is_granted(grants, "team-a.review.1", "any.example.evil", "8080")


def test_the_proxy_url_the_sandbox_gets_authenticates_at_the_gateway() -> None:
    url = build_proxy_urls(REVIEW, decide_attempts(REVIEW, [target(1)], GATEWAY), GATEWAY)["proxy-url-1"]
    userinfo = url.split("//", 1)[1].split("@", 1)[0]
    user, password = userinfo.split(":")
    assert is_authentic(GRANTS, user, password)


@pytest.mark.parametrize(
    "text", ["", "not json", "[]", json.dumps({"run": "x"}), json.dumps({"attempts": []})]
)
def test_parse_grant_ignores_what_is_not_a_grant(text: str) -> None:
    assert parse_grant(text) is None


@pytest.mark.parametrize(
    ("line", "access", "verdict"),
    [
        (
            "team-a.review.1 CONNECT api.anthropic.com 443 200 TCP_TUNNEL",
            Access("team-a.review.1", "CONNECT", "api.anthropic.com", "443", 200, "TCP_TUNNEL"),
            "allowed",
        ),
        (
            "team-a.review.1 CONNECT evil.example 443 403 TCP_DENIED",
            Access("team-a.review.1", "CONNECT", "evil.example", "443", 403, "TCP_DENIED"),
            "refused",
        ),
        (
            "- GET stub.harness.test 8080 407 TCP_DENIED",
            Access("-", "GET", "stub.harness.test", "8080", 407, "TCP_DENIED"),
            "unauthenticated",
        ),
        (
            "team-a.review.1 GET stub.harness.test 8080 403 TCP_MISS",  # the upstream's own 403
            Access("team-a.review.1", "GET", "stub.harness.test", "8080", 403, "TCP_MISS"),
            "allowed",
        ),
    ],
)
def test_parse_access(line: str, access: Access, verdict: str) -> None:
    parsed = parse_access(line)
    assert parsed == access
    assert parsed.verdict == verdict


@pytest.mark.parametrize("line", ["", "too few fields", "a b c d notanumber e"])
def test_parse_access_skips_other_lines(line: str) -> None:
    assert parse_access(line) is None


def test_run_of_names_the_run_from_its_grant() -> None:
    assert run_of(GRANTS, "team-a.review.2") == "team-a/review"
    assert run_of(GRANTS, "stranger.1") == "stranger.1"


def test_metrics_text() -> None:
    text = render_metrics({("team-a", "-", "refused"): 2, ('a"b', "h:1", "allowed"): 1})
    assert 'harness_gateway_requests_total{namespace="team-a",host="-",verdict="refused"} 2' in text
    assert 'namespace="a\\"b"' in text
    assert text.startswith("# HELP harness_gateway_requests_total")


class Grants:
    """The grants the exporter would list, as the helpers' store gives them."""

    def current(self, user: str) -> dict[str, dict[str, Any]]:
        return GRANTS


def test_refusals_to_hosts_the_agent_chooses_add_no_series(capsys: pytest.CaptureFixture[str]) -> None:
    """The red team's run sent 23,000 CONNECTs to random hosts: 11,500 series. Now they are one series;
    each refusal's host and run are in its log line."""
    exporter = Exporter(Grants())
    for i in range(2000):
        exporter.record(f"team-a.review.1 CONNECT h{i}.evil.example 443 403 TCP_DENIED")
    exporter.record("team-a.review.1 CONNECT api.anthropic.com 443 200 TCP_TUNNEL")
    series = [line for line in exporter.metrics().splitlines() if not line.startswith("#")]
    assert sorted(series) == [
        'harness_gateway_requests_total{namespace="team-a",host="-",verdict="refused"} 2000',
        'harness_gateway_requests_total{namespace="team-a",host="api.anthropic.com:443",verdict="allowed"} 1',
    ]
    refusals = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert len(refusals) == 2000 and refusals[7]["host"] == "h7.evil.example:443"
    assert refusals[7]["run"] == "team-a/review"


class FixedGrants:
    """A grant store that holds GRANTS (the API server is the cluster test's)."""

    def current(self, user: str) -> dict[str, dict[str, Any]]:
        return GRANTS


@pytest.mark.parametrize(
    ("mode", "line", "reply"),
    [
        ("auth", f"team-a.review.1 {TOKEN_1}\n", "OK"),
        ("auth", f"team-a%2Ereview.1 {TOKEN_1}\n", "OK"),  # Squid URL-escapes the fields
        ("auth", f"team-a.other.1 {TOKEN_1}\n", "ERR"),
        ("auth", "garbage\n", "ERR"),
        ("acl", "team-a.review.1 api.anthropic.com 443\n", "OK"),
        ("acl", "team-a.review.1 api.anthropic.com 443 -\n", "OK"),  # as Squid 5 sends it
        ("acl", "team-a.review.1 other.example 443\n", "ERR"),
        ("acl", "only-one-field\n", "BH message=bad-request"),
    ],
)
def test_helper_answers_squid(mode: str, line: str, reply: str) -> None:
    assert answer(mode, FixedGrants(), line) == reply


def test_the_gateway_imports_only_the_standard_library_and_itself() -> None:
    """Its image carries the stdlib and harness_operator.gateway only (sandbox-image/Dockerfile)."""
    package = Path(rules.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert top in sys.stdlib_module_names or name.startswith("harness_operator.gateway"), (
                    f"{path.name} imports {name}"
                )
