"""The publishing container's work (runner/publish.py) with real git: an origin, the workspace as the
pod's own clone script (the git-clone init container's command) makes it, an agent's edits and attacks,
the patch, the push."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from tests.unit.core.pod.test_publish import TARGET

from harness_operator.api.reasons import Reason
from harness_operator.api.v1alpha1 import HarnessRun
from harness_operator.contract.changes import BASE_FILE, ChangesReport, PublishPlan, Verdict
from harness_operator.contract.frame import decode_frame
from harness_operator.core.attempt import decide_attempt
from harness_operator.core.config import OperatorConfig
from harness_operator.core.pod.job import build_job
from harness_operator.runner.publish import count_changes, publish

TOKEN = "ghp_publisher-write-token-0123456789"
VENDOR_KEY = "sk-ant-vendor-key-abcdefghijklmnop"
CLONE_TOKEN = "ghp_clone-read-token-9876543210"


def git(*args: str, cwd: Path | None = None) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"]
    identity += ["-c", "protocol.file.allow=always"]
    done = subprocess.run(["git", *identity, *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def clone_as_the_pod_does(
    origin: Path, workdir: Path, base_file: Path, home: Path, ref: str = "main"
) -> None:
    """The git-clone init container's own script and environment (core/desired.py), run here: the
    origin is a local path, the read token a literal, and the base recorded in `base_file`."""
    run = HarnessRun.model_validate(
        {
            "metadata": {"name": "fix-1", "namespace": "team-a", "uid": "uid-1"},
            "spec": {
                "provider": "claude",
                "prompt": "Fix it.",
                "workspace": {
                    "workingDir": "/workspace/repo",
                    "git": {
                        "url": "https://git.example.invalid/acme/widgets.git",
                        "ref": ref,
                        "credentialsSecretRef": {"name": "read", "key": "token"},
                    },
                    "publish": {"credentialsSecretRef": {"name": "write", "key": "token"}},
                },
            },
        }
    )
    spec = build_job(run, decide_attempt(run, TARGET, OperatorConfig()), OperatorConfig())["spec"][
        "template"
    ]["spec"]
    [clone] = [c for c in spec["initContainers"] if c["name"] == "git-clone"]
    env = {e["name"]: e["value"] for e in clone["env"] if "value" in e}
    env |= {
        "PATH": os.environ["PATH"],
        "GIT_URL": f"file://{origin}",
        "WORKDIR": str(workdir),
        "HOME": str(home),
        "GIT_TOKEN": CLONE_TOKEN,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    script = clone["command"][-1].replace(BASE_FILE, str(base_file))
    done = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


class Pod:
    """An origin, the workspace as the clone leaves it (base recorded), the verdict as the runner writes."""

    def __init__(self, tmp: Path, files: dict[str, str | bytes] | None = None) -> None:
        self.tmp = tmp
        seed = tmp / "seed"
        seed.mkdir()
        for name, content in (files or {"README.md": "hello\n", "logo.bin": bytes(range(256))}).items():
            (seed / name).parent.mkdir(parents=True, exist_ok=True)
            (seed / name).write_bytes(content if isinstance(content, bytes) else content.encode())
        git("init", "-q", str(seed))
        git("add", "-A", cwd=seed)
        self.seed = seed
        self.origin = tmp / "origin.git"
        self.workdir = tmp / "volume" / "repo"
        self.workdir.parent.mkdir()
        (tmp / "home").mkdir()
        self.verdict = tmp / "verdict.json"
        self.verdict.write_text(Verdict(succeeded=True, output="Renamed the greeting.").model_dump_json())
        self.state = tmp / "state"
        self.state.mkdir()
        self.submodule = ""

    def commit_and_clone(self) -> Pod:
        git("commit", "-q", "-m", "seed", cwd=self.seed)
        git("clone", "-q", "--bare", str(self.seed), str(self.origin))
        self.clone()
        return self

    def clone(self, ref: str = "main") -> None:
        clone_as_the_pod_does(self.origin, self.workdir, self.tmp / "base", self.tmp / "home", ref)
        self.base = git("rev-parse", "HEAD", cwd=self.workdir)

    def plan(self, **changes: object) -> PublishPlan:
        fields: dict[str, object] = {
            "url": f"file://{self.origin}",
            "working_dir": str(self.workdir),
            "patch_limit": 1_000_000,
            "branch": "harness/run-1",
            "commit_message": "run-1",
            "secret_envs": ["HARNESS_PUBLISH_TOKEN", "ANTHROPIC_API_KEY"],
        }
        return PublishPlan.model_validate({**fields, **changes})

    def publish(self, plan: PublishPlan) -> ChangesReport:
        environ = {"HARNESS_PUBLISH_TOKEN": TOKEN, "ANTHROPIC_API_KEY": VENDOR_KEY}
        return publish(plan, environ, str(self.verdict), str(self.tmp / "base"), self.state)

    def branches(self) -> dict[str, str]:
        out = git("for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads", cwd=self.origin)
        return dict(line.split(" ") for line in out.splitlines())

    def tree(self, commit: str) -> dict[str, tuple[str, str]]:
        """path -> (mode, object) of a commit in the origin (a name that is not UTF-8 surrogate-escaped)."""
        listing = subprocess.run(
            ["git", "ls-tree", "-r", "-z", "--full-tree", commit],
            cwd=self.origin,
            capture_output=True,
            check=True,
        ).stdout.decode("utf-8", "surrogateescape")
        entries = {}
        for record in filter(None, listing.split("\0")):
            meta, path = record.split("\t", 1)
            mode, _, object_id = meta.split(" ")
            entries[path] = (mode, object_id)
        return entries


@pytest.fixture
def pod(tmp_path: Path) -> Pod:
    return Pod(tmp_path).commit_and_clone()


def test_the_change_is_a_patch_and_a_commit_on_the_branch(
    pod: Pod, capfd: pytest.CaptureFixture[str]
) -> None:
    (pod.workdir / "README.md").write_text("hello, world\nsecond line\n")
    (pod.workdir / "new.txt").write_text("new\n")
    (pod.workdir / "logo.bin").write_bytes(bytes(reversed(range(256))))

    report = pod.publish(pod.plan())

    assert report.reason is None, report.message
    assert (report.files, report.insertions, report.deletions) == (3, 3, 1)
    assert report.base == pod.base and report.branch == "harness/run-1"
    assert pod.branches()["harness/run-1"] == report.commit
    assert git("show", f"{report.commit}:new.txt", cwd=pod.origin) == "new"
    assert git("rev-parse", f"{report.commit}^", cwd=pod.origin) == pod.base
    patch = decode_frame(capfd.readouterr().err, report.patch_sha256)
    assert isinstance(patch, bytes) and report.patch_bytes == len(patch)
    assert b"GIT binary patch" in patch and b"+hello, world" in patch
    # The patch applies to the base as a user would apply it.
    check = pod.tmp / "check"
    git("clone", "-q", str(pod.origin), str(check))
    (pod.tmp / "p.patch").write_bytes(patch)
    git("apply", "--check", str(pod.tmp / "p.patch"), cwd=check)


def test_an_unchanged_workspace_publishes_nothing(pod: Pod) -> None:
    report = pod.publish(pod.plan())
    assert (report.files, report.reason, report.branch) == (0, None, None)
    assert "harness/run-1" not in pod.branches()


def test_a_failed_agent_is_skipped(pod: Pod) -> None:
    (pod.workdir / "README.md").write_text("half done\n")
    pod.verdict.write_text(Verdict(succeeded=False).model_dump_json())
    assert pod.publish(pod.plan()).skipped
    pod.verdict.unlink()  # no verdict at all: the runner never reported
    assert pod.publish(pod.plan()).skipped
    assert "harness/run-1" not in pod.branches()


def test_the_workspace_git_config_and_hooks_are_never_used(pod: Pod) -> None:
    """The agent points the remote elsewhere (url, pushurl, insteadOf) and adds hooks: the push goes to the
    origin of the plan, to the run's branch, and no hook runs."""
    evil = pod.tmp / "evil.git"
    git("init", "-q", "--bare", str(evil))
    marker = pod.tmp / "hook-ran"
    config = pod.workdir / ".git" / "config"
    config.write_text(
        config.read_text()
        + f'[remote "origin"]\n\tpushurl = file://{evil}\n'
        + f'[url "file://{evil}"]\n\tinsteadOf = file://{pod.origin}\n'
        + "[core]\n\tfsmonitor = touch "
        + str(marker)
        + "\n"
    )
    hooks = pod.workdir / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in ("pre-push", "pre-commit", "post-commit", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (hooks / hook).chmod(0o755)
    (pod.workdir / "README.md").write_text("changed\n")

    report = pod.publish(pod.plan())

    assert report.reason is None, report.message
    assert pod.branches()["harness/run-1"] == report.commit
    assert git("for-each-ref", cwd=evil) == ""
    assert not marker.exists()


def test_the_branch_is_never_forced(pod: Pod) -> None:
    (pod.workdir / "README.md").write_text("first\n")
    first = pod.publish(pod.plan())
    assert first.reason is None
    (pod.workdir / "README.md").write_text("second\n")
    for path in pod.state.iterdir():  # a new pod's own volume
        subprocess.run(["rm", "-rf", str(path)], check=True)

    again = pod.publish(pod.plan())

    assert again.reason == Reason.PushRejected
    assert "harness/run-1" in (again.message or "") and "set publish.branch.name" in (again.message or "")
    assert pod.branches()["harness/run-1"] == first.commit
    assert again.patch_sha256  # the patch is kept all the same


@pytest.mark.parametrize(
    ("where", "content"),
    [
        ("leak.txt", f"token={TOKEN}\n"),
        ("notes/key.json", '{"key": "' + VENDOR_KEY + '"}\n'),
        ("leak.bin", b"\0\1" + __import__("base64").b64encode(VENDOR_KEY.encode()) + b"\0"),
    ],
)
def test_a_change_holding_a_credential_is_refused(pod: Pod, where: str, content: str | bytes) -> None:
    path = pod.workdir / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content if isinstance(content, bytes) else content.encode())

    report = pod.publish(pod.plan())

    assert report.reason == Reason.ChangeHoldsCredential
    assert where in (report.message or "")
    assert TOKEN not in report.render() and VENDOR_KEY not in report.render()
    assert report.patch_sha256 is None and "harness/run-1" not in pod.branches()


