"""harnessctl: validate, run (local), render, crds, import-dagu; the cluster commands in cluster.py (the
command-line shell).

Installed a second time as `kubectl-harness`, so `kubectl harness logs RUN` works as a kubectl plugin."""

from __future__ import annotations

import argparse
import re
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from harness_operator import __version__
from harness_operator.api.common import DNS_SUBDOMAIN_RULE
from harness_operator.api.crd import build_crds, render_crd_yaml
from harness_operator.catalog import load_builtin_catalog
from harness_operator.cli.approvals import add_approval_commands
from harness_operator.cli.cluster import (
    EXIT_CODES,
    add_cluster_arguments,
    add_connection_arguments,
    cmd_cancel,
    cmd_describe,
    cmd_logs,
    cmd_rerun,
    cmd_triggers,
    connect,
    parse_target,
    run_cluster_command,
)
from harness_operator.cli.dagu_import import dns_name, import_dagu
from harness_operator.cli.dagu_pipeline import PIPELINE_SERVICE_ACCOUNT
from harness_operator.cli.manifests import load_documents
from harness_operator.cli.triggers import DEFAULT_LIMIT
from harness_operator.cli.validation import ERROR, WARNING, RunLookup, validate_documents


def _run_lookup(args: argparse.Namespace) -> RunLookup:
    """Whether a HarnessRun exists on the cluster of --kubeconfig/--context, in the manifest's namespace,
    else -n, else the context's."""
    kube, default = connect(args)
    return lambda namespace, name: kube.fetch_run(namespace or default, name) is not None


def load_operator_env(path: str) -> dict[str, str] | None:
    """The environment of the `operator` container of the Deployment in `path`, or None after saying why
    not (validate's and render's --operator)."""
    from harness_operator.cli.render import read_operator_env

    env = read_operator_env(load_documents([path]))
    if not env:
        print(
            f"harnessctl: {path} holds no Deployment with an `operator` container: give the chart as "
            "`helm template` renders it, or `kubectl get deployment -o yaml` of the installed one",
            file=sys.stderr,
        )
        return None
    return env


def cmd_validate(args: argparse.Namespace) -> int:
    from harness_operator.core.config import OperatorConfig

    docs = load_documents(args.paths)
    if not docs:
        print(f"harnessctl: no manifests found in {' '.join(args.paths)}", file=sys.stderr)
        return 1
    config = None
    if args.operator:
        env = load_operator_env(args.operator)
        if env is None:
            return 2
        try:
            config = OperatorConfig.from_env(env)
        except ValueError as exc:
            print(f"harnessctl: {args.operator}: {exc}", file=sys.stderr)
            return 2
    lookup = _run_lookup(args) if args.cluster else None
    findings = validate_documents(
        docs, load_builtin_catalog(), strict=args.strict, lookup=lookup, config=config
    )
    for finding in findings:
        print(finding.render())
    errors = sum(1 for f in findings if f.severity == ERROR)
    warnings = sum(1 for f in findings if f.severity == WARNING)
    print(f"{len(docs)} manifests: {errors} errors, {warnings} warnings", file=sys.stderr)
    return 1 if errors else 0


def cmd_crds(args: argparse.Namespace) -> int:
    for out_dir in args.output:
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for name, crd in build_crds().items():
            (folder / name).write_text(render_crd_yaml(crd), encoding="utf-8")
            print(folder / name)
    return 0


def read_dag(path: Path) -> dict[str, Any] | None:
    """A Dagu YAML file as a mapping, or None after saying why not."""
    try:
        dag = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        print(f"harnessctl: cannot read {path}: {exc}", file=sys.stderr)
        return None
    if not isinstance(dag, dict):
        print(f"harnessctl: {path}: a Dagu DAG must be a YAML mapping", file=sys.stderr)
        return None
    return dag


def _param(text: str) -> str:
    if "=" not in text or not text.split("=", 1)[0]:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return text


