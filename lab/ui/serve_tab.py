"""Serve tab: put the tuned config behind the lab's speech server and load it like users would.

Milliseconds per step on one stream do not say what listeners get when many arrive at once;
time to first audio and streams kept at real time under load do. So the tab starts
`lab serve` in-process for the shared knob state, or attaches to a server already running on
this machine (`lab.ui.serving`), and sweeps it with `lab loadtest`'s own code, one load point
at a time, so the charts grow as each point completes.

- The pipeline comes from the app's cache: a config the other tabs loaded serves at once.
  The server shares its worker, so a click on Synthesize during a sweep is one more stream.
- Cancel, or Stop, cancels the point under way: its requests are dropped (their slots free
  on the server), not half-reported. The points before it stay in the report, which is
  rewritten after every point under the data directory, as the CLI writes it.
- A sweep's requests are benchmark traffic on the Live tab, not users': the served pipeline
  is tagged as the Benchmark tab tags its own while the sweep runs (a Synthesize click on
  the same config meanwhile is counted with them, the price of sharing the cached model).
- Utilisation is the app's own telemetry sampler (the server is on this machine): GPU
  utilisation where NVML reports a GPU, else the host's CPU, and the tab says which.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Coroutine, Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import gradio as gr
import pandas as pd
from pandas.io.formats.style import Styler

from lab.bench.load_report import (
    PointSummary,
    RequestRecord,
    capacity,
    figure,
    remark_lines,
    result_of,
    table_rows,
    ttfa_parts,
    write_html,
    write_json,
    write_markdown,
)
from lab.bench.loadtest import (
    MAX_PROCESSES,
    LoadPlan,
    LoadResult,
    SpeechTarget,
    command_of,
    run_load,
)
from lab.bench.report import run_meta
from lab.frontend import list_sentence_sets, sentence_set
from lab.metrics.events import BENCHMARK, events
from lab.ui import charts, tables
from lab.ui.common import PROGRESS, load, resolve_config
from lab.ui.panel import build_panel
from lab.ui.serving import HOST, Serving, SinceLastLook, Target, describe, scrape, snippets
from lab.ui.tables import INT, MS, ONE, PERCENT, Column

if TYPE_CHECKING:
    from lab.ui.context import LabContext

METRICS_EVERY_S = 2.0
CANCEL_POLL_S = 0.2
WARMUP = 1  # one unmeasured request first, as `lab loadtest` sends by default
COLUMNS = {
    "load": Column("Load"),
    "mid_streams": Column("Streams in flight", ONE),
    "requests": Column("Requests", INT),
    "ok": Column("OK", INT),
    "ttfa_p50_ms": Column("TTFA p50 (ms)", MS),
    "ttfa_p95_ms": Column("TTFA p95 (ms)", MS),
    "latency_p95_ms": Column("Latency p95 (ms)", MS),
    "realtime_fraction": Column("At real time", PERCENT),
    "audio_s_per_s": Column("Audio s per s", ONE),
    "busy": Column("Utilisation %", ONE),
    "host_busy": Column("Serving thread on host", PERCENT),
    "round_ms": Column("Round (ms)", ONE),
    "codec_lag_ms": Column("Codec lag (ms)", ONE),
    "errors": Column("Errors"),
}
SPLIT_LABEL = ("Where the time to first audio went, from the server's Server-Timing "
               "('p50 / p95 / max' ms): queue = waiting for a slot, first-audio = slot to "
               "first chunk, engine = the pipeline's share of that, admission = the part of "
               "engine spent waiting for the engine to let it in, outside = the rest "
               "(network, client)")


def parse_loads(raw: str, kind: type, what: str) -> tuple:
    """'1, 2, 4' as numbers above 0; an empty box is no points."""
    items = [part.strip() for part in (raw or "").split(",") if part.strip()]
    try:
        values = tuple(kind(item) for item in items)
    except ValueError:
        values = (0,)
    if any(v <= 0 for v in values):
        raise ValueError(f"{what} must be comma-separated numbers above 0, got {raw!r}")
    return values


def make_plan(concurrency: str, rates: str, requests: float, duration_s: float,
              sets: list[str], processes: float = 1) -> LoadPlan:
    """The sweep the boxes describe, checked before any request (ValueError if not)."""
    if not 1 <= int(processes or 0) <= MAX_PROCESSES:
        raise ValueError(f"sending processes must lie in [1, {MAX_PROCESSES}], got {processes}")
    plan = LoadPlan(parse_loads(concurrency, int, "concurrency"),
                    parse_loads(rates, float, "arrival rates"), int(requests),
                    float(duration_s), tuple(sets or ()), seed=0, warmup=WARMUP,
                    processes=int(processes))
    if not plan.points():
        raise ValueError("give concurrency levels, arrival rates, or both")
    if not plan.texts:
        raise ValueError("pick at least one sentence set")
    if plan.requests < 1 or not plan.duration_s > 0:
        raise ValueError("requests and seconds per point must be above 0")
    for name in plan.texts:
        sentence_set(name)
    return plan


def run_until(work: Coroutine, cancel: threading.Event) -> LoadResult | None:
    """Run `work` on an event loop in this thread, where Gradio's tqdm tracking sees its
    progress bars; None once `cancel` is set, after cancelling it (closing its requests)."""

    async def watched():
        task = asyncio.ensure_future(work)
        while not task.done():
            await asyncio.wait({task}, timeout=CANCEL_POLL_S)
            if cancel.is_set():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                return None
        return task.result()

    return asyncio.run(watched())


def one_point(plan: LoadPlan, shape: str, level: float, first: bool) -> LoadPlan:
    """`plan` cut to one of its points; only the first point sends the warm-up."""
    closed = shape == "closed"
    return dataclasses.replace(plan, concurrency=(int(level),) if closed else (),
                               rates=() if closed else (level,),
                               warmup=plan.warmup if first else 0)


def sweep(target: SpeechTarget, plan: LoadPlan, cancel: threading.Event
          ) -> Iterator[tuple[PointSummary, list[RequestRecord], float]]:
    """Each load point once it completes, with when it began (for its telemetry); it stops
    early when cancelled, and raises ValueError when no warm-up request got audio."""
    for i, (shape, level) in enumerate(plan.points()):
        began = time.time()
        result = run_until(run_load(target, one_point(plan, shape, level, i == 0)), cancel)
        if result is None:
            return
        if result.unmeasured:
            raise ValueError(result.unmeasured)
        yield result.rows[0], result.records, began


def counted_apart(target: Target) -> AbstractContextManager:
    """Within the block, the served pipeline's requests are benchmark traffic; an attached
    server runs elsewhere and records nothing here."""
    return events.tagged(target.pipeline, BENCHMARK) if target.pipeline else nullcontext()


def has_gpu(ctx: LabContext) -> bool:
    latest = ctx.telemetry.latest()
    return latest is not None and latest.gpu_name is not None


def busy(ctx: LabContext, began: float) -> float | None:
    """Mean GPU utilisation since `began`, or CPU % without a GPU; None before a sample."""
    samples = ctx.telemetry.history(time.time() - began)
    gpu = [s.gpu_util_percent for s in samples if s.gpu_util_percent is not None]
    values = gpu or [s.cpu_percent for s in samples]
    return sum(values) / len(values) if values else None


def table_row(row: PointSummary, busy_percent: float | None) -> dict:
    """One point as the table shows it: its load in words, its mean utilisation beside it."""
    load = f"{row.load:g} in flight" if row.shape == "closed" else f"{row.load:g} arrivals/s"
    return {**table_rows([row])[0], "load": load, "busy": busy_percent}


def table(rows: list[dict], gpu: bool) -> Styler:
    unit = "GPU util %" if gpu else "CPU % (no GPU)"
    return tables.readable(rows, {**COLUMNS, "busy": Column(unit, ONE)})


def capacity_text(rows: list[PointSummary]) -> str:
    """The sweep so far answers the tab's question: the highest load that kept every stream
    in real time, per load shape (`lab.bench.load_report.capacity`), what the server finished
    where it was full, where it slowed its streams, and where the serving thread, not the
    device, set the pace (`remark_lines`)."""
    remark = "\n\n".join(line for line in remark_lines(rows) if line)
    return ("**Capacity so far:** " + "; ".join(capacity(table_rows(rows)))
            + (f"\n\n{remark}" if remark else ""))


def load_figure(rows: list[PointSummary]):
    """`lab loadtest`'s own figure in the app's style: ticks at the loads swept only,
    counts from zero, the legend under the panels."""
    fig = figure(rows, "Load sweep: time to first audio, streams at real time, errors")
    for i, shape in enumerate(dict.fromkeys(r.shape for r in rows), start=1):
        fig.update_xaxes(tickmode="array", row=i,
                         tickvals=sorted({r.load for r in rows if r.shape == shape}))
    fig.update_yaxes(rangemode="tozero")
    return fig.update_layout(template=charts.TEMPLATE, legend=dict(orientation="h", y=-0.2))


def telemetry_figure(ctx: LabContext, began: float):
    """The Live tab's chart over the sweep, its utilisation panel on a full 0-100 scale."""
    samples = [s.to_dict() for s in ctx.telemetry.history(time.time() - began)]
    fig = charts.telemetry(samples, has_gpu(ctx), gap_s=3 * ctx.telemetry.interval_s)
    return fig.update_yaxes(range=[0, 105], row=1, col=1) if samples else fig