def test_a_working_directory_the_agent_replaced_is_not_read(pod: Pod) -> None:
    outside = pod.tmp / "outside"
    outside.mkdir()
    (outside / "secret").write_text("not the repository\n")
    subprocess.run(["rm", "-rf", str(pod.workdir)], check=True)
    pod.workdir.symlink_to(outside)

    report = pod.publish(pod.plan())

    assert report.reason == Reason.WorkspaceNotGit
    assert "replaced" in (report.message or "")


def test_a_patch_over_the_limit_needs_a_branch(pod: Pod, capfd: pytest.CaptureFixture[str]) -> None:
    (pod.workdir / "big.txt").write_text("x" * 5000 + "\n")

    alone = pod.publish(pod.plan(branch=None, patch_limit=1000))
    assert alone.reason == Reason.PatchTooLarge
    assert "spec.workspace.publish.branch" in (alone.message or "")

    with_branch = pod.publish(pod.plan(patch_limit=1000))
    assert with_branch.reason is None and with_branch.patch_sha256 is None
    assert with_branch.patch_bytes and with_branch.patch_bytes > 1000
    assert pod.branches()["harness/run-1"] == with_branch.commit
    assert "HARNESS-OUTPUT-BEGIN" not in capfd.readouterr().err


def test_counts_read_renames_and_binary_files() -> None:
    numstat = b"3\t1\ta.txt\0-\t-\tlogo.bin\0" + b"0\t0\t\0old.txt\0new.txt\0"
    assert count_changes(numstat) == (3, 3, 1)


