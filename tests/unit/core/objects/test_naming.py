"""Child names: within Kubernetes' limits, deterministic, and distinct for distinct inputs."""

import re

import pytest

from harness_operator.core.objects.naming import (
    encode_user_label,
    end_event_name,
    fit_name,
    job_name,
    workspace_claim_name,
)

SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
UID = "0f8e3c1a-5b2d-4e6f-9a7b-1c2d3e4f5a6b"


@pytest.mark.parametrize("run", ["r", "a" * 63, "b" * 253])
def test_the_end_event_name_is_a_subdomain_of_the_run_and_uid(run: str) -> None:
    name = end_event_name(run, UID)
    assert len(name) <= 253
    assert SUBDOMAIN.match(name), name
    assert name.endswith(".end")
    assert name == end_event_name(run, UID)


def test_a_run_recreated_under_its_name_gets_another_end_event() -> None:
    assert end_event_name("r", UID) != end_event_name("r", UID.replace("0f8e", "1f8e"))
    long = "c" * 240
    assert end_event_name(long, UID) != end_event_name(long, UID.replace("0f8e", "1f8e"))


def test_fit_name_keeps_short_names_and_cuts_long_ones_with_a_hash() -> None:
    assert fit_name("run", "-a1") == "run-a1"
    assert job_name("r" * 70, 1) != job_name("r" * 71, 1)
    assert len(job_name("r" * 70, 12)) == 63
    assert job_name("r" * 70, 12).endswith("-a12")


LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
# Usernames as authenticators write them, and the label value that names each (the admission policy's
# encoding, templates/admission-run-user.yaml).
USERS = {
    "alice": "alice",
    "Alice": "Alice",
    "alice@example.com": "alice_at_example.com",
    "system:serviceaccount:team-a:bot": "system_c_serviceaccount_c_team-a_c_bot",
    "a_b": "a__b",
    "a:b": "a_c_b",
    "a_c_b": "a__c__b",
    "oidc:bob.smith@corp.example": "oidc_c_bob.smith_at_corp.example",
}


def test_a_username_becomes_one_label_value_and_no_two_share_one() -> None:
    for user, value in USERS.items():
        assert encode_user_label(user) == value
        assert LABEL_VALUE.match(value), value
    assert len(set(USERS.values())) == len(USERS)


@pytest.mark.parametrize(
    "user",
    ["https://issuer.example#1234", "a b", "_svc", "x" * 64, "bob@", "system:serviceaccount:" + "n" * 40],
)
def test_a_username_no_label_value_can_hold_is_none(user: str) -> None:
    assert encode_user_label(user) is None


def test_each_users_agent_workspace_is_its_own_claim() -> None:
    """Keyed on the user label as written: users who differ only in case, or in what a DNS name cannot
    hold, get claims of their own."""
    names = {workspace_claim_name("r", "claude", "agentUser", u) for u in USERS.values()}
    assert len(names) == len(USERS)
    for name in names:
        assert SUBDOMAIN.match(name) and len(name) <= 63 and name.startswith("harness-ws-claude-"), name
    long = workspace_claim_name("r", "claude", "agentUser", "u" * 63)
    assert len(long) <= 63 and long != workspace_claim_name("r", "claude", "agentUser", "u" * 62)
