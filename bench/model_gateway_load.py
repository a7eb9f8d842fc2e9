"""The model gateway at concurrency, side by side with the same stubs reached directly (issue 54).

    KUBECONFIG=... python bench/model_gateway_load.py [--seconds 5] [--pace 0.5] [--hold 8] [--flood 240]
    KUBECONFIG=... python bench/model_gateway_load.py --profile OUT.txt [--py-spy PATH]
    KUBECONFIG=... python bench/model_gateway_load.py --vendor anthropic --workers 64 --paced-only \
        --no-flood [--traces]

One real gateway process with the chart's default limits, a real Redis and the three vendors' stubs on
loopback; the stubs run in a process of their own, so this client's event loop does not share their
interpreter. The grants are written as the operator writes them (bench/model_gateway.py), each with a
maxCostUSD, so every check of a capped request runs. Each load is closed: N workers each send streamed
requests back to back for SECONDS (after a second of warm-up, not counted), spread over attempts and
namespaces that stay at half their in-flight limits (4 per attempt, 16 per namespace), so fairness
refuses none of them.
1. For each vendor shape (Anthropic Messages, OpenAI Chat Completions, Gemini streamGenerateContent) and
   64 and 256 workers: the stub directly, then through the gateway, twice: the stubs answering at once
   (the load saturates: the gateway's capacity), then after PACE seconds (WORKERS / PACE requests a
   second: streams of a model that takes its time). Time to the first byte of the body and to its end at
   p50 and p99, what the gateway adds at the same percentile, requests per second per CPU-second of the
   gateway (utime + stime of /proc/PID/stat over the window), its peak RSS (sampled), and the CPU share
   of this client, the stubs and the gateway over each window.
2. Two tenants: a normal one (16 workers, its own namespace, paced) alone, then while FLOOD workers send
   requests the Anthropic stub holds HOLD seconds (a long answer), retrying a refusal after 0.5 s as a
   CLI does: first all from one namespace (its limits hold them), then spread over 16 namespaces (each
   under its limits, together past the upstream pool). The normal tenant's p99 each way, every non-200.
Goals are printed PASS/FAIL, not asserted. --profile instead records the gateway with py-spy (attached
to its process) under 64 workers per vendor and prints where its CPU goes. --vendor, --workers,
--paced-only and --no-flood narrow part 1 and skip part 2. --traces makes every run traced (its grants
carry the attempts' traceparents) and the gateway export a span per request to an OTLP/HTTP sink on
loopback (it answers 200 and counts the spans): run once with it and once without to read what tracing
adds. The gateway writes an audit record per request either way.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes import config
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_gateway import (
    BODY,
    build_grant,
    cpu_seconds,
    gateway_process,
    grant_maps,
    percentile,
    redis_server,
    rss_mib,
    time_request,
)
from tests.stubs.anthropic import AnthropicStub
from tests.stubs.gemini import GeminiStub
from tests.stubs.openai import OpenAIStub

CONCURRENCY = (64, 256)
PER_ATTEMPT, PER_NAMESPACE = 4, 16  # half the chart's limits (8, 32): none of the load is refused
LOAD_NAMESPACES = max(CONCURRENCY) // PER_NAMESPACE
NORMAL_WORKERS = 16
FLOOD_NAMESPACE_ATTEMPTS = 30  # one namespace's runs, 8 workers each: 240 at once
RETRY_AFTER = 0.5  # a refused flood request is sent again after this (the SDKs' first backoff)
WARMUP = 1.0
MAX_COST_USD = 1_000_000.0
HOLD_USER = "bench-hold"  # metadata.user_id of a request the Anthropic stub holds
PROMPT = "hi " * 300
GOAL_ADDED_P99_MS, GOAL_FLOOD_RATIO, GOAL_RSS_MIB = 30.0, 1.2, 200.0


@dataclass(frozen=True)
class Shape:
    """A vendor's streamed request: the vendor's own path and body, and the header its key goes in."""

    vendor: str
    path: str
    body: dict[str, Any]
    auth: str

    def headers(self, token: str) -> dict[str, str]:
        return {"authorization": f"Bearer {token}"} if self.auth == "authorization" else {self.auth: token}


SHAPES = (
    Shape("anthropic", "/v1/messages", {**BODY, "stream": True}, "x-api-key"),
    Shape(
        "openai",
        "/v1/chat/completions",
        {"model": "gpt-4.1", "max_tokens": 256, "messages": BODY["messages"], "stream": True},
        "authorization",
    ),
    Shape(
        "gemini",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
        {
            "contents": [{"role": "user", "parts": [{"text": PROMPT}]}],
            "generationConfig": {"maxOutputTokens": 256},
        },
        "x-goog-api-key",
    ),
)
VENDORS = [shape.vendor for shape in SHAPES]
HELD = {**SHAPES[0].body, "metadata": {"user_id": HOLD_USER}}


# --- the stubs' process ----------------------------------------------------------------------------------


class HoldingAnthropicStub(AnthropicStub):
    """The Anthropic stub, holding a request of HOLD_USER `hold` seconds before it answers."""

    hold = 0.0

    def handle(self, req: Any) -> Any:
        if isinstance(req.body, dict) and (req.body.get("metadata") or {}).get("user_id") == HOLD_USER:
            time.sleep(self.hold)
        return super().handle(req)


def serve_stubs(hold: float) -> None:
    """The stubs, until stdin closes; prints their base URLs (JSON, one line), then sets each line read
    (seconds) as every stub's delay before it answers a model call, and says `ok`. Their request logs are
    emptied every second (a bench sends hundreds of thousands)."""
    HoldingAnthropicStub.hold = hold
    stubs = {"anthropic": HoldingAnthropicStub(), "openai": OpenAIStub(), "gemini": GeminiStub()}
    for stub in stubs.values():
        stub.start()

    def forget() -> None:
        while True:
            time.sleep(1)
            for stub in stubs.values():
                with stub._lock:
                    stub.requests.clear()

    threading.Thread(target=forget, daemon=True).start()
    print(json.dumps({vendor: stub.base_url for vendor, stub in stubs.items()}), flush=True)
    for line in sys.stdin:
        for stub in stubs.values():
            stub.delay = float(line)
        print("ok", flush=True)


def set_delay(stubs: subprocess.Popen[str], seconds: float) -> None:
    """Every stub answers a model call `seconds` after it came (a model that takes its time)."""
    assert stubs.stdin is not None and stubs.stdout is not None
    stubs.stdin.write(f"{seconds}\n")
    stubs.stdin.flush()
    assert stubs.stdout.readline().strip() == "ok"


@contextmanager
def stub_process(hold: float) -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve-stubs", "--hold", str(hold)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        yield proc, json.loads(proc.stdout.readline())
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.terminate()
        proc.wait()


# --- the load ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    """One worker's request."""

    url: str
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class Window:
    samples: list[tuple[float, float, int]]  # (first byte, end, status); status 0: no answer
    seconds: float
    cpu: dict[str, float] = field(default_factory=dict)  # CPU-seconds by process over the window

    def ok(self, which: int) -> list[float]:
        return [sample[which] for sample in self.samples if sample[1] and sample[2] == 200]

    def statuses(self) -> Counter[int]:
        return Counter(sample[2] for sample in self.samples if sample[2] != 200)


