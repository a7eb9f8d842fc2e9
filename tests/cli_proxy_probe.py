"""Which agent CLIs send their API traffic through HTTPS_PROXY/HTTP_PROXY, run in their own sandbox image
(Docker, host network) against a recording proxy on loopback; the catalog's `proxyEnv` capability says
what this found (docs/cli-facts.md).

    python -m tests.cli_proxy_probe [--no-node-switch] [NAME ...]   # default: every CLI probed here

`--no-node-switch` leaves NODE_USE_ENV_PROXY unset, to see which CLIs need it.

Each CLI is pointed at a vendor base URL whose host name resolves nowhere (`probe.invalid`), with the
proxy variables the operator sets for a run behind the egress gateway (NODE_USE_ENV_PROXY=1 included).
A CLI that honours them asks the proxy (`CONNECT probe.invalid:443` for https, an absolute-form request
for http); one that does not fails on the name and the proxy hears nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from harness_operator import __version__

ROOT = Path(__file__).resolve().parents[1]
HOST = "probe.invalid"
SETTINGS = json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}})
PI_MODELS = json.dumps({"providers": {"anthropic": {"baseUrl": "{url}"}}})
# name -> (argv after the executable, env): a one-shot prompt routed to the probe host.
CLIS: dict[str, tuple[list[str], dict[str, str]]] = {
    "claude": (["-p", "hi"], {"ANTHROPIC_API_KEY": "sk-probe", "ANTHROPIC_BASE_URL": "{url}"}),
    "codex": (
        [
            "exec",
            "--skip-git-repo-check",
            "-c",
            "model_provider=probe",
            "-c",
            'model_providers.probe={name="probe", base_url="{url}/v1", env_key="OPENAI_API_KEY", '
            'wire_api="responses"}',
            "hi",
        ],
        {"OPENAI_API_KEY": "sk-probe"},
    ),
    "gemini": (
        ["-p", "hi", "--model", "gemini-2.5-flash"],
        {
            "GEMINI_API_KEY": "probe",
            "GOOGLE_GEMINI_BASE_URL": "{url}",
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
        },
    ),
    "qwen": (
        ["-p", "hi", "--auth-type", "openai"],
        {"OPENAI_API_KEY": "sk-probe", "OPENAI_BASE_URL": "{url}/v1"},
    ),
    "copilot": (
        ["-p", "hi"],
        {
            "COPILOT_OFFLINE": "true",
            "COPILOT_PROVIDER_BASE_URL": "{url}/v1",
            "COPILOT_MODEL": "gpt-4.1",
            "COPILOT_PROVIDER_API_KEY": "probe",
        },
    ),
    "aider": (
        ["--message", "hi", "--model", "gpt-4o", "--no-git", "--yes-always"],
        {"OPENAI_API_KEY": "sk-probe", "OPENAI_API_BASE": "{url}/v1"},
    ),
    "pi": (
        ["-p", "hi", "--provider", "anthropic", "--model", "claude-sonnet-4-5", "--mode", "json"],
        {
            "ANTHROPIC_API_KEY": "sk-probe",
            "PI_OFFLINE": "1",
            "PI_CODING_AGENT_DIR": "/home/sandbox/.pi/agent",
        },
    ),
    "opencode": (
        ["run", "--model", "anthropic/claude-sonnet-4-5", "hi"],
        {
            "ANTHROPIC_API_KEY": "sk-probe",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_CONFIG_CONTENT": json.dumps(
                {"provider": {"anthropic": {"options": {"baseURL": "{url}/v1"}}}}
            ),
        },
    ),
}


class Recorder(BaseHTTPRequestHandler):
    """Records each request line (CONNECT or absolute-form) and refuses it."""

    seen: list[str] = []

    def _refuse(self) -> None:
        Recorder.seen.append(f"{self.command} {self.path}")
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_CONNECT = do_GET = do_POST = _refuse

    def log_message(self, format: str, *args: object) -> None:
        pass


def probe(name: str, port: int, scheme: str, node_switch: bool = True) -> list[str]:
    """The requests the proxy heard from `name` sent to scheme://probe.invalid."""
    argv, env = CLIS[name]
    url = f"{scheme}://{HOST}"
    proxy = f"http://probe.1:token@127.0.0.1:{port}"
    variables = {k: v.replace("{url}", url) for k, v in env.items()}
    variables |= {n: proxy for n in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy")}
    variables |= {"NO_PROXY": "localhost,127.0.0.1", "no_proxy": "localhost,127.0.0.1"}
    if node_switch:
        variables["NODE_USE_ENV_PROXY"] = "1"
    argv = [a.replace("{url}", url) for a in argv]
    # HOME is an empty volume in the pod, as here.
    docker = ["docker", "run", "--rm", "--network", "host", "--tmpfs", "/home/sandbox:uid=65532,exec"]
    docker += ["--entrypoint", "sh"]
    docker += [arg for k, v in variables.items() for arg in ("-e", f"{k}={v}")]
    executable = {"aider": "aider"}.get(name, name)
    models = PI_MODELS.replace("{url}", url)
    settings = (
        f"mkdir -p ~/.gemini ~/.pi/agent; printf %s '{SETTINGS}' > ~/.gemini/settings.json; "
        f"printf %s '{models}' > ~/.pi/agent/models.json"
    )
    script = f'{settings}; exec timeout 45 {executable} "$@" </dev/null'
    Recorder.seen = []
    done = subprocess.run(
        [*docker, f"harness.local/sandbox-{name}:{__version__}", "-c", script, name, *argv],
        capture_output=True,
        check=False,
        timeout=120,
    )
    heard = [line for line in Recorder.seen if HOST in line]
    if not heard:  # what the CLI said, to tell "ignores the proxy" from "never tried"
        print(done.stdout.decode(errors="replace")[-600:], done.stderr.decode(errors="replace")[-600:])
    return heard


def main(args: list[str]) -> int:
    node_switch = "--no-node-switch" not in args
    names = [a for a in args if a != "--no-node-switch"]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    for name in names or list(CLIS):
        for scheme in ("https", "http"):
            heard = probe(name, port, scheme, node_switch)
            verdict = "honours the proxy" if heard else "ignores the proxy"
            print(f"{name} {scheme}: {verdict} {heard[:2]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
