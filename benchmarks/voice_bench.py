"""Benchmark of the embedded Piper voice: speed by precision, compile mode and batch size,
streaming TTFB, and the sound (DNSMOS OVRL, WER) of each precision on a sentence set.

    python benchmarks/voice_bench.py --device cpu --out benchmarks/results
    python benchmarks/voice_bench.py --device cuda --dtypes bf16 --compile none,default
    python benchmarks/voice_bench.py --device cpu --only quality --out benchmarks/results

Every configuration runs in this one process, so ratios between rows compare like with like:
each row's `x baseline` divides by the first dtype and first compile mode at the same batch
size. Each speed row times `--repeats` passes over the text set after one untimed pass and
gives the median pass with its min-max; the thread count is pinned and recorded. The time to
first audio table runs every dtype and compile mode of the speed table, at batch 1.

Writes voice_<device>.json and voice_<device>.md. `--only quality` re-scores the sound into an
existing report and keeps its timings, which a busy machine would spoil but not the scores.
Hand-written remarks go in the JSON's `notes` and `anomalies` lists, so a rewritten report
keeps them; `--render` rewrites the markdown from the JSON alone.

Where espeak-ng cannot be installed (the phonemizer has no build for some Pythons), write the
sentences' phonemes where it can (`--record-phonemes FILE`) and replay them (`--phonemes FILE`):
the model's input ids are then exactly those espeak-ng gives.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

from lab.bench.report import anomaly_lines, markdown_table, run_meta, write_json
from lab.bench.runner import summarize
from lab.config import PipelineConfig
from lab.frontend import sentence_set
from lab.metrics.repeats import Spread, pinned_threads, timed_repeats
from lab.pipeline import WARMUP_TEXTS, Pipeline

SPEED_COLS = ["dtype", "compile", "batch_size", "rtf", "rtf_range", "x_baseline",
              "audio_s_per_s", "latency_p50_ms", "latency_p95_ms", "vocoder_ms_p50",
              "recompiles", "peak_memory_mb", "fallbacks"]


def compiled_graphs() -> int:
    """Graphs torch.compile has built in this process: a rise during timing is a recompile."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def measure(pipe: Pipeline, texts: list[str], batch_size: int, repeats: int) -> dict:
    """One speed row: one untimed pass over the set, then `repeats` timed passes. A request's
    latency is its batch's wall time (every request in a batch waits for all of it)."""
    groups = [texts[i:i + batch_size] for i in range(0, len(texts), batch_size)]

    def one_pass():
        latencies, results = [], []
        for group in groups:
            start = time.perf_counter()
            out = pipe.synthesize_batch(group)
            latencies += [(time.perf_counter() - start) * 1e3] * len(group)
            results += out
        return latencies, results

    one_pass()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    graphs = compiled_graphs()
    passes_ms, passes = timed_repeats(one_pass, repeats=repeats, warmup=0)
    recompiles = compiled_graphs() - graphs
    latencies = [x for lat, _ in passes for x in lat]
    results = [r for _, res in passes for r in res]
    wall_s = sum(sum(lat[i] for i in range(0, len(lat), batch_size)) for lat, _ in passes) / 1e3
    row = summarize(pipe, texts, batch_size, repeats, wall_s, latencies, results).to_dict()
    rtfs = Spread.of([sum(lat[i] for i in range(0, len(lat), batch_size)) / 1e3
                      / sum(r.metrics.audio_seconds for r in res) for lat, res in passes])
    stages = sorted({s for r in results for s in r.metrics.stages})
    row.update({
        "rtf": rtfs.median, "audio_s_per_s": 1 / rtfs.median, "rtf_spread": rtfs.to_dict(),
        "pass_ms": passes_ms.to_dict(),
        "stages_ms_p50": {s: statistics.median(r.metrics.stages.get(s, 0.0) for r in results)
                          for s in stages},
        "recompiles": recompiles,
    })
    return row


def speed_rows(base: PipelineConfig, texts, dtypes, compiles, batch_sizes, repeats):
    rows = []
    for dtype in dtypes:
        for mode in compiles:
            for size in batch_sizes:
                pipe = Pipeline(base.replace(dtype=dtype, compile=mode, stream=False,
                                             batch_size=size))
                row = measure(pipe, texts, size, repeats)
                rows.append({"dtype": dtype, "compile": mode, **row,
                             "load_ms": pipe.startup.get("load_ms"),
                             "warmup_ms": pipe.startup.get("warmup_ms")})
                pipe.close()
                print(json.dumps({k: rows[-1][k] for k in ("dtype", "compile", "batch_size",
                                                            "rtf", "recompiles")}), flush=True)
    return rows


