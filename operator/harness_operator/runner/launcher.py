"""The agent container's entrypoint: take a launch from the runner's channel, start the agent with
the channel's FIFOs as its stdio, stop it when told, say how it ended and exit with its code; a
launch marked `more` (a re-prompt may follow) has it take the next launch first, until a release (I/O).

    python3 -I -m harness_operator.runner.launcher --channel /run/harness/channel

Isolated mode (-I) and a working directory outside the workspace: nothing the workspace or the
environment holds changes which code this runs. It is the container's PID 1 (no tini: a PID 1 of the
agent's user that anyone may trace would hand the agent the container log's pipe through /proc/1/fd),
and makes itself non-dumpable first, so the agent (the same user) can neither trace it, write its
memory nor open its descriptors; it reaps the orphans the agent leaves.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import threading
from typing import IO

from harness_operator.runner.channel import (
    RENDEZVOUS_SECONDS,
    await_channel,
    open_launcher_ends,
    say_status,
    take_launch,
)
from harness_operator.runner.launch import Launch, start_agent, take_session
from harness_operator.runner.stops import SetupError, make_undumpable, signal_group, stop_process_group

DEFAULT_CHANNEL = "/run/harness/channel"


def exit_code(returncode: int) -> int:
    """As a shell reports it: a death by signal N is 128 + N (Popen says -N)."""
    return returncode if returncode >= 0 else 128 - returncode


def reap_until(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the agent, reaping meanwhile every orphan handed to this process (PID 1 is the parent
    of whatever the agent leaves running); the agent's exit code as a shell reports it."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return exit_code(proc.returncode)


def reap_orphans() -> None:
    """Reap the orphans that have ended (none, or no child at all: nothing to do)."""
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def follow_control(control: IO[bytes], pgid: int, exited: threading.Event) -> None:
    """Stop requests from the runner: SIGTERM the agent's group, SIGKILL after the grace (0: now) or
    as soon as the agent exited. The main thread reports the agent's exit meanwhile; this thread ends
    when the runner closes its end (after the agent's exit) or with the process."""
    with control:
        for line in iter(control.readline, b""):
            try:
                grace = float(json.loads(line)["stop"])
            except (ValueError, KeyError, TypeError):
                continue
            if grace > 0 and signal_group(pgid, signal.SIGTERM):
                exited.wait(grace)
            signal_group(pgid, signal.SIGKILL)


def serve(launch: Launch, channel: str) -> int:
    """Start the agent `launch` says, on the channel's FIFOs; its exit code, said to the runner (1
    when it could not start)."""
    status, stdout, stderr, stdin, control = open_launcher_ends(channel)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # an ignored signal stays ignored across exec
    try:
        proc = start_agent(launch, stdin if launch.stdin else subprocess.DEVNULL, stdout, stderr)
    except SetupError as exc:
        say_status(status, {"setup": {"reason": exc.reason, "message": exc.message}})
        for fh in (status, stdout, stderr, stdin, control):
            fh.close()
        return 1
    for fh in (stdout, stderr, stdin):
        fh.close()  # the agent holds them now: their end is its end
    say_status(status, {"started": True})
    # The pod is being deleted: the runner, signalled too, decides the stop and asks for it (so its
    # report says why); if it cannot, the kubelet's SIGKILL after the grace period ends the container.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    exited = threading.Event()
    follower = threading.Thread(target=follow_control, args=(control, proc.pid, exited), daemon=True)
    follower.start()
    code = reap_until(proc)
    exited.set()
    stop_process_group(proc, 0)  # whatever the agent left in its group goes too: no orphans
    reap_orphans()
    # Only now (nothing of the agent's can still write it), and only after an exit 0 (or an ACP adapter's
    # stop, its turn over): the runner keeps the session of a successful attempt alone.
    done = code == 0 or launch.stopped_when_done
    session, problem = take_session(launch) if done else (None, None)
    said: dict[str, object] = {"exit": code}
    if session is not None:
        said["session"] = base64.b64encode(session).decode("ascii")
    if problem is not None:
        said["sessionProblem"] = problem
    say_status(status, said)
    status.close()
    # No stop meant for this agent may reach the next one's group: its follower ends first.
    follower.join(RENDEZVOUS_SECONDS)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="harness-launcher", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--channel", default=DEFAULT_CHANNEL, help=f"the runner's channel ({DEFAULT_CHANNEL})"
    )
    args = parser.parse_args(argv)
    make_undumpable()
    if not await_channel(args.channel, RENDEZVOUS_SECONDS):
        print(f"harness-launcher: no channel at {args.channel}", file=sys.stderr)
        return 1
    code = 0
    while (launch := take_launch(args.channel)) is not None:
        code = serve(launch, args.channel)
        if not launch.more:
            break
    return code


if __name__ == "__main__":
    sys.exit(main())
