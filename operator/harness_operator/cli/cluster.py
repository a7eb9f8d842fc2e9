"""harnessctl's commands against a cluster (logs, cancel, rerun, describe, triggers; approve and reject
are in approvals.py): kubectl's flags, kubectl's error lines and the exit codes scripts read (I/O)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError, MaxRetryError

from harness_operator.api.v1alpha1 import GROUP, HarnessRun
from harness_operator.controller.kube import Kube
from harness_operator.controller.kubeconfig import Flags, KubeconfigError

EXIT_FAILED = 1  # the run ended without success, or manifests with errors
EXIT_USAGE = 2  # bad arguments or kubeconfig (argparse's code)
EXIT_SERVER = 3  # the API server answered with an error (Forbidden, NotFound, ...)
EXIT_UNREACHABLE = 4  # no answer from the API server
EXIT_INTERRUPTED = 130

EXIT_CODES = f"""exit codes:
  0    done (logs: the run or pipeline succeeded, or is still running without -f)
  {EXIT_FAILED}    the run or pipeline ended without success (logs); manifests with errors (validate,
       render, import-dagu); the run is not awaiting approval (approve, reject)
  {EXIT_USAGE}    bad arguments, or a kubeconfig that cannot be used (no file, no such context)
  {EXIT_SERVER}    Error from server: the API server refused or failed the request (Forbidden,
       Unauthorized, NotFound, Conflict, ...); the reason is in parentheses on stderr
  {EXIT_UNREACHABLE}    Unable to connect to the server
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""


class ServerError(Exception):
    """An error the API server answered with, as kubectl prints it."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def not_found(name: str, plural: str = "harnessruns") -> ServerError:
    """kubectl's NotFound line for a run (or an object of another of our kinds)."""
    return ServerError("NotFound", f'{plural}.{GROUP} "{name}" not found')


def render_api_error(exc: ApiException) -> str:
    """The line kubectl prints for an API error: `Error from server (Reason): message`, the Status the
    server sent; 401 as kubectl says it."""
    status: dict[str, Any] = {}
    try:
        body = json.loads(exc.body or "")
        status = body if isinstance(body, dict) else {}
    except (TypeError, ValueError):
        pass
    if exc.status == 401:
        return "error: You must be logged in to the server (Unauthorized)"
    reason = str(status.get("reason") or "")
    if not reason and exc.status:
        reason = HTTPStatus(exc.status).phrase.replace(" ", "") if exc.status in HTTPStatus else ""
    message = str(status.get("message") or (exc.body if exc.body and not status else "") or exc.reason or "")
    return f"Error from server ({reason}): {message}" if reason else f"Error from server: {message}"


def render_connection_error(exc: HTTPError) -> str:
    """kubectl's line when the API server cannot be reached."""
    cause = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
    return f"Unable to connect to the server: {cause}"