def ttfb_rows(base: PipelineConfig, texts, dtypes, compiles, intervals, repeats):
    """Time to first audio at batch 1, one-shot vs streaming at several intervals, for each
    dtype and compile mode of the speed table. Each text is synthesized `repeats` times."""
    rows = []
    for dtype in dtypes:
        for mode in compiles:
            cfg = base.replace(dtype=dtype, compile=mode, batch_size=1)
            settings = [("one-shot", cfg.replace(stream=False))]
            settings += [(f"stream every {n} frames", cfg.replace(stream=True, decode_interval=n))
                         for n in intervals]
            for label, c in settings:
                pipe = Pipeline(c)  # warmed up at construction
                graphs = compiled_graphs()
                results = [pipe.synthesize(t) for _ in range(repeats) for t in texts]
                ttfb = Spread.of([r.metrics.ttfb_ms for r in results])
                total = Spread.of([r.metrics.total_ms for r in results])
                rows.append({
                    "mode": label, "dtype": dtype, "compile": mode,
                    "ttfb_ms_mean": statistics.mean(r.metrics.ttfb_ms for r in results),
                    "total_ms_mean": statistics.mean(r.metrics.total_ms for r in results),
                    "audio_s_mean": statistics.mean(r.metrics.audio_seconds for r in results),
                    "ttfb_ms_p50": ttfb.median, "ttfb_ms_range": _range(ttfb),
                    "ttfb_ms": ttfb.to_dict(), "total_ms": total.to_dict(),
                    "recompiles": compiled_graphs() - graphs,
                })
                pipe.close()
    return rows


def vocoder_probe(model_ref: str, device: str, dtype: str, frames: int, batches, reps: int):
    """The vocoder alone on fixed random latents: eager, compiled as the lab compiles it
    (dynamic shapes) and compiled for this one shape, timed with device events."""
    from lab.models.piper_backend import PIPER_PLAN
    from lab.models.piper_voice import load_voice
    from lab.quant.plan import apply_knobs

    model = load_voice(model_ref).model
    apply_knobs(model, PIPER_PLAN, dtype=dtype, quant="none", compile_mode="none", device=device)
    dec = model.dec
    variants = {"eager": dec.forward,
                "compiled, dynamic shapes (the lab's setting)": torch.compile(dec.forward,
                                                                             dynamic=True),
                "compiled, this shape only": torch.compile(dec.forward, dynamic=False)}
    rows = []
    gen = torch.Generator().manual_seed(0)
    for batch in batches:
        z = torch.randn(batch, dec.conv_pre.in_channels, frames, generator=gen)
        z = z.to(device, dec.conv_pre.weight.dtype)
        mask = torch.ones(batch, 1, frames, device=device, dtype=z.dtype)
        ref = None
        for name, fn in variants.items():
            start = time.perf_counter()
            with torch.inference_mode():
                out = fn(z, mask)
            _sync(device)
            first_s = time.perf_counter() - start
            with torch.inference_mode():
                for _ in range(3):
                    out = fn(z, mask)
                device_ms = _device_times(lambda f=fn, a=z, m=mask: f(a, m), device, reps)
            ref = out.float() if ref is None else ref
            rows.append({"variant": name, "batch": batch, "frames": frames, "dtype": dtype,
                         "first_call_s": first_s, "ms_p50": device_ms.median,
                         "ms_range": _range(device_ms, ".2f"), "ms": device_ms.to_dict(),
                         "rel_err_vs_eager": float((out.float() - ref).norm() / ref.norm())})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _device_times(fn, device: str, reps: int) -> Spread:
    times = []
    for _ in range(reps):
        if device.startswith("cuda"):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            with torch.inference_mode():
                fn()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end))
        else:
            start = time.perf_counter()
            with torch.inference_mode():
                fn()
            times.append((time.perf_counter() - start) * 1e3)
    return Spread.of(times)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _range(s: Spread, spec: str = ".1f") -> str:
    return f"{s.low:{spec}}-{s.high:{spec}}"