def process_cpu(pids: dict[str, int]) -> dict[str, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"client": usage.ru_utime + usage.ru_stime, **{n: cpu_seconds(p) for n, p in pids.items()}}


async def run_load(
    session: aiohttp.ClientSession,
    specs: Sequence[Spec],
    seconds: float,
    pids: dict[str, int],
    warmup: float = WARMUP,
    retry_after: float = 0.0,
    stagger: float = 0.0,
) -> Window:
    """Each spec's worker sends its request back to back for `warmup` + `seconds`, the workers' first
    requests spread evenly over `stagger` seconds (so that answers of a fixed delay do not come, and
    their next requests go, all at once); what started after the warm-up is counted, and the processes'
    CPU from then until the last answer."""
    started = time.perf_counter()
    counted, end = started + warmup, started + warmup + seconds
    samples: list[tuple[float, float, int]] = []
    cpu: dict[str, float] = {}

    async def worker(i: int, spec: Spec) -> None:
        await asyncio.sleep(stagger * i / len(specs))
        while (at := time.perf_counter()) < end:
            try:
                sample = await time_request(session, spec.url, spec.body, spec.headers)
            except (aiohttp.ClientError, TimeoutError):
                sample = (0.0, 0.0, 0)
            if at >= counted:
                samples.append(sample)
            if sample[2] != 200 and retry_after:
                await asyncio.sleep(retry_after)

    async def mark() -> None:
        await asyncio.sleep(warmup)
        cpu.update(process_cpu(pids))

    await asyncio.gather(mark(), *(worker(i, spec) for i, spec in enumerate(specs)))
    after = process_cpu(pids)
    return Window(samples, time.perf_counter() - counted, {n: after[n] - cpu[n] for n in after})


