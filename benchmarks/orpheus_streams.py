"""How many Orpheus voices can one GPU keep in real time, SNAC decoding included?

Every run goes through the continuous-batching engine (Orpheus-3B shape, dummy weights, static
slot cache, graphed decode), and every frame through the windowed, batched SNAC decode as it
would when serving. 82 tokens/s is real time: 7 tokens per 85.3 ms frame.

The headline is open loop, as users load a server: requests arrive as a Poisson process at
each `--arrivals` rate for `--duration` seconds and join the running batch when they arrive,
so prefills land mid-run and codec windows fall due at scattered steps. Arrivals keep to the
wall clock whatever the engine does; a late engine makes requests wait, and time to first audio
counts that wait, from each request's arrival. Reported per rate: streams in flight (mean over
the arrival window, and peak), time to first audio, each stream's delivered rate (below), the
decode step times and where the wall time went.

Second, N utterances start together on the same step, which flatters the engine (their codec
windows fall due together, no prefill interrupts decoding). Reported per N: per-stream and
aggregate tokens/s, time to first audio p50/p95 and the codec's share of the wall time. A codec
micro-benchmark times one batched window decode at 1/16/64 streams eager and compiled, and a
quality check measures how closely each streaming window reproduces a one-shot decode (SNR).

A stream's delivered rate is taken over time: it is played from its first chunk on, and its
rate is the worst, over its chunks, of audio delivered so far over time elapsed (in tokens/s;
at least 82 means it never runs dry). Streams that start together with the same length share
every decode step, so any whole-life average would be the same for all of them. Each rate and
each N runs `--repeats` times: figures are medians over repeats, with the min-max in `spread`.

    python benchmarks/orpheus_streams.py                                # GPU, full size
    python benchmarks/orpheus_streams.py --arrivals 4,8 --streams ''    # open loop only
    python benchmarks/orpheus_streams.py --smoke                        # CPU, tiny, seconds

`--prefix-cache both` runs each rate without, then with, the voice prefix cache in the same
process; `--reference-tokens N` puts a speaker reference of N tokens at the start of every
prompt, as a cloned voice's requests carry (its transcript and audio codes), which is what a
prefix cache has to save.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from lab.bench.arrivals import poisson_arrivals
from lab.bench.report import command_line
from lab.config import PipelineConfig, load_preset, parse_overrides
from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.heap import freeze_survivors
from lab.engine.request import SamplingParams
from lab.engine.weights import load_lm
from lab.metrics.gc_pauses import GcPauses
from lab.metrics.repeats import Spread, pinned_threads, timed_repeats
from lab.models.orpheus_backend import build_tts
from lab.models.orpheus_format import (
    AudioTokenConstraint,
    OrpheusFormat,
    OrpheusLayout,
    dummy_tokenizer,
)
from lab.models.orpheus_sizing import TINY_SNAC
from lab.models.snac_codec import ORPHEUS_WINDOW, SNAC_24KHZ, SnacCodec, build_snac
from lab.models.token_backend import decode_mode, stream_window
from lab.models.token_tts import TokenTTS
from lab.quant.precision import DTYPES
from lab.stream.codec_stream import StreamingDecoder, StreamWindow

REALTIME_TOKENS_PER_S = 7 * 24000 / 2048
WINDOWS = [ORPHEUS_WINDOW, StreamWindow(1, 2, 2), StreamWindow(2, 3, 3), StreamWindow(1, 3, 3)]
TEXTS = [
    "The quick brown fox jumps over the lazy dog near the riverbank.",
    "Please confirm your appointment for Tuesday at three in the afternoon.",
    "Streaming speech should start quickly and never stall while it plays.",
    "Our latency budget is three hundred milliseconds to the first sound.",
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny shapes on CPU, runs in seconds")
    p.add_argument("--preset", help="build the engine and codec as `lab serve` does for this "
                   "preset (its window, codec, decode mode and prefill knobs replace the flags)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one of the preset's keys (with --preset)")
    p.add_argument("--arrivals", default="4,8,16,32",
                   help="open-loop Poisson arrival rates per second ('' to skip)")
    p.add_argument("--duration", type=float, default=15.0, help="seconds of arrivals per rate")
    p.add_argument("--tokens", type=int, default=420, help="tokens per open-loop request")
    p.add_argument("--seed", type=int, default=0, help="seed of the arrival schedule")
    p.add_argument("--drain-timeout", type=float, default=60.0,
                   help="seconds after the arrivals end that streams still in flight may take")
    p.add_argument("--streams", default="1,16,64,100,128",
                   help="simultaneous-start stream counts ('' to skip)")
    p.add_argument("--slots", type=int, default=0,
                   help="engine slots (0: the largest --streams count)")
    p.add_argument("--frames", type=int, default=60, help="audio frames per stream (7 tokens)")
    p.add_argument("--max-len", type=int, default=0, help="cache length (0: fit the run)")
    p.add_argument("--decode-mode", default="cuda-graph", help="LM decode step mode")
    p.add_argument("--window", default="1,1,2",
                   help="SNAC window hop,left,right[,max_hop[,first[,wait]]] in frames "
                        "(max_hop: chunks grow up to it while a listener has audio in hand; "
                        "first: frames the first chunk emits, 0 for hop; wait: frames the first "
                        "chunk waits for, 0 for hop + right)")
    p.add_argument("--real-lengths", default="on", choices=("on", "off"),
                   help="decode attention over each slot's filled positions (on a GPU) or the "
                        "batch's key bucket")
    p.add_argument("--narrow-head", default="on", choices=("on", "off"),
                   help="compute logits for the tokens Orpheus can emit only, or the whole "
                        "vocabulary")
    p.add_argument("--snac-compile", default="default", help="'none' or a torch.compile mode")
    p.add_argument("--snac-dtype", default="fp32", choices=sorted(DTYPES))
    p.add_argument("--side-stream", action="store_true", help="decode SNAC on a side stream")
    p.add_argument("--snac-graphs", action="store_true",
                   help="replay the SNAC decode from CUDA graphs (per batch bucket and frames)")
    p.add_argument("--gc-everything", action="store_true",
                   help="leave what warm-up left alive in Python's full collections")
    p.add_argument("--mixed-prefill", type=int, default=0,
                   help="prompt tokens a decode step may carry (0: prompts prefill alone)")
    p.add_argument("--prefix-cache", default="off", choices=("off", "on", "both"),
                   help="keep the voice's shared prompt prefix (both: each rate off, then on)")
    p.add_argument("--grow-lead-ms", default="",
                   help="compare these growth thresholds (ms, comma-separated; the config's "
                        "grow_lead_ms) on the one build, each rate in turn ('': the build's)")
    p.add_argument("--rush-lead-ms", default="",
                   help="compare these rush leads (ms, comma-separated; the config's "
                        "rush_lead_ms, 0 off) on the one build, each rate in turn ('': the "
                        "build's)")
    p.add_argument("--admit-lead-ms", default="",
                   help="compare these admission holds (ms, comma-separated; the config's "
                        "admit_lead_ms, 0 off) on the one build, each rate in turn ('': the "
                        "build's)")
    p.add_argument("--admit-round-ms", default="",
                   help="compare these ceilings on the engine's recent rounds (ms, "
                        "comma-separated; the config's admit_round_ms, 0 off) on the one build, "
                        "each rate in turn ('': the build's)")
    p.add_argument("--reference-tokens", type=int, default=0,
                   help="tokens of a speaker reference before every prompt (a cloned voice)")
    p.add_argument("--snac-table", default="on", choices=("on", "off"),
                   help="time one batched window decode per codec variant (off: skip its "
                        "compiles, for a shorter run)")
    p.add_argument("--profile", action="store_true", help="write a kernel table for the largest N")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--repeats", type=int, default=3, help="runs per stream count")
    p.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    p.add_argument("--out", default="benchmarks/results/")
    p.add_argument("--render", action="store_true",
                   help="rewrite the markdown from the saved JSON; measure nothing")
    args = p.parse_args(argv)
    if args.smoke:
        args.streams, args.frames, args.decode_mode = "1,4", 4, "eager"
        args.arrivals, args.duration, args.tokens, args.drain_timeout = "5,20", 1.0, 28, 10.0
        args.snac_compile, args.dtype, args.repeats = "none", "fp32", 1
        args.threads = 1  # tiny shapes: more threads only add contention
    if args.preset:
        args.config = adopt_preset(args)
    elif args.set:
        p.error("--set needs --preset")
    streams = counts(args.streams, int)
    args.slots = args.slots or max(streams, default=0)
    if args.slots < max(streams, default=1):
        p.error(f"--slots {args.slots} cannot hold the --streams counts {args.streams!r}")
    return args


def adopt_preset(args: argparse.Namespace) -> PipelineConfig:
    """The preset's config, its streaming and engine knobs copied onto `args` so that the
    report names what ran."""
    cfg = load_preset(args.preset, **parse_overrides(args.set))
    if cfg.family != "orpheus" or cfg.weights != "dummy":
        raise SystemExit(f"--preset {args.preset}: needs an Orpheus preset with dummy weights")
    w = stream_window(cfg)
    args.window = f"{w.hop},{w.left},{w.right},{w.max_hop},{w.first},{w.wait}"
    args.dtype, args.mixed_prefill = cfg.dtype, cfg.mixed_prefill
    args.decode_mode = decode_mode(cfg.compile, cfg.cuda_graphs)
    args.snac_compile, args.snac_graphs = cfg.compile, cfg.cuda_graphs
    args.snac_dtype = "fp32" if cfg.codec_dtype == "auto" else cfg.codec_dtype
    args.side_stream = cfg.codec_side_stream
    args.prefix_cache = "on" if cfg.prefix_cache else "off"
    return cfg


def counts(text: str, kind: type) -> list:
    """A comma-separated list of numbers; empty text skips that part of the benchmark."""
    return [kind(x) for x in text.split(",") if x.strip()]


def window_of(text: str) -> StreamWindow:
    return StreamWindow(*(int(x) for x in text.split(",")))


@dataclass(frozen=True)
class ClonedVoice:
    """Orpheus' prompt behind a speaker reference: zero-shot cloning puts a reference
    transcript and its audio codes before the text, so every request to that voice starts
    with the same `reference` tokens."""

    inner: OrpheusFormat
    reference: tuple[int, ...]

    def prompt(self, unit: str, voice: str | None) -> list[int]:
        return [*self.reference, *self.inner.prompt(unit, voice)]

    def voice_prefix(self, voice: str | None) -> list[int]:
        return [*self.reference, *self.inner.voice_prefix(voice)]

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


def reference_tokens(layout: OrpheusLayout, n: int) -> tuple[int, ...]:
    """`n` audio tokens in Orpheus' order (7 codes per frame), fixed by a seed."""
    seeded = torch.Generator().manual_seed(1)
    codes = torch.randint(0, layout.codebook_size, (n,), generator=seeded)
    return tuple(layout.audio_token(i % 7, int(c)) for i, c in enumerate(codes))