def quality_rows(base: PipelineConfig, texts: list[str], dtypes):
    from lab.quality import evaluate

    rows = []
    for dtype in dtypes:
        pipe = Pipeline(base.replace(dtype=dtype, stream=False))
        scores = [evaluate(r.audio, r.sample_rate, r.text) for r in map(pipe.synthesize, texts)]
        rows.append({
            "dtype": dtype,
            "dnsmos_ovrl": float(np.mean([s.mos.ovrl for s in scores])),
            "dnsmos_sig": float(np.mean([s.mos.sig for s in scores])),
            "p808": float(np.mean([s.mos.p808 for s in scores])),
            "wer": float(np.mean([s.wer for s in scores])),
            "cer": float(np.mean([s.cer for s in scores])),
        })
    return rows


def record_phonemes(texts: list[str], model: str, path: Path) -> None:
    """Write what espeak-ng returns for every sentence the benchmark (and the warm-up) sends."""
    import piper_phonemize

    from lab.frontend import prepare
    from lab.models.piper_voice import read_settings, resolve_voice_file

    table: dict[str, list[str]] = {}  # one string per clause, one code point per phoneme
    real = piper_phonemize.phonemize_espeak

    def recording(text: str, voice: str):
        out = real(text, voice)
        table[f"{voice}\t{text}"] = ["".join(clause) for clause in out]
        return out

    settings, _ = read_settings(resolve_voice_file(model))
    piper_phonemize.phonemize_espeak = recording
    try:
        for text in [*texts, *WARMUP_TEXTS]:
            prepare(text, settings.phoneme_id_map, settings.espeak_voice)
    finally:
        piper_phonemize.phonemize_espeak = real
    path.write_text(json.dumps(table, ensure_ascii=False, indent=1) + "\n")
    print(f"{len(table)} sentences -> {path}")


def replay_phonemes(path: Path) -> None:
    """Stand in for the phonemizer with a recorded table; an unrecorded sentence fails loudly."""
    table = json.loads(path.read_text())

    def phonemize_espeak(text: str, voice: str):
        key = f"{voice}\t{text}"
        if key not in table:
            raise KeyError(f"no recorded phonemes for {text!r}; record them with espeak-ng")
        return [list(clause) for clause in table[key]]

    sys.modules["piper_phonemize"] = types.SimpleNamespace(phonemize_espeak=phonemize_espeak)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="default")
    parser.add_argument("--dtypes", default="fp32,bf16")
    parser.add_argument("--compile", default="none")
    parser.add_argument("--batch-sizes", default="1,4,8")
    parser.add_argument("--intervals", default="12,24,48")
    parser.add_argument("--texts", default="medium")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per speed row")
    parser.add_argument("--ttfb-repeats", type=int, default=3,
                        help="times each text is synthesized per TTFB row")
    parser.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    parser.add_argument("--probe-vocoder", action="store_true",
                        help="also time the vocoder alone: eager vs compiled (dynamic, static)")
    parser.add_argument("--probe-frames", type=int, default=480,
                        help="latent frames per probe call (480: about 5.6 s of audio)")
    parser.add_argument("--quality", action="store_true", help="also score DNSMOS and WER")
    parser.add_argument("--only", choices=["quality"],
                        help="re-score only the sound into the existing report; keep its timings")
    parser.add_argument("--phonemes", type=Path, help="replay phonemes recorded with espeak-ng")
    parser.add_argument("--record-phonemes", type=Path, help="record the text set's phonemes")
    parser.add_argument("--render", action="store_true",
                        help="rewrite <stem>.md from <stem>.json; measure nothing")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--stem", help="output file stem (default voice_<device>)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    texts = sentence_set(args.texts)
    out, stem = Path(args.out), args.stem or f"voice_{args.device}"
    if args.render:
        write(json.loads((out / f"{stem}.json").read_text()), out, stem)
        return
    if args.record_phonemes:
        record_phonemes(texts, args.model, args.record_phonemes)
        return
    if args.phonemes:
        replay_phonemes(args.phonemes)
    base = PipelineConfig(device=args.device, model=args.model)
    dtypes, compiles = args.dtypes.split(","), args.compile.split(",")
    with pinned_threads(args.threads) as threads:
        meta = run_meta(command="python " + " ".join(sys.argv), texts=args.texts,
                        threads=threads, repeats=args.repeats, ttfb_repeats=args.ttfb_repeats,
                        phonemes="replayed from a table recorded with espeak-ng"
                        if args.phonemes else "espeak-ng")
        if args.only == "quality":
            rescore_quality(out, stem, meta, quality_rows(base, texts, dtypes))
            return
        sizes = [int(s) for s in args.batch_sizes.split(",")]
        result = {"meta": meta,
                  "speed": speed_rows(base, texts, dtypes, compiles, sizes, args.repeats)}
        result["ttfb"] = ttfb_rows(base, texts, dtypes, compiles,
                                   [int(n) for n in args.intervals.split(",")],
                                   args.ttfb_repeats)
        if args.probe_vocoder:
            result["vocoder_probe"] = vocoder_probe(args.model, args.device, dtypes[-1],
                                                    args.probe_frames, [1, 8], 20)
        if args.quality:
            result["quality"] = quality_rows(base, texts, dtypes)
    write(result, out, stem)


