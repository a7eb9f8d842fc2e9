"""A real git smart-HTTP server for tests: git's own ``git http-backend`` (CGI) served by lighttpd.

    with GitHttpServer(tmp_path / "git", token="t0ken") as git:
        url = git.create_repo("acme/widgets", {"README.md": "hello\\n"})
        ...                          # clone/fetch anonymously; push as x-access-token:t0ken
        git.branches("acme/widgets")  # {"main": "<sha>", "harness/run-1": "<sha>"}
        git.refs_pushed()             # ["refs/heads/harness/run-1"]
        git.requests()                # [{"method": "GET", "path": "/git/...", "status": 401, "user": "-"}, ...]

Reads (clone, fetch; protocol v0 and v2) need no credentials. With a ``token``, pushes (the
``info/refs?service=git-receive-pack`` advertisement and the ``git-receive-pack`` POST) need HTTP basic
auth as ``x-access-token`` / ``token`` (a forge's installation-token convention); without one, anyone may
push. lighttpd runs in the foreground as the current user on a free port of ``host``; its config, logs,
pid file and the bare repositories all live under ``root``. Needs ``lighttpd`` (Debian's package) and git.
"""

from __future__ import annotations

import http.client
import os
import re
import shlex
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from ..lib import processes

USER = "x-access-token"
# A repository name: path segments of safe characters (``owner/repo`` works), ``.git`` added by the server.
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")
_SYNC_PREFIX = "/_harness_sync/"
# Fixed identity and date: create_repo gives the same files the same commit SHA on every run.
_COMMIT_ENV = {
    "GIT_AUTHOR_NAME": "Harness Test",
    "GIT_AUTHOR_EMAIL": "harness-test@example.invalid",
    "GIT_COMMITTER_NAME": "Harness Test",
    "GIT_COMMITTER_EMAIL": "harness-test@example.invalid",
}
_COMMIT_TIME = "1735689600 +0000"  # 2025-01-01T00:00:00Z
_POST_RECEIVE = """#!/bin/sh
# The test server's record of every ref a push updated (tests/servers/git_http.py reads it).
while read -r old new ref; do
  printf '%s\\t%s\\t%s\\t%s\\t%s\\n' {name} "$old" "$new" "$ref" "${{REMOTE_USER:--}}" >> {log}
done
"""


