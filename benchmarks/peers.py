"""The lab's decode step against the strongest peer, warmed, in one process.

    python benchmarks/peers.py                          # orpheus-3b shape, dummy bf16 weights
    python benchmarks/peers.py --weights lab/data/voice --stem peers_voice

At each batch size, every row but the first is warmed by one full-length generation (same
prompt, same number of steps) before its timed repeats, so no row pays for one-off work inside
its timing:
- transformers `generate` with its default dynamic cache, cold: the first generation at this
  batch size, timed once. It pays for what a warm-up removes, mostly cuDNN building an
  attention plan for every new key length; a benchmark that times only this row flatters
  whatever it is compared with;
- the same, warmed;
- transformers `generate` with `cache_implementation="static"`, which compiles the model's
  forward itself: the strongest way to run transformers, and the baseline here;
- the lab: static cache + CUDA graph, and static cache + compiled block + CUDA graph.

Then the lab as its engine serves the shape, each row on a freshly loaded model: in bf16 and
in each of `--quants` (quantized first, as a pipeline does at load), with the output head
narrowed to the tokens Orpheus' format can emit (end-of-speech and the 7 x 4096 audio codes, as
the engine's runner does; `--no-narrow-head` keeps the whole head), decode attention over each
row's filled positions where the engine's kernel runs (as the engine does by default), compiled
block + CUDA graph.
Their greedy choice is over the narrowed span, which the format's constraint imposes anyway;
transformers still computes every logit, so these rows say what the engine's whole step costs,
not the same computation as the peers'. A row's bytes read count the head rows it reads.

'x strongest peer' divides the faster transformers row by each row. The weight-streaming
floor is the bytes a step must read over the measured copy bandwidth. Each row also states the
bandwidth it achieved: the bytes a step reads (the weights, plus the K/V its attention reads:
the filled positions for transformers' dynamic cache, every allocated position for its static
cache, and for the lab's the key bucket that holds the batch's filled positions) over its step
time, as a share of the measured copy bandwidth. Dummy weights measure speed only. Writes
<stem>.json and <stem>.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib.metadata import version
from pathlib import Path

import torch
import transformers
from engine_ladder import _free, copy_bandwidth, graphed, load_model, repeated, streamed_bytes
from tqdm import tqdm

from lab.bench.report import markdown_table, recorded_args, run_meta, save_report
from lab.engine import generate, hf_generate, norm_matvec, to_hf_model
from lab.engine.graphs import default_key_buckets
from lab.models.orpheus_format import AudioTokenConstraint, OrpheusError, OrpheusLayout
from lab.quant import apply_precision
from lab.quant.precision import is_plain
from lab.quant.triton_site import runs_kernels

COLD = "transformers generate, dynamic cache (cold)"
PEERS = {COLD: "dynamic", "transformers generate, dynamic cache (warmed)": "dynamic",
         "transformers generate, static cache + its compile (warmed)": "static"}
LAB = {"lab, static cache + CUDA graph": "cuda-graph",
       "lab, static cache + compiled block + CUDA graph": "default"}


READING = ("How to read it: 'same_tokens_as_first_row' compares greedy tokens with the "
           "dynamic-cache row; in bf16, different kernels flip near-ties between logits, so only "
           "speed is compared here (the same-token tests run in fp32). transformers with its "
           "static cache compiles on the first call: its warm-up run paid for that, the timed "
           "runs did not.")


def peer_row(hf, prompt, steps: int, cache: str, repeats: int, warm: bool):
    if not warm:
        return (*repeated(lambda: hf_generate(hf, prompt, steps, cache), 1), [])
    hf_generate(hf, prompt, steps, cache)
    return (*repeated(lambda: hf_generate(hf, prompt, steps, cache), repeats), [])


def kv_positions(row: str, args) -> float:
    """Cache positions a row's attention reads per sequence, averaged over the timed steps:
    transformers' dynamic cache holds what is filled; its static cache allocates prompt +
    steps and reads them all; the lab's captured step reads the smallest key bucket that
    holds the batch's furthest position."""
    filled = range(args.prompt_len + 1, args.prompt_len + args.steps + 1)
    if row not in PEERS:
        buckets = default_key_buckets(args.max_len)
        return sum(min(b for b in buckets if b >= n) for n in filled) / len(filled)
    if PEERS[row] == "static":
        return args.prompt_len + args.steps
    return sum(filled) / len(filled)


