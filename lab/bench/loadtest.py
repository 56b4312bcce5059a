"""`lab loadtest URL`: load a speech server on this machine and measure what listeners get.

    lab loadtest http://127.0.0.1:8000 --concurrency 1,2,4,8 --rates 0.5,1,2 --requests 50
    python -m lab.bench.loadtest http://127.0.0.1:8000 --concurrency 1,4

Each request posts the lab's sentences (drawn with a seeded generator from its sentence sets)
to OpenAI's `/v1/audio/speech` and reads the streamed audio as it arrives: time to first audio
from when the request was due, total latency, seconds of audio, and whether playback would
have stalled (`lab.bench.playback`). Closed-loop points keep N requests in flight; open-loop
points send Poisson arrivals at a rate without waiting for answers (`lab.bench.arrivals`).
Every point stops after `--requests` requests or `--duration` seconds, whichever comes first,
and each request after `--timeout`, so a run is bounded by points x (duration + timeout).
Only loopback URLs are accepted (`lab.bench.loopback`). `--processes N` sends every point from
N processes (`lab.bench.load_shares`), so that a load of a few hundred streams measures the
server rather than the client's own event loop; the report warns where requests went out late.
From a lab server, each point also reads the serving thread's counters off `/metrics` as it
starts and ends: the share of the point its thread spent on host work, and its mean round
(`lab.bench.host_work`).

Writes `<stem>.json` (every request) and `<stem>.html` (plotly, self-contained) under
`--out`, and prints the summary table. Exit code 0 when any request got audio, 1 when none
did (the server is down or refuses everything), 2 on bad input such as a remote URL.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import httpx
from tqdm import tqdm

from lab.bench.arrivals import poisson_arrivals
from lab.bench.host_work import ThreadClock, clock_of_metrics, with_host_work
from lab.bench.load_report import (
    TTFA_PARTS,
    PointSummary,
    RequestRecord,
    capacity_lines,
    remark_lines,
    result_of,
    summarize,
    table_rows,
    ttfa_parts,
    write_html,
    write_json,
    write_markdown,
)
from lab.bench.load_shares import Senders, deal, send_share
from lab.bench.loopback import loopback_client, loopback_url
from lab.bench.playback import Timeline
from lab.bench.speech_stream import FORMATS, StreamFailed, audio_counter

SPEECH_PATH = "/v1/audio/speech"
MODELS_PATH = "/v1/models"
METRICS_PATH = "/metrics"
COUNTERS_SETTLE_S = 0.3
"""A server whose pipeline runs in a process of its own books its thread's counters four times
a second: read a moment later, they hold the rounds of what has just ended (the warm-up before
a point, the point's last requests after it)."""
SAMPLE_RATE_HEADER = "x-sample-rate"
SERVER_TIMING_HEADER = "server-timing"
MAX_PROCESSES = 64
"""The most sending processes a run may start: each imports the lab, so a typo of 1000 would
take the machine's memory before it sent anything."""


class LoadTestError(RuntimeError):
    """The run could not start: the server does not answer as an OpenAI speech server."""


@dataclass(frozen=True)
class SpeechTarget:
    """Where requests go and what they ask for; the same for every request of a run."""

    url: str
    model: str
    voice: str
    format: str
    sample_rate: int
    timeout_s: float

    def body(self, text: str) -> dict:
        """OpenAI's request; `format` sse asks for PCM in server-sent events."""
        sse = self.format == "sse"
        return {"model": self.model, "input": text, "voice": self.voice,
                "response_format": "pcm" if sse else self.format,
                "stream_format": "sse" if sse else "audio"}


@dataclass(frozen=True)
class LoadPlan:
    """The load points of a run and the bounds on each."""

    concurrency: tuple[int, ...]
    rates: tuple[float, ...]
    requests: int
    duration_s: float
    texts: tuple[str, ...]
    seed: int
    warmup: int
    processes: int = 1

    def points(self) -> list[tuple[str, float]]:
        return [("closed", c) for c in self.concurrency] + [("open", r) for r in self.rates]


def speech_url(url: str) -> str:
    """The speech endpoint under a server's base URL; a URL naming a path is kept as given."""
    parsed = loopback_url(url)
    if parsed.path in ("", "/"):
        return str(parsed.copy_with(path=SPEECH_PATH))
    return str(parsed)


def _error_kind(err: Exception) -> str:
    if isinstance(err, (httpx.TimeoutException, asyncio.TimeoutError)):
        return "timeout"
    if isinstance(err, StreamFailed):
        return "stream_error"
    if isinstance(err, httpx.ConnectError):
        return "connect"
    if isinstance(err, httpx.TransportError):
        return "connection_lost"
    return "bad_body"


async def _read(client: httpx.AsyncClient, target: SpeechTarget, text: str,
                timeline: Timeline, server: dict[str, float]) -> str | None:
    """Stream one response into `timeline`, and its `Server-Timing` into `server`; the error
    kind for a status other than 200. PCM's rate is the server's `X-Sample-Rate` header where
    it sends one."""
    async with client.stream("POST", target.url, json=target.body(text)) as response:
        if response.status_code != 200:
            await response.aread()
            return f"http_{response.status_code}"
        server.update(server_timing(response.headers.get(SERVER_TIMING_HEADER, "")))
        rate = int(response.headers.get(SAMPLE_RATE_HEADER, target.sample_rate))
        counter = audio_counter(target.format, rate)
        async for data in response.aiter_bytes():
            timeline.add(time.perf_counter(), counter.feed(data), len(data))
    return None


async def speak(client: httpx.AsyncClient, target: SpeechTarget, text: str, due: float,
                shape: str, load: float, origin: float) -> RequestRecord:
    """One request, timed from `due`; a failure becomes an error kind, never an exception,
    and the audio that arrived before it still counts."""
    sent, timeline, server = time.perf_counter(), Timeline(), {}
    try:
        error = await asyncio.wait_for(_read(client, target, text, timeline, server),
                                       target.timeout_s)
    except (httpx.HTTPError, asyncio.TimeoutError, ValueError) as err:
        error = _error_kind(err)
    if error is None and not timeline.times:
        error = "no_audio"
    return RequestRecord(
        shape=shape, load=load, chars=len(text), due_s=round(due - origin, 4),
        lag_s=sent - due, ttfa_s=timeline.ttfa_s(due), latency_s=time.perf_counter() - due,
        audio_s=timeline.audio_s, bytes=timeline.bytes, reads=timeline.reads,
        margin_s=timeline.margin_s(), tightest_s=timeline.tightest_s(), error=error,
        server_ms=server or None)


def server_timing(header: str) -> dict[str, float]:
    """The durations of a `Server-Timing` header in ms by name (`name;dur=12.5, ...`);
    entries without a readable duration are skipped."""
    parts = {}
    for entry in header.split(","):
        name, *params = (p.strip() for p in entry.split(";"))
        for param in params:
            key, _, value = param.partition("=")
            if name and key.strip() == "dur":
                try:
                    parts[name] = float(value.strip().strip('"'))
                except ValueError:
                    continue
    return parts


def draw_texts(sets: tuple[str, ...], count: int, seed: int) -> list[str]:
    """`count` sentences drawn with replacement from the lab's sentence sets, seeded, so
    request k of two runs says the same thing whatever the timing."""
    from lab.frontend import sentence_set

    pool = [line for name in sets for line in sentence_set(name)]
    rng = random.Random(seed)
    return [rng.choice(pool) for _ in range(count)]


async def run_point(client: httpx.AsyncClient, target: SpeechTarget, plan: LoadPlan,
                    shape: str, load: float, senders: Senders | None = None
                    ) -> tuple[list[RequestRecord], float]:
    """Every request of one load point, and its wall time from its start to its last answer;
    from the `senders`' processes where given, else on this event loop with `client`.

    Every point draws the same sentences and, in the open loop, the same arrival gaps scaled
    to its rate, so two points differ in their load and in nothing else."""
    texts = draw_texts(plan.texts, plan.requests, plan.seed)
    offsets = [] if shape == "closed" else poisson_arrivals(load, plan.requests,
                                                             plan.duration_s, plan.seed)
    shares = deal(shape, load, texts, offsets, plan.processes if senders else 1)
    bar = tqdm(total=len(offsets) or plan.requests, desc=f"{shape} {load:g}", unit="req")
    failed = 0

    def heard(error: bool) -> None:
        nonlocal failed
        failed += error
        bar.update(1)
        bar.set_postfix(errors=failed)

    if senders is None:
        origin = time.perf_counter()
        records = await send_share(speak, client, target, shares[0], shape, load,
                                   plan.duration_s, origin, lambda r: heard(r.error is not None))
        wall_s = time.perf_counter() - origin
    else:
        records, wall_s = await asyncio.to_thread(senders.send, speak, target, shares, shape,
                                                  load, plan.duration_s, heard)
    bar.close()
    return records, wall_s


@dataclass(frozen=True)
class LoadResult:
    target: SpeechTarget
    rows: list[PointSummary]
    records: list[RequestRecord]
    warmup_errors: list[str]

    @property
    def got_audio(self) -> bool:
        return any(r.error is None for r in self.records)

    @property
    def unmeasured(self) -> str | None:
        """Why no point was measured (every warm-up request failed), or None: a server that
        answered none of them would only have filled minutes with refusals."""
        if self.rows or not self.warmup_errors:
            return None
        return (f"none of the {len(self.warmup_errors)} warm-up requests to {self.target.url} "
                f"got audio ({', '.join(self.warmup_errors)}); nothing was measured")


async def served_model(client: httpx.AsyncClient, url: str) -> str:
    """The first model the server lists at `/v1/models`, for a run that names none."""
    models_url = url.removesuffix(SPEECH_PATH).rstrip("/") + MODELS_PATH
    try:
        response = await client.get(models_url)
        response.raise_for_status()
        return response.json()["data"][0]["id"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as err:
        raise LoadTestError(f"cannot read the served model from {models_url} ({err!r}); "
                            "name it with --model") from err


async def server_clock(client: httpx.AsyncClient, target: SpeechTarget) -> ThreadClock | None:
    """The server's serving-thread counters from its `/metrics` (`lab.bench.host_work`),
    read `COUNTERS_SETTLE_S` after the call, once what came before is on them; None from a
    server that does not give them."""
    url = target.url.removesuffix(SPEECH_PATH).rstrip("/") + METRICS_PATH
    await asyncio.sleep(COUNTERS_SETTLE_S)
    try:
        response = await client.get(url)
    except httpx.HTTPError:
        return None
    return clock_of_metrics(response.text) if response.is_success else None


async def run_load(target: SpeechTarget, plan: LoadPlan,
                   on_point: Callable[[LoadResult], None] | None = None) -> LoadResult:
    """Warm up, then every load point in turn on one client. A server that answers none of
    the warm-up requests is not loaded at all: minutes of refused connections say nothing.
    Without a model name, the first one the server lists is asked for. Each row carries the
    server's host work over its point where the server's `/metrics` gives it. `on_point` gets
    what was measured so far after each point, for a caller that saves as it goes."""
    rows: list[PointSummary] = []
    records: list[RequestRecord] = []
    async with loopback_client(target.timeout_s) as client:
        if not target.model:
            target = replace(target, model=await served_model(client, target.url))
        warm = [await speak(client, target, text, time.perf_counter(), "warmup", 0, 0.0)
                for text in draw_texts(plan.texts, plan.warmup, plan.seed + 1)]
        errors = [r.error for r in warm if r.error is not None]
        if warm and len(errors) == len(warm):
            return LoadResult(target, rows, records, errors)
        with contextlib.ExitStack() as stack:
            senders = (stack.enter_context(Senders(plan.processes))
                       if plan.processes > 1 else None)
            for shape, load in plan.points():
                before = await server_clock(client, target)
                point, wall_s = await run_point(client, target, plan, shape, load, senders)
                after = await server_clock(client, target) if before else None
                rows.append(with_host_work(summarize(point, shape, load, wall_s), before, after))
                records += point
                if on_point is not None:
                    on_point(LoadResult(target, list(rows), list(records), errors))
    return LoadResult(target, rows, records, errors)


def _numbers(kind: Callable[[str], float]) -> Callable[[str], tuple]:
    """argparse type for `1,2,4`: positive numbers of `kind`, a usage error otherwise."""

    def parse(text: str) -> tuple:
        try:
            values = tuple(kind(part) for part in text.split(","))
        except ValueError:
            values = ()
        if not values or min(values) <= 0:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a comma-separated list of numbers > 0, e.g. 1,2,4")
        return values

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `lab loadtest`, for the lab's CLI and for `python -m` alike."""
    parser.add_argument("url", nargs="?", help="the server's base URL (or its speech "
                                               "endpoint); loopback only, e.g. "
                                               "http://127.0.0.1:8000")
    parser.add_argument("--concurrency", type=_numbers(int), default=None,
                        help="closed-loop points: requests kept in flight, e.g. 1,2,4,8 "
                             "(default 1,2,4,8 when --rates is not given)")
    parser.add_argument("--rates", type=_numbers(float), default=(),
                        help="open-loop points: Poisson arrivals per second, e.g. 0.5,1,2")
    parser.add_argument("--requests", type=int, default=50,
                        help="most requests per point (default 50)")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="most seconds per point before no new request starts "
                             "(default 60)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one request may take in all (default 60)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="requests sent one at a time first and not measured (default 1)")
    parser.add_argument("--texts", default="short,medium",
                        help="the lab's sentence sets to draw from (default short,medium)")
    parser.add_argument("--seed", type=int, default=0,
                        help="seeds the sentence draw and the arrival times")
    parser.add_argument("--processes", type=int, default=1,
                        help="processes that send the load, each with its own event loop "
                             "(default 1); one reading a few hundred streams falls behind, "
                             "and its delay counts against the server")
    parser.add_argument("--format", choices=FORMATS, default="pcm",
                        help="pcm and wav stream bytes; sse streams PCM in server-sent events")
    parser.add_argument("--sample-rate", type=int, default=22050,
                        help="of pcm and sse audio from a server that sends no X-Sample-Rate "
                             "header (WAV states its own; default 22050, the default voice)")
    parser.add_argument("--model", default="",
                        help="the request's model field (default: the first one the server "
                             "lists at /v1/models)")
    parser.add_argument("--voice", default="default",
                        help="the request's voice field (default 'default', the lab's name "
                             "for a single-speaker voice)")
    parser.add_argument("--out", default="runs/loadtest", help="folder for the reports")
    parser.add_argument("--stem", default="loadtest", help="file name of the reports")
    parser.add_argument("--render", action="store_true",
                        help="rewrite <stem>.md from <out>/<stem>.json (with any notes added "
                             "to it) and send nothing")


def plan_of(args: argparse.Namespace) -> tuple[SpeechTarget, LoadPlan]:
    """What to send where, checked before any request: a bad value is a ValueError."""
    if not args.url:
        raise ValueError("give the server's URL, e.g. http://127.0.0.1:8000 (only --render "
                         "works without one)")
    for name in ("requests", "duration", "timeout"):
        if getattr(args, name) <= 0:
            raise ValueError(f"--{name} {getattr(args, name)} must be > 0")
    if args.warmup < 0:
        raise ValueError(f"--warmup {args.warmup} must be >= 0")
    if not 1 <= args.processes <= MAX_PROCESSES:
        raise ValueError(f"--processes {args.processes} must lie in [1, {MAX_PROCESSES}]")
    target = SpeechTarget(speech_url(args.url), args.model, args.voice, args.format,
                          args.sample_rate, args.timeout)
    concurrency = args.concurrency or (() if args.rates else (1, 2, 4, 8))
    plan = LoadPlan(tuple(concurrency), tuple(args.rates), args.requests, args.duration,
                    _sentence_sets(args.texts), args.seed, args.warmup, args.processes)
    return target, plan


def _sentence_sets(text: str) -> tuple[str, ...]:
    """`short,medium` as set names, each checked to exist (an unknown one names the sets)."""
    from lab.frontend import sentence_set

    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise ValueError(f"--texts {text!r} names no sentence set")
    for name in names:
        sentence_set(name)
    return names


def run(args: argparse.Namespace) -> int:
    """`lab loadtest`: 0 when any request got audio, 1 when none did; bad input raises
    ValueError (the CLI prints it and exits 2). The JSON and the markdown are written before
    the HTML page, so a missing plotting library loses no numbers."""
    from lab.bench.report import markdown_table, run_meta

    out = Path(args.out)
    paths = {kind: out / f"{args.stem}.{kind}" for kind in ("json", "md", "html")}
    if args.render:
        return render(paths["json"], paths["md"])
    target, plan = plan_of(args)
    out.mkdir(parents=True, exist_ok=True)
    try:
        result = asyncio.run(run_load(target, plan))
    except LoadTestError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    if result.unmeasured:
        print(f"error: {result.unmeasured}", file=sys.stderr)
        return 1
    meta = run_meta(command=command_of(result.target, plan, args.stem),
                    **asdict(result.target), **asdict(plan))
    saved = result_of(meta, result.rows, result.records)
    write_json(paths["json"], saved)
    write_markdown(paths["md"], saved)
    print(markdown_table(table_rows(result.rows)))
    print("\n".join(capacity_lines(table_rows(result.rows)) + remark_lines(result.rows)))
    split = ttfa_parts(result.records)
    if split:
        print(f"\nTime to first audio by the server's Server-Timing: {TTFA_PARTS}")
        print(markdown_table(split))
    write_html(paths["html"], result.rows, f"Load test of {target.url}", result.records)
    print(f"wrote {paths['json']}, {paths['md']} and {paths['html']}")
    return 0 if result.got_audio else 1


def command_of(target: SpeechTarget, plan: LoadPlan, stem: str) -> str:
    """The load as one `lab loadtest` command with every value it used, defaults included,
    so a report reruns the same load whoever started it (the CLI, the app's Serve tab, a
    script). The folder it was saved in is left out: that is the machine's, not the load's."""
    values = {"concurrency": plan.concurrency, "rates": plan.rates, "requests": plan.requests,
              "duration": plan.duration_s, "timeout": target.timeout_s, "warmup": plan.warmup,
              "texts": plan.texts, "seed": plan.seed, "processes": plan.processes,
              "format": target.format,
              "sample-rate": target.sample_rate, "model": target.model, "voice": target.voice,
              "stem": stem}
    parts = ["lab", "loadtest", target.url]
    for name, value in values.items():
        if value not in (None, "", ()):
            parts += [f"--{name}", _spelled(value)]
    return shlex.join(parts)


def _spelled(value: object) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(_spelled(v) for v in value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def render(json_path: Path, md_path: Path) -> int:
    """`--render`: the markdown again from a saved JSON, with any notes added to it since."""
    if not json_path.is_file():
        raise ValueError(f"--render: no report {json_path} to render")
    write_markdown(md_path, json.loads(json_path.read_text()))
    print(f"wrote {md_path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.bench.loadtest",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
