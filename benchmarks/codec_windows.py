"""SNAC's decode of a round's windows, as each build of the codec runs it.

    python benchmarks/codec_windows.py                       # H100: fp16, CUDA graphs
    python benchmarks/codec_windows.py --device cpu --batches 2 --frames 5 --repeats 3

Each round of an Orpheus server decodes one window per stream with audio due: a batch of a
few to a hundred windows of 5 to 12 frames (a chunk of 1 to 8 frames and its context).
Under load that call shares the GPU with the LM's step, so its time is time the step loses.
Rows, per batch and window length:

- `eager`: the codec as a preset without `compile` runs it (one Triton kernel per snake);
- `compiled`: the codec as a preset with `compile` builds it (torch.compile over SNAC, weight
  norm folded, snakes fused by the compiler).

On a GPU each call is captured in a CUDA graph and timed between CUDA events over its
replays (median of `--repeats`); on a CPU by wall clock, comparable within the run only.
`err` is the largest difference from the eager codec in fp32 on the same device (the audio
peaks near 1). Dummy (seeded random) SNAC weights: speed, and each build's own numerical
difference. Writes <stem>.json and <stem>.md.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from linear_kernels import captured, median_ms
from tqdm import tqdm

from lab.bench.report import markdown_table, recorded_args, run_meta, save_report
from lab.models.snac_codec import FRAME_CODES, SnacCodec, build_snac

VARIANTS = ("eager", "compiled")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
COLUMNS = ["variant", "batch", "frames", "ms", "x_eager", "us_per_frame", "err"]
Decode = Callable[[torch.Tensor], torch.Tensor]


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[8, 32, 128])
    ap.add_argument("--frames", type=int, nargs="+", default=[5, 8, 12])
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--dtype", default="fp16", choices=sorted(DTYPES))
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--stem", default="codec_windows")
    return ap.parse_args(argv)


def decoder(variant: str, dtype: torch.dtype, device: torch.device) -> Decode:
    """frames [B, F, 7] on the device -> audio [B, F * 2048], as `variant` builds the codec."""
    codec = SnacCodec(build_snac(), device=device, dtype=dtype, noise=False,
                      compile_mode="none" if variant == "eager" else "default")
    return codec.decode


def measure(decode: Decode, frames: torch.Tensor, reference: torch.Tensor, device,
            repeats: int) -> dict:
    ms, audio = median_ms(captured(lambda: decode(frames), device), device, repeats)
    batch, length = frames.shape[:2]
    return {"batch": batch, "frames": length, "ms": round(ms, 4),
            "us_per_frame": round(1000 * ms / (batch * length), 3),
            "err": float((audio.float() - reference).abs().max())}


def run(args) -> dict:
    device = torch.device(args.device)
    builds = {v: decoder(v, DTYPES[args.dtype], device) for v in args.variants}
    reference = decoder("eager", torch.float32, device)
    gen = torch.Generator().manual_seed(0)
    rows = []
    shapes = [(b, f) for b in args.batches for f in args.frames]
    for batch, length in tqdm(shapes, desc="shapes", file=sys.stdout):
        frames = torch.randint(0, 4096, (batch, length, FRAME_CODES), generator=gen).to(device)
        want = reference(frames)
        for variant, decode in builds.items():
            rows.append({"variant": variant,
                         **measure(decode, frames, want, device, args.repeats)})
        eager = next((r["ms"] for r in rows[-len(builds):] if r["variant"] == "eager"), None)
        for row in rows[-len(builds):]:
            row["x_eager"] = eager and round(eager / row["ms"], 3)
        print(markdown_table(rows[-len(builds):], COLUMNS), flush=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"meta": run_meta(device=name), "dtype": args.dtype,
            "weights": "dummy (seeded random SNAC 24 kHz): speed and numerical difference",
            "args": recorded_args(args), "rows": rows}


def render(report: dict) -> str:
    """The markdown of a report, with the hand-written `notes` of its JSON, if any."""
    notes = report.get("notes", [])
    return (f"# SNAC's decode of a round's windows ({report['dtype']})\n\n"
            f"Device: {report['meta']['device']}. Weights: {report['weights']}. "
            f"Command: `python {report['meta']['command']}`.\n\n"
            "'x_eager': the eager row's ms at the same batch and window over this row's. "
            "'err': the largest difference from the eager codec in fp32.\n\n"
            + markdown_table(report["rows"], COLUMNS)
            + "".join(["\n\n## Notes\n"] + [f"\n- {n}" for n in notes] if notes else []))


def main(argv=None) -> None:
    args = parse_args(argv)
    print(save_report(run(args), args.out, args.stem, render))


if __name__ == "__main__":
    main()