def head_span(cfg) -> tuple[int, int] | None:
    """The tokens Orpheus' format can emit, where this vocabulary holds its layout: the span the
    engine narrows the output head to (`AudioTokenConstraint.vocab_range`)."""
    try:
        return AudioTokenConstraint(OrpheusLayout.fitting(cfg.vocab_size)).vocab_range
    except OrpheusError:
        return None


def add_bandwidth(rows: list[dict], lm, args, bandwidth: float | None) -> None:
    """Bytes read and bandwidth for the rows that have none yet, from `lm`'s weights."""
    cfg = lm.cfg
    per_position = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * lm.embed.weight.element_size()
    for r in rows:
        if "ms_per_step" not in r or "gb_per_s" in r:
            continue
        read = streamed_bytes(lm) + r["batch"] * kv_positions(r["row"], args) * per_position
        r["mb_read_per_step"] = round(read / 1e6, 1)
        r["gb_per_s"] = round(read / r["ms_per_step"] / 1e6, 1)
        if bandwidth:
            r["pct_of_copy_bw"] = round(100 * read / r["ms_per_step"] * 1e3 / bandwidth, 1)


def lab_row(lm, prompt, steps: int, mode: str, max_len: int, repeats: int, sample=None):
    dec = graphed(lm, prompt.shape[0], max_len, mode)
    generate(lm, prompt, steps, "static", sample, decoder=dec)
    return (*repeated(lambda: generate(lm, prompt, steps, "static", sample, decoder=dec),
                      repeats), dec.fallbacks)


def timed(batch: int, name: str, job) -> tuple[dict, object | None]:
    """One row from its job, (median run, spread of runs, fallbacks), and that median run; or
    the error that stopped it, so that the other rows go on."""
    row = {"batch": batch, "row": name}
    try:
        res, spread, fallbacks = job()
    except Exception as err:
        return {**row, "error": f"{type(err).__name__}: {str(err)[:200]}"}, None
    finally:
        _free()
    row.update(ms_per_step=round(spread.median, 3), min=round(spread.low, 3),
               max=round(spread.high, 3), tokens_per_s=round(batch * 1e3 / spread.median, 1))
    if fallbacks:
        row["fallbacks"] = "; ".join(fallbacks)
    return row, res


def served_row(lm, prompt, args, name: str) -> tuple[dict, torch.Tensor | None]:
    """One row of the lab as its engine serves the shape (see the module docstring), and the
    tokens of its median run; greedy over the narrowed span, if the head is narrowed."""
    start = lm.head_range[0] if lm.head_range else 0
    row, res = timed(prompt.shape[0], name, lambda: lab_row(
        lm, prompt, args.steps, "default", args.max_len, args.repeats,
        lambda logits: logits.argmax(-1) + start))
    return row, None if res is None else res.tokens


