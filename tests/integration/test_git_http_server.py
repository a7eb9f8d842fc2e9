"""The publisher's git server (tests/servers/git_http.py): real git clients against lighttpd + git http-backend.

Needs no cluster, only lighttpd (Debian's package; .ci/run installs it) and git.
"""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers.git_http import USER, GitHttpServer

TOKEN = "t0ken-for-tests"
FILES = {"README.md": "hello\n", "src/app.py": b"print('hi')\n"}


def git(
    *args: str, cwd: Path | None = None, check: bool = True, **env: str
) -> subprocess.CompletedProcess[str]:
    """A git client with no user or system config that never prompts for a password."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    base |= {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0"}
    base |= {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    proc = subprocess.run(["git", *args], cwd=cwd, env=base | env, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.fixture
def server(tmp_path: Path) -> Iterator[GitHttpServer]:
    with GitHttpServer(tmp_path / "server", token=TOKEN) as srv:
        yield srv


def _clone_and_commit(server: GitHttpServer, name: str, dest: Path, content: str) -> str:
    git("clone", "-q", server.url_for(name), str(dest))
    (dest / "CHANGE.md").write_text(content)
    git("add", "CHANGE.md", cwd=dest)
    git("commit", "-q", "-m", "change", cwd=dest)
    return git("rev-parse", "HEAD", cwd=dest).stdout.strip()


@pytest.mark.parametrize("version", ["2", "0"])
def test_anonymous_clone_speaks_the_protocol_version_asked(server, tmp_path, version):
    url = server.create_repo("acme/widgets", FILES)
    assert url == f"{server.base_url}/git/acme/widgets.git"
    dest = tmp_path / "clone"
    proc = git("-c", f"protocol.version={version}", "clone", str(url), str(dest), GIT_TRACE_PACKET="1")
    # A v2 server's first packet line says so; a v0 one advertises refs straight away.
    assert ("git< version 2" in proc.stderr) is (version == "2"), proc.stderr[-2000:]
    assert (dest / "README.md").read_text() == "hello\n"
    assert (dest / "src/app.py").read_bytes() == b"print('hi')\n"
    assert git("rev-parse", "HEAD", cwd=dest).stdout.strip() == server.branches("acme/widgets")["main"]
    reads = server.requests()
    assert reads and all(r["user"] == "-" and r["status"] == 200 for r in reads), reads
    assert reads[0] == {
        "method": "GET",
        "path": "/git/acme/widgets.git/info/refs?service=git-upload-pack",
        "status": 200,
        "user": "-",
    }
    assert {
        "method": "POST",
        "path": "/git/acme/widgets.git/git-upload-pack",
        "status": 200,
        "user": "-",
    } in reads


@pytest.mark.parametrize("version", ["2", "0"])
def test_a_commit_no_branch_points_at_any_more_is_fetched_by_its_sha(server, tmp_path, version):
    server.create_repo("r", FILES)
    base = server.branches("r")["main"]
    _clone_and_commit(server, "r", tmp_path / "work", "newer\n")
    git("push", "-q", server.push_url_for("r"), "HEAD:main", cwd=tmp_path / "work")
    assert server.branches("r")["main"] != base  # base is no branch's tip: v0 needs allowAnySHA1InWant
    empty = tmp_path / "empty"
    git("init", "-q", str(empty))
    git("-c", f"protocol.version={version}", "fetch", "-q", "--depth=1", server.url_for("r"), base, cwd=empty)
    assert git("rev-parse", "FETCH_HEAD", cwd=empty).stdout.strip() == base
    assert git("show", f"{base}:README.md", cwd=empty).stdout == "hello\n"


def test_push_with_the_token_creates_the_branch(server, tmp_path):
    server.create_repo("acme/widgets", FILES)
    main = server.branches("acme/widgets")["main"]
    head = _clone_and_commit(server, "acme/widgets", tmp_path / "work", "the agent's change\n")
    git(
        "push",
        "-q",
        server.push_url_for("acme/widgets"),
        "HEAD:refs/heads/harness/run-1",
        cwd=tmp_path / "work",
    )
    assert server.branches("acme/widgets") == {"main": main, "harness/run-1": head}
    assert server.refs_pushed() == ["refs/heads/harness/run-1"]
    assert server.pushes() == [
        {
            "repo": "acme/widgets",
            "old": "0" * 40,
            "new": head,
            "ref": "refs/heads/harness/run-1",
            "user": USER,
        }
    ]
    assert server.read("acme/widgets", "harness/run-1", "CHANGE.md") == b"the agent's change\n"
    assert server.read("acme/widgets", head, "README.md") == b"hello\n"
    with pytest.raises(FileNotFoundError):
        server.read("acme/widgets", "main", "CHANGE.md")
    pushes = [r for r in server.requests() if "receive-pack" in r["path"]]
    assert pushes[-2:] == [
        {
            "method": "GET",
            "path": "/git/acme/widgets.git/info/refs?service=git-receive-pack",
            "status": 200,
            "user": USER,
        },
        {"method": "POST", "path": "/git/acme/widgets.git/git-receive-pack", "status": 200, "user": USER},
    ]


@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["no-token", "wrong-token"])
def test_push_without_the_token_is_refused_with_401(server, tmp_path, token):
    server.create_repo("r", FILES)
    before = server.branches("r")
    _clone_and_commit(server, "r", tmp_path / "work", "x\n")
    url = server.url_for("r") if token is None else server.push_url_for("r", token)
    proc = git("push", url, "HEAD:refs/heads/harness/run-1", cwd=tmp_path / "work", check=False)
    assert proc.returncode != 0
    assert ("terminal prompts disabled" if token is None else "Authentication failed") in proc.stderr, (
        proc.stderr
    )
    assert server.branches("r") == before and server.refs_pushed() == []
    pushes = [r for r in server.requests() if "receive-pack" in r["path"]]
    assert pushes and all(r["status"] == 401 and r["user"] == "-" for r in pushes), pushes


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/git/r.git/git-receive-pack"),
        ("GET", "/git/r.git/info/refs?service=git-receive-pack"),
        # http-backend url-decodes the service parameter: an encoded one asks for a push's advertisement too.
        ("GET", "/git/r.git/info/refs?service=git%2Dreceive-pack"),
    ],
)
def test_receive_pack_is_behind_auth_however_it_is_asked(server, method, path):
    server.create_repo("r", FILES)
    req = urllib.request.Request(
        server.base_url + path, method=method, data=b"" if method == "POST" else None
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 401
    assert err.value.headers["WWW-Authenticate"].startswith("Basic")
    assert server.requests()[-1] == {"method": method, "path": path, "status": 401, "user": "-"}


def test_without_a_token_anyone_may_push(tmp_path):
    with GitHttpServer(tmp_path / "open") as server:
        server.create_repo("r", FILES)
        head = _clone_and_commit(server, "r", tmp_path / "work", "x\n")
        git("push", "-q", server.url_for("r"), "HEAD:refs/heads/b", cwd=tmp_path / "work")
        assert server.branches("r")["b"] == head
        assert server.pushes()[0]["user"] == "-"


def test_many_repositories_on_one_server(server, tmp_path):
    urls = [server.create_repo(f"owner{i % 3}/repo-{i}", {"n.txt": f"{i}\n"}) for i in range(60)]
    assert len(set(urls)) == 60
    for i in (0, 31, 59):
        dest = tmp_path / f"clone-{i}"
        git("clone", "-q", urls[i], str(dest))
        assert (dest / "n.txt").read_text() == f"{i}\n"
    # The same files make the same commit: create_repo is deterministic.
    assert server.branches("owner0/repo-0")["main"] != server.branches("owner1/repo-1")["main"]
    server.create_repo("again/repo-0", {"n.txt": "0\n"})
    assert server.branches("again/repo-0") == server.branches("owner0/repo-0")


def test_names_are_checked(server):
    for bad in ("../escape", "a//b", "r.git", "", "-r", "a b"):
        with pytest.raises(ValueError):
            server.create_repo(bad, FILES)
    server.create_repo("r", FILES)
    with pytest.raises(FileExistsError):
        server.create_repo("r", FILES)
