"""The lab's decode step against the strongest peer, warmed, in one process.

    python benchmarks/peers.py                          # orpheus-3b shape, dummy bf16 weights
    python benchmarks/peers.py --weights lab/data/voice --stem peers_voice

At each batch size, every row is warmed by one full-length generation (same prompt, same number
of steps) before its timed repeats, so no row pays for one-off work inside its timing:
- transformers `generate` with its default dynamic cache; the warm-up builds cuDNN's attention
  plan for every key length the timed runs will meet;
- transformers `generate` with `cache_implementation="static"`, which compiles the model's
  forward itself: the strongest way to run transformers, and the baseline here;
- the lab: static cache + CUDA graph, and static cache + compiled block + CUDA graph.

'x strongest peer' divides the faster transformers row by each row. The weight-streaming
floor is the bytes a step must read over the measured copy bandwidth. Dummy weights measure
speed only. Writes <stem>.json and <stem>.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from engine_ladder import _free, copy_bandwidth, graphed, load_model, repeated, streamed_bytes
from tqdm import tqdm

from lab.bench.report import markdown_table, run_meta
from lab.engine import generate, hf_generate, to_hf_model

PEERS = {"transformers generate, dynamic cache (warmed)": "dynamic",
         "transformers generate, static cache + its compile (warmed)": "static"}
LAB = {"lab, static cache + CUDA graph": "cuda-graph",
       "lab, static cache + compiled block + CUDA graph": "default"}


READING = ("How to read it: 'same_tokens_as_first_row' compares greedy tokens with the "
           "dynamic-cache row; in bf16, different kernels flip near-ties between logits, so only "
           "speed is compared here (the same-token tests run in fp32). transformers with its "
           "static cache compiles on the first call: its warm-up run paid for that, the timed "
           "runs did not.")


def peer_row(hf, prompt, steps: int, cache: str, repeats: int):
    hf_generate(hf, prompt, steps, cache)
    return repeated(lambda: hf_generate(hf, prompt, steps, cache), repeats)


def lab_row(lm, prompt, steps: int, mode: str, max_len: int, repeats: int):
    dec = graphed(lm, prompt.shape[0], max_len, mode)
    generate(lm, prompt, steps, "static", decoder=dec)
    return repeated(lambda: generate(lm, prompt, steps, "static", decoder=dec), repeats)


def rows_for(lm, hf, prompt, args) -> list[dict]:
    rows, tokens = [], {}
    jobs = [(name, lambda c=c: peer_row(hf, prompt, args.steps, c, args.repeats))
            for name, c in PEERS.items()]
    jobs += [(name, lambda m=m: lab_row(lm, prompt, args.steps, m, args.max_len, args.repeats))
             for name, m in LAB.items()]
    for name, job in jobs:
        try:
            res, spread = job()
        except Exception as err:  # one failed row must not lose the others
            rows.append({"batch": prompt.shape[0], "row": name,
                         "error": f"{type(err).__name__}: {str(err)[:200]}"})
            continue
        finally:
            _free()
        tokens[name] = res.tokens
        rows.append({"batch": prompt.shape[0], "row": name,
                     "ms_per_step": round(spread.median, 3), "min": round(spread.low, 3),
                     "max": round(spread.high, 3),
                     "tokens_per_s": round(prompt.shape[0] * 1e3 / spread.median, 1)})
    best = min((r["ms_per_step"] for r in rows if r["row"] in PEERS and "ms_per_step" in r),
               default=None)
    reference = next(iter(tokens.values()), None)
    for r in rows:
        if "ms_per_step" in r and best:
            r["x_strongest_peer"] = round(best / r["ms_per_step"], 2)
        if r["row"] in tokens:
            r["same_tokens_as_first_row"] = bool(torch.equal(tokens[r["row"]], reference))
    return rows


def main(argv=None) -> None:
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
    args = ap.parse_args(argv)
    device = torch.device("cuda")
    lm, cfg = load_model(args, device)
    hf = to_hf_model(lm)
    bandwidth = copy_bandwidth(device)
    floor_ms = streamed_bytes(lm) / bandwidth * 1e3 if bandwidth else None
    rows = []
    for batch in tqdm(args.batches, desc="batches", file=sys.stdout):
        gen = torch.Generator().manual_seed(batch)
        prompt = torch.randint(0, cfg.vocab_size, (batch, args.prompt_len), generator=gen)
        rows += rows_for(lm, hf, prompt.to(device), args)
        print(markdown_table(rows), flush=True)
    weights = "dummy (random): speed only" if args.weights is None else "the lab's trained voice"
    shape = args.shape if args.weights is None else "ar-voice"
    report = {"meta": run_meta(device=torch.cuda.get_device_name(device)), "shape": shape,
              "dtype": args.dtype, "weights": weights, "floor_ms_batch1": floor_ms,
              "args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.stem}.json").write_text(json.dumps(report, indent=2))
    head = ["batch", "row", "ms_per_step", "min", "max", "tokens_per_s", "x_strongest_peer",
            "same_tokens_as_first_row", "error"]
    floor = f"{floor_ms:.2f} ms" if floor_ms else "not measured"
    (args.out / f"{args.stem}.md").write_text(
        f"# Decode step against the strongest peer ({shape}, {args.dtype})\n\n"
        f"Device: {report['meta']['device']}. Weights: {weights}. Prompt {args.prompt_len} "
        f"tokens, {args.steps} greedy steps timed, {args.repeats} repeats after a full-length "
        f"warm-up per row (median, min, max of the runs' median step); the lab's static cache "
        f"holds {args.max_len} positions. Weight-streaming floor at batch 1: {floor}. "
        f"Command: `{report['meta']['command']}`.\n\n{READING}\n\n"
        + markdown_table(rows, [h for h in head if any(h in r for r in rows)]))


if __name__ == "__main__":
    main()
