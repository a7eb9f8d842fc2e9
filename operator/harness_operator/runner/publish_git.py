"""git in the publishing container's own bare repository, and how a step's failure reads (I/O).

Every setting git uses is given on the command line's level, none read from the pod or the workspace;
only the `remote` environment (fetch, push, ls-remote) holds the write credential, and it never names
the working tree (runner/publish.py says why).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from harness_operator.runner.redact import Redactor

# The variables git may read from this container's environment: the egress gateway's proxy, if any.
PASSED_ENV = ("PATH", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")
GIT_LINES = 3
REMOTE_REASONS = ("remote: error:", "remote: fatal:")
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
HTTP_DENIED = re.compile(r"\b40[13]\b")


class PublishError(Exception):
    """A step failed: `reason` (a Reason) and a message that names the fix."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Git:
    """git in the publisher's own bare repository, with nothing of the pod's configuration: every setting
    is ours, given on the command line's level. Two environments: `remote` (fetch, push, ls-remote) holds
    the credential and never names the working tree; `local` (the steps that list the working tree and
    build the commit) holds no token and no credential helper, and only `untracked` names the tree."""

    def __init__(self, state: Path, workdir: str, password: str, redactor: Redactor, deadline: float):
        self.redactor = redactor
        self.deadline = deadline
        home = state / "home"
        home.mkdir(parents=True, exist_ok=True)
        (state / "tmp").mkdir(exist_ok=True)
        (state / "template").mkdir(exist_ok=True)
        settings = [
            ("core.hooksPath", "/dev/null"),
            ("core.fsmonitor", "false"),
            ("core.autocrlf", "false"),
            ("core.untrackedCache", "false"),
            ("safe.directory", "*"),
            ("credential.helper", ""),
            ("http.followRedirects", "false"),
            ("init.templateDir", str(state / "template")),
        ]
        base = {k: v for k, v in os.environ.items() if k in PASSED_ENV}
        base |= {
            "HOME": str(home),
            "TMPDIR": str(state / "tmp"),
            "LANG": "C",
            "GIT_DIR": str(state / "repo.git"),
            "GIT_INDEX_FILE": str(state / "index"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_OPTIONAL_LOCKS": "0",
        }
        helper = '!f() { echo username=x-access-token; echo "password=$HARNESS_GIT_PASSWORD"; }; f'
        self.local = base | _config_env(settings)
        self.remote = base | _config_env([*settings, ("credential.helper", helper)])
        self.remote["HARNESS_GIT_PASSWORD"] = password
        self.state = str(state)
        self.workdir = workdir

    def init(self) -> None:
        """The publisher's repository: bare, from an empty template (no hooks)."""
        env = {k: v for k, v in self.local.items() if k not in ("GIT_DIR", "GIT_INDEX_FILE")}
        self.run("init", "-q", "--bare", self.local["GIT_DIR"], env=env)

    def untracked(self) -> list[bytes]:
        """The working tree's paths that are not in the index and that its `.gitignore` files do not
        exclude; the one git command that sees the working tree, and it reads no file's content."""
        env = self.local | {"GIT_WORK_TREE": self.workdir}
        listing = self.run("ls-files", "--others", "--exclude-standard", "-z", env=env, cwd=self.workdir)
        return [path for path in listing.split(b"\0") if path]

    def run(
        self,
        *args: str,
        stdin: bytes | Iterator[bytes] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> bytes:
        """git's stdout, by default in the local environment outside the working tree; a failure raises
        CalledProcessError with its (redacted) stderr. An iterator as stdin is streamed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise subprocess.TimeoutExpired(["git", *args], 0)
        with (
            tempfile.TemporaryFile(dir=self.local["TMPDIR"]) as out,
            tempfile.TemporaryFile(dir=self.local["TMPDIR"]) as err,
        ):
            process = subprocess.Popen(
                ["git", *args],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                env=self.local if env is None else env,
                cwd=cwd or self.state,
            )
            assert process.stdin is not None
            try:
                for chunk in [stdin] if isinstance(stdin, bytes) else stdin or []:
                    process.stdin.write(chunk)
                    if time.monotonic() > self.deadline:
                        raise subprocess.TimeoutExpired(["git", *args], left)
                process.stdin.close()
                code = process.wait(timeout=max(self.deadline - time.monotonic(), 0.001))
            except BrokenPipeError:
                code = process.wait(timeout=max(self.deadline - time.monotonic(), 0.001))
            except BaseException:
                process.kill()
                process.wait()
                raise
            out.seek(0)
            err.seek(0)
            if code != 0:
                said = self.redactor.bytes(err.read()).decode("utf-8", "replace")
                raise subprocess.CalledProcessError(code, ["git", args[0]], output=b"", stderr=said)
            return out.read()

    def text(self, *args: str) -> str:
        return self.run(*args).decode("utf-8", "replace").strip()

    def remote_run(self, *args: str) -> bytes:
        """git with the credential: never in, nor naming, the working tree."""
        return self.run(*args, env=self.remote)


def _config_env(settings: list[tuple[str, str]]) -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(settings))}
    for i, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    return env


def last_lines(error: subprocess.CalledProcessError | subprocess.TimeoutExpired) -> str:
    """git's own words, its last lines, on one line."""
    if isinstance(error, subprocess.TimeoutExpired):
        return "timed out (publish.timeoutSeconds of the operator)"
    lines = [line.strip() for line in str(error.stderr or "").splitlines()]
    lines = [line for line in lines if line and not line.startswith("hint:")]
    tail = lines[-GIT_LINES:]
    # The origin's own reason (a forge's pre-receive hook: "remote: error: User permission denied ...")
    # comes before git's summary of the refusal, so the last lines alone would drop it.
    remote = [line for line in lines if line.lower().startswith(REMOTE_REASONS) and line not in tail]
    return " / ".join([*remote[:GIT_LINES], *tail]) or f"git {error.cmd[-1]} exited {error.returncode}"


def describe_push_failure(said: str, branch: str, onto_existing: bool = False) -> str:
    """The push's refusal in git's words and the fix; `onto_existing`: a FastForward push onto the
    branch as cloned (which only a rule of the origin's, such as a protected branch, refuses)."""
    # Matched without the URLs git names (a repository called owner-403x is no HTTP 403), and the status
    # codes as words only (a commit id such as 8d403f7 is none either).
    lower = URL.sub("", said).lower()
    denied = ("authentication", "permission", "denied", "could not read")
    # git's own refusals of the ref (it exists, it moved) and the origin's (a hook, a branch rule).
    taken = ("already exists", "stale info", "non-fast-forward", "fetch first", "[rejected]")
    by_origin = ("[remote rejected]", "hook declined")
    if any(s in lower for s in denied) or HTTP_DENIED.search(lower):
        fix = "the token in publish.credentialsSecretRef may not push to the repository: give it write access"
    elif onto_existing and any(s in lower for s in taken + by_origin):
        fix = f"the origin does not let the token add commits to branch {branch} (a protected branch?)"
    elif any(s in lower for s in by_origin):
        fix = f"the origin's rules refused branch {branch} (a protected branch, a hook): see its words"
    elif any(s in lower for s in taken):
        fix = f"branch {branch} exists on the origin: delete it, or set publish.branch.name to a new one"
    else:
        fix = "check the origin and the token in publish.credentialsSecretRef"
    return f"the origin refused the push of branch {branch}: {said}; {fix}"
