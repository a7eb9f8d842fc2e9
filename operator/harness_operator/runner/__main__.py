"""The sandbox entrypoint: run the one attempt in the plan file, report, exit with its code (I/O).

    python3 -I -m harness_operator.runner --plan /etc/harness/plan.json --channel /run/harness/channel

Reports through what a pod without API credentials has: the exit code, the termination message (the
result document, under 4 KiB) and the pod log (the agent's stderr and the normalized events of its
stdout as they come, then the framed output, and last, for a traced run, its spans: runner/spans.py).
With `--channel` (the pod) the agent runs in a container of its own, started by the launcher there
(`channel`), so nothing the agent does can write this process's report; without it (tests, by hand)
the agent is a child of this process.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from types import FrameType

from harness_operator.api.reasons import Reason
from harness_operator.contract.changes import Verdict
from harness_operator.contract.frame import SESSION, encode_frame
from harness_operator.contract.plan import AttemptPlan, load_plan
from harness_operator.contract.result import EXIT_SETUP, NETWORK_NOT_CONFINED, render_termination_message
from harness_operator.runner.channel import Spawner, create_channel
from harness_operator.runner.confinement import await_confinement, describe_confinement
from harness_operator.runner.executor import AttemptResult, execute
from harness_operator.runner.launch import LocalAgent, Spawn
from harness_operator.runner.network import await_destinations, describe_reached, find_destinations
from harness_operator.runner.redact import Redactor
from harness_operator.runner.spans import SpanRecorder

DEFAULT_PLAN = "/etc/harness/plan.json"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
VERDICT_OUTPUT_BYTES = 65536  # a pull request's body takes at most 60000 characters of it


def build_arg_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness-runner", description="Run one attempt of a HarnessRun.")
    parser.add_argument("--plan", default=DEFAULT_PLAN, help=f"the attempt's plan (default {DEFAULT_PLAN})")
    parser.add_argument("--result-file", default=None, help="also write the full result document here")
    parser.add_argument(
        "--channel", default=None, help="create the launcher's channel here and run the agent through it"
    )
    parser.add_argument(
        "--workdir", default=None, help="the agent's working directory when the plan names none"
    )
    parser.add_argument(
        "--verdict",
        default=None,
        help="also write whether the agent succeeded, and its output, here (for the publishing container)",
    )
    parser.add_argument(
        "--termination-log",
        default=DEFAULT_TERMINATION_LOG,
        help=f"termination message (default {DEFAULT_TERMINATION_LOG}; skipped if its folder is missing)",
    )
    return parser


def install_cancel_handler(cancel: threading.Event) -> None:
    """SIGTERM (and SIGINT) to the runner cancel the attempt: the executor forwards it to the agent."""

    def handler(signum: int, frame: FrameType | None) -> None:
        cancel.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def write_reports(result: AttemptResult, termination_log: str, result_file: str | None) -> None:
    doc = result.to_result()
    if result_file:
        with open(result_file, "w", encoding="utf-8") as fh:
            json.dump(doc.to_doc(), fh, indent=2, sort_keys=True)
    if os.path.isdir(os.path.dirname(termination_log) or "."):
        try:
            with open(termination_log, "w", encoding="utf-8") as fh:
                fh.write(render_termination_message(doc))
        except OSError as exc:
            print(f"harness: cannot write the termination message: {exc}", file=sys.stderr)
    # On stderr, the stream of every other runner line: the container runtime copies stdout and stderr
    # apart, so only one stream keeps the frame last and whole. It starts a line of its own.
    if result.session is not None:
        sys.stderr.write("\n" + encode_frame(result.session, SESSION))
    sys.stderr.write("\n" + encode_frame(result.output))
    sys.stderr.flush()


def write_spans(line: str | None) -> None:
    """The runner's spans of a traced run, the last line it writes (after the frame, on its line)."""
    if line is not None:
        sys.stderr.write(line)
        sys.stderr.flush()


def write_verdict(result: AttemptResult, path: str) -> None:
    """The publishing container's word from the runner: written whole (a rename) or not at all."""
    doc = result.to_result()
    text = result.output[:VERDICT_OUTPUT_BYTES].decode("utf-8", "replace")
    verdict = Verdict(succeeded=doc.succeeded, output=text)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(verdict.model_dump_json())
    os.chmod(tmp, 0o644)  # the publisher runs as the sandbox's user
    os.replace(tmp, path)