def use_prefix_cache(tts: TokenTTS, on: bool) -> None:
    """Keep the voice's prefix (or forget it): requests submitted from now on reuse it."""
    tts.engine.runner.prefixes.clear()
    if on:
        tts.engine.cache_prefix(tts.format.voice_prefix("tara"))


def use_window_lead(tts: TokenTTS, name: str, ms: float | None) -> float:
    """Set one of the decoder window's leads from ms (`guard_s`: the audio in hand past which
    streams grow their chunks; `rush_s`: the audio in hand below which they rush one; None:
    keep it); the value in force, in ms. Between runs no stream is open, so nothing waits on
    the old value."""
    decoder = tts.decoder
    if ms is not None:
        decoder.window = replace(decoder.window, **{name: ms / 1000})
    return round(getattr(decoder.window, name) * 1000, 3)


def use_gate(tts: TokenTTS, attribute: str, ms: float | None) -> float:
    """Set one of the pipeline's admission gates (`admit_lead_s`: the audio in hand every
    playing stream must hold; `admit_round_s`: the ceiling on the engine's recent rounds)
    from ms (None: keep it); the value in force, in ms."""
    if ms is not None:
        setattr(tts, attribute, ms / 1000)
    return round(getattr(tts, attribute) * 1000, 3)


def lm_shape(args: argparse.Namespace) -> str:
    if args.preset:
        return "orpheus-3b" if args.config.model == "default" else args.config.model
    return "tiny-llama" if args.smoke else "orpheus-3b"