def _object_name(text: str) -> str:
    if len(text) > 253 or not re.match(DNS_SUBDOMAIN_RULE, text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an object name (a DNS-1123 subdomain)")
    return text


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return int(text)


def cmd_import_dagu(args: argparse.Namespace) -> int:
    path = Path(args.dag)
    dag = read_dag(path)
    base = read_dag(Path(args.base)) if args.base else {}
    if dag is None or base is None:
        return 1
    params = dict(p.split("=", 1) for p in args.param)
    name = dns_name(str(dag.get("name") or path.stem))
    result = import_dagu(dag, name, base, params=params, service_account=args.service_account)
    for line in result.errors:
        print(f"{path}: error: {line}", file=sys.stderr)
    if result.errors:
        print(
            f"harnessctl: {len(result.errors)} errors: Dagu refuses this DAG; nothing imported",
            file=sys.stderr,
        )
        return 1
    sys.stdout.write(yaml.safe_dump_all(result.manifests, sort_keys=False))
    for line in result.unsupported:
        print(f"{path}: unsupported: {line}", file=sys.stderr)
    for line in result.notes:
        print(f"{path}: note: {line}", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from harness_operator.cli.local_run import run_paths

    return run_paths(args.paths, args.status_file)


def cmd_render(args: argparse.Namespace) -> int:
    from harness_operator.cli.render import build_pipeline_wave, build_rendered_objects
    from harness_operator.core.config import OperatorConfig

    docs = load_documents(args.paths)
    errors = [f for f in validate_documents(docs, load_builtin_catalog()) if f.severity == ERROR]
    for finding in errors:
        print(finding.render(), file=sys.stderr)
    if errors:
        return 1
    env = None
    if args.operator:
        env = load_operator_env(args.operator)
        if env is None:
            return 2
    if env is None:
        print(
            "harnessctl: rendered without --operator: with the HARNESS_* variables of this shell, else the "
            "operator's defaults (no gateways, so no proxy or model-gateway variables in the plans); give "
            "the chart (`helm template`) to render as it is installed",
            file=sys.stderr,
        )
    objects, problems = build_rendered_objects(
        docs, load_builtin_catalog(), OperatorConfig.from_env(env), datetime.now(UTC)
    )
    notes: list[str] = []
    for doc in docs:
        if doc.kind == "HarnessPipeline":
            runs, later = build_pipeline_wave(doc, datetime.now(UTC))
            objects += runs
            notes += later
    for problem in problems:
        print(problem, file=sys.stderr)
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
    sys.stdout.write("".join(f"# {note}\n" for note in notes))
    return 1 if problems else 0


PATHS_HELP = "files or folders of YAML manifests; - reads them from stdin"


def build_parser() -> argparse.ArgumentParser:
    prog = "kubectl harness" if Path(sys.argv[0]).name == "kubectl-harness" else "harnessctl"
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run and check agent-harness manifests.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check manifests offline (schema, CEL rules, references)")
    validate.add_argument("paths", nargs="+", metavar="PATH", help=PATHS_HELP)
    validate.add_argument(
        "--strict",
        action="store_true",
        help="a run named by another (after, runOutput, resumeFrom, workspace.from) but not in the files "
        "is an error, not a warning",
    )
    validate.add_argument(
        "--cluster",
        action="store_true",
        help="look runs named but not in the files up on the cluster (--kubeconfig, --context, -n); a "
        "missing one is an error",
    )
    add_connection_arguments(validate)  # with --cluster; -n: the namespace of manifests that name none
    validate.add_argument(
        "--operator",
        metavar="FILE",
        help="the operator Deployment (`helm template` of the chart, or `kubectl get deployment -o yaml`): "
        "tells which vendors the model gateway routes, so no key is asked of those runs",
    )
    validate.set_defaults(func=cmd_validate)  # --cluster sets args.cluster: main() prints kubectl's errors

    run = sub.add_parser(
        "run", help="execute each HarnessRun, then each HarnessPipeline, in the files here, with no cluster"
    )
    run.add_argument("paths", nargs="+", metavar="PATH", help=PATHS_HELP)
    run.add_argument("--status-file", metavar="FILE", help="write the final status (as in the CR) as YAML")
    run.set_defaults(func=cmd_run)

    render = sub.add_parser(
        "render",
        help="print the objects the operator would create (secrets redacted); for a pipeline, the runs it "
        "creates first",
    )
    render.add_argument("paths", nargs="+", metavar="PATH", help=PATHS_HELP)
    render.add_argument(
        "--operator",
        metavar="FILE",
        help="configure as this operator Deployment is (`helm template` of the chart with your values, or "
        "`kubectl get deployment -o yaml` of the installed one); default: the HARNESS_* variables of this "
        "shell, else the operator's built-in defaults (no gateways)",
    )
    render.set_defaults(func=cmd_render)

    crds = sub.add_parser("crds", help="write the generated CustomResourceDefinitions")
    crds.add_argument(
        "-o", "--output", action="append", default=None, metavar="DIR", help="folder to write (repeatable)"
    )
    crds.set_defaults(func=cmd_crds)

    dagu = sub.add_parser("import-dagu", help="turn a Dagu DAG's harnesses and harness steps into manifests")
    dagu.add_argument("dag", metavar="DAG.yaml")
    dagu.add_argument(
        "--base", metavar="BASE.yaml", help="Dagu's base config, whose harnesses: the DAG inherits"
    )
    dagu.add_argument(
        "--param",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        type=_param,
        help="a value for one of the DAG's params: (as `dagu start DAG -- NAME=VALUE`); repeatable",
    )
    dagu.add_argument(
        "--service-account",
        metavar="NAME",
        default=PIPELINE_SERVICE_ACCOUNT,
        type=_object_name,
        help="the ServiceAccount a DAG of several harness steps (a HarnessPipeline) creates its runs as "
        f"(default: {PIPELINE_SERVICE_ACCOUNT}); it must exist, and the operator may impersonate it",
    )
    dagu.set_defaults(func=cmd_import_dagu)

    logs = sub.add_parser(
        "logs",
        help="show a run's progress: turns, tool calls, text, usage, outcome; or a pipeline's: its steps' "
        "phases and their runs' progress",
    )
    logs.add_argument(
        "run",
        metavar="RUN",
        type=parse_target,
        help="the HarnessRun's name (or run/NAME), or pipeline/NAME: a HarnessPipeline's steps, and each "
        "run's progress in turn, prefixed with [step/run]",
    )
    add_connection_arguments(logs)
    logs.add_argument(
        "-f", "--follow", action="store_true", help="follow the run (or the pipeline) until it ends"
    )
    logs.add_argument(
        "-o", "--output", choices=["text", "jsonl"], default="text", help="jsonl: the normalized events"
    )
    logs.set_defaults(func=cmd_logs, cluster=True)

    describe = sub.add_parser(
        "describe", help="a run as kubectl describe shows objects, inputs and Events too"
    )
    add_cluster_arguments(describe)
    describe.set_defaults(func=cmd_describe, cluster=True)

    cancel = sub.add_parser(
        "cancel",
        help="cancel a run (sets spec.cancel: its agent is stopped), or a pipeline's unfinished runs",
    )
    cancel.add_argument(
        "run",
        metavar="RUN",
        type=parse_target,
        help="the HarnessRun's name (or run/NAME), or pipeline/NAME: every unfinished run of the "
        "HarnessPipeline is cancelled and no further step starts",
    )
    add_connection_arguments(cancel)
    cancel.set_defaults(func=cmd_cancel, cluster=True)

    rerun = sub.add_parser("rerun", help="create a new run with a run's spec (named RUN-xxxxx)")
    add_cluster_arguments(rerun)
    rerun.set_defaults(func=cmd_rerun, cluster=True)

    add_approval_commands(sub)

    triggers = sub.add_parser(
        "triggers",
        help="the HarnessTriggers of a namespace, or one's recent deliveries (its Events) and runs",
    )
    triggers.add_argument(
        "trigger", metavar="NAME", nargs="?", help="the HarnessTrigger's name (none: list the namespace's)"
    )
    triggers.add_argument(
        "--limit",
        type=_positive,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"show the newest N deliveries and runs (default {DEFAULT_LIMIT})",
    )
    add_connection_arguments(triggers)
    triggers.set_defaults(func=cmd_triggers, cluster=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "crds" and args.output is None:
        args.output = ["crds"]
    if getattr(args, "cluster", False):
        return run_cluster_command(args.func, args)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