@dataclass
class Tenants:
    """The grants' tokens: the load's namespaces (per vendor, PER_NAMESPACE // PER_ATTEMPT attempts
    each), the normal tenant's and the flooding namespace's (Anthropic attempts)."""

    load: list[dict[str, list[str]]]
    normal: list[str]
    flood: list[str]


def build_tenants(traced: bool) -> tuple[Tenants, list[dict[str, Any]]]:
    per_vendor = PER_NAMESPACE // PER_ATTEMPT
    bodies, load = [], []
    for i in range(LOAD_NAMESPACES):
        body, tokens = build_grant(
            f"bench-load-{i:02}", [v for v in VENDORS for _ in range(per_vendor)], MAX_COST_USD, traced
        )
        bodies.append(body)
        load.append({v: tokens[k * per_vendor : (k + 1) * per_vendor] for k, v in enumerate(VENDORS)})
    normal_body, normal = build_grant("bench-normal", ["anthropic"] * per_vendor, MAX_COST_USD, traced)
    flood_body, flood = build_grant(
        "bench-flood", ["anthropic"] * FLOOD_NAMESPACE_ATTEMPTS, MAX_COST_USD, traced
    )
    return Tenants(load, normal, flood), [*bodies, normal_body, flood_body]


def load_specs(
    base: str, shape: Shape, workers: int, tenants: Tenants | None, body: Any = None
) -> list[Spec]:
    """`workers` workers' requests to `base` (a stub: tenants None, any key; the gateway: the load's
    tokens, PER_ATTEMPT workers on each attempt, PER_NAMESPACE in each namespace)."""
    specs = []
    for w in range(workers):
        ns, attempt = divmod(w % (LOAD_NAMESPACES * PER_NAMESPACE), PER_NAMESPACE)
        token = "sk-direct" if tenants is None else tenants.load[ns][shape.vendor][attempt // PER_ATTEMPT]
        specs.append(Spec(base + shape.path, body or shape.body, shape.headers(token)))
    return specs


class PeakRss:
    """The gateway's RSS sampled every 0.1 s while a block runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0.0

    @contextmanager
    def sampling(self) -> Iterator[None]:
        self.peak = 0.0
        task = asyncio.ensure_future(self._sample())
        try:
            yield
        finally:
            task.cancel()

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, rss_mib(self.pid))
            await asyncio.sleep(0.1)


# --- reporting ------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.2f}"


def pcts(window: Window, which: int) -> tuple[float, float]:
    values = window.ok(which)
    return (percentile(values, 0.5), percentile(values, 0.99)) if values else (float("nan"), float("nan"))


def row(name: str, window: Window) -> str:
    f50, f99 = pcts(window, 0)
    t50, t99 = pcts(window, 1)
    rate = len(window.ok(1)) / window.seconds
    cpu = " ".join(f"{n} {c / window.seconds * 100:3.0f}%" for n, c in window.cpu.items())
    return (
        f"{name:<26} n {len(window.samples):6}  first byte p50 {ms(f50)} p99 {ms(f99)} ms  "
        f"end p50 {ms(t50)} p99 {ms(t99)} ms  {rate:7.0f} req/s  CPU {cpu}  non-200 {dict(window.statuses())}"
    )


def added(direct: Window, through: Window) -> tuple[float, float, float, float]:
    """(first byte p50, p99, end p50, p99) added by the gateway, in ms."""
    (df50, df99), (dt50, dt99) = pcts(direct, 0), pcts(direct, 1)
    (gf50, gf99), (gt50, gt99) = pcts(through, 0), pcts(through, 1)
    return (gf50 - df50) * 1000, (gf99 - df99) * 1000, (gt50 - dt50) * 1000, (gt99 - dt99) * 1000


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# --- the bench ------------------------------------------------------------------------------------------


@dataclass
class Bench:
    """What a measurement talks to: the stubs (by vendor), the gateway, the grants' tokens."""

    session: aiohttp.ClientSession
    stubs: dict[str, str]
    stubs_process: subprocess.Popen[str]
    gateway: int  # its pid
    port: int
    tenants: Tenants
    args: argparse.Namespace
    goals: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def pids(self, through: bool) -> dict[str, int]:
        return {"stubs": self.stubs_process.pid, **({"gateway": self.gateway} if through else {})}

    def normal_specs(self) -> list[Spec]:
        shape = SHAPES[0]
        tokens = self.tenants.normal
        url = f"{self.base}/anthropic{shape.path}"
        return [Spec(url, shape.body, shape.headers(tokens[w % len(tokens)])) for w in range(NORMAL_WORKERS)]

    def flood_specs(self) -> dict[str, list[Spec]]:
        """The flood from one namespace (its runs), and spread over the load's namespaces (each under its
        limits, w % LOAD_NAMESPACES picks the namespace)."""
        shape, url, per_vendor = (
            SHAPES[0],
            f"{self.base}/anthropic{SHAPES[0].path}",
            PER_NAMESPACE // PER_ATTEMPT,
        )
        own = self.tenants.flood
        load = self.tenants.load
        return {
            "one namespace": [
                Spec(url, HELD, shape.headers(own[w % len(own)])) for w in range(self.args.flood)
            ],
            f"{LOAD_NAMESPACES} namespaces": [
                Spec(
                    url,
                    HELD,
                    shape.headers(
                        load[w % LOAD_NAMESPACES]["anthropic"][(w // LOAD_NAMESPACES) % per_vendor]
                    ),
                )
                for w in range(self.args.flood)
            ],
        }


async def measure_shapes(bench: Bench, rss: PeakRss, pace: float) -> None:
    """Each vendor's shape at each concurrency, the stub directly then through the gateway; the stubs
    answer at once (pace 0: the load saturates) or after `pace` seconds (workers / pace requests a
    second)."""
    set_delay(bench.stubs_process, pace)
    for shape in SHAPES:
        if bench.args.vendor not in (None, shape.vendor):
            continue
        for workers in bench.args.workers:
            specs = load_specs(bench.stubs[shape.vendor], shape, workers, None)
            direct = await run_load(bench.session, specs, bench.args.seconds, bench.pids(False), stagger=pace)
            specs = load_specs(f"{bench.base}/{shape.vendor}", shape, workers, bench.tenants)
            with rss.sampling():
                through = await run_load(
                    bench.session, specs, bench.args.seconds, bench.pids(True), stagger=pace
                )
            name = f"{shape.vendor} x{workers} " + (f"paced {pace:g} s" if pace else "saturated")
            print(row(f"{name} direct", direct))
            print(row(f"{name} gateway", through))
            f50, f99, t50, t99 = added(direct, through)
            per_core = len(through.ok(1)) / through.cpu["gateway"]
            print(
                f"{name} added: first byte p50 {f50:.2f} p99 {f99:.2f} ms, end p50 {t50:.2f} p99 "
                f"{t99:.2f} ms; {per_core:.0f} requests per gateway CPU-second; gateway RSS peak "
                f"{rss.peak:.1f} MiB"
            )
            worst = max(f99, t99)
            bench.goals.append(
                f"{verdict(worst <= GOAL_ADDED_P99_MS)} {name}: p99 added {worst:.1f} ms (first byte "
                f"{f99:.1f}, end {t99:.1f}), goal <= {GOAL_ADDED_P99_MS:.0f} ms"
                if workers == 64
                else f"{verdict(rss.peak <= GOAL_RSS_MIB)} {name}: gateway RSS peak {rss.peak:.1f} MiB, goal "
                f"<= {GOAL_RSS_MIB:.0f} MiB"
            )
    set_delay(bench.stubs_process, 0.0)


async def measure_flood(bench: Bench, rss: PeakRss) -> None:
    """The normal tenant (its answers paced) alone, then while the other floods (from one namespace, then
    spread); the flood's answers take the pace and the hold."""
    args, normal = bench.args, bench.normal_specs()
    set_delay(bench.stubs_process, args.pace)
    alone = await run_load(bench.session, normal, args.flood_seconds, bench.pids(True), stagger=args.pace)
    print(row(f"normal tenant alone, paced {args.pace:g} s", alone))
    for where, specs in bench.flood_specs().items():
        with rss.sampling():
            seconds = args.flood_seconds + args.hold
            flood = asyncio.ensure_future(
                run_load(bench.session, specs, seconds, {}, warmup=0.0, retry_after=RETRY_AFTER)
            )
            await asyncio.sleep(args.hold)  # the flood holds what it can before the normal tenant starts
            during = await run_load(
                bench.session, normal, args.flood_seconds, bench.pids(True), stagger=args.pace
            )
            flooded = await flood
        print(row(f"normal, flood from {where}", during))
        print(row(f"  the flood ({where})", flooded) + f"  gateway RSS peak {rss.peak:.1f} MiB")
        a99, d99, bad = pcts(alone, 1)[1], pcts(during, 1)[1], dict(during.statuses())
        bench.goals.append(
            f"{verdict(d99 <= GOAL_FLOOD_RATIO * a99 and not bad)} normal tenant's p99 with a flood from "
            f"{where}: {d99 * 1000:.1f} ms against {a99 * 1000:.1f} ms alone (x{d99 / a99:.2f}, goal <= "
            f"x{GOAL_FLOOD_RATIO}); non-200 {bad}"
        )


async def measure(
    stubs: dict[str, str],
    stub_proc: subprocess.Popen[str],
    gw: int,
    port: int,
    tenants: Tenants,
    args: argparse.Namespace,
) -> None:
    rss = PeakRss(gw)
    print(f"gateway RSS idle: {rss_mib(gw):.1f} MiB")
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        bench = Bench(session, stubs, stub_proc, gw, port, tenants, args)
        for pace in (args.pace,) if args.paced_only else (0.0, args.pace):
            await measure_shapes(bench, rss, pace)
        if not args.no_flood:
            await measure_flood(bench, rss)
    print("goals:")
    for goal in bench.goals:
        print(" ", goal)


def machine() -> str:
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    mem = next(line for line in meminfo if line.startswith("MemTotal")).split()[1]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{now}; nproc {os.cpu_count()}, memory {int(mem) / 1024 / 1024:.1f} GiB; load average {load}"


# --- the traces' sink ------------------------------------------------------------------------------------


class _Sink(BaseHTTPRequestHandler):
    """OTLP/HTTP's traces endpoint: takes an export, counts its spans, answers 200."""

    protocol_version = "HTTP/1.1"
    spans = exports = 0
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        export = ExportTraceServiceRequest.FromString(body)
        count = sum(len(scope.spans) for rs in export.resource_spans for scope in rs.scope_spans)
        with _Sink.lock:
            _Sink.spans += count
            _Sink.exports += 1
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, fmt: str, *args: Any) -> None:
        pass


@contextmanager
def trace_sink(enabled: bool) -> Iterator[dict[str, str]]:
    """The gateway's tracing settings: an OTLP/HTTP sink on loopback while the block runs (enabled), or
    none (tracing off)."""
    if not enabled:
        yield {}
        return
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {"HARNESS_TRACING_ENDPOINT": f"http://127.0.0.1:{server.server_address[1]}"}
    finally:
        server.shutdown()
        print(f"OTLP sink: {_Sink.spans} spans in {_Sink.exports} exports")


# --- the profile ----------------------------------------------------------------------------------------


async def profile_load(
    stubs: dict[str, str], gw: subprocess.Popen[bytes], port: int, tenants: Tenants, args: argparse.Namespace
) -> None:
    seconds = args.seconds * len(SHAPES) + WARMUP * len(SHAPES) + 2
    spy = subprocess.Popen(
        [args.py_spy, "record", "--pid", str(gw.pid), "--rate", "200", "--nonblocking", "--format", "raw",
         "--duration", str(int(seconds)), "--output", args.profile],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    await asyncio.sleep(1)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for shape in SHAPES:
            window = await run_load(
                session,
                load_specs(f"http://127.0.0.1:{port}/{shape.vendor}", shape, 64, tenants),
                args.seconds,
                {"gateway": gw.pid},
            )
            print(row(f"{shape.vendor} x64 (profiled)", window))
    await asyncio.to_thread(spy.wait)


def print_profile(path: str, top: int = 45) -> None:
    """py-spy's raw stacks (`frame;frame;... count`): the share of the samples each function is on the
    stack of (inclusive) and at the top of (self)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in Path(path).read_text().splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        n = int(count)
        total += n
        own[frames[-1]] += n
        for name in {frame.rpartition(":")[0] if "(" in frame else frame for frame in frames}:
            inclusive[name] += n
    print(f"{total} samples (200 a second of the gateway's busy threads)")
    print("inclusive (function, file):")
    for name, n in inclusive.most_common(top):
        print(f"  {n / total * 100:5.1f}%  {name}")
    print("self (function, file:line):")
    for name, n in own.most_common(top):
        print(f"  {n / total * 100:5.1f}%  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="each load's counted window")
    parser.add_argument("--pace", type=float, default=0.5, help="seconds a paced load's answers take")
    parser.add_argument("--hold", type=float, default=8.0, help="seconds the stub holds a flood's request")
    parser.add_argument("--flood", type=int, default=240, help="the flooding tenant's workers")
    parser.add_argument("--flood-seconds", type=float, default=10.0, help="the normal tenant's window")
    parser.add_argument("--profile", metavar="OUT", help="record the gateway with py-spy into OUT instead")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy")
    parser.add_argument("--vendor", choices=VENDORS, help="only this vendor's shape (part 1)")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=list(CONCURRENCY), help="part 1's concurrencies"
    )
    parser.add_argument("--paced-only", action="store_true", help="part 1's paced loads only")
    parser.add_argument("--no-flood", action="store_true", help="skip part 2 (the two tenants)")
    parser.add_argument(
        "--traces", action="store_true", help="traced runs, spans exported to an OTLP sink on loopback"
    )
    parser.add_argument("--serve-stubs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_stubs:
        serve_stubs(args.hold)
        return 0
    if shutil.which("redis-server") is None:
        print("needs redis-server (apt-get install redis-server)", file=sys.stderr)
        return 2
    config.load_kube_config()
    print(f"start: {machine()}")
    tenants, bodies = build_tenants(args.traces)
    with (
        tempfile.TemporaryFile() as log,
        stub_process(args.hold) as (stub_proc, stubs),
        redis_server() as redis_url,
        grant_maps(bodies),
        trace_sink(args.traces) as tracing,
        gateway_process(redis_url, stubs, log, tracing) as (gw, port),
    ):
        if args.profile:
            asyncio.run(profile_load(stubs, gw, port, tenants, args))
        else:
            asyncio.run(measure(stubs, stub_proc, gw.pid, port, tenants, args))
        log.seek(0)
        records = [json.loads(line) for line in log if line.startswith(b"{")]
    refused = Counter(r.get("status") for r in records if r.get("msg") == "refused")
    print(f"gateway's refusals logged, by status: {dict(refused)}")
    print(f"gateway's audit records: {sum(r.get('audit') == 'model-request' for r in records)}")
    print(f"end: {machine()}")
    if args.profile:
        print_profile(args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
