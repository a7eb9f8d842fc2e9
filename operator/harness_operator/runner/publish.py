"""The publishing container of an attempt's pod (I/O): the agent's change as a patch, a branch, a PR.

    python3 -I -m harness_operator.runner.publish

A sidecar: it starts before the agent and waits. The kubelet stops it (SIGTERM) only once the runner's
and the agent's containers have ended, so no process of the agent is left when the workspace is read.
Then, if the runner's verdict (a volume the agent does not mount) says the agent succeeded, it takes the
change into a bare repository of its own (contract/changes.py: PUBLISH_DIR). The commit the clone
recorded is fetched from the origin, the only step but the push that holds the credential, and neither
names the working tree. The change is then taken with no token in git's environment and no credential
helper: the files are read as the bytes the agent wrote (runner/worktree.py: no filter, attribute,
encoding or configuration of the workspace's, no nested repository entered) and written as one commit on
that base by `git fast-import`. A change holding a granted credential's value, reaching into a submodule,
or editing CI configuration the run does not allow is refused. The patch goes to this container's log,
framed; the commit is pushed to the run's branch only if it does not exist yet (never forced, never
onto an existing branch) with the write credential, which only this container holds; the pull request
is opened through the forge's API. What happened is the termination message (ChangesReport); the exit
code is 0 unless the publisher itself broke.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from itertools import chain
from pathlib import Path
from types import FrameType

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import (
    BASE_FILE,
    BODY_OUTPUT_CHARS,
    CLONE_TOKEN_ENV,
    PUBLISH_DIR,
    PUBLISH_PLAN_ENV,
    PUBLISH_TOKEN_ENV,
    VERDICT_FILE,
    ChangesReport,
    PublishPlan,
    Verdict,
    is_ci_path,
)
from harness_operator.contract.frame import encode_frame
from harness_operator.runner.forges import build_pull_request, read_pull_request_url
from harness_operator.runner.redact import Redactor
from harness_operator.runner.worktree import NestedRepository, fast_import_commit, parse_tree, take_entries

DEFAULT_TERMINATION_LOG = "/dev/termination-log"
# The variables git may read from this container's environment: the egress gateway's proxy, if any.
PASSED_ENV = ("PATH", "HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")
# The ref of the taken change in the publisher's repository.
CHANGE_REF = "refs/harness/change"
COMMIT = re.compile(r"^([0-9a-f]{40}|[0-9a-f]{64})$")
GIT_LINES = 3


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not followed: urllib would send the token on to wherever it points."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


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
    return " / ".join(lines[-GIT_LINES:]) or f"git {error.cmd[-1]} exited {error.returncode}"


def read_verdict(path: str) -> Verdict | None:
    try:
        return Verdict.model_validate_json(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def check_workdir(workdir: str) -> None:
    """The working directory is still the directory the clone made: not a link, not replaced by a file.
    (Its parent is the workspace volume, which the agent could write.)"""
    try:
        info = os.lstat(workdir)
    except OSError as exc:
        raise PublishError(
            Reason.WorkspaceNotGit, f"the working directory {workdir} is gone ({exc.strerror})"
        ) from None
    if not stat.S_ISDIR(info.st_mode) or os.path.realpath(workdir) != os.path.normpath(workdir):
        raise PublishError(
            Reason.WorkspaceNotGit,
            f"the working directory {workdir} was replaced by the agent (a link or a file): no change is "
            "taken from it",
        )


def read_base(path: str) -> str:
    try:
        base = Path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        base = ""
    if not COMMIT.match(base):
        raise PublishError(
            Reason.WorkspaceNotGit,
            "the clone recorded no commit for the workspace, so there is nothing to take a change against",
        )
    return base


def count_changes(numstat: bytes) -> tuple[int, int, int]:
    """(files, insertions, deletions) from `git diff --numstat -z`; a binary file counts no lines."""
    files = insertions = deletions = 0
    fields = numstat.split(b"\0")
    i = 0
    while i < len(fields):
        head = fields[i]
        if not head:
            i += 1
            continue
        added, removed, path = [*head.split(b"\t", 2), b"", b""][:3]
        files += 1
        insertions += int(added) if added.isdigit() else 0
        deletions += int(removed) if removed.isdigit() else 0
        # A rename or copy (-z) leaves the path empty and names both paths in the next two fields.
        i += 3 if not path else 1
    return files, insertions, deletions


def find_credential(
    git: Git, base: str, commit: str, patch: bytes, secrets: Mapping[str, str]
) -> tuple[str, str] | None:
    """(path or 'the patch', variable) of a granted credential's value the change holds, in any form the
    runner redacts: in the patch and in every new or changed file as stored (binary ones too)."""
    if not secrets:
        return None
    raw = git.run("diff", "--raw", "-z", "--no-abbrev", "--no-renames", "--diff-filter=AMT", base, commit)
    fields = raw.split(b"\0")
    blobs: list[tuple[str, str]] = []
    for i in range(0, len(fields) - 1, 2):
        meta = fields[i].decode("ascii", "replace").split()
        if len(meta) >= 4 and meta[0].startswith(":") and not meta[1].startswith("16"):  # not a gitlink
            blobs.append((fields[i + 1].decode("utf-8", "replace"), meta[3]))
    for name, value in sorted(secrets.items()):
        one = Redactor([value])
        for path, blob in blobs:
            if one.finds(git.run("cat-file", "blob", blob)):
                return path, name
        if one.finds(patch):
            return "the patch", name
    return None


def find_ci_path(git: Git, base: str, commit: str) -> str | None:
    """The first CI configuration path the change adds, edits or removes, or None."""
    names = git.run("diff", "--name-only", "-z", "--no-renames", base, commit).split(b"\0")
    return next(
        (n.decode("utf-8", "replace") for n in names if is_ci_path(n.decode("utf-8", "replace"))), None
    )


def render_template(text: str, output: str) -> str:
    return text.replace("$(output)", output[:BODY_OUTPUT_CHARS])


def describe_push_failure(said: str, branch: str) -> str:
    lower = said.lower()
    if any(
        s in lower for s in ("already exists", "stale info", "non-fast-forward", "fetch first", "rejected")
    ):
        fix = f"branch {branch} exists on the origin: delete it, or set publish.branch.name to a new one"
    elif any(s in lower for s in ("401", "403", "authentication", "permission", "denied", "could not read")):
        fix = "the token in publish.credentialsSecretRef may not push to the repository: give it write access"
    else:
        fix = "check the origin and the token in publish.credentialsSecretRef"
    return f"the origin refused the push of branch {branch}: {said}; {fix}"


def open_pull_request(
    plan: PublishPlan, branch: str, base: str, output: str, token: str, redactor: Redactor
) -> str:
    request = plan.pull_request
    assert request is not None
    title = render_template(request.title, output.splitlines()[0] if output.strip() else "").strip()
    rendered = request.model_copy(
        update={"title": title[:256] or branch, "body": render_template(request.body, output)}
    )
    call = build_pull_request(rendered, branch, base, token)
    req = urllib.request.Request(call.url, data=call.body, headers=call.headers, method=call.method)
    try:
        with _OPENER.open(req, timeout=60) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        raise PublishError(
            Reason.PullRequestFailed,
            f"the forge's API at {request.api_url} cannot be reached ({exc}); check "
            "publish.pullRequest.apiURL and that the run's network policy allows its host",
        ) from None
    url, problem = read_pull_request_url(request.forge, status, body)
    if url is None:
        said = redactor.text(problem or "")
        raise PublishError(
            Reason.PullRequestFailed,
            f"the forge refused to open the pull request from {branch} into {base}: {said}; check "
            "publish.pullRequest (repository, base) and that the token may open pull requests",
        )
    return url


def origin_head(git: Git, url: str) -> str:
    """The origin's default branch (its HEAD), for a pull request that names no base."""
    heads = git.remote_run("ls-remote", "--symref", url, "HEAD").decode("utf-8", "replace")
    for line in heads.splitlines():
        if line.startswith("ref: refs/heads/"):
            return line.split("\t")[0].removeprefix("ref: refs/heads/")
    raise PublishError(
        Reason.PullRequestFailed, "the origin names no default branch: set publish.pullRequest.base"
    )


