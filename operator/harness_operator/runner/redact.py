"""Replace granted credential values with [REDACTED] in bytes, text and streams, also encoded (pure).

Each value is caught as written, inside a JSON string, and, when it has at least MIN_ENCODED_BYTES,
in its base64 (standard and URL-safe alphabets, with and without padding, at each of the three byte
alignments a value can have inside a longer encoded text), hex (lower and upper case) and URL-encoded
(percent-encoding) forms. Other transformations are not caught: docs/design-decisions.md says which.
"""

from __future__ import annotations

import base64
import builtins
import json
import re
from collections.abc import Callable, Iterable
from urllib.parse import quote, quote_plus

MARK = b"[REDACTED]"
# Shorter values get only their exact forms: an encoded form of a few characters would redact noise.
MIN_ENCODED_BYTES = 8


def build_base64_forms(raw: bytes) -> set[bytes]:
    """The base64 text that `raw` yields wherever it sits in a longer encoded text: the full encoding
    (padded and not), and for each alignment (0, 1 or 2 bytes before it in its 3-byte group) the run
    of characters that depend on `raw` alone."""
    encoders: list[Callable[[bytes], bytes]] = [base64.b64encode, base64.urlsafe_b64encode]
    forms: set[bytes] = set()
    for encode in encoders:
        full = encode(raw)
        forms |= {full, full.rstrip(b"=")}
        for offset in (0, 1, 2):
            encoded = encode(b"\0" * offset + raw)
            first = -(-8 * offset // 6)  # the first character with no bit from the bytes before
            last = 8 * (offset + len(raw)) // 6  # past the last character with no bit from those after
            forms.add(encoded[first:last])
    return forms


def build_url_forms(value: str) -> set[bytes]:
    """Percent-encodings as common encoders write them: every reserved character or all but '/',
    spaces as %20 or '+', hex digits upper or lower case."""
    upper = {quote(value, safe=""), quote(value, safe="/"), quote_plus(value, safe="")}
    lower = {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), form) for form in upper}
    return {form.encode("ascii") for form in upper | lower}


def build_forms(value: str) -> set[bytes]:
    """Every form of one secret value that is redacted."""
    raw = value.encode("utf-8")
    forms = {
        raw,
        json.dumps(value)[1:-1].encode("utf-8"),
        json.dumps(value, ensure_ascii=False)[1:-1].encode("utf-8"),
    }
    if len(raw) >= MIN_ENCODED_BYTES:
        forms |= build_base64_forms(raw)
        forms |= {raw.hex().encode("ascii"), raw.hex().upper().encode("ascii")}
        forms |= build_url_forms(value)
    return {form for form in forms if form}


class Redactor:
    """Redacts each secret in every form build_forms gives."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[bytes] = set()
        for value in secrets:
            if value:
                forms |= build_forms(value)
        self._forms = sorted(forms, key=len, reverse=True)  # longest first: no partial leftovers

    def __bool__(self) -> bool:
        return bool(self._forms)

    def finds(self, data: builtins.bytes) -> bool:
        """Whether `data` holds a secret in one of its forms."""
        return any(form in data for form in self._forms)

    def bytes(self, data: bytes) -> bytes:
        for form in self._forms:
            if form in data:
                data = data.replace(form, MARK)
        return data

    def text(self, data: str) -> str:
        return self.bytes(data.encode("utf-8")).decode("utf-8", "replace") if self._forms else data

    def held_tail(self, data: builtins.bytes) -> int:
        """How many bytes at the end of `data` could be the start of a form the next bytes complete."""
        held = 0
        for form in self._forms:
            start = max(0, len(data) - len(form) + 1)
            at = data.find(form[:1], start)
            while at != -1 and len(data) - at > held:
                if form.startswith(data[at:]):
                    held = len(data) - at
                    break
                at = data.find(form[:1], at + 1)
        return held


class StreamRedactor:
    """Redacts a stream read in chunks: a value split across two reads is still caught, because the
    tail that could begin one is held back until the next chunk (or the end) decides."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        """The bytes of `chunk` (after what was held) that are safe to pass on now."""
        data = self._redactor.bytes(self._held + chunk)
        keep = self._redactor.held_tail(data)
        self._held = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep]

    def flush(self) -> bytes:
        """What is still held, at the end of the stream."""
        data, self._held = self._held, b""
        return data
