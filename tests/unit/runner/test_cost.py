"""Cost (reported / computed / unknown), the output frame, the result document and the local status."""

import hashlib
import json

import pytest

from harness_operator.api.v1alpha1 import ModelPricing, Usage
from harness_operator.contract.frame import FrameError, decode_frame, encode_frame
from harness_operator.contract.result import (
    TERMINATION_LIMIT,
    ResultDocument,
    build_result_doc,
    parse_termination_message,
    render_termination_message,
)
from harness_operator.contract.usage import Tokens
from harness_operator.core.status.usage import sum_usage
from harness_operator.runner.attempt import agent_exit_code
from harness_operator.runner.cost import PriceBook, compute_cost, compute_usage
from harness_operator.runner.parsers import Report

PRICING = {"m": ModelPricing(input=2, output=10, cache_read=0.5, cache_write=4)}
BOOK = PriceBook(PRICING)


# --- cost ---------------------------------------------------------------------------------------------


def test_reported_cost_wins():
    assert compute_cost(Report(cost_usd=0.5, tokens=Tokens(input=10)), BOOK) == (0.5, "reported", None)


def test_computed_cost_from_pricing():
    report = Report(model="m", tokens=Tokens(input=1_000_000, output=100_000, cache_read=2_000_000))
    cost = compute_cost(report, BOOK)
    assert (cost.source, cost.price_source) == ("computed", "definition")
    assert cost.usd == pytest.approx(2 + 1 + 1)


def test_computed_cost_per_model():
    book = PriceBook({"a": ModelPricing(input=1), "b": ModelPricing(output=1)})
    report = Report(by_model={"a": Tokens(input=1_000_000), "b": Tokens(output=2_000_000)})
    assert compute_cost(report, book) == (pytest.approx(3.0), "computed", "definition")


def test_unknown_without_pricing_or_tokens():
    assert compute_cost(Report(tokens=Tokens(input=5)), PriceBook()) == (None, "unknown", None)
    assert compute_cost(Report(), BOOK) == (None, "unknown", None)
    usage = compute_usage(Report(), PriceBook())
    assert usage.cost_usd is None and usage.input_tokens is None and usage.cost_source == "unknown"


def test_model_hint_picks_the_price_when_the_cli_names_no_model():
    book = PriceBook({"a": ModelPricing(input=1), "b": ModelPricing(input=100)})
    assert compute_cost(Report(tokens=Tokens(input=1_000_000)), book, "b").usd == 100.0
    assert compute_cost(Report(tokens=Tokens(input=1_000_000)), book) == (None, "unknown", None)


def test_sum_usage_keeps_unknown_unknown():
    known = Usage(input_tokens=1, cost_usd=0.1, cost_source="reported")
    assert sum_usage([known, known]).cost_usd == pytest.approx(0.2)
    assert sum_usage([known, Usage(input_tokens=2)]).cost_usd is None
    assert sum_usage([known, Usage(input_tokens=2)]).input_tokens == 3


# --- frame --------------------------------------------------------------------------------------------


def test_frame_round_trip_at_the_end_of_a_log():
    data = ("résumé\n" * 200).encode()
    log = "agent stderr line\nmore\n" + encode_frame(data)
    assert decode_frame(log) == data
    assert decode_frame(log, hashlib.sha256(data).hexdigest()) == data


def test_empty_output_frames():
    assert decode_frame(encode_frame(b"")) == b""


def test_the_last_frame_wins_over_a_forged_earlier_one():
    forged = encode_frame(b"forged by the agent on stderr")
    real = encode_frame(b"real output")
    assert (
        decode_frame(forged + "noise\n" + real, hashlib.sha256(b"real output").hexdigest()) == b"real output"
    )


def test_frame_errors():
    assert isinstance(decode_frame("nothing here\n"), FrameError)
    cut = encode_frame(b"x" * 500).split("\n")
    assert isinstance(decode_frame("\n".join(cut[:3])), FrameError)  # no end marker
    tampered = encode_frame(b"abc").replace("YWJj", "YWJk")
    assert isinstance(decode_frame(tampered), FrameError)
    wrong = decode_frame(encode_frame(b"abc"), "0" * 64)
    assert isinstance(wrong, FrameError) and "termination message" in wrong.message


def test_frame_survives_crlf():
    assert decode_frame(encode_frame(b"hello").replace("\n", "\r\n")) == b"hello"


# --- result document / termination message ------------------------------------------------------------


def doc(**overrides):
    base = dict(
        attempt=1,
        provider="p",
        exit_code=0,
        reason=None,
        message="",
        usage={"costSource": "unknown"},
        model="m",
        session_id="s",
        output=b"out",
        output_bytes=3,
        truncated=False,
    )
    base.update(overrides)
    return build_result_doc(**base)


def test_result_doc_fields():
    d = doc()
    assert d.output is not None
    assert d.exit_code == 0 and d.output.sha256 == hashlib.sha256(b"out").hexdigest()
    assert "reason" not in d.to_doc()
    assert parse_termination_message(render_termination_message(d)) == d


def test_termination_message_never_exceeds_4k():
    huge = doc(
        exit_code=3,
        reason="ProviderFailed",
        message="x" * 20000,
        cli_version="v" * 5000,
        session_id="s" * 3000,
    )
    text = render_termination_message(huge)
    assert len(text.encode()) <= TERMINATION_LIMIT
    parsed = json.loads(text)
    assert parsed["exitCode"] == 3 and parsed["reason"] == "ProviderFailed"
    assert huge.output is not None and parsed["output"]["sha256"] == huge.output.sha256


def test_termination_message_essentials_when_even_the_reason_is_huge():
    text = render_termination_message(
        doc(exit_code=1, reason="R" * 10000, usage={"priceSource": "y" * 10000})
    )
    assert len(text.encode()) <= TERMINATION_LIMIT
    assert json.loads(text)["exitCode"] == 1


def test_fallback_rule():
    assert ResultDocument(exit_code=2, reason="ProviderFailed").fallback_allowed
    assert ResultDocument(exit_code=1, reason="AuthFailed").fallback_allowed
    for reason in ("Timeout", "Cancelled", "CostLimitExceeded"):
        assert not ResultDocument(exit_code=124, reason=reason).fallback_allowed
    assert not ResultDocument(exit_code=0).fallback_allowed


@pytest.mark.parametrize(("returncode", "expected"), [(0, 0), (1, 1), (124, 124), (-9, 137), (-15, 143)])
def test_agent_exit_code_reports_a_signal_as_a_shell_does(returncode: int, expected: int) -> None:
    assert agent_exit_code(returncode) == expected