@dataclass
class SweepLog:
    """The points measured so far, rewritten after each one as `lab loadtest` writes its
    reports (every request in JSON, the plotly page), so a cancel keeps what finished."""

    json_path: Path
    meta: dict
    rows: list[PointSummary] = field(default_factory=list)
    records: list[RequestRecord] = field(default_factory=list)
    shown: list[dict] = field(default_factory=list)

    @classmethod
    def under(cls, folder: Path, target: SpeechTarget, plan: LoadPlan) -> SweepLog:
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"serve-{time.strftime('%Y%m%d-%H%M%S')}"
        meta = run_meta(command=command_of(target, plan, stem), **dataclasses.asdict(target),
                        **dataclasses.asdict(plan))
        return cls(folder / f"{stem}.json", meta)

    def add(self, row: PointSummary, records: list[RequestRecord],
            busy_percent: float | None) -> list[str]:
        """Keep one point; the report's paths."""
        self.rows.append(row)
        self.records += records
        self.shown.append(table_row(row, busy_percent))
        html_path, md_path = (self.json_path.with_suffix(kind) for kind in (".html", ".md"))
        saved = result_of(self.meta, self.rows, self.records)
        write_json(self.json_path, saved)
        write_markdown(md_path, saved)
        write_html(html_path, self.rows, f"Load test of {self.meta['url']}", self.records)
        return [str(self.json_path), str(md_path), str(html_path)]

    def split(self) -> pd.DataFrame | None:
        """Each point's time to first audio split by the server's `Server-Timing`; None
        against a server that sends none."""
        rows = ttfa_parts(self.records)
        return pd.DataFrame(rows) if rows else None


