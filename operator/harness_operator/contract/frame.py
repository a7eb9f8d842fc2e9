"""The output's trip through the pod log: a framed, base64, checksummed block (pure).

    ===HARNESS-OUTPUT-BEGIN v1 bytes=<n> sha256=<hex>===
    <base64, 76 characters a line>
    ===HARNESS-OUTPUT-END===

The runner writes the block last, after the agent's whole process group is gone, so the last BEGIN
line in the log is the runner's. The decoder also checks the byte count and the sha256, against the
frame's own header and, when given, against the sha256 from the termination message (which the agent
cannot write), so a forged, cut or rotated log is an error, never a wrong output.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass

FRAME_MARKER = "===HARNESS-OUTPUT-"  # what BEGIN and END start with; agent lines never do (events.py)
BEGIN = f"{FRAME_MARKER}BEGIN"
END = f"{FRAME_MARKER}END==="
LINE = 76
_HEADER = re.compile(r"^===HARNESS-OUTPUT-BEGIN v1 bytes=(\d+) sha256=([0-9a-f]{64})===$")


@dataclass(frozen=True)
class FrameError:
    """Why no output could be taken from a log."""

    message: str


def encode_frame(data: bytes) -> str:
    """The framed block for `data`, ending with a newline."""
    digest = hashlib.sha256(data).hexdigest()
    encoded = base64.b64encode(data).decode("ascii")
    body = [encoded[i : i + LINE] for i in range(0, len(encoded), LINE)]
    return "\n".join([f"{BEGIN} v1 bytes={len(data)} sha256={digest}===", *body, END]) + "\n"


def decode_frame(log_text: str, expected_sha256: str | None = None) -> bytes | FrameError:
    """The output framed at the end of a pod log, checked; a FrameError says what is wrong."""
    lines = [line.rstrip("\r") for line in log_text.split("\n")]
    starts = [i for i, line in enumerate(lines) if line.startswith(BEGIN)]
    if not starts:
        return FrameError("no output frame in the log")
    start = starts[-1]
    header = _HEADER.match(lines[start])
    if not header:
        return FrameError("malformed output frame header")
    size, digest = int(header.group(1)), header.group(2)
    try:
        end = lines.index(END, start + 1)
    except ValueError:
        return FrameError("output frame has no end marker (log cut or rotated?)")
    try:
        data = base64.b64decode("".join(lines[start + 1 : end]), validate=True)
    except ValueError as exc:
        return FrameError(f"output frame is not valid base64: {exc}")
    if len(data) != size:
        return FrameError(f"output frame holds {len(data)} bytes, header says {size}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        return FrameError("output frame sha256 does not match its header")
    if expected_sha256 is not None and actual != expected_sha256:
        return FrameError("output frame sha256 does not match the termination message")
    return data