def served_model(args, device, quant: str, fold: bool = True, rope: bool = True):
    """A fresh model, quantized with `quant` (as a pipeline does at load), then its head
    narrowed to the format's span unless `--no-narrow-head` (as the engine's runner does).
    `fold` False keeps each block's norms apart from the projections after them, where a
    single token's float step would run them in one kernel (`lab.engine.norm_matvec`);
    `rope` False rotates q and k apart from the K/V write (`lab.engine.rope_write`)."""
    lm, cfg = load_model(args, device)
    lm.fold_norms(fold)
    lm.fuse_rope(rope)
    applied = quant if quant == "none" else apply_precision(lm, args.dtype, quant, device).applied
    span = head_span(cfg) if args.narrow_head else None
    if span:
        lm.narrow_head(*span)
    head = f", head narrowed to {span[1] - span[0]:,} tokens" if span else ""
    why = (lm.read_real_lengths(lm.embed.weight.dtype) if device.type == "cuda"
           else "no GPU: the engine reads real lengths on GPUs only")
    attention = (", attention over real lengths" if why is None
                 else f", attention over the key bucket ({why})")
    if why is None:
        attention += (", q/k rotated in the cache write" if rope
                      else ", rope apart from the cache write")
    precision = args.dtype if applied == "none" else applied
    if applied != quant:
        precision += f" (asked {quant})"
    norms = ""
    if norm_matvec.reads(lm.layers[0].attn.qkv.weight, lm.embed.weight.dtype):
        folded = fold and runs_kernels(lm.embed.weight)
        sums = " and residual sums" if is_plain(lm.layers[0].attn.o.weight) else ""
        norms = (f", one-token norms{sums} in the lab's one-row kernel" if folded
                 else ", norms apart from their projections")
    return lm, f"lab as served, {precision}, compiled block + CUDA graph{head}{attention}{norms}"


def served_rows(args, device, bandwidth: float | None) -> list[dict]:
    """Each served precision at every batch size; with `--apart`, beside the float rows the
    same model with its norms apart at batch 1 (the one batch size the fold acts on), and
    with its rope apart from the K/V write at every batch size."""
    rows = []
    models = [("none", True, True, args.batches),
              *((q, True, True, args.batches) for q in args.quants)]
    if args.apart:
        models.insert(1, ("none", True, False, args.batches))
        if 1 in args.batches:
            models.insert(1, ("none", False, True, [1]))
    for quant, fold, rope, batches in models:
        lm, name = served_model(args, device, quant, fold, rope)
        for batch in batches:
            row, _ = served_row(lm, prompt_for(batch, lm.cfg, args, device), args, name)
            rows.append(row)
            add_bandwidth(rows, lm, args, bandwidth)
        del lm
        _free()
    return rows


def prompt_for(batch: int, cfg, args, device) -> torch.Tensor:
    gen = torch.Generator().manual_seed(batch)
    return torch.randint(0, cfg.vocab_size, (batch, args.prompt_len), generator=gen).to(device)


def relate(rows: list[dict]) -> None:
    """'x strongest peer' on every timed row: the faster transformers row at its batch size
    over the row's step."""
    for batch in {r["batch"] for r in rows}:
        best = min((r["ms_per_step"] for r in rows if r["batch"] == batch and r["row"] in PEERS
                    and "ms_per_step" in r), default=None)
        for r in rows:
            if r["batch"] == batch and "ms_per_step" in r and best:
                r["x_strongest_peer"] = round(best / r["ms_per_step"], 2)