def rescore_quality(out: Path, stem: str, meta: dict, rows: list[dict]) -> None:
    """Swap new sound rows into the saved report; its speed rows and their meta stay as run."""
    result = json.loads((out / f"{stem}.json").read_text())
    result["quality"] = rows
    result["quality_meta"] = meta
    write(result, out, stem)


def with_baseline(rows: list[dict]) -> list[dict]:
    """Each row's speed-up over the first (dtype, compile) of the run at the same batch size."""
    if not rows:
        return rows
    first = (rows[0]["dtype"], rows[0]["compile"])
    base = {r["batch_size"]: r["rtf"] for r in rows if (r["dtype"], r["compile"]) == first}
    out = []
    for r in rows:
        ref = base.get(r["batch_size"])
        spread = r.get("rtf_spread")
        out.append({**r, "x_baseline": ref / r["rtf"] if ref and r["rtf"] else None,
                    "rtf_range": f"{spread['min']:.3g}-{spread['max']:.3g}" if spread else None,
                    "vocoder_ms_p50": (r.get("stages_ms_p50") or {}).get("vocoder")})
    return out


def header(result: dict) -> list[str]:
    """Command, device, weights, baseline and anomalies: what a reader needs before a number."""
    meta = result["meta"]
    lines = [f"Command: `{meta['command']}`", "",
             f"- Device: {meta.get('device', '?')}; torch {meta.get('torch', '?')}, "
             f"Python {meta.get('python', '?')}; {meta.get('date', '')}",
             f"- Threads: {meta.get('threads') or 'not recorded'}; timed passes per speed row: "
             f"{meta.get('repeats') or 'not recorded'}"]
    if meta.get("phonemes"):
        lines.append(f"- Phonemes: {meta['phonemes']}")
    for key, label in (("weights", "Weights"), ("baseline", "Baseline")):
        if result.get(key):
            lines.append(f"- {label}: {result[key]}")
    return lines + anomaly_lines(result)


def write(result: dict, out: Path, stem: str) -> None:
    write_json(result, out, stem)
    speed = with_baseline(result["speed"])
    cols = [c for c in SPEED_COLS if any(r.get(c) is not None for r in speed)]
    ttfb_cols = [c for c in ("dtype", "compile", "mode", "ttfb_ms_p50", "ttfb_ms_range",
                             "ttfb_ms_mean", "total_ms_mean", "audio_s_mean", "recompiles")
                 if any(c in r for r in result["ttfb"])]
    parts = [f"# Default voice benchmark ({result['meta'].get('device', '')})", *header(result),
             "", "## Speed by precision and batch size (one-shot decoding)", "",
             "`rtf` is the median pass's wall time over its audio (below 1: faster than real "
             "time), `rtf_range` the min-max over passes, `x_baseline` the baseline's rtf over "
             "this row's at the same batch size, `vocoder_ms_p50` the median request's time "
             "in the vocoder (device events on a GPU), `recompiles` the graphs torch.compile "
             "built during the timed passes.", "",
             markdown_table(speed, cols), "",
             "## Time to first audio, batch 1", "", markdown_table(result["ttfb"], ttfb_cols)]
    if result.get("vocoder_probe"):
        parts += ["", "## The vocoder alone (fixed random latents, device time per call)", "",
                  markdown_table(result["vocoder_probe"], ["variant", "batch", "frames",
                                                           "dtype", "ms_p50", "ms_range",
                                                           "first_call_s",
                                                           "rel_err_vs_eager"])]
    if "quality" in result:
        parts += ["", "## Sound on the sentence set", *_quality_origin(result),
                  markdown_table(result["quality"])]
    if result.get("notes"):
        parts += ["", "Notes: " + "\n\n".join(result["notes"])]
    (out / f"{stem}.md").write_text("\n".join(parts) + "\n")
    print("\n".join(parts))


def _quality_origin(result: dict) -> list[str]:
    """The command line of a sound section scored apart from the timings above it."""
    meta = result.get("quality_meta")
    if meta is None:
        return []
    return [f"Scored separately on {meta['date']}: `{meta['command']}`", ""]


if __name__ == "__main__":
    main()
