"""Child names: within Kubernetes' limits, deterministic, and distinct for distinct inputs."""

import re

import pytest

from harness_operator.core.naming import end_event_name, fit_name, job_name

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