def build(ctx: LabContext) -> None:
    serving, since = Serving(), SinceLastLook()
    cancels: dict[str, threading.Event] = {}
    panel = build_panel(ctx.default, "serve", ctx.default_preset, folded=True)
    with gr.Row():
        port = gr.Number(0, precision=0, minimum=0, maximum=65535, elem_id="serve-port",
                         label=f"Port on {HOST} for a new server (0: a free one)")
        url = gr.Textbox(label="…or the URL of a server on this machine to attach to",
                         scale=2, placeholder="http://127.0.0.1:8000", elem_id="serve-url")
    with gr.Row():
        start = gr.Button("Start server", variant="primary", elem_id="serve-start")
        attach = gr.Button("Attach", elem_id="serve-attach")
        stop = gr.Button("Stop / detach", variant="stop", elem_id="serve-stop")
    status = gr.Markdown("No server yet.", elem_id="serve-status")
    metrics = gr.Markdown(elem_id="serve-metrics")
    with gr.Accordion("Call it: curl, and OpenAI's Python client", visible=False) as calls:
        curl = gr.Markdown(elem_id="serve-curl")
        python = gr.Markdown(elem_id="serve-python")
    timer = gr.Timer(METRICS_EVERY_S, active=False)
    gr.Markdown("### Load sweep")
    with gr.Row():
        concurrency = gr.Textbox("1, 2, 4", label="Concurrency (closed loop)",
                                 elem_id="serve-concurrency")
        rates = gr.Textbox("", label="Poisson arrivals per second (open loop)",
                           placeholder="e.g. 0.5, 1, 2", elem_id="serve-rates")
        sets = gr.Dropdown(list_sentence_sets(), value=["short"], multiselect=True,
                           label="Sentence sets", elem_id="serve-texts")
    with gr.Row():
        requests = gr.Slider(1, 200, value=10, step=1, label="Requests per point",
                             elem_id="serve-requests")
        duration = gr.Number(30, minimum=1, label="Most seconds per point",
                             elem_id="serve-duration")
        timeout = gr.Number(60, minimum=1, label="Request timeout (s)", elem_id="serve-timeout")
        processes = gr.Number(1, minimum=1, maximum=MAX_PROCESSES, precision=0,
                              label="Sending processes", elem_id="serve-processes",
                              info="one reading a few hundred streams falls behind, and its "
                                   "delay counts against the server; more start with each "
                                   "point")
    with gr.Row():
        go = gr.Button("Run sweep", variant="primary", elem_id="serve-go")
        cancel_button = gr.Button("Cancel", variant="stop", elem_id="serve-cancel")
    sweep_status = gr.Markdown(elem_id="serve-sweep-status")
    load_chart = gr.Plot(elem_id="serve-chart")
    hw_chart = gr.Plot(elem_id="serve-telemetry")
    results = gr.Dataframe(label="Load points", interactive=False, elem_id="serve-table")
    split = gr.Dataframe(label=SPLIT_LABEL, interactive=False, elem_id="serve-split")
    files = gr.File(label="Report (JSON, markdown, plotly HTML; also under the data directory)",
                    file_count="multiple", elem_id="serve-files")
    shown = [status, metrics, calls, curl, python, timer]
    unchanged = [gr.skip()] * (len(shown) - 1)

    def showing(target: Target) -> list:
        curl_text, python_text = snippets(target)
        return [describe(target), asyncio.run(scrape(target.url, since)),
                gr.Accordion(visible=True), f"```shell\n{curl_text}\n```",
                f"```python\n{python_text}```", gr.Timer(active=True)]

    def refused(err: Exception) -> list:
        """The reason, above what still runs: a refusal changes nothing else."""
        gr.Warning(str(err))
        still = f"\n\n{describe(serving.current)}" if serving.current else ""
        return [f"⚠️ **{err}**{still}", *unchanged]

    def on_start(data: dict, progress=PROGRESS) -> list:
        try:
            cfg = resolve_config(ctx, panel, data)
            name = Path(str(data[panel.preset])).stem if data[panel.preset] else None
            return showing(serving.start(int(data[port] or 0), name,
                                         lambda: load(ctx, cfg, progress)))
        except (ValueError, RuntimeError, OSError) as err:
            return refused(err)

    def on_attach(raw: str) -> list:
        try:
            return showing(serving.attach(raw))
        except ValueError as err:
            return refused(err)

    def on_stop():
        if serving.current is not None:
            for event in cancels.values():  # the tab's own sweeps end with their server
                event.set()
            yield [f"Stopping {serving.current.url}: the requests in flight finish first…",
                   *unchanged]
        target = serving.stop()
        hidden = ["", gr.Accordion(visible=False), "", "", gr.Timer(active=False)]
        if target is None:
            yield ["No server is running or attached.", *hidden]
        else:
            done = "Detached from" if target.server is None else "Stopped the server on"
            yield [f"{done} {target.url}.", *hidden]

    def on_tick():
        target = serving.current
        return gr.skip() if target is None else asyncio.run(scrape(target.url, since))

    def on_sweep(data: dict, request: gr.Request, progress=PROGRESS):
        key = request.session_hash or "default"
        cancel = cancels[key] = threading.Event()
        try:
            yield from sweeping(data, cancel, progress)
        finally:
            if cancels.get(key) is cancel:
                del cancels[key]

    def sweeping(data: dict, cancel: threading.Event, progress):
        target = serving.current
        try:
            if target is None:
                raise ValueError("start a server or attach to one first")
            plan = make_plan(data[concurrency], data[rates], data[requests], data[duration],
                             data[sets], data[processes])
            speech = target.speech(float(data[timeout]))
        except ValueError as err:
            gr.Warning(str(err))
            yield {sweep_status: f"⚠️ **{err}**"}
            return
        total, began = len(plan.points()), time.time()
        log = SweepLog.under(ctx.data_dir / "loadtest", speech, plan)
        yield {results: None, split: None, load_chart: None, hw_chart: None, files: None,
               sweep_status: f"Running {total} load points against {target.url}…"}
        progress((0, total), desc="warm-up and the first point", unit="point")
        try:
            with counted_apart(target):
                for row, records, point_began in sweep(speech, plan, cancel):
                    paths = log.add(row, records, busy(ctx, point_began))
                    done = len(log.rows)
                    progress((done, total), desc=f"{done}/{total} points", unit="point")
                    yield {results: table(log.shown, has_gpu(ctx)), split: log.split(),
                           load_chart: load_figure(log.rows),
                           hw_chart: telemetry_figure(ctx, began), files: paths,
                           sweep_status: f"{done}/{total} points · telemetry: "
                                         f"{ctx.telemetry.gpu_status()}\n\n"
                                         + capacity_text(log.rows)}
        except ValueError as err:
            gr.Warning(str(err))
            yield {sweep_status: f"⚠️ **{err}**"}
            return
        if cancel.is_set():
            yield {sweep_status: f"Cancelled after {len(log.rows)}/{total} points: the point "
                                 "under way was dropped; the finished ones are saved under "
                                 f"`{log.json_path.parent}`."}

    def on_cancel(request: gr.Request) -> str:
        event = cancels.get(request.session_hash or "default")
        if event is None:
            return "No sweep is running."
        event.set()
        return "Cancelling: the point under way is dropped."

    start.click(on_start, {port, *panel.inputs(), panel.preset}, shown, concurrency_limit=1,
                show_progress_on=[status])
    attach.click(on_attach, url, shown, concurrency_limit=1)
    stop.click(on_stop, None, shown, concurrency_limit=1)
    timer.tick(on_tick, None, metrics, show_progress="hidden")
    go.click(on_sweep, {concurrency, rates, requests, duration, timeout, sets, processes},
             [sweep_status, results, split, load_chart, hw_chart, files], concurrency_limit=1,
             show_progress_on=[sweep_status])
    # No `cancels=`: the sweep ends by itself within a moment, so its last word is not lost.
    cancel_button.click(on_cancel, None, sweep_status)