def filter_config(marker: Path) -> str:
    """A filter (and the process filter git would start) that leaves `marker` holding its environment."""
    command = f"\"sh -c 'env > {marker}; cat'\""  # quoted: `;` starts a comment in a config file
    return f'[filter "x"]\n\tclean = {command}\n\tsmudge = {command}\n'


def plant_nested_repository(folder: Path, marker: Path, source: Path) -> None:
    """What the red team planted: `source` cloned into `folder` (for a submodule, as `git submodule
    update` would: its HEAD the commit the base records), its config running a filter on every file,
    and a file changed at its size, so that git must hash it through the filter to see whether it did."""
    if folder.is_dir():
        folder.rmdir()
    folder.parent.mkdir(parents=True, exist_ok=True)
    git("clone", "-q", str(source), str(folder))
    config = folder / ".git" / "config"
    config.write_text(config.read_text() + filter_config(marker))
    (folder / ".gitattributes").write_text("* filter=x\n")
    (folder / "payload.txt").write_text("COMMITTED\n")


def with_submodule(tmp: Path) -> Pod:
    """An origin whose commit records a submodule (a gitlink at `sub`, of `tmp/subrepo`'s commit)."""
    source = tmp / "subrepo"
    source.mkdir()
    (source / "payload.txt").write_text("committed\n")
    git("init", "-q", str(source))
    git("add", "-A", cwd=source)
    git("commit", "-q", "-m", "submodule", cwd=source)
    pod = Pod(tmp)
    commit = git("rev-parse", "HEAD", cwd=source)
    git("update-index", "--add", "--cacheinfo", f"160000,{commit},sub", cwd=pod.seed)
    (pod.seed / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = ../subrepo\n')
    git("add", ".gitmodules", cwd=pod.seed)
    pod.submodule = commit
    return pod.commit_and_clone()


@pytest.mark.parametrize("folder", ["sub", "vendor/lib"])
def test_a_filter_planted_in_a_nested_repository_never_runs(tmp_path: Path, folder: str) -> None:
    """The critical hole: `git add -A` ran `git status` in a submodule's folder, whose own config held a
    clean filter, with the write token in reach. Now no git process reads the agent's tree (none that
    holds a credential, none that runs a filter), and a change reaching into a nested repository is
    refused, whether it is the base's submodule (`sub`) or one the agent made (`vendor/lib`)."""
    pod = with_submodule(tmp_path)
    marker = tmp_path / "filter-ran"
    plant_nested_repository(pod.workdir / folder, marker, tmp_path / "subrepo")
    (pod.workdir / "README.md").write_text("changed\n")

    report = pod.publish(pod.plan())

    assert report.reason == Reason.ChangeTouchesSubmodule, report
    assert folder in (report.message or "")
    assert not marker.exists()
    assert "harness/run-1" not in pod.branches()


def test_a_submodule_left_alone_is_published_as_the_base_recorded_it(tmp_path: Path) -> None:
    pod = with_submodule(tmp_path)
    assert (pod.workdir / "sub").is_dir()  # the clone's empty folder, as git leaves a submodule
    (pod.workdir / "README.md").write_text("changed\n")

    report = pod.publish(pod.plan())

    assert report.reason is None, report.message
    assert report.files == 1
    assert pod.tree(report.commit or "")["sub"] == ("160000", pod.submodule)


def test_a_folder_holding_git_in_any_case_is_never_taken(pod: Pod, tmp_path: Path) -> None:
    """`.GIT` is `.git` on a case-insensitive checkout: it would plant a config there."""
    (pod.workdir / "docs" / ".GIT").mkdir(parents=True)
    (pod.workdir / "docs" / ".GIT" / "config").write_text(filter_config(tmp_path / "m"))

    report = pod.publish(pod.plan())

    assert report.reason == Reason.ChangeTouchesSubmodule, report
    assert "harness/run-1" not in pod.branches()


def test_an_encoding_attribute_cannot_hide_a_credential(pod: Pod) -> None:
    """working-tree-encoding made git store other bytes than the agent wrote, so the check missed the
    value; the change is now the bytes written, checked as they are."""
    (pod.workdir / ".gitattributes").write_text("leak.txt working-tree-encoding=UTF-16LE\n")
    (pod.workdir / "leak.txt").write_bytes(f"key={VENDOR_KEY}\n".encode())

    report = pod.publish(pod.plan())

    assert report.reason == Reason.ChangeHoldsCredential, report
    assert "leak.txt" in (report.message or "")


def test_a_tracked_folder_replaced_by_a_link_is_not_read_through(pod: Pod) -> None:
    """A link is taken as its target's bytes, never followed (one out of the tree is refused:
    test_protected_paths.py)."""
    (pod.workdir / "src").mkdir()
    (pod.workdir / "src" / "main.py").write_text("print(1)\n")
    (pod.workdir / "README.md").unlink()
    os.symlink("src", pod.workdir / "README.md")  # a tracked file replaced by a link to a folder
    (pod.workdir / "docs").symlink_to("src")

    report = pod.publish(pod.plan())

    assert report.reason is None, report.message
    tree = pod.tree(report.commit or "")
    assert tree["README.md"][0] == "120000" and tree["docs"][0] == "120000"
    assert not [path for path in tree if path.startswith(("docs/", "README.md/"))]
    shown = git("show", f"{report.commit}:README.md", cwd=pod.origin)
    assert shown == "src"  # the link's target, not what it points at


def test_odd_names_modes_and_ignored_files_are_taken_as_git_would(pod: Pod) -> None:
    odd = ['quote"d', "back\\slash", "tab\there", "new\nline", "-leading-dash", "ünïcode", " lead space"]
    for name in odd:
        (pod.workdir / name).write_text(name + "\n")
    (pod.workdir / bytes.decode(b"raw-\xff", "utf-8", "surrogateescape")).write_bytes(b"raw\n")
    tool = pod.workdir / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (pod.workdir / ".gitignore").write_text("*.log\nbuild/\n")
    (pod.workdir / "debug.log").write_text("ignored\n")
    (pod.workdir / "build").mkdir()
    (pod.workdir / "build" / "out.o").write_text("ignored\n")
    (pod.workdir / "logo.bin").unlink()

    report = pod.publish(pod.plan())

    assert report.reason is None, report.message
    tree = pod.tree(report.commit or "")
    paths = set(tree)
    assert set(odd) <= paths and b"raw-\xff".decode("utf-8", "surrogateescape") in paths
    assert tree["bin/tool"][0] == "100755"
    assert {"debug.log", "build/out.o", "logo.bin"}.isdisjoint(paths) and ".gitignore" in paths
    assert git("show", f"{report.commit}:new\nline", cwd=pod.origin) == "new\nline"
    raw = subprocess.run(
        [b"git", b"cat-file", b"blob", f"{report.commit}:".encode() + b"raw-\xff"],
        cwd=pod.origin,
        capture_output=True,
        check=True,
    )
    assert raw.stdout == b"raw\n"


def test_a_tracked_file_an_ignore_rule_matches_is_still_taken(pod: Pod) -> None:
    (pod.workdir / ".gitignore").write_text("README.md\n")
    (pod.workdir / "README.md").write_text("still tracked\n")

    report = pod.publish(pod.plan())

    assert report.reason is None, report.message
    assert git("show", f"{report.commit}:README.md", cwd=pod.origin) == "still tracked"


def test_eol_attributes_change_nothing_the_agent_left_alone(tmp_path: Path) -> None:
    """The clone checks out the committed bytes (no eol, ident or encoding conversion), so a file the
    agent did not touch is the base's, byte for byte, and only the agent's edit is the change."""
    pod = Pod(
        tmp_path,
        {
            ".gitattributes": "*.txt text eol=crlf\n*.c ident\n",
            "a.txt": "one\ntwo\n",
            "b.c": "/* $Id$ */\n",
            "README.md": "hello\n",
        },
    ).commit_and_clone()
    assert (pod.workdir / "a.txt").read_bytes() == b"one\ntwo\n"
    (pod.workdir / "README.md").write_text("changed\n")

    report = pod.publish(pod.plan())

    assert report.reason is None, report.message
    assert report.files == 1


def test_the_branch_is_created_never_moved(pod: Pod) -> None:
    """publish.branch.name: main pushed the agent's commit onto main (a fast-forward); a push now only
    creates its branch."""
    (pod.workdir / "README.md").write_text("onto main\n")
    main = pod.branches()["main"]

    report = pod.publish(pod.plan(branch="main"))

    assert report.reason == Reason.PushRejected, report
    assert "branch main exists" in (report.message or "")
    assert pod.branches()["main"] == main


def plant_in_claim(volume: Path, workdir: Path, marker: Path, how: str) -> None:
    """What the last agent on a shared claim leaves: a repository at the claim's root whose config and
    info/attributes run a filter on every file, and the working directory's `.git` made to lead there."""
    git("init", "-q", str(volume))
    config = volume / ".git" / "config"
    config.write_text(config.read_text() + filter_config(marker))
    (volume / ".git" / "info").mkdir(exist_ok=True)
    (volume / ".git" / "info" / "attributes").write_text("* filter=x\n")
    hooks = workdir / ".git" / "hooks"
    hooks.mkdir(parents=True, exist_ok=True)
    for hook in ("post-checkout", "reference-transaction"):
        (hooks / hook).write_text(f"#!/bin/sh\nenv > {marker}\n")
        (hooks / hook).chmod(0o755)
    if how == "no HEAD":  # git no longer takes it for a repository and looks further up
        (workdir / ".git" / "HEAD").unlink()
    elif how == "commondir":
        (workdir / ".git" / "commondir").write_text(str(volume / ".git") + "\n")
        (workdir / ".git" / "config").write_text(filter_config(marker))
    elif how == "gitfile":
        subprocess.run(["rm", "-rf", str(workdir / ".git")], check=True)
        (workdir / ".git").write_text(f"gitdir: {volume / '.git'}\n")
    (workdir / ".gitattributes").write_text("* filter=x\n")


@pytest.mark.parametrize("how", ["no HEAD", "commondir", "gitfile"])
def test_a_shared_claim_runs_nothing_the_last_agent_left(pod: Pod, tmp_path: Path, how: str) -> None:
    """The next run's clone (with its own read token) never lets git discover a repository, and makes
    `.git` anew before the fetch: no filter, hook or attribute of the last agent's runs."""
    marker = tmp_path / "filter-ran"
    plant_in_claim(pod.workdir.parent, pod.workdir, marker, how)

    pod.clone()

    assert not marker.exists(), marker.read_text()
    git_dir = pod.workdir / ".git"
    assert git_dir.is_dir() and not git_dir.is_symlink()
    assert sorted(p.name for p in (git_dir / "info").iterdir()) == ["attributes"]
    assert not (git_dir / "commondir").exists() and not (git_dir / "hooks").exists()
    assert (pod.workdir / "README.md").read_text() == "hello\n"
    assert pod.base == git("rev-parse", "main", cwd=pod.origin)
    (pod.workdir / "README.md").write_text("the next run's change\n")
    report = pod.publish(pod.plan())
    assert report.reason is None, report.message
    assert not marker.exists()


def push_to_origin(pod: Pod, branch: str, text: str) -> str:
    """Someone else's commit on `branch` of the origin (from its current head, or main's), its SHA."""
    other = pod.tmp / f"other-{len(list(pod.tmp.glob('other-*')))}"
    git("clone", "-q", str(pod.origin), str(other))
    start = branch if branch in pod.branches() else "main"
    git("checkout", "-q", "-B", branch, f"origin/{start}", cwd=other)
    (other / "README.md").write_text(text)
    git("commit", "-q", "-am", "someone else's", cwd=other)
    git("push", "-q", "origin", f"HEAD:refs/heads/{branch}", cwd=other)
    return git("rev-parse", "HEAD", cwd=other)


FOLLOW_UP = "harness/fix-1"


@pytest.fixture
def follow_up(pod: Pod) -> Pod:
    """A pull request's branch with a first commit on it, cloned as a follow-up run clones it."""
    push_to_origin(pod, FOLLOW_UP, "the first run's change\n")
    subprocess.run(["rm", "-rf", str(pod.workdir)], check=True)
    pod.clone(FOLLOW_UP)
    return pod


def test_fast_forward_adds_one_commit_onto_the_branch_as_cloned(follow_up: Pod) -> None:
    pod = follow_up
    head = pod.branches()[FOLLOW_UP]
    assert pod.base == head and (pod.workdir / "README.md").read_text() == "the first run's change\n"
    main = pod.branches()["main"]
    (pod.workdir / "README.md").write_text("the reviewer's rename\n")

    report = pod.publish(pod.plan(branch=FOLLOW_UP, if_exists="FastForward"))

    assert report.reason is None, report.message
    assert (report.base, report.branch, report.files) == (head, FOLLOW_UP, 1)
    assert pod.branches() == {"main": main, FOLLOW_UP: report.commit}
    assert git("rev-list", "--count", f"{head}..{report.commit}", cwd=pod.origin) == "1"
    assert git("rev-parse", f"{report.commit}^", cwd=pod.origin) == head
    assert git("show", f"{report.commit}:README.md", cwd=pod.origin) == "the reviewer's rename"


def test_fast_forward_is_refused_when_someone_pushed_meanwhile(follow_up: Pod) -> None:
    pod = follow_up
    (pod.workdir / "README.md").write_text("the agent's change\n")
    theirs = push_to_origin(pod, FOLLOW_UP, "a reviewer's own commit\n")

    report = pod.publish(pod.plan(branch=FOLLOW_UP, if_exists="FastForward"))

    assert report.reason == Reason.BranchMoved, report
    message = report.message or ""
    assert f"branch {FOLLOW_UP} moved" in message and pod.base in message and theirs in message
    assert "never forced" in message and "start a new run" in message
    assert pod.branches()[FOLLOW_UP] == theirs  # nothing pushed over it
    assert report.patch_sha256 and report.commit is None  # the patch is kept all the same


def test_fast_forward_onto_a_deleted_branch_is_refused(follow_up: Pod) -> None:
    pod = follow_up
    git("update-ref", "-d", f"refs/heads/{FOLLOW_UP}", cwd=pod.origin)
    (pod.workdir / "README.md").write_text("the agent's change\n")

    report = pod.publish(pod.plan(branch=FOLLOW_UP, if_exists="FastForward"))

    assert report.reason == Reason.BranchMoved, report
    assert "is gone (deleted)" in (report.message or "")
    assert FOLLOW_UP not in pod.branches()


def test_fail_still_refuses_the_branch_a_fast_forward_takes(follow_up: Pod) -> None:
    """The same workspace and branch without FastForward: today's create-only refusal."""
    pod = follow_up
    head = pod.branches()[FOLLOW_UP]
    (pod.workdir / "README.md").write_text("the agent's change\n")

    report = pod.publish(pod.plan(branch=FOLLOW_UP))

    assert report.reason == Reason.PushRejected, report
    assert f"branch {FOLLOW_UP} exists" in (report.message or "")
    assert pod.branches()[FOLLOW_UP] == head