def _git_env() -> dict[str, str]:
    """The environment of the git commands the server runs: no user or system config, no inherited GIT_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", **_COMMIT_ENV)
    return env


def _lighttpd() -> str:
    found = shutil.which("lighttpd") or next(
        (p for p in ("/usr/sbin/lighttpd", "/sbin/lighttpd") if os.access(p, os.X_OK)), None
    )
    if found is None:
        raise RuntimeError("lighttpd is not installed: apt-get install lighttpd (.ci/run does)")
    return found


def _free_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def _quote(value: str) -> str:
    """A lighttpd config string."""
    if '"' in value or "\\" in value or "\n" in value:
        raise ValueError(f"not usable in lighttpd.conf: {value!r}")
    return f'"{value}"'


class GitHttpServer:
    """lighttpd + ``git http-backend`` under ``root``; ``start()``/``stop()`` or a context manager."""

    def __init__(self, root: Path, host: str = "127.0.0.1", token: str | None = None):
        if token is not None and (not token or "\n" in token):
            raise ValueError("token must be a non-empty single line")
        self.root = Path(root).resolve()
        self.host = host
        self.token = token
        self.port = 0
        self.repos = self.root / "repos"
        self._pushes_log = self.root / "pushes.log"
        self._access_log = self.root / "access.log"
        self._proc: subprocess.Popen[bytes] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> GitHttpServer:
        """Start lighttpd on a free port of ``host``; returns once it answers HTTP."""
        if self._proc is not None:
            return self
        lighttpd = _lighttpd()
        for d in (self.repos, self.root / "www", self.root / "tmp"):
            d.mkdir(parents=True, exist_ok=True)
        self._pushes_log.touch()
        if self.token is not None:
            fd = os.open(self.root / "users", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as users:  # lighttpd's plain userfile: user:password
                users.write(f"{USER}:{self.token}\n")
        error_log = self.root / "error.log"
        last_error = ""
        for _attempt in range(5):  # another process may take the free port before lighttpd binds it
            self.port = _free_port(self.host)
            conf = self.root / "lighttpd.conf"
            conf.write_text(self._config())
            error_log.unlink(missing_ok=True)
            with open(self.root / "lighttpd.out", "ab") as out:
                self._proc = processes.start(
                    [lighttpd, "-D", "-f", str(conf)],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=self.root,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                )
            if self._wait_ready(timeout=10.0):
                return self
            self._terminate()
            last_error = error_log.read_text() if error_log.exists() else ""
            last_error += (self.root / "lighttpd.out").read_text()
            if "in use" not in last_error:
                break
        raise RuntimeError(f"lighttpd did not start:\n{last_error}")

    def stop(self) -> None:
        self._terminate()

    def __enter__(self) -> GitHttpServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _terminate(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            processes.stop(proc, grace=10)

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                self._get(_SYNC_PREFIX + "ready")
                return True
            except OSError:
                time.sleep(0.05)
        return False

    def _get(self, path: str) -> int:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    def _config(self) -> str:
        root = str(self.root)
        backend = subprocess.run(
            ["git", "--exec-path"], check=True, capture_output=True, text=True, env=_git_env()
        ).stdout.strip()
        env = {
            "GIT_PROJECT_ROOT": str(self.repos),
            # Every repository under the root is served; none needs git-daemon-export-ok.
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        }
        # Protocol v2: lighttpd hands the client's Git-Protocol header to the CGI as HTTP_GIT_PROTOCOL, which
        # git http-backend (git >= 2.18) copies into GIT_PROTOCOL itself; nothing to set here.
        lines = [
            f"server.document-root = {_quote(root + '/www')}",
            f"server.bind = {_quote(self.host)}",
            f"server.port = {self.port}",
            f"server.pid-file = {_quote(root + '/lighttpd.pid')}",
            f"server.errorlog = {_quote(root + '/error.log')}",
            f"server.upload-dirs = ( {_quote(root + '/tmp')} )",
            'server.modules = ( "mod_alias", "mod_auth", "mod_authn_file", "mod_setenv",'
            ' "mod_cgi", "mod_accesslog" )',
            # A file access log is flushed about once a second; a piped one line by line (requests()).
            f"accesslog.filename = {_quote('|exec cat >> ' + shlex.quote(str(self._access_log)))}",
            'accesslog.format = "%s %u %r"',
            f'alias.url = ( "/git/" => {_quote(backend + "/git-http-backend/")} )',
            '$HTTP["url"] =~ "^/git/" {',
            '  cgi.assign = ( "" => "" )',
            "  setenv.add-environment = ( "
            + ", ".join(f"{_quote(k)} => {_quote(v)}" for k, v in env.items())
            + " )",
            "}",
        ]
        if self.token is not None:
            require = 'auth.require = ( "/" => ( "method" => "basic", "realm" => "git", "require" => "valid-user" ) )'
            lines += [
                'auth.backend = "plain"',
                f"auth.backend.plain.userfile = {_quote(root + '/users')}",
                # The push's ref advertisement: every query but a fetch's needs the token (a list of what
                # is open rather than of what is not; lighttpd matches the query with percent-encoded
                # unreserved characters decoded, as http-backend reads it).
                '$HTTP["querystring"] !~ "^(service=git-upload-pack)?$" {',
                f"  {require}",
                "}",
                # The push itself (lighttpd matches the decoded path, as http-backend sees it).
                '$HTTP["url"] =~ "/git-receive-pack$" {',
                f"  {require}",
                "}",
            ]
        return "\n".join(lines) + "\n"

    # -- addresses -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def url_for(self, name: str) -> str:
        """The repository's clone URL: ``http://host:port/git/<name>.git``."""
        return f"{self.base_url}/git/{name}.git"

    def push_url_for(self, name: str, token: str | None = None) -> str:
        """The clone URL with ``x-access-token:<token>`` (default: the server's token) in it."""
        token = self.token if token is None else token
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{USER}:{token}@{host}:{self.port}/git/{name}.git"

    def path_for(self, name: str) -> Path:
        """The bare repository on disk."""
        if not _NAME.fullmatch(name) or name.endswith(".git"):
            raise ValueError(f"bad repository name {name!r} (segments of [A-Za-z0-9._-], no .git suffix)")
        return self.repos / f"{name}.git"

    # -- repositories ----------------------------------------------------------------------
    def create_repo(
        self,
        name: str,
        files: dict[str, str | bytes],
        branch: str = "main",
        submodules: dict[str, str] | None = None,
    ) -> str:
        """A bare repository whose ``branch`` holds one commit with ``files`` and ``submodules`` (path ->
        the commit its gitlink records); returns its URL."""
        path = self.path_for(name)
        if path.exists():
            raise FileExistsError(f"repository {name!r} exists")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._git(None, "init", "-q", "--bare", f"--initial-branch={branch}", str(path))
        self._git(path, "config", "http.receivepack", "true")
        # The publisher fetches the exact commit the agent started from by its SHA, which need not be a
        # branch tip any more; protocol v0 refuses such a "want" without this (v2 allows any).
        self._git(path, "config", "uploadpack.allowAnySHA1InWant", "true")
        hook = path / "hooks" / "post-receive"
        hook.write_text(_POST_RECEIVE.format(name=shlex.quote(name), log=shlex.quote(str(self._pushes_log))))
        hook.chmod(0o755)
        stream = self._import_stream(branch, files, submodules or {})
        self._git(path, "fast-import", "--quiet", input=stream)
        return self.url_for(name)

    @staticmethod
    def _import_stream(branch: str, files: dict[str, str | bytes], submodules: dict[str, str]) -> bytes:
        def data(payload: bytes) -> bytes:
            return b"data %d\n%s\n" % (len(payload), payload)

        who = f"{_COMMIT_ENV['GIT_AUTHOR_NAME']} <{_COMMIT_ENV['GIT_AUTHOR_EMAIL']}> {_COMMIT_TIME}"
        out = f"commit refs/heads/{branch}\nauthor {who}\ncommitter {who}\n".encode()
        out += data(b"initial commit")
        for file, content in sorted(files.items()):
            parts = file.split("/")
            if not file or "\n" in file or file.startswith('"') or {"", ".", "..", ".git"} & set(parts):
                raise ValueError(f"bad file path {file!r}")
            raw = content.encode() if isinstance(content, str) else content
            out += f"M 100644 inline {file}\n".encode() + data(raw)
        for folder, commit in sorted(submodules.items()):
            out += f"M 160000 {commit} {folder}\n".encode()
        return out + b"done\n"

    def branches(self, name: str) -> dict[str, str]:
        """Branch name (``main``, ``harness/run-1``) -> commit SHA, read from the bare repository."""
        out = self._git(
            self.path_for(name), "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads"
        )
        refs = (line.split(" ", 1) for line in out.decode().splitlines())
        return {ref.removeprefix("refs/heads/"): sha for ref, sha in refs}

    def read(self, name: str, ref: str, path: str) -> bytes:
        """The content of ``path`` at ``ref`` (a branch, tag or SHA)."""
        try:
            return self._git(self.path_for(name), "cat-file", "blob", f"{ref}:{path}")
        except subprocess.CalledProcessError as exc:
            raise FileNotFoundError(f"{name}: no {path!r} at {ref!r}: {exc.stderr.decode().strip()}") from exc

    def _git(self, repo: Path | None, *args: str, input: bytes | None = None) -> bytes:
        cmd = ["git", *(["--git-dir", str(repo)] if repo is not None else []), *args]
        return subprocess.run(cmd, check=True, capture_output=True, input=input, env=_git_env()).stdout

    # -- what happened ---------------------------------------------------------------------
    def pushes(self) -> list[dict[str, str]]:
        """Every ref update a push made, in order: repo, ref, old and new SHA, the pushing user (or "-")."""
        if not self._pushes_log.exists():
            return []
        keys = ("repo", "old", "new", "ref", "user")
        return [
            dict(zip(keys, line.split("\t"), strict=True))
            for line in self._pushes_log.read_text().splitlines()
        ]

    def refs_pushed(self) -> list[str]:
        """Every ref ever updated by a push (``refs/heads/...``), in order, over all repositories."""
        return [p["ref"] for p in self.pushes()]

    def requests(self) -> list[dict[str, Any]]:
        """lighttpd's access log: ``method``, ``path`` (query included), ``status`` (int), ``user``."""
        if self._proc is not None and self._proc.poll() is None:
            # lighttpd logs a request after answering it, so a client may be here first. A marker
            # request, answered after every request already answered, orders the log: once its line is
            # there, every earlier one is too.
            marker = _SYNC_PREFIX + uuid.uuid4().hex
            self._get(marker)
            deadline = time.monotonic() + 5
            while marker not in self._read_access_log() and time.monotonic() < deadline:
                time.sleep(0.01)
        out: list[dict[str, Any]] = []
        for line in self._read_access_log().splitlines():
            fields = line.split(" ")
            if len(fields) < 4 or not fields[0].isdigit() or fields[3].startswith(_SYNC_PREFIX):
                continue
            out.append({"method": fields[2], "path": fields[3], "status": int(fields[0]), "user": fields[1]})
        return out

    def _read_access_log(self) -> str:
        try:
            return self._access_log.read_text(errors="replace")
        except FileNotFoundError:
            return ""
