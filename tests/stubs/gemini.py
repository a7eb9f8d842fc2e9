"""Stub of the Gemini API (generativelanguage ``v1beta``), for the Gemini CLI with an API key.

    from tests.stubs.gemini import GeminiStub
    with GeminiStub(mode="ok") as stub:
        env = {"GOOGLE_GEMINI_BASE_URL": stub.base_url, "GEMINI_API_KEY": "sk-test-stub"}

    python -m tests.stubs.gemini --mode ok

Answers ``POST /<version>/models/<model>:streamGenerateContent`` (SSE with ``alt=sse``, else a
JSON array), ``:generateContent``, ``:countTokens`` and ``:embedContent``; logs anything else.

Modes: ok, tool_use (first call offering functions answers a functionCall), call (the first call
offering functions answers a functionCall of ``call``, a constructor keyword: the tool's name and
arguments, e.g. an MCP server's tool, whether it is offered or not; later calls answer TEXT),
unauthorized (401, ``API_KEY_INVALID``), hang.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ._base import RecordedRequest, Response, StubServer, serve_main

TEXT = "Hello from the Gemini stub."
USAGE = {
    "promptTokenCount": 1234,
    "candidatesTokenCount": 56,
    "cachedContentTokenCount": 100,
    "thoughtsTokenCount": 0,
    "totalTokenCount": 1290,
}


def _fill(schema: dict[str, Any]) -> Any:
    """A minimal value that satisfies a (simple) JSON schema."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return schema["enum"][0]
    t = str(schema.get("type", "object")).lower()
    if t == "object":
        props = schema.get("properties") or {}
        keys = schema.get("required") or list(props)
        return {k: _fill(props.get(k, {})) for k in keys}
    if t == "array":
        return []
    if t in ("number", "integer"):
        return schema.get("minimum", 0)
    if t == "boolean":
        return False
    return "stub"


class GeminiStub(StubServer):
    name = "gemini"
    modes = ("ok", "tool_use", "call", "unauthorized", "hang")
    text = TEXT

    def __init__(self, *args: Any, call: tuple[str, dict[str, Any]] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.call = call  # the call mode's tool and arguments
        self._tool_use_sent = False

    @staticmethod
    def _method(req: RecordedRequest) -> str:
        last = req.path.rsplit("/", 1)[-1]
        return last.split(":", 1)[1] if ":" in last else ""

    @staticmethod
    def _model(req: RecordedRequest) -> str:
        last = req.path.rsplit("/", 1)[-1]
        return last.split(":", 1)[0]

    def is_model_call(self, req: RecordedRequest) -> bool:
        return req.method == "POST" and self._method(req) in ("generateContent", "streamGenerateContent")

    def is_known(self, req: RecordedRequest) -> bool:
        return self.is_model_call(req) or self._method(req) in (
            "countTokens",
            "embedContent",
            "batchEmbedContents",
        )

    def handle(self, req: RecordedRequest) -> Response:
        method = self._method(req)
        if self.mode == "unauthorized" and method:
            return Response(
                401,
                {
                    "error": {
                        "code": 401,
                        "message": "API key not valid. Please pass a valid API key. (stub)",
                        "status": "UNAUTHENTICATED",
                        "details": [
                            {
                                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                                "reason": "API_KEY_INVALID",
                                "domain": "googleapis.com",
                            }
                        ],
                    }
                },
            )
        if method == "countTokens":
            return Response(200, {"totalTokens": USAGE["promptTokenCount"]})
        if method in ("embedContent",):
            return Response(200, {"embedding": {"values": [0.0] * 8}})
        if method == "batchEmbedContents":
            n = len((req.body or {}).get("requests") or []) if isinstance(req.body, dict) else 1
            return Response(200, {"embeddings": [{"values": [0.0] * 8}] * max(n, 1)})
        if not self.is_model_call(req):
            return Response(200, {})
        body = req.body if isinstance(req.body, dict) else {}
        parts = self._parts(body)
        # As the API does, `candidateCount` candidates, each billed.
        count = (body.get("generationConfig") or {}).get("candidateCount")
        count = count if isinstance(count, int) and count > 1 else 1
        usage = dict(USAGE, candidatesTokenCount=USAGE["candidatesTokenCount"] * count)
        usage["totalTokenCount"] = usage["promptTokenCount"] + usage["candidatesTokenCount"]
        chunk = {
            "candidates": [
                {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": i}
                for i in range(count)
            ],
            "usageMetadata": usage,
            "modelVersion": self._model(req),
            "responseId": "stub-response-1",
        }
        if method == "generateContent":
            return Response(200, chunk)
        if (req.query.get("alt") or [""])[0] == "sse":
            return Response(200, sse=self._sse(chunk))
        return Response(200, [chunk])

    def _parts(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        json_answer = self._json_answer(body)
        if json_answer is not None:
            return [{"text": json.dumps(json_answer)}]
        if self.mode == "call" and self.call is not None and body.get("tools"):
            with self._lock:
                first, self._tool_use_sent = not self._tool_use_sent, True
            if first:
                name, args = self.call
                return [{"functionCall": {"name": name, "args": dict(args)}}]
        if self.mode == "tool_use" and not self._tool_use_sent:
            names = [
                d.get("name")
                for t in body.get("tools") or []
                if isinstance(t, dict)
                for d in t.get("functionDeclarations") or []
                if isinstance(d, dict)
            ]
            names = [n for n in names if n]
            if names:
                pref = [n for n in names if n in ("list_directory", "glob", "read_file")]
                name = (pref or names)[0]
                with self._lock:
                    self._tool_use_sent = True
                args = {
                    "path": ".",
                    "dir_path": ".",
                    "pattern": "*.no-such-extension",
                    "file_path": "no-such-file.txt",
                }
                return [{"functionCall": {"name": name, "args": args}}]
        return [{"text": self.text}]

    @staticmethod
    def _json_answer(body: dict[str, Any]) -> Any:
        """Side calls that ask for JSON (the CLI's model router, its loop detector, ...)."""
        cfg = body.get("generationConfig") or {}
        if cfg.get("responseMimeType") != "application/json" and not (
            cfg.get("responseJsonSchema") or cfg.get("responseSchema")
        ):
            return None
        if "model_choice" in json.dumps(body):
            return {"reasoning": "stub: simple request", "model_choice": "flash"}
        return _fill(cfg.get("responseJsonSchema") or cfg.get("responseSchema") or {"type": "object"})

    def _sse(self, chunk: dict[str, Any]) -> Iterator[tuple[None, Any]]:
        first = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": chunk["candidates"][0]["content"]["parts"]},
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": USAGE["promptTokenCount"],
                "totalTokenCount": USAGE["promptTokenCount"],
            },
            "modelVersion": chunk["modelVersion"],
            "responseId": chunk["responseId"],
        }
        last = {
            "candidates": [
                {"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}
            ],
            "usageMetadata": chunk["usageMetadata"],
            "modelVersion": chunk["modelVersion"],
            "responseId": chunk["responseId"],
        }
        yield None, first
        yield None, last


def main(argv: list[str] | None = None) -> int:
    return serve_main(GeminiStub, argv)


if __name__ == "__main__":
    raise SystemExit(main())
