"""The built-ins' `knownOptions`: every long option each pinned CLI's help prints, as a `with` key.

    python -m tests.cli_options          # print the lists the installed CLIs give
    python -m tests.cli_options --write  # write them into operator/harness_operator/catalog/*.yaml

The CLIs are the pinned ones tests/cli-tools.sh installs (the images' versions);
tests/integration_cli/test_cli_options.py fails when a catalog entry's list is not what its CLI prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOG = ROOT / "operator" / "harness_operator" / "catalog"
CLI_BIN = Path(os.environ.get("HARNESS_CLI_BIN", Path.home() / ".cache/harness-operator/cli-tools/bin"))
# Where each built-in's options go: its binary and prefix arguments, then --help.
HELP = {
    "aider": ["aider", "--help"],
    "claude": ["claude", "--help"],
    "codex": ["codex", "exec", "--help"],
    "copilot": ["copilot", "--help"],
    "gemini": ["gemini", "--help"],
    "opencode": ["opencode", "run", "--help"],
    "pi": ["pi", "--help"],
    "qwen": ["qwen", "--help"],
}
# Options a CLI accepts but its help does not print (docs/cli-facts.md says how each was seen).
HIDDEN = {"claude": ["max-turns"]}
LONG_OPTION = re.compile(r"(?<![\w-])--([a-zA-Z][a-zA-Z0-9]*(?:-[a-zA-Z0-9]+)*)(?![\w])")
LINES = re.compile(r"^  knownOptions: \[[^\]]*\].*$", re.MULTILINE)
WIDTH = 110


def options_of(provider: str) -> list[str]:
    """The long options the pinned CLI's help prints (and the hidden ones it accepts), sorted."""
    argv = HELP[provider]
    with tempfile.TemporaryDirectory() as home:
        done = subprocess.run(
            [str(CLI_BIN / argv[0]), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=home,
            env={"PATH": os.environ["PATH"], "HOME": home, "NO_COLOR": "1", "TERM": "dumb"},
        )
    text = done.stdout + done.stderr
    found = set(LONG_OPTION.findall(text)) | set(HIDDEN.get(provider, []))
    assert done.returncode == 0 and len(found) > 5, f"{argv}: {done.returncode}\n{text[-2000:]}"
    return sorted(found - {"help"})


def render_lines(options: list[str]) -> str:
    """A flow list wrapped at WIDTH, under a comment naming its generator."""
    lines, line = [], "  knownOptions: ["
    for i, option in enumerate(options):
        word = option + ("]" if i == len(options) - 1 else ",")
        if len(line) + 1 + len(word) > WIDTH:
            lines.append(line)
            line = "    " + word
        else:
            line += ("" if line.endswith("[") else " ") + word
    return "\n".join([*lines, line])


def write(provider: str, options: list[str]) -> None:
    path = CATALOG / f"{provider}.yaml"
    text = path.read_text()
    lines = render_lines(options)
    if LINES.search(text):
        text = LINES.sub(lambda _: lines, text)
    else:  # after kebabCaseFlags, where a reader of the flags looks, under a comment naming this
        comment = "  # what the pinned CLI's help prints: python -m tests.cli_options --write"
        text = re.sub(
            r"^(  kebabCaseFlags: .*)$", lambda m: f"{m[1]}\n{comment}\n{lines}", text, count=1, flags=re.M
        )
    path.write_text(text)


def main(argv: list[str]) -> int:
    for provider in sorted(HELP):
        options = options_of(provider)
        if "--write" in argv:
            write(provider, options)
        print(f"{provider}: {len(options)} options")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
