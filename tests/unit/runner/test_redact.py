"""Redaction of granted values: exact, JSON-escaped and encoded forms (base64 at each alignment and both
alphabets, hex, URL-encoding), values split across stream reads, and what is deliberately not caught."""

import base64
import random
import re
from urllib.parse import quote, quote_plus

import pytest

from harness_operator.runner.redact import MARK, MIN_ENCODED_BYTES, Redactor, StreamRedactor

SECRET = "sk-live/4f+9Qz?a=b&c d\u00e9"  # reserved characters, a space and a non-ASCII letter
RAW = SECRET.encode()


def b64_inside(prefix: bytes, encode: object = base64.b64encode) -> bytes:
    """The secret base64-encoded in the middle of a longer text, `prefix` bytes decide its alignment."""
    return encode(prefix + RAW + b" and some more bytes after it")  # type: ignore[operator,no-any-return]


@pytest.mark.parametrize(
    "leak",
    [
        RAW,
        base64.b64encode(RAW),
        base64.b64encode(RAW).rstrip(b"="),
        base64.urlsafe_b64encode(RAW),
        base64.urlsafe_b64encode(RAW).rstrip(b"="),
        b64_inside(b""),
        b64_inside(b"x"),
        b64_inside(b"xy"),
        b64_inside(b"xyz"),
        b64_inside(b"x", base64.urlsafe_b64encode),
        b64_inside(b"xy", base64.urlsafe_b64encode),
        RAW.hex().encode(),
        RAW.hex().upper().encode(),
        quote(SECRET, safe="").encode(),
        quote(SECRET).encode(),
        quote_plus(SECRET).encode(),
        re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quote(SECRET, safe="")).encode(),
    ],
    ids=[
        "exact",
        "base64",
        "base64 unpadded",
        "base64url",
        "base64url unpadded",
        "base64 inside, aligned",
        "base64 inside, offset 1",
        "base64 inside, offset 2",
        "base64 inside, offset 3 (aligned again)",
        "base64url inside, offset 1",
        "base64url inside, offset 2",
        "hex",
        "HEX",
        "url-encoded",
        "url-encoded keeping /",
        "form-encoded",
        "url-encoded lower-case",
    ],
)
def test_every_form_is_redacted(leak: bytes) -> None:
    redacted = Redactor([SECRET]).bytes(b"before " + leak + b" after")
    assert MARK in redacted
    assert leak not in redacted
    # what remains of an encoded form is at most the characters that carry bits of the neighbours
    assert b"before " in redacted and b" after" in redacted


def decodable(text: bytes) -> bytes:
    """Whatever base64 text decodes to, read from each of the four character offsets."""
    out = b""
    for start in range(4):
        chunk = text[start:]
        chunk = chunk[: len(chunk) // 4 * 4]
        out += base64.b64decode(chunk, validate=False) if chunk else b""
    return out


@pytest.mark.parametrize("prefix", [b"", b"x", b"xy"])
def test_base64_inside_a_longer_text_leaves_no_decodable_part_of_the_secret(prefix: bytes) -> None:
    redacted = Redactor([SECRET]).bytes(b64_inside(prefix))
    assert MARK in redacted
    recovered = b"".join(decodable(part) for part in redacted.split(MARK))
    assert not any(RAW[i : i + 3] in recovered for i in range(len(RAW) - 2))


def test_short_values_are_redacted_only_as_written() -> None:
    short = "abc1234"  # under MIN_ENCODED_BYTES: an encoded core of a few characters would hit noise
    assert len(short) < MIN_ENCODED_BYTES
    redactor = Redactor([short])
    assert redactor.bytes(b"x abc1234 y") == b"x " + MARK + b" y"
    hexed = short.encode().hex().encode()
    assert redactor.bytes(hexed) == hexed


def test_json_escaped_forms_still_redacted() -> None:
    secret = 'tok-"quoted"-\\-value'
    redactor = Redactor([secret])
    assert redactor.text('{"x": "tok-\\"quoted\\"-\\\\-value"}') == '{"x": "[REDACTED]"}'


def stream(redactor: Redactor, chunks: list[bytes]) -> bytes:
    out = StreamRedactor(redactor)
    return b"".join([*(out.feed(c) for c in chunks), out.flush()])


def test_a_value_split_across_reads_is_caught() -> None:
    secret = "line-one\nline-two-of-a-pem"  # a multi-line value spans two readline() chunks
    text = b"key: " + secret.encode() + b"\nnext line\n"
    chunks = [line + b"\n" for line in text.split(b"\n")[:-1]]
    assert stream(Redactor([secret]), chunks) == b"key: " + MARK + b"\nnext line\n"


@pytest.mark.parametrize("seed", range(20))
def test_any_chunking_gives_the_same_result_as_one_read(seed: int) -> None:
    rng = random.Random(seed)
    redactor = Redactor([SECRET, "another-granted-value"])
    text = (
        b"start "
        + RAW
        + b" mid "
        + base64.b64encode(b"zz" + RAW)
        + b" hex "
        + RAW.hex().encode()
        + b" another-granted-value end "
        + RAW[:5]
    )
    cuts = sorted(rng.sample(range(1, len(text)), 8))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert stream(redactor, chunks) == redactor.bytes(text)


def test_only_a_possible_start_is_held_back() -> None:
    """Live stderr stays live: a chunk is held only while its tail could begin a secret."""
    out = StreamRedactor(Redactor(["secret-value-1"]))
    assert out.feed(b"plain line\n") == b"plain line\n"
    assert out.feed(b"almost secret-val") == b"almost "
    assert out.feed(b"ue-2\n") == b"secret-value-2\n"
    assert out.flush() == b""


def test_a_partial_value_at_the_very_end_is_not_caught() -> None:
    """Documented limit: a prefix of a value is not the value."""
    assert stream(Redactor(["secret-value-1"]), [b"x secret-val"]) == b"x secret-val"
