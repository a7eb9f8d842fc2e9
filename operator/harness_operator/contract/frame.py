"""The output's trip through the pod log: a framed, base64, checksummed block (pure).

    ===HARNESS-OUTPUT-BEGIN v1 bytes=<n> sha256=<hex>===
    <base64, 76 characters a line>
    ===HARNESS-OUTPUT-END===

The agent's session files travel the same way in a block of kind SESSION (===HARNESS-SESSION-...).

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

FRAME_MARKER = "===HARNESS-"  # what every frame's BEGIN and END start with; agent lines never do (events.py)
OUTPUT = "OUTPUT"
SESSION = "SESSION"
LINE = 76


def _begin(kind: str) -> str:
    return f"{FRAME_MARKER}{kind}-BEGIN"


def _end(kind: str) -> str:
    return f"{FRAME_MARKER}{kind}-END==="


@dataclass(frozen=True)
class FrameError:
    """Why no output could be taken from a log."""

    message: str


def encode_frame(data: bytes, kind: str = OUTPUT) -> str:
    """The framed block for `data`, ending with a newline."""
    digest = hashlib.sha256(data).hexdigest()
    encoded = base64.b64encode(data).decode("ascii")
    body = [encoded[i : i + LINE] for i in range(0, len(encoded), LINE)]
    return "\n".join([f"{_begin(kind)} v1 bytes={len(data)} sha256={digest}===", *body, _end(kind)]) + "\n"


def decode_frame(log_text: str, expected_sha256: str | None = None, kind: str = OUTPUT) -> bytes | FrameError:
    """The block of `kind` framed last in a pod log, checked; a FrameError says what is wrong."""
    what = kind.lower()
    lines = [line.rstrip("\r") for line in log_text.split("\n")]
    starts = [i for i, line in enumerate(lines) if line.startswith(_begin(kind))]
    if not starts:
        return FrameError(f"no {what} frame in the log")
    start = starts[-1]
    header = re.match(rf"^{re.escape(_begin(kind))} v1 bytes=(\d+) sha256=([0-9a-f]{{64}})===$", lines[start])
    if not header:
        return FrameError(f"malformed {what} frame header")
    size, digest = int(header.group(1)), header.group(2)
    try:
        end = lines.index(_end(kind), start + 1)
    except ValueError:
        return FrameError(f"{what} frame has no end marker (log cut or rotated?)")
    try:
        data = base64.b64decode("".join(lines[start + 1 : end]), validate=True)
    except ValueError as exc:
        return FrameError(f"{what} frame is not valid base64: {exc}")
    if len(data) != size:
        return FrameError(f"{what} frame holds {len(data)} bytes, header says {size}")
    actual = hashlib.sha256(data).hexdigest()
    if actual != digest:
        return FrameError(f"{what} frame sha256 does not match its header")
    if expected_sha256 is not None and actual != expected_sha256:
        return FrameError(f"{what} frame sha256 does not match the termination message")
    return data