def credentials_from_env(plan: AttemptPlan) -> dict[str, str]:
    """In the pod, granted secrets arrive as the runner's environment (secretKeyRef)."""
    return {name: os.environ[name] for name in plan.credential_envs if name in os.environ}


def main(argv: list[str] | None = None) -> int:
    spans = SpanRecorder()
    args = build_arg_parser().parse_args(argv)
    cancel = threading.Event()
    install_cancel_handler(cancel)
    spawner = Spawner(args.channel) if args.channel else None
    try:
        if args.channel:
            create_channel(args.channel)
        result = run_attempt(args, cancel, spawner or LocalAgent, spans)
    except Exception as exc:  # whatever goes wrong, the pod still ends with a result document
        message = f"harness: the runner failed: {type(exc).__name__}: {exc}".splitlines()[0]
        print(message, file=sys.stderr)
        result = AttemptResult(0, "", EXIT_SETUP, Reason.SetupFailed, message)
    finally:
        if spawner is not None:
            spawner.release()  # a launcher given nothing to run ends its container
    if args.verdict:
        try:
            write_verdict(result, args.verdict)
        except OSError as exc:  # the publisher then takes no change: it says so
            print(f"harness: cannot write the verdict: {exc}", file=sys.stderr)
    write_reports(result, args.termination_log, args.result_file)
    write_spans(spans.finish(result))
    return result.exit_code


def run_attempt(
    args: argparse.Namespace, cancel: threading.Event, spawn: Spawn, spans: SpanRecorder
) -> AttemptResult:
    """Read the plan, wait for confinement, execute; every failure is a result, never a raise. The
    spans are recorded from here when the plan says the run is traced."""
    try:
        with open(args.plan, encoding="utf-8") as fh:
            plan = load_plan(fh.read())
    except (OSError, ValueError) as exc:
        message = f"harness: cannot read the plan {args.plan}: {exc}".splitlines()[0]
        print(message, file=sys.stderr)
        return AttemptResult(0, "", EXIT_SETUP, Reason.SetupFailed, message)
    if plan.working_dir is None and args.workdir:
        plan = plan.model_copy(update={"working_dir": args.workdir})
    print(
        f"harness: attempt {plan.attempt}/{plan.total_attempts} with {plan.provider}",
        file=sys.stderr,
        flush=True,
    )
    credentials = credentials_from_env(plan)
    spans.begin(plan, credentials)
    if plan.confinement is not None:
        with spans.step("confinement probe") as said:
            found = await_confinement(plan.confinement, cancel=cancel)
            said["harness.confined"] = found.confined
        line = describe_confinement(plan.confinement, found)
        print(line, file=sys.stderr, flush=True)
        if not found.confined and plan.confinement.required and not cancel.is_set():
            return AttemptResult(plan.attempt, plan.provider, EXIT_SETUP, NETWORK_NOT_CONFINED, line)
    env = {**{e.name: e.value for e in plan.env}, **credentials}
    destinations = find_destinations(env, plan.model_destinations)
    if destinations:
        with spans.step("model destinations") as said:
            reached = await_destinations(destinations, cancel=cancel)
            said["harness.unreachable"] = len(reached.unreachable)
        line = describe_reached(destinations, reached)
        print(line, file=sys.stderr, flush=True)
        if reached.unreachable and not cancel.is_set():
            return AttemptResult(plan.attempt, plan.provider, EXIT_SETUP, Reason.ProviderUnavailable, line)
    try:
        return execute(
            plan,
            credentials,
            cancel=cancel,
            on_event=spans.on_event,
            events_to_log=True,
            spawn=spans.launching(spawn),
        )
    except Exception as exc:  # whatever goes wrong, the pod still ends with a result document
        text = Redactor(credentials.values()).text(f"{type(exc).__name__}: {exc}")
        message = f"harness: the runner failed: {text}".splitlines()[0]
        print(message, file=sys.stderr)
        return AttemptResult(plan.attempt, plan.provider, EXIT_SETUP, Reason.SetupFailed, message)


if __name__ == "__main__":
    sys.exit(main())