def build(args, device: torch.device, n_slots: int, max_len: int):
    if args.preset:
        tts = build_tts(args.config, device, n_slots=n_slots, max_len=max_len)[0]
        tts.engine.runner.logits_processor.allow_stop = False  # every request runs --tokens
        return tts
    lm, cfg = load_lm("dummy", shape=lm_shape(args), dtype=args.dtype, device=device)
    layout = OrpheusLayout.fitting(cfg.vocab_size)
    snac_cfg = {**(TINY_SNAC if args.smoke else SNAC_24KHZ), "codebook_size": layout.codebook_size}
    codec = SnacCodec(build_snac(snac_cfg), device=device, dtype=DTYPES[args.snac_dtype],
                      noise=False, compile_mode=args.snac_compile, is_dummy=True,
                      cuda_graphs=args.snac_graphs, max_batch=n_slots)
    constraint = AudioTokenConstraint(layout, allow_stop=False)
    engine = LLMEngine(lm, EngineConfig(n_slots=n_slots, max_len=max_len,
                                        decode_mode=args.decode_mode,
                                        mixed_prefill=args.mixed_prefill,
                                        real_length_attention=args.real_lengths == "on"),
                       logits_processor=constraint if args.narrow_head == "on" else None)
    fmt = OrpheusFormat(dummy_tokenizer(layout), layout)
    if args.reference_tokens:
        fmt = ClonedVoice(fmt, reference_tokens(layout, args.reference_tokens))
    tts = TokenTTS(engine, codec, fmt, window=window_of(args.window),
                   side_stream=args.side_stream)
    engine.runner.logits_processor = constraint  # set after the engine: the head stays whole
    use_prefix_cache(tts, args.prefix_cache == "on")
    return tts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def playback(arrivals: list[tuple[float, int]], sample_rate: int) -> tuple[float, float] | None:
    """One stream played from its first chunk on: its sustained rate, the worst over its
    chunks of audio delivered before the chunk over time elapsed (as tokens/s, so 82 is real
    time), and its worst lateness in ms (above 0: the listener heard a gap). None when every
    chunk came at once."""
    t0, played = arrivals[0][0], 0.0
    rate, late = math.inf, -math.inf
    for t, samples in arrivals:
        if t > t0:
            rate = min(rate, played / (t - t0))
            late = max(late, (t - t0 - played) * 1e3)
        played += samples / sample_rate
    return None if math.isinf(rate) else (rate * REALTIME_TOKENS_PER_S, late)


def timed_step(tts: TokenTTS, deliveries: dict[str, list]) -> tuple[float, bool]:
    """One step: its wall ms and whether it launched a prefill. Each audio chunk it returns is
    logged under its stream in `deliveries` as (time, samples), the input of `playback`."""
    prefilled = tts.engine.stats.prefill_tokens
    t0 = time.perf_counter()
    chunks = tts.step()
    now = time.perf_counter()
    for chunk in chunks:
        if len(chunk.audio) and chunk.stream_id in deliveries:
            deliveries[chunk.stream_id].append((now, len(chunk.audio)))
    return (now - t0) * 1e3, tts.engine.stats.prefill_tokens > prefilled


def run_streams(tts: TokenTTS, n: int, tokens: int, device: torch.device) -> dict:
    """Start n utterances together and run them to the end; latency and throughput figures."""
    from torch._dynamo.utils import counters

    decoder = tts.decoder
    codec_ms_before = decoder.device_decode_ms()
    graphs = counters["stats"]["unique_graphs"]
    sync(device)
    start = time.perf_counter()
    ids = [tts.submit(TEXTS[i % len(TEXTS)], "tara",
                      SamplingParams(max_tokens=tokens, seed=i)) for i in range(n)]
    steps, arrivals = [], {i: [] for i in ids}
    while tts.has_unfinished():
        steps.append(timed_step(tts, arrivals)[0])
    sync(device)
    wall = time.perf_counter() - start
    requests = [tts.engine.release(i) for i in ids]
    utts = [tts.utterances.pop(i) for i in ids]
    per_stream = [(len(r.output_ids) - 1) / (r.finish_time - r.first_token_time)
                  for r in requests]
    played = [p for i in ids if arrivals[i] and (p := playback(arrivals[i], tts.sample_rate))]
    sustained = min(p[0] for p in played) if played else min(per_stream)
    ttfa = [u.ttfa_ms for u in utts]
    codec_ms = decoder.device_decode_ms() - codec_ms_before
    total = sum(len(r.output_ids) for r in requests)
    return {
        "streams": n, "tokens_per_stream": tokens, "wall_s": wall,
        "per_stream_tok_s_min": sustained, "per_stream_tok_s_p50": statistics.median(
            per_stream), "aggregate_tok_s": total / wall,
        "realtime_factor_min": sustained / REALTIME_TOKENS_PER_S,
        "ttfa_ms_p50": percentile(ttfa, 50), "ttfa_ms_p95": percentile(ttfa, 95),
        "step_ms_p50": statistics.median(steps), "step_ms_p95": percentile(steps, 95),
        "snac_ms_total": codec_ms, "snac_share": codec_ms / (wall * 1e3),
        "audio_s_per_stream": len(utts[0].audio()) / tts.sample_rate,
        "per_stream_tok_s_mean_min": min(per_stream),
        "playback_late_ms_max": max(p[1] for p in played) if played else None,
        "stalled_streams": sum(p[1] > 0 for p in played),
        "step_ms_max": max(steps), "slowest_step": steps.index(max(steps)),
        "recompiles": counters["stats"]["unique_graphs"] - graphs,
    }


SPREAD_KEYS = ("per_stream_tok_s_min", "per_stream_tok_s_p50", "aggregate_tok_s",
               "ttfa_ms_p50", "ttfa_ms_p95", "step_ms_p50", "snac_share", "playback_late_ms_max",
               "step_ms_max")
PER_RUN_KEYS = (*SPREAD_KEYS, "stalled_streams", "slowest_step", "recompiles")


def repeated(measure: Callable[[], dict], repeats: int, spread_keys: tuple[str, ...],
             per_run_keys: tuple[str, ...]) -> dict:
    """`measure` `repeats` times: each figure is the median over runs, with its min-max; a
    figure every run shares (a stream count) is kept as it is, not turned into a float."""
    _, runs = timed_repeats(measure, repeats=repeats, warmup=0)
    row = {}
    for key, value in runs[0].items():
        if isinstance(value, list):  # a log (the slowest steps): per run only
            continue
        values = [r[key] for r in runs if r[key] is not None]
        same = not values or isinstance(value, bool) or len(set(values)) == 1
        row[key] = value if same else statistics.median(values)
    row["repeats"] = repeats
    row["spread"] = {k: Spread.of([r[k] for r in runs]).to_dict()
                     for k in spread_keys if all(r[k] is not None for r in runs)}
    row["per_run"] = {k: [r[k] for r in runs] for k in per_run_keys}
    return row


MAX_REQUESTS = 100_000
"""Only guards against a mistyped rate: `--duration` is what bounds a schedule."""