def run_cluster_command(command: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """`command`, its failures printed as kubectl prints them (no traceback) with the exit codes above."""
    try:
        return command(args)
    except KubeconfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ServerError as exc:
        print(f"Error from server ({exc.reason}): {exc}", file=sys.stderr)
        return EXIT_SERVER
    except ApiException as exc:
        print(render_api_error(exc), file=sys.stderr)
        return EXIT_SERVER
    except HTTPError as exc:
        print(render_connection_error(exc), file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def connect(args: argparse.Namespace) -> tuple[Kube, str]:
    """The client and namespace kubectl's flags (and $KUBECONFIG) choose."""
    flags = Flags(
        kubeconfig=args.kubeconfig,
        context=args.context,
        namespace=args.namespace,
        as_user=args.as_user,
        as_groups=tuple(args.as_group),
        as_uid=args.as_uid,
    )
    return Kube.from_kubeconfig(flags)


RUN_KIND, PIPELINE_KIND = "HarnessRun", "HarnessPipeline"
PIPELINE_TYPES = {"pipeline", "pipelines", "harnesspipeline", "harnesspipelines", "hpipe"}
RUN_TYPES = {"run", "runs", "harnessrun", "harnessruns", "hrun"}


def parse_target(text: str) -> tuple[str, str]:
    """(kind, name) of `logs`' and `cancel`'s argument: NAME or TYPE/NAME as kubectl names objects
    (`run/NAME`, `pipeline/NAME`, their plurals, kinds, short names, with or without the group)."""
    kind, slash, name = text.partition("/")
    if not slash:
        return RUN_KIND, text
    kind = kind.lower().removesuffix(f".{GROUP}")
    if name and kind in PIPELINE_TYPES:
        return PIPELINE_KIND, name
    if name and kind in RUN_TYPES:
        return RUN_KIND, name
    raise argparse.ArgumentTypeError(f"{text!r}: give RUN, run/RUN or pipeline/PIPELINE")


def cmd_logs(args: argparse.Namespace) -> int:
    from harness_operator.cli.follow import (
        PipelineNews,
        PipelineNotFound,
        RunNotFound,
        follow_pipeline,
        follow_run,
    )
    from harness_operator.contract.events import Event, render_event

    def say(line: str | None) -> None:
        if line is not None:
            print(line, flush=True)

    def write(event: Event) -> None:
        say(
            json.dumps(event.to_json(), ensure_ascii=False) if args.output == "jsonl" else render_event(event)
        )

    def tell(news: PipelineNews) -> None:
        say(json.dumps(news.to_json(), ensure_ascii=False) if args.output == "jsonl" else news.render())

    kind, name = args.run
    kube, namespace = connect(args)
    if kind == PIPELINE_KIND:
        try:
            return follow_pipeline(kube, namespace, name, args.follow, tell)
        except PipelineNotFound as exc:
            raise not_found(name, "harnesspipelines") from exc
    try:
        return follow_run(kube, namespace, name, args.follow, write)
    except RunNotFound as exc:
        raise not_found(name) from exc


def cmd_cancel(args: argparse.Namespace) -> int:
    """Set spec.cancel of the run, or of the pipeline (which cancels its unfinished runs)."""
    kind, name = args.run
    plural = "harnesspipelines" if kind == PIPELINE_KIND else "harnessruns"
    kube, namespace = connect(args)
    user = None
    if plural == "harnessruns":
        run = kube.fetch_run(namespace, name)
        if run is None:
            raise not_found(name, plural)
        if (run.get("spec") or {}).get("cancel"):  # who cancelled it is recorded once
            print(f"{kind.lower()}.{GROUP}/{name} cancel already requested")
            return 0
        user = kube.fetch_username()
    if not kube.cancel(namespace, name, plural, user):
        raise not_found(name, plural)
    print(f"{kind.lower()}.{GROUP}/{name} cancel requested")
    return 0


def cmd_rerun(args: argparse.Namespace) -> int:
    from harness_operator.cli.manifests import build_rerun

    kube, namespace = connect(args)
    run = kube.fetch_run(namespace, args.run)
    if run is None:
        raise not_found(args.run)
    created = kube.create_run(build_rerun(run, kube.fetch_username()))
    print(f"harnessrun.{GROUP}/{created['metadata']['name']} created")
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    from harness_operator.cli.describe import build_description
    from harness_operator.core.objects.naming import output_config_map_name

    kube, namespace = connect(args)
    raw = kube.fetch_run(namespace, args.run)
    if raw is None:
        raise not_found(args.run)
    run = HarnessRun.model_validate(raw)
    values: dict[str, str] = {}
    for item in run.spec.inputs:  # never a Secret's: describe shows sizes, and a Secret's is not its to read
        value: str | None = item.value
        if item.config_map_key_ref is not None:
            ref = item.config_map_key_ref
            value = kube.fetch_config_map_key(namespace, ref.name, ref.key)
        elif item.run_output is not None and not item.run_output.path:
            value = kube.fetch_config_map_key(
                namespace, output_config_map_name(item.run_output.name), "output"
            )
        if value is not None:
            values[item.name] = value
    events = kube.fetch_events(namespace, str(raw["metadata"]["uid"]))
    sys.stdout.write(build_description(run, values, events, datetime.now(UTC)))
    return 0


def cmd_triggers(args: argparse.Namespace) -> int:
    from harness_operator.cli.triggers import TRIGGER_LABEL, build_trigger_description, build_trigger_list

    kube, namespace = connect(args)
    now = datetime.now(UTC)
    if args.trigger is None:
        triggers, _ = kube.list_objects("HarnessTrigger", namespace, "")
        listed = list(triggers)
        if not listed:
            print(f"No resources found in {namespace} namespace.", file=sys.stderr)
            return 0
        runs, _ = kube.list_objects("HarnessRun", namespace, TRIGGER_LABEL)
        sys.stdout.write(build_trigger_list(listed, list(runs), now))
        return 0
    trigger = kube.fetch_trigger(namespace, args.trigger)
    if trigger is None:
        raise not_found(args.trigger, "harnesstriggers")
    events = kube.fetch_events(namespace, str(trigger["metadata"]["uid"]))
    runs, _ = kube.list_objects("HarnessRun", namespace, f"{TRIGGER_LABEL}={args.trigger}")
    sys.stdout.write(build_trigger_description(trigger, events, list(runs), now, args.limit))
    return 0


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN and kubectl's connection flags."""
    parser.add_argument("run", metavar="RUN", help="the HarnessRun's name")
    add_connection_arguments(parser)


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """kubectl's connection flags, meaning what they mean to kubectl."""
    parser.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
    parser.add_argument("--context", help="kubeconfig context to use (default: current-context)")
    parser.add_argument(
        "--kubeconfig",
        help="kubeconfig file (default: $KUBECONFIG, a ':'-separated list merged as kubectl merges it, "
        "then ~/.kube/config)",
    )
    parser.add_argument(
        "--as", dest="as_user", metavar="USER", help="impersonate USER (overrides the kubeconfig's as:)"
    )
    parser.add_argument(
        "--as-group",
        action="append",
        default=[],
        metavar="GROUP",
        help="impersonate GROUP too (repeatable; overrides the kubeconfig's as-groups:)",
    )
    parser.add_argument(
        "--as-uid", metavar="UID", help="impersonate this UID (overrides the kubeconfig's as-uid:)"
    )
