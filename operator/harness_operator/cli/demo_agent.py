"""harness-demo-agent: a stand-in agent CLI that answers without a model or a key (I/O, demo only).

It speaks Claude Code's `-p --output-format stream-json --verbose` dialect (init, assistant, result
with usage and cost) so `harnessctl run examples/demo/demo-run.yaml` shows output, tokens and cost on
a laptop with no key and no cluster. It says plainly on stderr that it is a demo.
"""

from __future__ import annotations

import json
import sys
import uuid

MODEL = "demo-model-1"
# Demo prices, USD per million tokens (input, output), only to show a reported cost.
PRICE_IN, PRICE_OUT = 3.0, 15.0


def parse_args(argv: list[str]) -> tuple[str, dict[str, str]]:
    """The prompt (`-p PROMPT`, or the first positional argument) and any `--flag value` options."""
    prompt = ""
    options: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-p", "--print") and i + 1 < len(argv):
            prompt, i = argv[i + 1], i + 2
            continue
        if arg.startswith("--"):
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            options[arg[2:]] = argv[i + 1] if has_value else "true"
            i += 2 if has_value else 1
            continue
        if not prompt:
            prompt = arg
        i += 1
    return prompt, options


def count_tokens(text: str) -> int:
    """A rough count (about four characters a token), good enough for a demo."""
    return max(1, (len(text) + 3) // 4)


def build_answer(prompt: str) -> str:
    words = prompt.split()
    return (
        "This is harness-demo-agent, not a real model.\n"
        f"Your prompt had {len(words)} words. Its first line, reversed word by word:\n"
        f"  {' '.join(reversed(prompt.splitlines()[0].split())) if prompt.strip() else '(empty)'}\n"
        "Point spec.provider at claude, codex or gemini to run a real agent.\n"
    )


def emit(event: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    prompt, options = parse_args(args)
    stdin = "" if sys.stdin is None or sys.stdin.isatty() else sys.stdin.read()
    print("harness-demo-agent: this is a demo agent; no model is called and no key is used", file=sys.stderr)
    session = str(uuid.uuid4())
    model = options.get("model", MODEL)
    answer = build_answer(prompt)
    tokens_in, tokens_out = count_tokens(prompt + stdin) + 900, count_tokens(answer)
    cost = round((tokens_in * PRICE_IN + tokens_out * PRICE_OUT) / 1_000_000, 6)
    usage = {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    emit({"type": "system", "subtype": "init", "session_id": session, "model": model, "tools": []})
    emit(
        {
            "type": "assistant",
            "session_id": session,
            "message": {
                "id": f"msg_demo_{session[:8]}",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": answer}],
                "usage": usage,
            },
        }
    )
    budget = options.get("max-budget-usd")
    over_budget = budget is not None and cost > float(budget)
    emit(
        {
            "type": "result",
            "subtype": "error_max_budget_usd" if over_budget else "success",
            "is_error": over_budget,
            "result": answer,
            "session_id": session,
            "num_turns": 1,
            "stop_reason": "end_turn",
            "terminal_reason": "completed",
            "total_cost_usd": cost,
            "usage": usage,
            "modelUsage": {
                model: {
                    "inputTokens": tokens_in,
                    "outputTokens": tokens_out,
                    "cacheReadInputTokens": 0,
                    "cacheCreationInputTokens": 0,
                    "costUSD": cost,
                }
            },
        }
    )
    return 1 if over_budget else 0


if __name__ == "__main__":
    sys.exit(main())
