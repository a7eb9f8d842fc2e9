"""Run a real agent CLI against a local vendor stub and capture what it prints.

    python -m tests.stubs.run_cli --stub anthropic --mode ok \\
        --env ANTHROPIC_BASE_URL={base_url} --env ANTHROPIC_API_KEY=sk-test-fixture \\
        --out tests/fixtures/cli/claude/success -- claude -p hi --output-format stream-json --verbose

writes ``<out>.stdout``, ``<out>.stderr``, ``<out>.exit`` and ``<out>.requests.json`` (the stub's
request log: method, path, logged headers, body keys; never credentials).

The child gets a minimal environment: PATH, a throw-away HOME (so no real login or config is
read), LANG, NO_COLOR, plus every ``--env`` (``{base_url}`` is replaced by the stub's URL and
``{home}`` by the throw-away HOME). The working directory is a fixed empty directory so the
captured output does not depend on where the repository is checked out.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

from ._base import StubServer

STUBS = {
    "anthropic": ("tests.stubs.anthropic", "AnthropicStub"),
    "openai": ("tests.stubs.openai", "OpenAIStub"),
    "gemini": ("tests.stubs.gemini", "GeminiStub"),
}

WORKDIR = "/tmp/harness-cli-fixture/work"
HOMEDIR = "/tmp/harness-cli-fixture/home"


def stub_class(name: str) -> type[StubServer]:
    mod, cls = STUBS[name]
    return getattr(importlib.import_module(mod), cls)


def run(
    stub: StubServer,
    argv: list[str],
    env: dict[str, str],
    timeout: float = 120.0,
    stdin: str | None = None,
    home: str | None = None,
    workdir: str | None = None,
    setup_home: Any = None,
) -> tuple[int, str, str, str]:
    """Run argv with env (after substitution) against a started stub; returns (exit, out, err, home)."""
    home = home or tempfile.mkdtemp(prefix="harness-cli-home-")
    workdir = workdir or tempfile.mkdtemp(prefix="harness-cli-work-")
    os.makedirs(home, exist_ok=True)
    os.makedirs(workdir, exist_ok=True)
    if setup_home:
        setup_home(home, stub)
    child_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "LANG": "C.UTF-8",
        "NO_COLOR": "1",
        "TERM": "dumb",
    }
    for k, v in env.items():
        child_env[k] = v.replace("{base_url}", stub.base_url).replace("{home}", home)
    argv = [a.replace("{base_url}", stub.base_url).replace("{home}", home) for a in argv]
    try:
        proc = subprocess.run(
            argv,
            env=child_env,
            cwd=workdir,
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return proc.returncode, proc.stdout, proc.stderr, home
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return 124, out, err + f"\n[run_cli: killed after {timeout}s timeout]\n", home


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.stubs.run_cli")
    p.add_argument("--stub", required=True, choices=sorted(STUBS))
    p.add_argument("--mode", default="ok")
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--out", required=True, help="path prefix for .stdout/.stderr/.exit/.requests.json")
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--stdin", default=None)
    p.add_argument("--keep-home", action="store_true")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        p.error("no command given")
    env = dict(e.split("=", 1) for e in args.env)
    shutil.rmtree(HOMEDIR, ignore_errors=True)
    shutil.rmtree(WORKDIR, ignore_errors=True)
    with stub_class(args.stub)(mode=args.mode) as stub:
        code, out, err, _home = run(stub, cmd, env, args.timeout, args.stdin, HOMEDIR, WORKDIR)
        reqs = [r.to_dict() for r in stub.requests]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out + ".stdout", "w") as f:
        f.write(out)
    with open(args.out + ".stderr", "w") as f:
        f.write(err)
    with open(args.out + ".exit", "w") as f:
        f.write(f"{code}\n")
    with open(args.out + ".requests.json", "w") as f:
        json.dump(reqs, f, indent=1)
        f.write("\n")
    if not args.keep_home:
        shutil.rmtree(HOMEDIR, ignore_errors=True)
    sys.stderr.write(f"exit={code} stdout={len(out)}B stderr={len(err)}B requests={len(reqs)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
