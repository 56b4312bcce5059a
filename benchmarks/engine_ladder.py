"""The decode speed ladder on one checkpoint, in one run: from transformers' `generate` to a
static KV cache replayed as a CUDA graph, then the same step at lower weight precision.

    python benchmarks/engine_ladder.py                 # orpheus-3b shape, dummy bf16 weights, GPU
    python benchmarks/engine_ladder.py --smoke         # tiny shapes on CPU, seconds

Prints markdown tables and writes engine_ladder.json + .md to --out. Dummy weights make noise,
not speech: these runs measure speed (the kernels do not care what the weights are).
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

from lab.engine import (
    LM_SHAPES,
    GraphedDecoder,
    StaticKVCache,
    generate,
    hf_generate,
    load_lm,
    to_hf_model,
)
from lab.quant import apply_precision

RUNGS = ("transformers generate", "lab eager, dynamic cache", "lab eager, static cache",
         "lab static cache + CUDA graph")
TARGET_MS, TARGET_SPEEDUP = 3.5, 15.0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="orpheus-3b")
    p.add_argument("--dtype", default="bf16", choices=("fp32", "fp16", "bf16"))
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64, 128])
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--steps", type=int, default=64, help="decode steps timed per run")
    p.add_argument("--max-len", type=int, default=256, help="static cache positions per slot")
    p.add_argument("--nocache-lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    p.add_argument("--quants", nargs="+",
                   default=["none", "int8-weight", "int8-dynamic", "int4-weight", "fp8"])
    p.add_argument("--quant-batches", type=int, nargs="+", default=[1, 64])
    p.add_argument("--compile", nargs="*",
                   default=["int8-weight:default", "none:default", "int8-dynamic:default",
                            "int8-weight:max-autotune-no-cudagraphs"],
                   help="QUANT:MODE pairs timed at --compile-batches through torch.compile")
    p.add_argument("--compile-batches", type=int, nargs="+", default=[1])
    p.add_argument("--budget-s", type=float, default=240.0,
                   help="start no compile run once the script has run this long")
    p.add_argument("--skip-hf", action="store_true")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--smoke", action="store_true", help="tiny shape on CPU in seconds")
    args = p.parse_args(argv)
    if args.smoke:
        args.shape, args.device, args.dtype = "tiny-llama", "cpu", "fp32"
        args.batches, args.prompt_len, args.steps, args.max_len = [1, 2], 4, 4, 16
        args.nocache_lengths, args.quant_batches = [8, 16, 32], [1]
        args.quants = ["none", "int8-weight", "int4-weight", "fp8"]
        args.compile = []
    return args


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
    """Weight bytes a decode step must read: all but the embedding table, which is gathered."""
    from lab.quant import weight_bytes

    embed = lm.embed.weight
    tied = lm.lm_head.weight is embed
    return weight_bytes(lm) - (0 if tied else embed.numel() * embed.element_size())


def graphed(lm, batch, max_len, mode="cuda-graph"):
    cfg = lm.cfg
    w = lm.embed.weight
    cache = StaticKVCache(cfg.n_layers, batch, max_len, cfg.n_kv_heads, cfg.head_dim, w.dtype,
                          w.device)
    dec = GraphedDecoder(lm, cache, mode, buckets=(batch,))
    dec.capture()
    return dec


def run_rung(rung, lm, hf, prompt, args):
    """Warm up once (allocator, cuBLAS heuristics, capture), then time `args.steps` steps."""
    steps = args.steps
    if rung == RUNGS[0]:
        hf_generate(hf, prompt, 3)
        return hf_generate(hf, prompt, steps), []
    if rung == RUNGS[3]:
        dec = graphed(lm, prompt.shape[0], args.max_len)
        generate(lm, prompt, 3, "static", decoder=dec)
        return generate(lm, prompt, steps, "static", decoder=dec), dec.fallbacks
    mode = "dynamic" if rung == RUNGS[1] else "static"
    generate(lm, prompt, 3, mode, max_len=args.max_len)
    return generate(lm, prompt, steps, mode, max_len=args.max_len), []


def ladder(lm, args, device):
    hf = None if args.skip_hf else to_hf_model(lm)
    rows = []
    rungs = RUNGS[1:] if hf is None else RUNGS
    for batch in tqdm(args.batches, desc="ladder", file=sys.stdout):
        gen = torch.Generator().manual_seed(batch)
        prompt = torch.randint(0, lm.cfg.vocab_size, (batch, args.prompt_len), generator=gen)
        prompt = prompt.to(device)
        tokens, base = {}, None
        for rung in rungs:
            try:
                res, fallbacks = run_rung(rung, lm, hf, prompt, args)
            except torch.cuda.OutOfMemoryError as err:
                rows.append({"batch": batch, "rung": rung, "error": f"out of memory: {err}"})
                _free()
                continue
            tokens[rung] = res.tokens
            base = base or (res.ms_per_step if rung == RUNGS[0] else None)
            rows.append({**res.summary(), "rung": rung, "fallbacks": fallbacks,
                         "speedup_vs_transformers": base / res.ms_per_step if base else None})
            _free()
        ref = tokens.get(RUNGS[2])
        for row in rows:
            if row["batch"] == batch and ref is not None and row["rung"] in tokens:
                row["tokens_match_static_eager"] = bool(torch.equal(tokens[row["rung"]], ref))
    del hf
    return rows


def nocache_growth(lm, args, device):
    """One forward over the whole prefix is the no-cache step at that context length."""
    rows = []
    for length in args.nocache_lengths:
        tokens = torch.randint(0, lm.cfg.vocab_size, (1, length), device=device)
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


def precision(args, device, bandwidth, start, save):
    rows, ref = [], None
    vocab = LM_SHAPES[args.shape].vocab_size
    probe = torch.randint(0, vocab, (1, 64), generator=torch.Generator().manual_seed(0))
    probe = probe.to(device)
    compile_runs = {}
    for pair in args.compile:
        quant, mode = pair.split(":")
        compile_runs.setdefault(quant, []).append(mode)
    for quant in tqdm(args.quants, desc="precision", file=sys.stdout):
        torch._dynamo.reset()
        lm, _ = load_lm("dummy", shape=args.shape, dtype=args.dtype, device=device)
        res = apply_precision(lm, args.dtype, quant, device)
        ref, rel, top1 = quality(lm, probe, ref)
        streamed = streamed_bytes(lm)
        runs = [("cuda-graph", b) for b in args.quant_batches]
        runs += [(m, b) for m in compile_runs.get(quant, []) for b in args.compile_batches]
        for mode, batch in runs:
            row = {"quant": quant, "batch": batch, "decode": mode, **res.to_dict(),
                   "streamed_bytes": streamed, "rel_err_vs_base": rel, "top1_vs_base": top1}
            if mode != "cuda-graph" and time.perf_counter() - start > args.budget_s:
                rows.append({**row, "error": f"skipped: past the {args.budget_s:.0f} s budget"})
                continue
            try:
                prompt = torch.randint(0, vocab, (batch, args.prompt_len), device=device)
                t0 = time.perf_counter()
                dec = graphed(lm, batch, args.max_len, mode)
                row["setup_s"] = time.perf_counter() - t0
                generate(lm, prompt, 3, "static", decoder=dec)
                out = generate(lm, prompt, args.steps, "static", decoder=dec)
                row.update(ms_per_step=out.ms_per_step, tokens_per_second=out.tokens_per_second,
                           decode_fallbacks=dec.fallbacks, decode_mode_used=dec.mode)
                row["achieved_GBps"] = streamed / out.ms_per_step / 1e6
                if bandwidth:
                    row["floor_ms"] = streamed / bandwidth * 1e3
            except Exception as err:
                row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
            rows.append(row)
            save(rows)
            dec = None
            _free()
        del lm
        _free()
    return rows


def _fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def _ladder_md(report) -> list[str]:
    lines = ["## Decode ladder", "", "| batch | rung | ms/step | tokens/s | x transformers | "
             "tokens = static eager | notes |", "|---" * 7 + "|"]
    for r in report["ladder"]:
        notes = r.get("error") or "; ".join(r.get("fallbacks", []))
        lines.append(f"| {r['batch']} | {r['rung']} | {_fmt(r.get('ms_per_step'))} | "
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
    return lines + ["", f"Fitted exponent (ms ~ context^k): k = {nc['exponent_all']:.2f} over "
                    f"all lengths, {nc['exponent_upper_half']:.2f} over the longer half. A whole "
                    "generation of n tokens without a cache costs about n^(1+k)."]


def _profile_md(prof) -> list[str]:
    if not prof:
        return []
    lines = ["", "## Where an eager batch-1 step goes (GPU kernels, profiler)", "",
             f"{prof['launches_per_step']} kernel launches, {prof['kernel_ms_per_step']:.2f} ms of "
             "kernel time per step.", "", "| kernel | calls/step | ms/step |", "|---|---|---|"]
    return lines + [f"| `{k['kernel']}` | {k['calls']} | {k['ms']:.3f} |" for k in prof["top"]]


def _precision_md(rows) -> list[str]:
    lines = ["", "## Precision (decode step, static cache)", "",
             "| quant | applied | decode | batch | weight GB | streamed GB | ms/step | tokens/s |"
             " GB/s | rel err | top-1 | notes |", "|---" * 12 + "|"]
    for r in rows:
        notes = r.get("error") or "; ".join(r["fallbacks"] + r.get("decode_fallbacks", []))
        if r["skipped"]:
            notes += f" {len(r['skipped'])} linear(s) kept unquantized, e.g. {r['skipped'][0]}"
        lines.append(
            f"| {r['quant']} | {r['applied']} | {r.get('decode_mode_used', r['decode'])} | "
            f"{r['batch']} | {r['weight_bytes'] / 1e9:.2f} | {r['streamed_bytes'] / 1e9:.2f} | "
            f"{_fmt(r.get('ms_per_step'))} | {_fmt(r.get('tokens_per_second'), '.0f')} | "
            f"{_fmt(r.get('achieved_GBps'), '.0f')} | {_fmt(r['rel_err_vs_base'], '.3f')} | "
            f"{_fmt(r['top1_vs_base'])} | {notes} |")
    return lines


def to_markdown(report) -> str:
    lines = [f"Command: `{report['command']}`", "",
             f"Device: {report['device']}; torch {report['torch']}, transformers "
             f"{report['transformers']}, torchao {report['torchao']}; shape {report['shape']} "
             f"({report['dtype']}, dummy weights: speed only)", ""]
    if report.get("floor_ms"):
        lines += [f"Weight-streaming floor at batch 1: {report['streamed_GB']:.2f} GB / "
                  f"{report['bandwidth_GBps']:.0f} GB/s = {report['floor_ms']:.2f} ms/step", ""]
    lines += _ladder_md(report) + _nocache_md(report["nocache"]) + _profile_md(report["profile"])
    lines += _precision_md(report["precision"])
    lines += ["", "## Targets", ""] + [f"- {t}" for t in report.get("targets", [])]
    return "\n".join(lines) + "\n"


def targets(report):
    graph = [r for r in report["ladder"] if r["batch"] == 1 and r["rung"] == RUNGS[3]]
    if not graph or "ms_per_step" not in graph[0]:
        return ["batch-1 CUDA-graph rung did not run"]
    g = graph[0]
    out = [f"batch-1 decode with CUDA graphs: {g['ms_per_step']:.2f} ms/step "
           f"({g['tokens_per_second']:.0f} tok/s); target <= {TARGET_MS} ms: "
           f"{'met' if g['ms_per_step'] <= TARGET_MS else 'MISSED'}"]
    if g.get("speedup_vs_transformers"):
        s = g["speedup_vs_transformers"]
        out.append(f"speed-up over transformers generate at batch 1: {s:.1f}x; target >= "
                   f"{TARGET_SPEEDUP}x: {'met' if s >= TARGET_SPEEDUP else 'MISSED'}")
    return out


def profile_step(lm, args, device):
    """GPU kernels of one eager batch-1 decode step, heaviest first: where the time goes."""
    if device.type != "cuda":
        return {}
    from torch.profiler import ProfilerActivity, profile

    cfg, w = lm.cfg, lm.embed.weight
    cache = StaticKVCache(cfg.n_layers, 1, args.max_len, cfg.n_kv_heads, cfg.head_dim, w.dtype,
                          device)
    tok = torch.zeros(1, 1, dtype=torch.long, device=device)
    pos = torch.full((1, 1), args.prompt_len, device=device)
    reps = 5
    with torch.inference_mode():
        lm(tok, pos, cache)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                lm(tok, pos, cache)
            _sync(device)
    kernels = []
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if us > 0:
            kernels.append({"kernel": e.key[:90], "calls": e.count // reps, "ms": us / reps / 1e3})
    kernels.sort(key=lambda k: -k["ms"])
    return {"kernel_ms_per_step": sum(k["ms"] for k in kernels),
            "launches_per_step": sum(k["calls"] for k in kernels), "top": kernels[:12]}


def _command(argv) -> str:
    """The run's command, with the output folder named as the repository's, not the machine's."""
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--out":
            skip = True
            continue
        kept.append(a)
    return " ".join(["python", "benchmarks/engine_ladder.py", *kept])


def main(argv=None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    start = time.perf_counter()
    device = torch.device(args.device)
    import torchao
    import transformers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "engine_ladder_smoke" if args.smoke else "engine_ladder"

    def save(report):
        (out / f"{stem}.json").write_text(json.dumps(report, indent=2, default=str))
        (out / f"{stem}.md").write_text(to_markdown(report))

    lm, cfg = load_lm("dummy", shape=args.shape, dtype=args.dtype, device=device)
    bandwidth = copy_bandwidth(device)
    report = {
        "command": _command(argv),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda"
        else f"CPU ({platform.processor() or platform.machine()})",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "torchao": torchao.__version__, "shape": args.shape, "dtype": args.dtype,
        "streamed_GB": streamed_bytes(lm) / 1e9,
        "bandwidth_GBps": bandwidth / 1e9 if bandwidth else None,
        "floor_ms": streamed_bytes(lm) / bandwidth * 1e3 if bandwidth else None,
        "args": vars(args), "ladder": [], "nocache": None, "profile": {}, "precision": [],
    }
    report["ladder"] = ladder(lm, args, device)
    report["targets"] = targets(report)
    save(report)
    report["nocache"] = nocache_growth(lm, args, device)
    report["profile"] = profile_step(lm, args, device)
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