def rows_for(lm, hf, prompt, args) -> list[dict]:
    rows, tokens = [], {}
    jobs = [(name, lambda c=c, w=name != COLD: peer_row(hf, prompt, args.steps, c,
                                                        args.repeats, w))
            for name, c in PEERS.items()]
    jobs += [(name, lambda m=m: lab_row(lm, prompt, args.steps, m, args.max_len, args.repeats))
             for name, m in LAB.items()]
    for name, job in jobs:
        row, res = timed(prompt.shape[0], name, job)
        rows.append(row)
        if res is not None:
            tokens[name] = res.tokens
    reference = next(iter(tokens.values()), None)
    for r in rows:
        if r["row"] in tokens:
            r["same_tokens_as_first_row"] = bool(torch.equal(tokens[r["row"]], reference))
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="orpheus-3b")
    ap.add_argument("--weights", type=Path, help="the lab's voice LM directory instead of --shape")
    ap.add_argument("--dtype", default="bf16", choices=("fp32", "fp16", "bf16"))
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 64])
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=128)
    ap.add_argument("--max-len", type=int, default=512, help="the lab's static cache positions")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--stem", default="peers")
    ap.add_argument("--quants", nargs="*", default=["int8-weight", "int4-weight"],
                    help="quant modes of the served rows, beside their bf16 row")
    ap.add_argument("--narrow-head", action=argparse.BooleanOptionalAction, default=True,
                    help="narrow the served rows' head to the format's tokens")
    ap.add_argument("--apart", action=argparse.BooleanOptionalAction, default=True,
                    help="add the float model with its norms apart from its projections at "
                         "batch 1, and with its rope apart from the K/V write at every batch "
                         "size, beside the served rows that run each in one kernel")
    ap.add_argument("--device", default="cuda", help="cpu only for a smoke run")
    ap.add_argument("--render", action="store_true",
                    help="rewrite <stem>.md from <stem>.json (notes added to it included)")
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.render:
        report = json.loads((args.out / f"{args.stem}.json").read_text())
        (args.out / f"{args.stem}.md").write_text(render(report))
        return
    device = torch.device(args.device)
    lm, cfg = load_model(args, device)
    hf = to_hf_model(lm)
    bandwidth = copy_bandwidth(device)
    floor_ms = streamed_bytes(lm) / bandwidth * 1e3 if bandwidth else None
    rows = []
    for batch in tqdm(args.batches, desc="batches", file=sys.stdout):
        rows += rows_for(lm, hf, prompt_for(batch, cfg, args, device), args)
        add_bandwidth(rows, lm, args, bandwidth)
        print(markdown_table(rows), flush=True)
    del lm, hf
    _free()
    rows += served_rows(args, device, bandwidth)
    relate(rows)
    print(markdown_table(rows), flush=True)
    weights = "dummy (random): speed only" if args.weights is None else "the lab's trained voice"
    shape = args.shape if args.weights is None else "ar-voice"
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    report = {"meta": run_meta(device=name, transformers=transformers.__version__,
                               torchao=version("torchao")),
              "shape": shape, "dtype": args.dtype, "weights": weights, "floor_ms_batch1": floor_ms,
              "copy_bandwidth_gb_s": bandwidth and bandwidth / 1e9,
              "args": recorded_args(args, "render"),
              "rows": rows}
    save_report(report, args.out, args.stem, render)


def render(report: dict) -> str:
    """The markdown of a report: its setting, the rows and any notes added to its JSON."""
    meta, args = report["meta"], report["args"]
    head = ["batch", "row", "ms_per_step", "min", "max", "tokens_per_s", "x_strongest_peer",
            "mb_read_per_step", "gb_per_s", "pct_of_copy_bw", "same_tokens_as_first_row",
            "fallbacks", "error"]
    rows = report["rows"]
    floor_ms, bandwidth = report["floor_ms_batch1"], report["copy_bandwidth_gb_s"]
    floor = (f"{floor_ms:.3g} ms at {bandwidth:.0f} GB/s measured copy bandwidth"
             if floor_ms else "not measured")
    versions = (f"torch {meta['torch']}, transformers {meta.get('transformers')}, torchao "
                f"{meta.get('torchao')}, {meta['date'][:10]}")
    notes = report.get("notes", [])
    return (f"# Decode step against the strongest peer ({report['shape']}, {report['dtype']})\n\n"
            f"Device: {meta['device']} ({versions}). Weights: {report['weights']}. Prompt "
            f"{args['prompt_len']} tokens, {args['steps']} greedy steps timed, {args['repeats']} "
            f"repeats after a full-length warm-up per row, except the cold row: its first run, "
            f"once (median, min, max of the runs' median step); the lab's static cache holds "
            f"{args['max_len']} positions. Weight-streaming floor at batch 1: {floor}. "
            f"Command: `python {meta['command']}`.\n\n{READING}\n\n"
            + markdown_table(rows, [h for h in head if any(h in r for r in rows)])
            + ("\n\n## Notes\n\n" + "\n".join(f"- {n}" for n in notes) + "\n" if notes else ""))


if __name__ == "__main__":
    main()