def publish(
    plan: PublishPlan,
    environ: Mapping[str, str],
    verdict_file: str = VERDICT_FILE,
    base_file: str = BASE_FILE,
    state: Path = Path(PUBLISH_DIR),
) -> ChangesReport:
    """Take, check, keep and publish the change; every failure is a report, never a raise."""
    verdict = read_verdict(verdict_file)
    if verdict is None or not verdict.succeeded:
        return ChangesReport(skipped=True, message="the agent did not succeed: no change is taken")
    secrets = {name: environ[name] for name in plan.secret_envs if environ.get(name)}
    redactor = Redactor(secrets.values())
    token = environ.get(PUBLISH_TOKEN_ENV) or ""
    report = ChangesReport()
    try:
        check_workdir(plan.working_dir)
        base = read_base(base_file)
        report = report.model_copy(update={"base": base})
        git = Git(
            state,
            plan.working_dir,
            token or environ.get(CLONE_TOKEN_ENV, ""),
            redactor,
            time.monotonic() + plan.timeout_seconds,
        )
        step = "fetching the cloned commit from the origin"
        try:
            git.init()
            git.remote_run("fetch", "-q", "--no-tags", "--depth=1", plan.url, base)
            step = "taking the working directory's files"
            commit = take_change(git, plan, base)
            if git.text("rev-parse", f"{commit}^{{tree}}") == git.text("rev-parse", f"{base}^{{tree}}"):
                return report.model_copy(
                    update={
                        "files": 0,
                        "insertions": 0,
                        "deletions": 0,
                        "message": "the agent changed nothing",
                    }
                )
            step = "comparing the change with its base"
            numstat = git.run("diff", "--numstat", "-z", base, commit)
            patch = git.run(
                "diff",
                "--binary",
                "--full-index",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                base,
                commit,
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            reason = Reason.PushRejected if step.startswith("fetching") else Reason.WorkspaceNotGit
            raise PublishError(reason, f"{step} failed: {last_lines(exc)}") from None
        except NestedRepository as exc:
            raise PublishError(Reason.ChangeTouchesSubmodule, str(exc)) from None
        files, insertions, deletions = count_changes(numstat)
        report = report.model_copy(
            update={
                "files": files,
                "insertions": insertions,
                "deletions": deletions,
                "patch_bytes": len(patch),
            }
        )
        held = find_credential(git, base, commit, patch, secrets)
        if held is not None:
            path, name = held
            raise PublishError(
                Reason.ChangeHoldsCredential,
                f"{path} holds the value of the credential {name}: the change is not kept, pushed or "
                "opened; take the value out of the workspace (the agent wrote it there)",
            )
        if len(patch) <= plan.patch_limit:
            sys.stderr.write("\n" + encode_frame(patch))
            sys.stderr.flush()
            report = report.model_copy(update={"patch_sha256": hashlib.sha256(patch).hexdigest()})
        elif plan.branch is None:
            raise PublishError(
                Reason.PatchTooLarge,
                f"the patch is {len(patch)} bytes, more than the {plan.patch_limit} a ConfigMap holds: set "
                "spec.workspace.publish.branch to keep the change on a branch",
            )
        if plan.branch is None:
            return report
        touched = find_ci_path(git, base, commit)
        if touched is not None and not plan.allow_ci_changes:
            raise PublishError(
                Reason.ChangeTouchesCI,
                f"the change edits {touched}, CI configuration a forge runs with the repository's secrets: "
                "it is not pushed or opened; set spec.workspace.publish.allowCIChanges: true to publish such "
                "changes",
            )
        try:
            # Create-only: the lease expects no such branch, so an existing one (main too) is refused.
            ref = f"refs/heads/{plan.branch}"
            git.remote_run(
                "push", "-q", "--no-verify", f"--force-with-lease={ref}:", plan.url, f"{commit}:{ref}"
            )
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise PublishError(
                Reason.PushRejected, describe_push_failure(last_lines(exc), plan.branch)
            ) from None
        report = report.model_copy(update={"commit": commit, "branch": plan.branch})
        if plan.pull_request is None:
            return report
        try:
            target = plan.pull_request.base or origin_head(git, plan.url)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise PublishError(
                Reason.PullRequestFailed, f"reading the origin's default branch failed: {last_lines(exc)}"
            ) from None
        url = open_pull_request(plan, plan.branch, target, verdict.output, token, redactor)
        return report.model_copy(update={"pull_request_url": url})
    except PublishError as exc:
        return report.model_copy(update={"reason": exc.reason, "message": redactor.text(exc.message)})


def take_change(git: Git, plan: PublishPlan, base: str) -> str:
    """The commit on `base` whose tree is the working directory as the agent left it: the base's files
    and the untracked ones `.gitignore` does not exclude, read as bytes (runner/worktree.py), streamed to
    `git fast-import` (which never sees the working tree)."""
    git.run("read-tree", base)
    base_tree = parse_tree(git.run("ls-tree", "-r", "-z", "--full-tree", base))
    entries = take_entries(plan.working_dir, base_tree, git.untracked())
    who = f"{plan.author_name} <{plan.author_email}>".encode()
    stream = fast_import_commit(CHANGE_REF, base, who, plan.commit_message.encode(), entries)
    git.run(
        "fast-import", "--quiet", "--force", "--date-format=now", "--done", stdin=chain(stream, [b"done\n"])
    )
    return git.text("rev-parse", CHANGE_REF)


def main(argv: list[str] | None = None) -> int:
    termination_log = (argv or sys.argv[1:] or [DEFAULT_TERMINATION_LOG])[0]
    plan = PublishPlan.model_validate_json(os.environ[PUBLISH_PLAN_ENV])
    stop = threading.Event()

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    print("harness-publish: waiting for the agent's container to end", file=sys.stderr, flush=True)
    stop.wait()
    report = publish(plan, os.environ)
    line = report.message or ("published" if not report.skipped else "skipped")
    print(f"harness-publish: {line}", file=sys.stderr, flush=True)
    try:
        Path(termination_log).write_text(report.render(), encoding="utf-8")
    except OSError as exc:
        print(f"harness-publish: cannot write the termination message: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
