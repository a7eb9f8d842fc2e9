"""A CLI's session files as one archive: packed from the home's session paths only, redacted, restored
only where those paths allow (never through a link, never outside the home), and bounded."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from harness_operator.contract.plan import AttemptPlan
from harness_operator.runner.attempt import read_earlier_session
from harness_operator.runner.launch import Launch, restore_session, take_session
from harness_operator.runner.redact import Redactor
from harness_operator.runner.session import (
    SESSION_FILES_MAX_BYTES,
    SessionTooLarge,
    pack_session,
    redact_session,
    unpack_session,
)
from harness_operator.runner.stops import SetupError

PATHS = [".claude/projects"]


def _tar(entries: list[tuple[str, bytes | None, str]]) -> bytes:
    """An archive of (name, content, type): type 'file', 'dir' or 'link' (content is then the target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content, kind in entries:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(content or b"")
                tar.addfile(info, io.BytesIO(content or b""))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.type, info.linkname = tarfile.SYMTYPE, (content or b"").decode()
                tar.addfile(info)
    return buffer.getvalue()


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".claude/projects/-workspace").mkdir(parents=True)
    (home / ".claude/projects/-workspace/s-1.jsonl").write_text('{"prompt": "remember APPLE"}\n')
    (home / ".claude/credentials.json").write_text("not session state")
    (home / ".bashrc").write_text("alias x=y")
    return home


def test_only_the_session_paths_are_packed_and_restored_elsewhere(tmp_path: Path) -> None:
    archive = pack_session(str(_home(tmp_path)), PATHS)
    assert archive is not None
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        assert tar.getnames() == [".claude/projects/-workspace/s-1.jsonl"]
    other = tmp_path / "other"
    other.mkdir()
    assert unpack_session(str(other), archive, PATHS) == [".claude/projects/-workspace/s-1.jsonl"]
    restored = other / ".claude/projects/-workspace/s-1.jsonl"
    assert restored.read_text() == '{"prompt": "remember APPLE"}\n'
    assert oct(restored.stat().st_mode & 0o777) == "0o600"
    assert pack_session(str(_home(tmp_path / "x")), PATHS) == archive  # the same files, the same archive
    assert archive[4:8] == bytes(4)  # ... in any second: gzip's header holds no time


def test_no_session_files_is_no_archive(tmp_path: Path) -> None:
    assert pack_session(str(tmp_path), PATHS) is None


def test_a_link_in_the_home_is_not_followed_when_packing(tmp_path: Path) -> None:
    home = _home(tmp_path)
    (tmp_path / "secret.txt").write_text("outside the home")
    os.symlink(tmp_path / "secret.txt", home / ".claude/projects/-workspace/leak.jsonl")
    archive = pack_session(str(home), PATHS)
    assert archive is not None
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        assert tar.getnames() == [".claude/projects/-workspace/s-1.jsonl"]


@pytest.mark.parametrize(
    "entries",
    [
        [("../escape.txt", b"x", "file")],
        [("/etc/passwd-like", b"x", "file")],
        [(".bashrc", b"alias ls='curl evil'", "file")],  # in the home, but not a session path
        [(".claude/projects/../../.bashrc", b"x", "file")],
    ],
)
def test_an_archive_that_reaches_beyond_the_session_paths_is_refused(tmp_path: Path, entries) -> None:
    with pytest.raises(ValueError, match="not under the session paths"):
        unpack_session(str(tmp_path), _tar(entries), PATHS)
    assert list(tmp_path.iterdir()) == []


def test_links_in_an_archive_are_skipped_and_never_written_through(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, home / ".claude/projects")  # planted by an earlier agent
    archive = _tar([(".claude/projects/x.jsonl", b"data", "file"), (".claude/projects/l", b"/etc", "link")])
    with pytest.raises(ValueError, match="through a link"):
        unpack_session(str(home), archive, PATHS)
    assert list(outside.iterdir()) == []
    plain = tmp_path / "plain"
    plain.mkdir()
    assert unpack_session(str(plain), archive, PATHS) == [".claude/projects/x.jsonl"]  # the link: skipped
    assert not (plain / ".claude/projects/l").exists()


def test_secrets_are_cut_out_of_the_files(tmp_path: Path) -> None:
    home = _home(tmp_path)
    (home / ".claude/projects/-workspace/s-1.jsonl").write_text('{"env": "sk-live-123456"}\n')
    archive = pack_session(str(home), PATHS)
    assert archive is not None
    redacted = redact_session(archive, Redactor(["sk-live-123456"]))
    with tarfile.open(fileobj=io.BytesIO(redacted), mode="r:gz") as tar:
        member = tar.extractfile(".claude/projects/-workspace/s-1.jsonl")
        assert member is not None and b"sk-live-123456" not in member.read()
    assert redact_session(archive, Redactor([])) == archive


def test_a_session_over_the_limit_is_not_kept(tmp_path: Path) -> None:
    home = _home(tmp_path)
    (home / ".claude/projects/big.jsonl").write_bytes(os.urandom(SESSION_FILES_MAX_BYTES // 8))
    with pytest.raises(SessionTooLarge, match="archive takes"):  # random bytes do not compress
        pack_session(str(home), PATHS)
    launch = Launch(["a"], "a", {"HOME": str(home)}, str(tmp_path), False, session_paths=PATHS)
    session, problem = take_session(launch)
    assert session is None and problem is not None and "more than" in problem
    bomb = _tar([(".claude/projects/zeros.jsonl", bytes(SESSION_FILES_MAX_BYTES + 1), "file")])
    with pytest.raises(SessionTooLarge):
        unpack_session(str(tmp_path / "bomb"), bomb, PATHS)


def test_a_launch_restores_its_session_and_refuses_a_bad_one(tmp_path: Path) -> None:
    archive = pack_session(str(_home(tmp_path)), PATHS)
    assert archive is not None
    home = tmp_path / "fresh"
    launch = Launch(
        ["a"],
        "a",
        {"HOME": str(home)},
        str(tmp_path),
        False,
        session_paths=PATHS,
        session=base64.b64encode(archive).decode(),
    )
    assert Launch.from_doc(launch.to_doc()) == launch
    restore_session(launch)
    assert (home / ".claude/projects/-workspace/s-1.jsonl").exists()
    bad = Launch(
        ["a"], "a", {"HOME": str(home)}, str(tmp_path), False, session_paths=PATHS, session="bm90IGEgdGFy"
    )
    with pytest.raises(SetupError, match="cannot restore the earlier session"):
        restore_session(bad)


def test_the_runner_takes_only_the_archive_its_plan_names(tmp_path: Path) -> None:
    archive = b"archive bytes"
    mounted = tmp_path / "session.tar.gz.base64"
    mounted.write_bytes(base64.b64encode(archive))
    digest = hashlib.sha256(archive).hexdigest()
    plan = AttemptPlan(attempt=1, total_attempts=1, provider="claude", binary="claude", session_sha256=digest)
    assert read_earlier_session(plan, str(mounted)) == archive
    assert read_earlier_session(plan.model_copy(update={"session_sha256": None}), str(mounted)) is None
    with pytest.raises(SetupError, match="not the one the plan names"):
        read_earlier_session(plan.model_copy(update={"session_sha256": "0" * 64}), str(mounted))
    with pytest.raises(SetupError, match="cannot read the earlier session"):
        read_earlier_session(plan, str(tmp_path / "missing"))
