"""Every recorded real-CLI case (tests/fixtures/cli/capture.py) that reaches its vendor ends as its fixture
did when the CLI goes through the real model gateway under a cap (maxCostUSD), the vendor stub behind it:
the gateway's intake (the raw path check, bodies parsed and serialised again, the allowlist of body
fields, client tools only) refuses none of what Claude Code, Codex, Gemini CLI, Qwen Code, OpenCode, Pi,
Copilot and Aider send. Marked ``cli``; a CLI not on PATH is skipped; needs Debian's redis-server."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.fixtures.cli.capture import CASES, HERE, Case
from tests.lib import processes
from tests.stubs.run_cli import run, stub_class

pytestmark = pytest.mark.cli

TOKEN = f"hmg-capped.1.{'c' * 64}"
# Models the stubs answer that the price table does not know: a cap needs a price.
PRICED = ("gpt-6.2-sol", "qwen3.7-max", "gpt-5-codex", "gpt-stub", "gpt-4o")
# Reaching the vendor is what is checked: cases that end before (a refused key, a hung vendor) are not.
SKIPPED_MODES = ("unauthorized", "hang")
# Codex's built-in provider authenticates from its login, not OPENAI_API_KEY: it never sends the token
# (it fails the same way without the gateway's intake checks).
SKIPPED = {("codex", "success_openai_base_url")}
ROUTED = [
    (cli, case)
    for cli, cases in CASES.items()
    for case in cases
    if case.mode not in SKIPPED_MODES and (cli, case.name) not in SKIPPED
]


def capped_grant(vendor: str) -> dict[str, object]:
    """A run's grant of one attempt under a 5 USD cap."""
    attempt: dict[str, object] = {
        "token_sha256": hashlib.sha256(TOKEN.encode()).hexdigest(),
        "vendor": vendor,
        "pricing": {model: {"input": 1, "output": 5} for model in PRICED},
    }
    grant: dict[str, object] = {"namespace": "team-a", "run": "capped", "uid": "uid-capped"}
    return {**grant, "maxCostUSD": 5.0, "attempts": {"1": attempt}}


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if shutil.which("redis-server") is None:
        pytest.skip("the model gateway's store is Debian's Redis: apt-get install redis-server")
    port = _free_port()
    folder = tmp_path_factory.mktemp("redis")
    redis = processes.start(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        processes.stop(redis)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Through:
    """What run() substitutes for {base_url}: the gateway's prefix of the case's vendor."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url


@pytest.mark.parametrize(("cli", "case"), ROUTED, ids=[f"{cli}-{case.name}" for cli, case in ROUTED])
def test_the_cli_case_ends_as_recorded_through_the_gateway_under_a_cap(
    cli: str, case: Case, redis_url: str, tmp_path: Path
) -> None:
    if shutil.which(case.argv[0]) is None:
        pytest.skip(f"`{case.argv[0]}` is not on PATH (tests/cli-tools.sh {cli})")
    options = {"answers": list(case.answers)} if case.answers else {}
    if case.command:
        options["command"] = case.command  # type: ignore[assignment]
    port, log = _free_port(), tmp_path / "gateway.log"
    with stub_class(case.stub)(mode=case.mode, **options) as stub, log.open("w") as errors:
        gateway = processes.start(
            [sys.executable, "-m", "tests.integration_cli.static_gateway", str(port), redis_url,
             json.dumps({case.stub: stub.base_url}), json.dumps({"capped": capped_grant(case.stub)})],
            stdout=subprocess.PIPE, stderr=errors,
        )  # fmt: skip
        try:
            assert gateway.stdout is not None and gateway.stdout.readline().strip() == b"ready", (
                log.read_text()
            )
            env = {name: value.replace("sk-test-fixture", TOKEN) for name, value in case.env.items()}
            code, _out, err, _home = run(
                Through(f"http://127.0.0.1:{port}/{case.stub}"),  # type: ignore[arg-type]
                case.argv, env, min(case.timeout, 120), case.stdin, setup_home=case.setup_home,
            )  # fmt: skip
        finally:
            processes.kill(gateway)
    refused = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert refused == [], refused
    expected = int((Path(HERE) / cli / f"{case.name}.exit").read_text())
    assert code == expected, err[-2000:]
    assert stub.model_calls() or expected != 0  # a case that succeeds reached its vendor
