"""Replace granted credential values with [REDACTED] in bytes and text (pure)."""

from __future__ import annotations

import json
from collections.abc import Iterable

MARK = b"[REDACTED]"


class Redactor:
    """Redacts each secret as written and as it appears inside a JSON string."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[bytes] = set()
        for value in secrets:
            if not value:
                continue
            forms.add(value.encode("utf-8"))
            forms.add(json.dumps(value)[1:-1].encode("utf-8"))
            forms.add(json.dumps(value, ensure_ascii=False)[1:-1].encode("utf-8"))
        self._forms = sorted(forms, key=len, reverse=True)  # longest first: no partial leftovers

    def __bool__(self) -> bool:
        return bool(self._forms)

    def bytes(self, data: bytes) -> bytes:
        for form in self._forms:
            if form in data:
                data = data.replace(form, MARK)
        return data

    def text(self, data: str) -> str:
        return self.bytes(data.encode("utf-8")).decode("utf-8", "replace") if self._forms else data
