"""The operator's HTTP client of forge APIs, for the reporting step: one call, bounded in time and size,
no redirect followed (I/O)."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

from harness_operator.core.forge.report_calls import ForgeCall

TIMEOUT_SECONDS = 10
MAX_ANSWER_BYTES = 1 << 20


class ForgeUnreachable(Exception):
    """The forge did not answer (refused, reset, timed out, a name that does not resolve)."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as it is: following one would carry the token's header to where the forge
    points, perhaps another host."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class ForgeClient:
    """Sends ForgeCalls; the answer's status and (bounded) body, whatever the status."""

    def __init__(self, timeout: float = TIMEOUT_SECONDS) -> None:
        self.timeout = timeout
        self._opener = urllib.request.build_opener(_NoRedirect())

    def send(self, call: ForgeCall) -> tuple[int, bytes]:
        request = urllib.request.Request(call.url, data=call.body, headers=call.headers, method=call.method)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                return int(response.status), response.read(MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as exc:
            with exc:
                return int(exc.code), exc.read(MAX_ANSWER_BYTES)
        except (OSError, ValueError) as exc:  # URLError and timeouts are OSErrors
            reason = getattr(exc, "reason", exc)
            raise ForgeUnreachable(f"{call.method} {call.url.split('?')[0]}: {reason}") from None