@dataclass
class OpenLoopRun:
    """What one open-loop run saw, per request id: when its arrival was due, when the loop got
    to submit it (after the step in progress), and its audio chunks as they came."""

    start: float
    due: dict[str, float] = field(default_factory=dict)
    submitted: dict[str, float] = field(default_factory=dict)
    deliveries: dict[str, list] = field(default_factory=dict)
    steps: list[tuple[float, bool]] = field(default_factory=list)
    slow: list[dict] = field(default_factory=list)
    idle_s: float = 0.0
    end: float = 0.0
    gc: dict = field(default_factory=dict)


def serve_open_loop(tts: TokenTTS, offsets: list[float], tokens: int,
                    stop_s: float) -> OpenLoopRun:
    """Submit each request when its offset from now comes due, and step while anything is in
    flight, until all is done or `stop_s` has passed.

    The schedule is the wall clock's, never the engine's: a request due during a step is
    submitted when the step ends, and that wait counts in its time to first audio, which runs
    from `due`.
    """
    run = OpenLoopRun(time.perf_counter())
    queue = deque(run.start + offset for offset in offsets)
    with GcPauses() as collector:
        while (queue or tts.has_unfinished()) and time.perf_counter() < run.start + stop_s:
            while queue and queue[0] <= time.perf_counter():
                submit_due(tts, run, queue.popleft(), tokens)
            if tts.has_unfinished():
                step_with_suspects(tts, run, collector)
            elif queue:
                idle = time.perf_counter()
                time.sleep(max(0.0, queue[0] - idle))
                run.idle_s += time.perf_counter() - idle
    run.end = time.perf_counter()
    run.gc = collector.summary()
    return run


SLOW_STEP_MS = 50.0


def step_with_suspects(tts: TokenTTS, run: OpenLoopRun, collector: GcPauses) -> None:
    """One timed step; a step slower than SLOW_STEP_MS is logged with what might explain it:
    a prefill, the streams running, codec windows and calls launched, compiles, collector
    pauses inside it."""
    from torch._dynamo.utils import counters

    before = (len(collector.pauses), tts.decoder.decoded_windows, tts.decoder.decode_calls,
              counters["stats"]["unique_graphs"])
    ms, prefilled = timed_step(tts, run.deliveries)
    run.steps.append((ms, prefilled))
    if ms > SLOW_STEP_MS:
        run.slow.append({
            "ms": ms, "prefill": prefilled, "running": len(tts.engine.scheduler.running),
            "codec_windows": tts.decoder.decoded_windows - before[1],
            "codec_calls": tts.decoder.decode_calls - before[2],
            "compiles": counters["stats"]["unique_graphs"] - before[3],
            "gc_ms": sum(p for _, p in collector.pauses[before[0]:])})


def submit_due(tts: TokenTTS, run: OpenLoopRun, due: float, tokens: int) -> None:
    i = len(run.due)
    rid = tts.submit(TEXTS[i % len(TEXTS)], "tara", SamplingParams(max_tokens=tokens, seed=i))
    run.due[rid], run.submitted[rid], run.deliveries[rid] = due, time.perf_counter(), []


def settle(tts: TokenTTS, run: OpenLoopRun) -> tuple[dict, list]:
    """Every request's utterance and engine record, leaving the engine empty for the next run.
    Those the drain timeout cut off before their last audio are aborted as they stand."""
    utts = {rid: tts.utterances[rid] for rid in run.due}
    for rid, utt in utts.items():
        if utt.done is None:
            tts.abort(rid)
    tts.run()
    for rid in utts:
        tts.utterances.pop(rid, None)
    return utts, [tts.engine.release(rid) for rid in run.due]


def occupancy(spans: list[tuple[float, float]], start: float, stop: float) -> tuple[float, int]:
    """Spans open at once: time-averaged over [start, stop], and the most at any moment."""
    covered = sum(max(0.0, min(b, stop) - max(a, start)) for a, b in spans)
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    return covered / (stop - start), max(itertools.accumulate(d for _, d in edges), default=0)


def wall_split(steps: list[tuple[float, bool]], idle_s: float, wall_s: float) -> dict:
    """Shares of the wall time in steps touched by a prefill, in decode-only steps, and idle
    (nothing in flight, waiting for the next arrival).

    A step is touched by a prefill when it launched one or follows one that did: the engine
    never waits for the device, so on a GPU a step's time is mostly the wait for the previous
    step's device work. On a CPU that counts one decode-only step per prefill too many, so
    there the prefill share is an upper bound.
    """
    touched = [launched or (k > 0 and steps[k - 1][1]) for k, (_, launched) in enumerate(steps)]
    prefill_s = sum(ms for (ms, _), t in zip(steps, touched, strict=True) if t) / 1e3
    decode_s = sum(ms for ms, _ in steps) / 1e3 - prefill_s
    return {"prefill_share": prefill_s / wall_s, "decode_share": decode_s / wall_s,
            "idle_share": idle_s / wall_s, "prefill_steps": sum(touched)}


