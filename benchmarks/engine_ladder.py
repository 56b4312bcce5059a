"""The decode speed ladder on one checkpoint, in one run: from transformers' `generate` to a
static KV cache replayed as a CUDA graph, then the same step at lower weight precision.

    python benchmarks/engine_ladder.py                 # orpheus-3b shape, dummy bf16 weights, GPU
    python benchmarks/engine_ladder.py --smoke         # tiny shapes on CPU, seconds
    python benchmarks/engine_ladder.py --weights lab/data/voice --stem engine_ladder_voice

Prints markdown tables and writes engine_ladder.json + .md (or --stem) to --out. Dummy weights
make noise, not speech: these runs measure speed (the kernels do not care what the weights are).
`--weights DIR` times the lab's own trained voice LM instead (its shape and real weights).

Every timed run repeats its generation `--repeats` times after a warm-up: ms/step is the median
run's median step, with the min-max over runs. Each quantized row is compared with the plain
dtype at the same decode mode and batch size, measured in the same run (its baseline job is
added when not asked for). Hand-written remarks live in the JSON's `anomalies` and `notes`
lists; `--render` rewrites the markdown from the JSON alone.
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from lab.bench.report import anomaly_lines, command_line, write_json
from lab.engine import (
    LM_SHAPES,
    GraphedDecoder,
    StaticKVCache,
    generate,
    hf_generate,
    load_lm,
    to_hf_model,
)
from lab.metrics.repeats import Spread, pinned_threads, timed_repeats
from lab.models.voice_weights import LM_FILE, load_voice_lm, read_voice_config
from lab.quant import apply_precision
from lab.quant.precision import DTYPES

RUNGS = ("transformers generate", "lab eager, dynamic cache", "lab eager, static cache",
         "lab static cache + CUDA graph", "lab static + torch.compile (regional) + CUDA graph")
TARGET_MS, TARGET_SPEEDUP = 3.5, 15.0
# torchao's eager int8 x int8 matmul formats its input tensor to text (a host sync) on every
# call, so it cannot be captured and runs ~1 s/step eagerly; it is timed compiled only.
COMPILED_ONLY = ("int8-dynamic",)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="orpheus-3b")
    p.add_argument("--weights", type=Path,
                   help="a directory with the lab's voice LM (lm.safetensors) instead of --shape")
    p.add_argument("--dtype", default="bf16", choices=("fp32", "fp16", "bf16"))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 128])
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--steps", type=int, default=64, help="decode steps timed per run")
    p.add_argument("--max-len", type=int, default=256, help="static cache positions per slot")
    p.add_argument("--nocache-lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    p.add_argument("--quants", nargs="+",
                   default=["none", "int8-weight", "int4-weight", "fp8", "int8-dynamic"])
    p.add_argument("--quant-batches", type=int, nargs="+", default=[1, 64])
    p.add_argument("--compile", nargs="*",
                   default=["int8-weight:default:1", "int8-dynamic:default:64,1",
                            "none:default:1,64", "fp8:default:1,64", "int4-weight:default:1",
                            "none:max-autotune-no-cudagraphs:1", "int8-weight:default:64"],
                   help="QUANT:MODE:BATCHES runs through torch.compile (then a CUDA graph)")
    p.add_argument("--budget-s", type=float, default=280.0,
                   help="start no compile run once the script has run this long")
    p.add_argument("--ladder-compile", default="default",
                   help="compile mode of the ladder's last rung")
    p.add_argument("--ladder-compile-batches", type=int, nargs="+", default=[1, 64])
    p.add_argument("--skip-hf", action="store_true")
    p.add_argument("--repeats", type=int, default=3, help="timed generations per row")
    p.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--stem", help="output file stem (default engine_ladder)")
    p.add_argument("--views", nargs="*", default=[],
                   help="STEM:BATCHES: also write STEM.{json,md} with the precision rows of "
                        "these batch sizes only (the same run)")
    p.add_argument("--render", action="store_true",
                   help="rewrite <stem>.md from <stem>.json; measure nothing")
    p.add_argument("--smoke", action="store_true", help="tiny shape on CPU in seconds")
    args = p.parse_args(argv)
    if args.ladder_compile == "none":  # no compiled rung in this run
        args.ladder_compile_batches = []
    if args.smoke:
        args.shape, args.device, args.dtype = "tiny-llama", "cpu", "fp32"
        args.batches, args.prompt_len, args.steps, args.max_len = [1, 2], 4, 4, 16
        args.nocache_lengths, args.quant_batches = [8, 16, 32], [1]
        args.quants = ["none", "int8-weight", "int4-weight", "fp8"]
        args.compile, args.ladder_compile, args.ladder_compile_batches = [], "eager", [1, 2]
        args.repeats, args.threads = 1, 1
    return args


def model_config(args):
    return LM_SHAPES[args.shape] if args.weights is None else read_voice_config(
        args.weights / LM_FILE)


def load_model(args, device):
    """The LM a run times: random weights of `--shape`, or the lab's voice from `--weights`."""
    if args.weights is None:
        return load_lm("dummy", shape=args.shape, dtype=args.dtype, device=device)
    lm, cfg = load_voice_lm(args.weights / LM_FILE)
    lm.to(device=device, dtype=DTYPES[args.dtype])
    lm.reset_rope()
    lm.tie_weights()
    return lm, cfg


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _free():
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def copy_bandwidth(device) -> float | None:
    """Device memory bandwidth in bytes/s from a large copy (bytes read plus written)."""
    if device.type != "cuda":
        return None
    src = torch.empty(1 << 31, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(6):
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * src.numel() / statistics.median(times[1:])


def streamed_bytes(lm) -> int:
    """Weight bytes a decode step must read: all but the embedding table, which is gathered,
    and the head rows a narrowed head skips (the full head still owns, and counts, them all)."""
    from lab.quant import tensor_bytes, weight_bytes

    embed = lm.embed.weight
    head = getattr(lm.lm_head, "full", lm.lm_head)
    read = weight_bytes(lm) - (0 if head.weight is embed else tensor_bytes(embed))
    if lm.head_range is None:
        return read
    start, stop = lm.head_range
    return read - int(tensor_bytes(head.weight) * (1 - (stop - start) / lm.cfg.vocab_size))


def graphed(lm, batch, max_len, mode="cuda-graph"):
    cfg = lm.cfg
    w = lm.embed.weight
    cache = StaticKVCache(cfg.n_layers, batch, max_len, cfg.n_kv_heads, cfg.head_dim, w.dtype,
                          w.device)
    dec = GraphedDecoder(lm, cache, mode, buckets=(batch,))
    dec.capture()
    return dec


def repeated(gen, repeats: int):
    """`gen()` (one timed generation) `repeats` times: the median run's result and the spread
    of the runs' median step times."""
    _, runs = timed_repeats(gen, repeats=repeats, warmup=0)
    spread = Spread.of([r.ms_per_step for r in runs])
    return sorted(runs, key=lambda r: r.ms_per_step)[(len(runs) - 1) // 2], spread


def run_rung(rung, lm, hf, prompt, args):
    """Warm up once (allocator, cuBLAS heuristics, capture), then time `args.steps` steps,
    `args.repeats` times."""
    steps, n = args.steps, args.repeats
    if rung == RUNGS[0]:
        hf_generate(hf, prompt, 3)
        return (*repeated(lambda: hf_generate(hf, prompt, steps), n), [])
    if rung in RUNGS[3:]:
        dec = graphed(lm, prompt.shape[0], args.max_len, "cuda-graph" if rung == RUNGS[3] else
                      args.ladder_compile)
        generate(lm, prompt, 3, "static", decoder=dec)
        return (*repeated(lambda: generate(lm, prompt, steps, "static", decoder=dec), n),
                dec.fallbacks)
    mode = "dynamic" if rung == RUNGS[1] else "static"
    generate(lm, prompt, 3, mode, max_len=args.max_len)
    return (*repeated(lambda: generate(lm, prompt, steps, mode, max_len=args.max_len), n), [])


def ladder(lm, args, device):
    rows, hf = [], None
    if not args.skip_hf:
        try:
            hf = to_hf_model(lm)
        except Exception as err:
            rows.append({"batch": 0, "rung": RUNGS[0], "error": f"{type(err).__name__}: {err}"})
    rungs = RUNGS[1:] if hf is None else RUNGS
    for batch in tqdm(args.batches, desc="ladder", file=sys.stdout):
        gen = torch.Generator().manual_seed(batch)
        prompt = torch.randint(0, lm.cfg.vocab_size, (batch, args.prompt_len), generator=gen)
        prompt = prompt.to(device)
        tokens, base = {}, None
        for rung in rungs:
            if rung == RUNGS[4] and batch not in args.ladder_compile_batches:
                continue
            try:
                res, spread, fallbacks = run_rung(rung, lm, hf, prompt, args)
            except Exception as err:
                rows.append({"batch": batch, "rung": rung,
                             "error": f"{type(err).__name__}: {str(err)[:300]}"})
                _free()
                continue
            tokens[rung] = res.tokens
            base = base or (res.ms_per_step if rung == RUNGS[0] else None)
            rows.append({**res.summary(), "rung": rung, "fallbacks": fallbacks,
                         "speedup_vs_transformers": base / res.ms_per_step if base else None,
                         "ms_per_step_spread": spread.to_dict()})
            _free()
        ref = tokens.get(RUNGS[2])
        for row in rows:
            if row["batch"] == batch and ref is not None and row["rung"] in tokens:
                row["tokens_match_static_eager"] = bool(torch.equal(tokens[row["rung"]], ref))
        if batch == 1 and device.type == "cuda":
            rows += cudnn_ablation(lm, hf, prompt, args, base)
    del hf
    return rows


def cudnn_ablation(lm, hf, prompt, args, base):
    """The growing-cache rungs again with cuDNN attention off: cuDNN builds an execution plan
    for every new key length, so a cache that grows each step pays for planning each step."""
    rows = []
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        for rung in RUNGS[:2] if hf is not None else RUNGS[1:2]:
            res, spread, _ = run_rung(rung, lm, hf, prompt, args)
            rows.append({**res.summary(), "rung": f"{rung} (cuDNN attention off)",
                         "fallbacks": [], "speedup_vs_transformers":
                         base / res.ms_per_step if base else None,
                         "ms_per_step_spread": spread.to_dict()})
    except Exception as err:
        rows.append({"batch": 1, "rung": "cuDNN attention off", "error": f"{err}"[:300]})
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)
    return rows


def nocache_growth(lm, args, device):
    """One forward over the whole prefix is the no-cache step at that context length."""
    rows = []
    for length in args.nocache_lengths:
        tokens = torch.randint(0, lm.cfg.vocab_size, (1, length)).to(device)
        positions = torch.arange(length, device=device).unsqueeze(0)
        times = []
        with torch.inference_mode():
            for _ in range(5 if device.type == "cuda" else 2):
                _sync(device)
                t0 = time.perf_counter()
                lm(tokens, positions, None, last_only=True)
                _sync(device)
                times.append((time.perf_counter() - t0) * 1e3)
        rows.append({"context": length, "ms_per_step": statistics.median(times[1:] or times)})
    x = np.log([r["context"] for r in rows])
    y = np.log([r["ms_per_step"] for r in rows])
    half = len(rows) // 2
    return {
        "rows": rows,
        "exponent_all": float(np.polyfit(x, y, 1)[0]),
        "exponent_upper_half": float(np.polyfit(x[half:], y[half:], 1)[0]),
    }


def quality(lm, probe, ref):
    with torch.inference_mode():
        out = lm(probe, torch.arange(probe.shape[1], device=probe.device).unsqueeze(0)).float()
    if ref is None:
        return out, None, None
    rel = ((out - ref).norm() / ref.norm()).item()
    return ref, rel, (out.argmax(-1) == ref.argmax(-1)).float().mean().item()


class NotTimed(RuntimeError):
    """A run whose result would not be a measurement of what its row names."""


def time_decode(lm, mode, batch, args, vocab, device, quant="none") -> dict:
    """Capture (and compile) the decode step for one batch size, then time a generation."""
    # Drawn on the CPU: a capture that failed can leave the GPU's generator unusable.
    prompt = torch.randint(0, vocab, (batch, args.prompt_len)).to(device)
    t0 = time.perf_counter()
    dec = graphed(lm, batch, args.max_len, mode)
    setup_s = time.perf_counter() - t0
    if quant in COMPILED_ONLY and dec.mode == "eager" and device.type == "cuda":
        raise NotTimed(f"not timed: {'; '.join(dec.fallbacks)}; {quant} eagerly is a "
                       "host-synchronising path (about 1 s/step), not a result")
    generate(lm, prompt, 3, "static", decoder=dec)
    out, spread = repeated(lambda: generate(lm, prompt, args.steps, "static", decoder=dec),
                           args.repeats)
    return {"setup_s": setup_s, "ms_per_step": out.ms_per_step,
            "tokens_per_second": out.tokens_per_second, "decode_fallbacks": dec.fallbacks,
            "decode_mode_used": dec.mode, "ms_per_step_spread": spread.to_dict()}


def quantize_measured(lm, dtype, quant, device):
    """Apply a precision, and the relative error of one quantized linear against its float
    weights: the kernel's own error, free of the amplification a deep stack of random (dummy)
    layers adds."""
    weight = lm.layers[0].mlp.gate_up.weight.detach().float().clone()
    x = torch.randn(16, weight.shape[1], generator=torch.Generator().manual_seed(0))
    result = apply_precision(lm, dtype, quant, device)
    x = x.to(device=weight.device, dtype=lm.embed.weight.dtype)
    with torch.inference_mode():
        ref = x.float() @ weight.T
        out = lm.layers[0].mlp.gate_up(x).float()
    return result, ((out - ref).norm() / ref.norm()).item()


def _jobs(args, device) -> list[tuple[str, str, int]]:
    """(quant, decode mode, batch): every quant under a plain CUDA graph first (cheap), then
    the compiled runs in the order given, which is their priority under --budget-s. A compiled
    quantized run whose plain-dtype baseline (same mode and batch) was not asked for gets it,
    placed first, so that every quantized row has its baseline from the same run."""
    skip = COMPILED_ONLY if device.type == "cuda" else ()
    jobs = [(q, "cuda-graph", b) for q in args.quants if q not in skip for b in args.quant_batches]
    compiled = []
    for spec in args.compile:
        quant, mode, batches = spec.split(":")
        compiled += [(quant, mode, int(b)) for b in batches.split(",")]
    baselines = [("none", m, b) for q, m, b in compiled if q != "none"]
    for job in [*baselines, *compiled]:
        if job not in jobs:
            jobs.append(job)
    return jobs


def with_baselines(rows: list[dict], ladder_rows=(), ladder_mode: str = "") -> list[dict]:
    """Each row's speed-up over the plain dtype at the same decode mode and batch size: the
    precision table's own plain rows first, else the ladder's graphed rungs (same run, same
    static cache and steps)."""
    base = {}
    for r in ladder_rows:
        mode = {RUNGS[3]: "cuda-graph", RUNGS[4]: ladder_mode}.get(r["rung"])
        if mode and r.get("ms_per_step"):
            base[(mode, r["batch"])] = r["ms_per_step"]
    base.update({(r["decode"], r["batch"]): r["ms_per_step"] for r in rows
                 if r["quant"] == "none" and r.get("ms_per_step")})
    for r in rows:
        ref = base.get((r["decode"], r["batch"]))
        r["baseline_ms_per_step"] = ref
        r["speedup_vs_base"] = ref / r["ms_per_step"] if ref and r.get("ms_per_step") else None
    return rows


def int_mm_probe(device) -> list[dict]:
    """torch._int_mm (what int8-dynamic compiles to) at a few row counts: where it runs."""
    if device.type != "cuda":
        return []
    rows = []
    b = torch.randint(-8, 8, (3072, 3072), dtype=torch.int8, device=device)
    for m in (1, 8, 16, 17, 32, 64):
        a = torch.randint(-8, 8, (m, 3072), dtype=torch.int8, device=device)
        try:
            torch._int_mm(a, b)
            torch.cuda.synchronize()
            rows.append({"rows": m, "runs": True, "error": None})
        except RuntimeError as err:
            rows.append({"rows": m, "runs": False, "error": str(err).splitlines()[0][:200]})
    return rows


class _Weights:
    """The model at one precision, reloaded only when the next job needs another one."""

    def __init__(self, args, device) -> None:
        self.args, self.device = args, device
        self.quant, self.lm, self.info, self.ref = None, None, {}, None
        vocab = model_config(args).vocab_size
        probe = torch.randint(0, vocab, (1, 64), generator=torch.Generator().manual_seed(0))
        self.probe = probe.to(device)

    def get(self, quant):
        if quant != self.quant:
            self.lm = None
            _free()
            torch._dynamo.reset()
            a = self.args
            self.lm, _ = load_model(a, self.device)
            res, layer_err = quantize_measured(self.lm, a.dtype, quant, self.device)
            ref, rel, top1 = quality(self.lm, self.probe, self.ref)
            self.ref = self.ref if self.ref is not None else ref
            self.info.setdefault(quant, {
                **res.to_dict(), "quant": quant, "streamed_bytes": streamed_bytes(self.lm),
                "rel_err_vs_base": rel, "top1_vs_base": top1, "linear_rel_err": layer_err})
            self.quant = quant
        return self.lm, self.info[quant]


def precision(args, device, bandwidth, start, save):
    """Each quant mode on a fresh copy of the weights: bytes, quality against the first mode
    (the plain dtype), and decode speed under a CUDA graph and the requested compile modes."""
    rows, weights = [], _Weights(args, device)
    vocab = model_config(args).vocab_size
    for quant, mode, batch in tqdm(_jobs(args, device), desc="precision", file=sys.stdout):
        if mode != "cuda-graph" and time.perf_counter() - start > args.budget_s:
            skipped = f"skipped: past the {args.budget_s:.0f} s budget"
            rows.append({**weights.info.get(quant, _unloaded(quant)), "batch": batch,
                         "decode": mode, "error": skipped})
            continue
        lm, info = weights.get(quant)
        row = {**info, "batch": batch, "decode": mode}
        try:
            row.update(time_decode(lm, mode, batch, args, vocab, device, quant))
            row["achieved_GBps"] = info["streamed_bytes"] / row["ms_per_step"] / 1e6
            row["floor_ms"] = info["streamed_bytes"] / bandwidth * 1e3 if bandwidth else None
        except Exception as err:
            row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
        rows.append(row)
        save(rows)
        _free()
    return rows


def _unloaded(quant) -> dict:
    return {"quant": quant, "applied": "-", "fallbacks": [], "skipped": [], "weight_bytes": 0,
            "streamed_bytes": 0, "rel_err_vs_base": None, "top1_vs_base": None,
            "linear_rel_err": None}


def _fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def _span(row) -> str:
    s = row.get("ms_per_step_spread")
    return "" if not s or s["n"] < 2 else f" ({s['min']:.2f}-{s['max']:.2f})"


def _ladder_md(report) -> list[str]:
    a = report["args"]
    lines = ["## Decode ladder", ""]
    if report.get("ladder_note"):
        lines += ["> " + line for line in report["ladder_note"]] + [""]
    lines += [f"Prompt of {a['prompt_len']} tokens, then {a['steps']} greedy decode steps timed "
              f"(median step); static caches hold {a['max_len']} positions per slot and "
              "attention reads all of them. 'tokens = static eager': same greedy tokens as the "
              "lab's eager static rung (in bf16, different kernels may flip near-ties on dummy "
              "weights).", "",
              "| batch | rung | ms/step | tokens/s | x transformers | "
              "tokens = static eager | notes |", "|---" * 7 + "|"]
    if report["ladder"] and not report["ladder"][0].get("ms_per_step_spread"):
        lines.insert(-3, "One timed generation per rung (no repeats in this run).\n")
    for r in report["ladder"]:
        notes = r.get("error") or "; ".join(r.get("fallbacks", []))
        lines.append(f"| {r['batch']} | {r['rung']} | {_fmt(r.get('ms_per_step'))}{_span(r)} | "
                     f"{_fmt(r.get('tokens_per_second'), '.0f')} | "
                     f"{_fmt(r.get('speedup_vs_transformers'), '.1f')} | "
                     f"{r.get('tokens_match_static_eager', '-')} | {notes} |")
    return lines


def _nocache_md(nc) -> list[str]:
    if not nc:
        return []
    lines = ["", "## No cache: each step recomputes the prefix (batch 1)", "",
             "| context | ms/step |", "|---|---|"]
    lines += [f"| {r['context']} | {r['ms_per_step']:.2f} |" for r in nc["rows"]]
    few = len(nc["rows"]) < 4
    return lines + ["", f"Fitted exponent (ms ~ context^k): k = {nc['exponent_all']:.2f} over "
                    f"all lengths, {nc['exponent_upper_half']:.2f} over the longer half. A whole "
                    "generation of n tokens without a cache costs about n^(1+k)."
                    + (f" Only {len(nc['rows'])} lengths: read k as a description of these "
                       "points, not as a trend." if few else "")]


def _profile_md(prof) -> list[str]:
    lines = []
    for name, p in (prof or {}).items():
        if p is None:
            continue
        lines += ["", f"## Where a batch-1 step goes: {name} (GPU kernels, profiler)", "",
                  f"{p['launches_per_step']} kernel launches, {p['kernel_ms_per_step']:.2f} ms of "
                  "kernel time per step.", "", "| kernel | calls/step | ms/step |", "|---|---|---|"]
        lines += [f"| `{k['kernel']}` | {k['calls']} | {k['ms']:.3f} |" for k in p["top"]]
    return lines


def _precision_md(report) -> list[str]:
    rows = with_baselines([dict(r) for r in report["precision"]], report["ladder"],
                          report["args"].get("ladder_compile", ""))
    lines = ["", "## Precision (decode step, static cache)", "",
             "'linear err': one quantized layer against its float weights (the kernel's own "
             "error). 'logit err' and 'top-1': whole-model logits against the plain dtype; with "
             "dummy weights a deep random network amplifies any perturbation, so read these as "
             "upper bounds, and judge real quality on real weights. int8-dynamic runs compiled "
             "only: torchao's eager int8 x int8 matmul reads its input back to the host on every "
             "call, which a CUDA graph cannot capture. Compiled runs compile one block and the "
             "head (regional), then capture the whole step as one CUDA graph. 'x base': the "
             "plain dtype's ms/step at the same decode mode and batch size, from the same run, "
             "over this row's ('-': no such baseline ran); where the precision table has no plain "
             "row, the ladder's graphed rung of that mode and batch is the baseline.", "",
             "| quant | applied | decode | batch | weight GB | streamed GB | ms/step | tokens/s |"
             " x base | GB/s | linear err | logit err | top-1 | notes |", "|---" * 14 + "|"]
    for r in rows:
        notes = r.get("error") or "; ".join(r["fallbacks"] + r.get("decode_fallbacks", []))
        if r["skipped"]:
            notes += f" {len(r['skipped'])} linear(s) kept unquantized, e.g. {r['skipped'][0]}"
        lines.append(
            f"| {r['quant']} | {r['applied']} | {r.get('decode_mode_used', r['decode'])} | "
            f"{r['batch']} | {r['weight_bytes'] / 1e9:.2f} | {r['streamed_bytes'] / 1e9:.2f} | "
            f"{_fmt(r.get('ms_per_step'))}{_span(r)} | "
            f"{_fmt(r.get('tokens_per_second'), '.0f')} | "
            f"{_fmt(r.get('speedup_vs_base'))} | "
            f"{_fmt(r.get('achieved_GBps'), '.0f')} | {_fmt(r['linear_rel_err'], '.4f')} | "
            f"{_fmt(r['rel_err_vs_base'], '.3f')} | "
            f"{_fmt(r['top1_vs_base'])} | {notes} |")
    return lines


WEIGHTS = {"dummy": "dummy (random) weights: speed only, never quality",
           "trained": "the lab's trained voice LM (real weights)"}


def _header(report) -> list[str]:
    """What a reader needs before a number: device, weights, repeats, baseline, anomalies."""
    a = report["args"]
    repeats = a.get("repeats", 1)
    lines = [f"- Device: {report['device']}; torch {report['torch']}, transformers "
             f"{report['transformers']}, torchao {report['torchao']}; threads "
             f"{report.get('threads') or 'not recorded'}",
             f"- Weights: shape {report['shape']} ({report['dtype']}), "
             f"{WEIGHTS[report.get('weights', 'dummy')]}",
             f"- Repeats: {repeats} timed generation(s) of {a['steps']} steps per row after a "
             "warm-up; ms/step is the median run's median step"
             + (", with the min-max over runs in brackets" if repeats > 1 else ""),
             "- Baseline: " + report.get("baseline", _baseline(report))]
    if report.get("view_of"):
        lines.append(f"- This file: {report['view_of']}")
    return lines + anomaly_lines(report)


def _baseline(report) -> str:
    rungs = {r["rung"] for r in report["ladder"] if "ms_per_step" in r}
    ladder = ("ladder: 'x transformers' divides by transformers `generate` in this run"
              if RUNGS[0] in rungs else "ladder: transformers was not run (no 'x transformers')")
    return (f"{ladder}; precision: each quantized row against the plain dtype at the same "
            "decode mode and batch size, same run ('x base')")


def to_markdown(report) -> str:
    lines = [f"Command: `{report['command']}`", "", *_header(report), ""]
    if report.get("floor_ms"):
        lines += [f"Weight-streaming floor at batch 1: {report['streamed_GB']:.2f} GB / "
                  f"{report['bandwidth_GBps']:.0f} GB/s = {report['floor_ms']:.2f} ms/step", ""]
    lines += _ladder_md(report) + _nocache_md(report["nocache"]) + _profile_md(report["profile"])
    lines += _precision_md(report)
    if report.get("int_mm"):
        lines += ["", "## torch._int_mm by row count (what compiled int8-dynamic calls)", "",
                  "| rows | runs | error |", "|---|---|---|"]
        lines += [f"| {r['rows']} | {r['runs']} | {r['error'] or ''} |" for r in report["int_mm"]]
    lines += ["", "## Targets", ""] + [f"- {t}" for t in report.get("targets", [])]
    if report.get("notes"):
        lines += ["", "## Run notes", ""] + [f"- {n}" for n in report["notes"]]
    return "\n".join(lines) + "\n"


def view(report, batches: list[int], stem: str) -> dict:
    """The same run with the precision rows of `batches` only."""
    kept = [r for r in report["precision"] if r["batch"] in batches]
    return {**report, "precision": kept,
            "view_of": f"the batch {','.join(map(str, batches))} precision rows of the run "
                       f"written to `{report.get('stem', 'engine_ladder')}.md` (same command, "
                       f"same process); the other sections are that run's too"}


def targets(report):
    """The lab's targets, checked on every batch-1 rung that runs under a CUDA graph."""
    out = []
    for r in report["ladder"]:
        if r["batch"] != 1 or r["rung"] not in RUNGS[3:] or "ms_per_step" not in r:
            continue
        ms, s = r["ms_per_step"], r.get("speedup_vs_transformers")
        line = (f"{r['rung']}, batch 1: {ms:.2f} ms/step ({r['tokens_per_second']:.0f} tok/s); "
                f"target <= {TARGET_MS} ms: "
                + ("met" if ms <= TARGET_MS else f"MISSED by {ms - TARGET_MS:.2f} ms"))
        if s:
            line += (f"; {s:.1f}x transformers generate, target >= {TARGET_SPEEDUP}x: "
                     + ("met" if s >= TARGET_SPEEDUP else "MISSED"))
        out.append(line)
    return out or ["no batch-1 CUDA-graph rung ran"]


def profile_step(lm, args, device):
    """GPU kernels of one batch-1 decode step, eager and compiled (uncaptured, so each kernel
    is seen), heaviest first: where the step's time goes."""
    if device.type != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile

    from lab.engine.llm import call_block, call_head

    cfg, w = lm.cfg, lm.embed.weight
    cache = StaticKVCache(cfg.n_layers, 1, args.max_len, cfg.n_kv_heads, cfg.head_dim, w.dtype,
                          device)
    tok = torch.zeros(1, 1, dtype=torch.long, device=device)
    pos = torch.full((1, 1), args.prompt_len, device=device)
    variants = {"eager": (call_block, call_head)}
    if args.ladder_compile not in ("eager", "none", "cuda-graph"):
        options = dict(mode=args.ladder_compile, fullgraph=True, dynamic=False)
        variants["compiled"] = (torch.compile(call_block, **options),
                                torch.compile(call_head, **options))
    out, reps = {}, 5
    for name, (block_fn, head_fn) in variants.items():
        with torch.inference_mode():
            for _ in range(2):
                lm(tok, pos, cache, block_fn=block_fn, head_fn=head_fn)
            _sync(device)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(reps):
                    lm(tok, pos, cache, block_fn=block_fn, head_fn=head_fn)
                _sync(device)
        kernels = []
        for e in prof.key_averages():
            us = getattr(e, "self_device_time_total", 0) or getattr(e, "self_cuda_time_total", 0)
            if us > 0:
                kernels.append({"kernel": e.key[:90], "calls": e.count // reps,
                                "ms": us / reps / 1e3})
        kernels.sort(key=lambda k: -k["ms"])
        out[name] = {"kernel_ms_per_step": sum(k["ms"] for k in kernels),
                     "launches_per_step": sum(k["calls"] for k in kernels), "top": kernels[:12]}
    return out


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out = Path(args.out)
    stem = args.stem or ("engine_ladder_smoke" if args.smoke else "engine_ladder")
    if args.render:
        report = json.loads((out / f"{stem}.json").read_text())
        (out / f"{stem}.md").write_text(to_markdown(report))
        return report
    with pinned_threads(args.threads) as threads:
        return run(args, argv, out, stem, threads)


def run(args, argv, out: Path, stem: str, threads: int) -> dict:
    start = time.perf_counter()
    device = torch.device(args.device)
    import torchao
    import transformers

    out.mkdir(parents=True, exist_ok=True)

    def save(report):
        write_json(report, out, stem)
        (out / f"{stem}.md").write_text(to_markdown(report))
        for spec in args.views:
            name, batches = spec.split(":")
            part = view(report, [int(b) for b in batches.split(",")], name)
            write_json(part, out, name)
            (out / f"{name}.md").write_text(to_markdown(part))

    if device.type == "cuda" and (args.compile or args.ladder_compile not in ("eager", "none")):
        # One inductor setting for every compiled run, bf16 and quantized alike: torchao's
        # recommendation (coordinate-descent tuning of the generated kernels), which its
        # quantize_ would otherwise switch on midway through the run.
        from torchao.quantization.utils import recommended_inductor_config_setter

        recommended_inductor_config_setter()
    lm, cfg = load_model(args, device)
    bandwidth = copy_bandwidth(device)
    report = {
        "command": command_line(["python", "benchmarks/engine_ladder.py", *argv]),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
        else f"CPU ({platform.processor() or platform.machine()})",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "torchao": torchao.__version__, "dtype": args.dtype,
        "shape": args.shape if args.weights is None else "ar-voice",
        "streamed_GB": streamed_bytes(lm) / 1e9,
        "bandwidth_GBps": bandwidth / 1e9 if bandwidth else None,
        "floor_ms": streamed_bytes(lm) / bandwidth * 1e3 if bandwidth else None,
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "ladder": [], "nocache": None, "profile": {}, "precision": [],
        "inductor": "torchao recommended settings (coordinate-descent tuning) for compiled runs",
        "threads": threads, "stem": stem,
        "weights": "dummy" if args.weights is None else "trained",
    }
    if any(spec.startswith("int8-dynamic") for spec in args.compile):
        report["int_mm"] = int_mm_probe(device)
    report["ladder"] = ladder(lm, args, device)
    report["targets"] = targets(report)
    save(report)
    for key, section in (("nocache", nocache_growth), ("profile", profile_step)):
        try:
            report[key] = section(lm, args, device)
        except Exception as err:
            report.setdefault("errors", []).append(f"{key}: {type(err).__name__}: {err}")
        save(report)
    del lm
    _free()

    def save_rows(rows):
        report["precision"] = rows
        save(report)

    report["precision"] = precision(args, device, bandwidth, start, save_rows)
    report["elapsed_s"] = time.perf_counter() - start
    save(report)
    print(to_markdown(report))
    return report


if __name__ == "__main__":
    main()