def quantiles(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """p50, p95 and max (None each when there is nothing to rank)."""
    if not values:
        return None, None, None
    return percentile(values, 50), percentile(values, 95), max(values)


def open_loop_row(run: OpenLoopRun, utts: dict, requests: list, duration: float,
                  sample_rate: int) -> dict:
    """Per-run figures: load, time to first audio from arrival, stream rates, step times."""
    ids = list(run.due)
    spans = [(run.due[i], utts[i].done or run.end) for i in ids]
    active_mean, active_peak = occupancy(spans, run.start, run.start + duration)
    ttfa = [(utts[i].first_audio - run.due[i]) * 1e3 for i in ids
            if utts[i].first_audio is not None]
    played = [p for i in ids if run.deliveries[i] and (p := playback(run.deliveries[i],
                                                                     sample_rate))]
    rates = [p[0] for p in played]
    below = sum(r < REALTIME_TOKENS_PER_S for r in rates) / len(rates) if rates else None
    ttfa_p50, ttfa_p95, ttfa_max = quantiles(ttfa)
    step_p50, step_p95, step_max = quantiles([ms for ms, _ in run.steps])
    wall = run.end - run.start
    return {
        "requests": len(ids), "finished": sum(utts[i].done is not None for i in ids),
        "active_mean": active_mean, "active_peak": active_peak,
        "ttfa_ms_p50": ttfa_p50, "ttfa_ms_p95": ttfa_p95, "ttfa_ms_max": ttfa_max,
        "submit_wait_ms_max": max((run.submitted[i] - run.due[i]) * 1e3 for i in ids),
        "stream_tok_s_min": min(rates, default=None), "stream_tok_s_p50": quantiles(rates)[0],
        "below_realtime_share": below,
        "playback_late_ms_max": max((p[1] for p in played), default=None),
        "stalled_streams": sum(p[1] > 0 for p in played),
        "step_ms_p50": step_p50, "step_ms_p95": step_p95, "step_ms_max": step_max,
        "steps": len(run.steps),
        **wall_split(run.steps, run.idle_s, wall), "wall_s": wall,
        "aggregate_tok_s": sum(len(r.output_ids) for r in requests) / wall,
    }


def run_open_loop(tts: TokenTTS, offsets: list[float], duration: float, tokens: int,
                  drain_s: float) -> dict:
    """One open-loop run over `offsets`, its figures, and the codec's share of its wall time."""
    from torch._dynamo.utils import counters

    codec_ms_before = tts.decoder.device_decode_ms()
    graphs = counters["stats"]["unique_graphs"]
    stats = tts.engine.stats
    prefilled, cached = stats.prefill_tokens, stats.cached_prefix_tokens
    run = serve_open_loop(tts, offsets, tokens, duration + drain_s)
    codec_ms = tts.decoder.device_decode_ms() - codec_ms_before
    row = open_loop_row(run, *settle(tts, run), duration, tts.sample_rate)
    row["prefill_tokens_per_request"] = (stats.prefill_tokens - prefilled) / row["requests"]
    row["cached_tokens_per_request"] = (stats.cached_prefix_tokens - cached) / row["requests"]
    row["snac_share"] = codec_ms / (row["wall_s"] * 1e3)
    row["recompiles"] = counters["stats"]["unique_graphs"] - graphs
    row["slow_steps"] = sorted(run.slow, key=lambda step: -step["ms"])[:8]
    row.update(run.gc)
    return row


OPEN_SPREAD_KEYS = ("active_mean", "ttfa_ms_p50", "ttfa_ms_p95", "stream_tok_s_min",
                    "below_realtime_share", "step_ms_p50", "step_ms_p95", "step_ms_max",
                    "prefill_share", "snac_share")
OPEN_PER_RUN_KEYS = (*OPEN_SPREAD_KEYS, "prefill_tokens_per_request", "active_peak", "finished",
                     "stalled_streams", "recompiles", "slow_steps", "gc_full", "gc_ms_max",
                     "gc_ms_total")


def open_loop_rows(tts: TokenTTS, args: argparse.Namespace, warm_tokens: int) -> list[dict]:
    """Each `--arrivals` rate `--repeats` times over one seeded schedule, after one short
    untimed run at the top rate (prefills of new batch shapes, codec batch sizes)."""
    rates = counts(args.arrivals, float)
    if not rates:
        return []
    warm = poisson_arrivals(max(rates), args.slots, min(1.0, args.duration), args.seed)
    settle(tts, serve_open_loop(tts, warm, warm_tokens, args.drain_timeout + 1.0))
    rows = []
    settings = {"off": [False], "on": [True], "both": [False, True]}[args.prefix_cache]
    leads = counts(args.grow_lead_ms, float) or [None]
    rushes = counts(args.rush_lead_ms, float) or [None]
    admits = counts(args.admit_lead_ms, float) or [None]
    ceilings = counts(args.admit_round_ms, float) or [None]
    for rate, prefix, lead, rush, admit, ceiling in itertools.product(rates, settings, leads,
                                                                      rushes, admits, ceilings):
        offsets = poisson_arrivals(rate, MAX_REQUESTS, args.duration, args.seed)
        if not offsets:
            raise SystemExit(f"no arrival in {args.duration} s at {rate}/s (seed {args.seed}): "
                             "raise --duration")
        use_prefix_cache(tts, prefix)
        grow_lead = use_window_lead(tts, "guard_s", lead)
        rush_lead = use_window_lead(tts, "rush_s", rush)
        admit_lead = use_gate(tts, "admit_lead_s", admit)
        admit_round = use_gate(tts, "admit_round_s", ceiling)
        measure = functools.partial(run_open_loop, tts, offsets, args.duration, args.tokens,
                                    args.drain_timeout)
        rows.append({"rate": rate, "prefix_cache": prefix, "grow_lead_ms": grow_lead,
                     "rush_lead_ms": rush_lead,
                     "admit_lead_ms": admit_lead, "admit_round_ms": admit_round,
                     **repeated(measure, args.repeats, OPEN_SPREAD_KEYS, OPEN_PER_RUN_KEYS)})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def profile_steps(tts: TokenTTS, n: int, tokens: int, out: Path) -> None:
    """Kernel and host-op table over 28 steady decode steps (4 frames, SNAC included)."""
    from torch.profiler import ProfilerActivity, profile

    ids = [tts.submit(TEXTS[i % len(TEXTS)], "tara", SamplingParams(max_tokens=tokens, seed=i))
           for i in range(n)]
    for _ in range(10):
        tts.step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(28):
            tts.step()
        sync(tts.codec.device)
    tts.run()
    for i in ids:
        tts.engine.release(i)
        tts.utterances.pop(i)
    events = prof.key_averages()
    device_key = "self_device_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
    tables = [events.table(sort_by=key, row_limit=25)
              for key in (device_key, "self_cpu_time_total")]
    out.write_text(f"{n} streams, 28 decode steps\n\n" + "\n\n".join(tables))


def time_call(fn, device: torch.device, reps: int) -> tuple[Spread, Spread]:
    """ms of fn() over reps, on the device (events; the host's clock on a CPU) and on the host
    until fn returns (what its launches cost the thread that also runs the LM's steps)."""
    times, host = [], []
    for _ in range(reps):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            t0 = time.perf_counter()
            fn()
            host.append((time.perf_counter() - t0) * 1e3)
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
            host.append(times[-1])
    return Spread.of(times), Spread.of(host)


def snac_microbench(args, device: torch.device, batches: list[int], frames: int) -> list[dict]:
    """ms per batched window decode for each codec variant, and its deviation from fp32 eager."""
    cfg = TINY_SNAC if args.smoke else SNAC_24KHZ
    variants = {"eager fp32": ("none", "fp32")}
    if args.snac_compile != "none":
        variants[f"compile:{args.snac_compile} fp32"] = (args.snac_compile, "fp32")
    if args.snac_dtype != "fp32":
        variants[f"compile:{args.snac_compile} {args.snac_dtype}"] = (args.snac_compile,
                                                                      args.snac_dtype)
    graphed = args.snac_graphs and device.type == "cuda"
    if graphed:
        variants[f"compile:{args.snac_compile} {args.snac_dtype} + graphs"] = (
            args.snac_compile, args.snac_dtype)
    codecs = {name: SnacCodec(build_snac(cfg), device=device, dtype=DTYPES[dtype], noise=False,
                              compile_mode=mode, cuda_graphs=name.endswith("graphs"),
                              max_batch=max(batches))
              for name, (mode, dtype) in variants.items()}
    rows = []
    for b in batches:
        codes = torch.randint(0, cfg["codebook_size"], (b, frames, 7))
        ref = codecs["eager fp32"].decode(codes)
        for name, codec in codecs.items():
            for _ in range(3):
                out = codec.decode(codes)
            spread, host = time_call(lambda c=codec, x=codes: c.decode(x), device,
                                     2 if args.smoke else 20)
            ms = spread.median
            err = float((out - ref).norm() / ref.norm())
            rows.append({"streams": b, "snac": name, "window_frames": frames, "ms_per_call": ms,
                         "ms_per_chunk": ms / b, "rel_err_vs_eager": err,
                         "host_ms_per_call": host.median,
                         "fallbacks": list(codec.fallbacks), "ms_per_call_spread":
                         spread.to_dict()})
    return rows


def window_quality(args, device: torch.device, windows: list[StreamWindow]) -> list[dict]:
    """SNR (dB) of streamed-and-joined audio against one decode of the whole utterance, over
    the whole utterance and over the first chunk alone (whose end may lack right context)."""
    cfg = TINY_SNAC if args.smoke else SNAC_24KHZ
    codec = SnacCodec(build_snac(cfg), device=device, noise=False)
    n_frames = 8 if args.smoke else 40
    codes = torch.randint(0, cfg["codebook_size"], (1, n_frames, 7),
                          generator=torch.Generator().manual_seed(0))
    ref = codec.decode(codes)[0].cpu()
    rows = []
    for window in windows:
        decoder = StreamingDecoder(codec, window)
        decoder.open("s")
        pieces, first = [], None
        for f in range(n_frames):
            decoder.push("s", codes[0, f:f + 1])
            if f == n_frames - 1:
                decoder.close("s")
            got = decoder.decode_due()
            if got and first is None:
                first = f + 1
            pieces += [c.audio for c in got]
        joined, head = torch.cat(pieces), len(pieces[0])
        rows.append({"window": window_label(window),
                     "frames_decoded_per_frame": window.frames / window.hop,
                     "snr_db": snr_db(ref, joined),
                     "first_chunk_snr_db": snr_db(ref[:head], joined[:head]),
                     "first_audio_after_tokens": 7 * first})
    return rows


def snr_db(ref: torch.Tensor, got: torch.Tensor) -> float:
    return 10 * math.log10(ref.pow(2).sum() / (ref - got).pow(2).sum().clamp_min(1e-30))


def window_label(w: StreamWindow) -> str:
    """hop,left,right, then the first chunk's own settings where they differ from a plain one."""
    extra = "".join(f" {name}={value}" for name, value in (("first", w.first), ("wait", w.wait))
                    if value)
    return f"{w.hop},{w.left},{w.right}{extra}"


def quality_windows(args) -> list[StreamWindow]:
    """The fixed comparison windows, then the run's own (without growth, which needs a clock
    that follows playback) when it differs from them."""
    fixed = WINDOWS[:2] if args.smoke else WINDOWS
    own = replace(window_of(args.window), max_hop=0)
    return fixed if own in fixed else [*fixed, own]


BASELINE = ("no outside serving stack was run. Stream rates compare with real time "
            "(82 tokens/s); the open-loop table compares with the simultaneous-start table and "
            "its 1-stream row of the same run")
SNAC_BASELINE = ("; the SNAC table compares each compiled codec with the eager fp32 codec in "
                 "the same run")


def _spread(row: dict, key: str, spec: str) -> str:
    s = row.get("spread", {}).get(key)
    if s is None or s["n"] < 2:
        return ""
    sep = " to " if s["min"] < 0 else "-"
    return f" ({s['min']:{spec}}{sep}{s['max']:{spec}})"


def _num(row: dict, key: str, spec: str) -> str:
    """One figure with its spread over runs, '-' where a run had nothing to measure."""
    value = row.get(key)
    return "-" if value is None else format(value, spec) + _spread(row, key, spec)


def _attention_and_head(result: dict) -> str:
    """What the decode step reads, for runs that recorded it."""
    if "real_lengths" not in result:
        return ""
    reads = "each slot's own positions" if result["real_lengths"] else "the batch's key bucket"
    head = result["head_range"]
    logits = ("the whole vocabulary" if head is None
              else f"tokens {head[0]}..{head[1] - 1} only")
    return f"Decode attention reads {reads}; logits for {logits}. "


def _built_from(result: dict) -> list[str]:
    if not result.get("preset"):
        return []
    sets = " ".join(f"`{pair}`" for pair in result["overrides"]) or "no overrides"
    return [f"- Built as `lab serve` builds preset `{result['preset']}` with {sets}: its "
            "engine, codec and streaming knobs, not the flags; end-of-speech is masked so that "
            "every request runs its full length, as the flags' build does."]


def _header(result: dict) -> list[str]:
    open_rows = (result.get("open_loop") or {}).get("rows")
    rows = open_rows or result["streams"]
    repeats = result.get("repeats") or (rows[0].get("repeats", 1) if rows else 1)
    per = "per arrival rate and per stream count" if open_rows else "per stream count"
    anomalies = [*(result.get("anomalies") or []),
                 *(f"The engine or codec fell back: {f}" for f in result.get("fallbacks", []))]
    slots = f"{result['slots']} slots, " if "slots" in result else ""
    return [f"# Orpheus concurrent streams\n\n`{result['command']}`\n",
            f"- Device: {result['device']}; threads {result.get('threads') or 'not recorded'}; "
            f"{repeats} run(s) {per}, figures are the median run's with the min-max over runs "
            "in brackets.",
            f"- Weights: {result['lm']} shape with dummy (random) weights and a dummy SNAC: "
            "speed only, never quality.",
            *_built_from(result),
            f"- Baseline: {result.get('baseline', BASELINE + SNAC_BASELINE + '.')}",
            "- Anomalies:" + (" none seen" if not anomalies else ""),
            *[f"  - {a}" for a in anomalies], "",
            f"LM {result['dtype']}, decode mode {result['decode_mode']}, {slots}cache "
            f"{result['max_len']} positions. Prompt {result['prompt_tokens']} tokens. "
            f"{_attention_and_head(result)}SNAC window "
            f"{result['window']} (hop,left,right[,max_hop[,first[,wait]]] frames), codec "
            f"{result['snac_compile']} "
            f"{result['snac_dtype']}{' in CUDA graphs' if result.get('snac_graphs') else ''}, "
            f"side stream {result['side_stream']}, prompt tokens "
            f"carried by a decode step {result.get('mixed_prefill', 0)}, speaker reference "
            f"tokens before each prompt {result.get('reference_tokens', 0)}. "
            f"Real time = {REALTIME_TOKENS_PER_S:.1f} tokens/s.\n"]


def _open_loop_table(result: dict) -> list[str]:
    open_loop = result.get("open_loop")
    if not open_loop or not open_loop["rows"]:
        return []
    lines = ["## Open loop: Poisson arrivals (headline)\n",
             f"Requests arrive as a Poisson process (seed {open_loop['seed']}) for "
             f"{open_loop['duration_s']:g} s per rate, each asking for {open_loop['tokens']} "
             "tokens, and join the running batch on arrival; after the last arrival, streams "
             f"in flight have {open_loop['drain_timeout_s']:g} s to finish ('finished' counts "
             "those that did). 'in flight' counts a stream from its arrival to its last audio: "
             "mean over the arrival window, and peak. TTFA runs from each request's arrival, so "
             "waiting for the step in progress or for a free slot counts. 'slowest' is the "
             "slowest stream at its worst moment (played from its first chunk, the least audio "
             "delivered per second elapsed, in tokens/s), 'p50' the median stream's, 'below "
             "RT' the share of streams that ever fell below real time. Wall: steps that launched "
             "or waited for a prefill / decode-only steps / idle with nothing in flight; SNAC is "
             "the codec's device time over the wall time, overlapping the steps.\n",
             "'prefill / cached' are prompt tokens per request computed, and copied from the "
             "voice prefix cache.\n",
             "'grow lead' is the audio in hand, in ms, past which a stream's chunks grow "
             "(`grow_lead_ms`; '-': not recorded); 'rush lead' the audio in hand, in ms, at "
             "or below which a stream's next chunk goes out with a frame less of right context "
             "(`rush_lead_ms`; 0: off; '-': not recorded); 'admit hold' the audio in hand, in ms, "
             "every playing stream must hold before a new stream is admitted (`admit_lead_ms`; "
             "0: admitted whenever a slot is free); 'round cap' the engine's recent rounds, in "
             "ms, past which no new stream is admitted (`admit_round_ms`; 0: off; '-': not "
             "recorded).\n",
             "| arrivals/s | prefix cache | grow lead | rush lead | admit hold | round cap | "
             "prefill / cached tokens | "
             "requests (finished) | "
             "in flight mean / peak | TTFA p50 / p95 ms | "
             "stream tok/s slowest / p50 | below RT | step p50 / p95 / max ms | "
             "wall prefill / decode / idle | SNAC |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in open_loop["rows"]:
        tokens = (f"{r['prefill_tokens_per_request']:.0f} / {r['cached_tokens_per_request']:.0f}"
                  if "cached_tokens_per_request" in r else "-")
        lines.append(
            f"| {r['rate']:g} | {'on' if r.get('prefix_cache') else 'off'} | "
            f"{_num(r, 'grow_lead_ms', 'g')} | {_num(r, 'rush_lead_ms', 'g')} | "
            f"{_num(r, 'admit_lead_ms', 'g')} | "
            f"{_num(r, 'admit_round_ms', 'g')} | {tokens} | "
            f"{r['requests']:g} ({r['finished']:g}) | "
            f"{_num(r, 'active_mean', '.1f')} / {r['active_peak']:g} | "
            f"{_num(r, 'ttfa_ms_p50', '.0f')} / {_num(r, 'ttfa_ms_p95', '.0f')} | "
            f"{_num(r, 'stream_tok_s_min', '.1f')} / {_num(r, 'stream_tok_s_p50', '.1f')} | "
            f"{_num(r, 'below_realtime_share', '.0%')} | {_num(r, 'step_ms_p50', '.2f')} / "
            f"{_num(r, 'step_ms_p95', '.2f')} / {_num(r, 'step_ms_max', '.1f')} | "
            f"{r['prefill_share']:.0%} / {r['decode_share']:.0%} / {r['idle_share']:.0%} | "
            f"{r['snac_share']:.0%} |")
    return lines + [""]


def _streams_table(result: dict) -> list[str]:
    if not result["streams"]:
        return []
    lines = ["## Simultaneous start (all N streams start on the same step)\n",
             "All streams start together with the same length, so they share every decode step "
             "and each stream's whole-life rate is the same ('mean' below, min over streams). "
             "'min' is the slowest stream at its worst moment: played from its first chunk, the "
             "least audio delivered per second elapsed, in tokens/s; 82 or more means no stream "
             "ever ran dry. 'late' is the worst gap a listener would hear (negative: audio to "
             "spare).\n",
             "| streams | per-stream tok/s min / p50 | mean (min) | aggregate tok/s | "
             "TTFA p50 / p95 ms | step p50 ms | SNAC share | late ms |",
             "|---|---|---|---|---|---|---|---|"]
    for r in result["streams"]:
        lines.append(
            f"| {r['streams']} | {_num(r, 'per_stream_tok_s_min', '.1f')} / "
            f"{r['per_stream_tok_s_p50']:.1f} | "
            f"{r.get('per_stream_tok_s_mean_min', float('nan')):.1f} | "
            f"{_num(r, 'aggregate_tok_s', '.0f')} | "
            f"{r['ttfa_ms_p50']:.0f} / {_num(r, 'ttfa_ms_p95', '.0f')} | "
            f"{r['step_ms_p50']:.2f} | {100 * r['snac_share']:.1f}% | "
            f"{_num(r, 'playback_late_ms_max', '.0f')} |")
    return lines + [""]


def _codec_tables(result: dict) -> list[str]:
    snac = _snac_table(result["snac"]) if result["snac"] else []
    return [*snac, *_window_table(result)]


def _snac_table(rows: list[dict]) -> list[str]:
    lines = ["## SNAC window decode\n", "Device time per call over 20 calls: median "
             "(min-max); host: the median time until the call returns, which the thread that "
             "also launches the LM's steps spends on it.\n",
             "| streams | codec | ms per call | ms per chunk | host ms per call | "
             "rel. err vs eager |", "|---|---|---|---|---|---|"]
    for r in rows:
        s = r.get("ms_per_call_spread")
        span = f" ({s['min']:.2f}-{s['max']:.2f})" if s else ""
        host = r.get("host_ms_per_call")
        lines.append(f"| {r['streams']} | {r['snac']} | {r['ms_per_call']:.2f}{span} | "
                     f"{r['ms_per_chunk']:.3f} | "
                     f"{'-' if host is None else f'{host:.2f}'} | "
                     f"{r['rel_err_vs_eager']:.1e} |")
    return [*lines, ""]


def _window_table(result: dict) -> list[str]:
    lines = ["## Streaming window vs one-shot decode (dummy SNAC)\n",
              "| hop,left,right | frames decoded per frame | SNR dB | first chunk SNR dB | "
              "first audio after tokens |",
              "|---|---|---|---|---|"]
    for r in result["windows"]:
        head = r.get("first_chunk_snr_db")
        lines.append(f"| {r['window']} | {r['frames_decoded_per_frame']:.1f} | "
                     f"{r['snr_db']:.1f} | {'-' if head is None else f'{head:.1f}'} | "
                     f"{r['first_audio_after_tokens']} |")
    return lines


def markdown(result: dict) -> str:
    lines = [*_header(result), *_open_loop_table(result), *_streams_table(result),
             *_codec_tables(result), "",
             "Targets: under Poisson arrivals, >= 128 streams in flight on average, none below "
             f"real time, TTFA p95 <= 250 ms: {result['targets'].get('open_loop', 'not run')}. "
             f"Simultaneous start: >= 100 streams at >= 82 tok/s each: "
             f"{result['targets']['streams']}; TTFA p95 <= 300 ms at 64 streams: "
             f"{result['targets']['ttfa']}."]
    if result.get("notes"):
        lines += ["", "## Run notes", ""] + [f"- {n}" for n in result["notes"]]
    return "\n".join(lines) + "\n"


def prompt_len(tts: TokenTTS) -> int:
    return len(tts.format.prompt(TEXTS[0], "tara"))


def targets(rows: list[dict], open_rows: list[dict]) -> dict:
    """The headline target under Poisson arrivals (at least 128 streams in flight on average,
    none ever below real time, TTFA p95 at most 250 ms: the rates that met it), then the
    simultaneous-start ones."""
    big = [r for r in rows if r["streams"] >= 100]
    at64 = [r for r in rows if r["streams"] == 64]
    held = [r["rate"] for r in open_rows if r["active_mean"] >= 128
            and r["below_realtime_share"] == 0 and r["ttfa_ms_p95"] <= 250]
    return {
        "open_loop": "not run" if not open_rows else
        (f"met at {', '.join(f'{x:g}' for x in held)} arrivals/s" if held else "missed"),
        "streams": "not run" if not big else
        ("met" if any(r["per_stream_tok_s_min"] >= 82 for r in big) else "missed"),
        "ttfa": "not run" if not at64 else
        ("met" if at64[0]["ttfa_ms_p95"] <= 300 else "missed"),
    }


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.render:
        path = Path(args.out) / "orpheus_streams.json"
        result = json.loads(path.read_text())
        path.with_suffix(".md").write_text(markdown(result))
        return result
    with pinned_threads(args.threads) as threads:
        return run(args, argv, threads)


def run(args: argparse.Namespace, argv: list[str] | None, threads: int) -> dict:
    command = command_line(["python", "benchmarks/orpheus_streams.py",
                            *(argv if argv is not None else sys.argv[1:])])
    device = torch.device("cpu" if args.smoke or not torch.cuda.is_available() else "cuda")
    streams = counts(args.streams, int)
    tokens = 7 * args.frames
    max_len = args.max_len or max(tokens, args.tokens) + 128 + args.reference_tokens
    tts = build(args, device, args.slots, max_len)
    tts.engine.runner.warmup()
    tts.codec.capture(window_of(args.window).frames)
    # Compile the codec for every batch and window length a run meets (first chunks grow to the
    # full window, last ones flush), and warm the allocators, before anything is timed.
    # Each stream count is warmed again before its timed runs: a batch size the codec has not
    # met may still cost a first call.
    warm_frames = window_of(args.window).frames + 3
    for n in (args.slots, 1):
        run_streams(tts, n, min(tokens, 7 * warm_frames), device)
    if not args.gc_everything:
        freeze_survivors()
    rows = []
    for n in streams:
        run_streams(tts, n, min(tokens, 7 * warm_frames), device)
        measure = functools.partial(run_streams, tts, n, tokens, device)
        rows.append(repeated(measure, args.repeats, SPREAD_KEYS, PER_RUN_KEYS))
        print(json.dumps(rows[-1]), flush=True)
    open_loop = {"duration_s": args.duration, "tokens": args.tokens, "seed": args.seed,
                 "drain_timeout_s": args.drain_timeout,
                 "rows": open_loop_rows(tts, args, min(args.tokens, 7 * warm_frames))}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.profile:
        profile_steps(tts, args.slots, tokens, out / "orpheus_streams_profile.txt")
    window = window_of(args.window)
    result = {
        "command": command, "device": torch.cuda.get_device_name() if device.type == "cuda"
        else "cpu", "lm": lm_shape(args), "dtype": args.dtype, "preset": args.preset,
        "overrides": args.set,
        "decode_mode": tts.engine.runner.decoder.mode, "max_len": max_len,
        "window": args.window, "snac_compile": args.snac_compile, "snac_dtype": args.snac_dtype,
        "side_stream": args.side_stream, "snac_graphs": tts.codec.graphs is not None,
        "prompt_tokens": prompt_len(tts),
        "mixed_prefill": args.mixed_prefill, "gc_frozen": not args.gc_everything,
        "prefix_cache": args.prefix_cache, "reference_tokens": args.reference_tokens,
        "real_lengths": any(layer.attn.real_lengths for layer in tts.engine.runner.model.layers),
        "head_range": tts.engine.runner.head_range, "slots": args.slots,
        "repeats": args.repeats, "open_loop": open_loop, "streams": rows,
        "snac": snac_microbench(args, device, [1, 4] if args.smoke else [1, 16, 64],
                                window.frames) if args.snac_table == "on" else [],
        "windows": window_quality(args, device, quality_windows(args)),
        "fallbacks": tts.engine.fallbacks + tts.codec.fallbacks,
        "threads": threads, "torch": torch.__version__, "weights": "dummy",
        "baseline": BASELINE + (SNAC_BASELINE if args.snac_table == "on" else "") + ".",
        "per_stream_tok_s_min_definition": (
            "slowest stream at its worst moment: played from its first chunk, the least "
            "audio delivered per second elapsed, as tokens/s (82 = real time); "
            "per_stream_tok_s_mean_min is the lowest whole-life mean rate"),
    }
    result["targets"] = targets(rows, open_loop["rows"])
    name = "orpheus_streams_smoke" if args.smoke else "orpheus_streams"
    (out / f"{name}.json").write_text(json.dumps(result, indent=2))
    (out / f"{name}.md").write_text(markdown(result))
    print(markdown(result))
    return result


if __name__ == "__main__":
    main()
