"""The LM's linear layers through each weight kernel, one row count at a time, unquantized
beside quantized.

    python benchmarks/linear_kernels.py                          # H100: 4 Orpheus-3B blocks
    python benchmarks/linear_kernels.py --tiles int4-weight --rows 1 16 64   # its tiles
    python benchmarks/linear_kernels.py --device cpu --shape tiny-llama --layers 1 --rows 1 4

A decode step at batch B multiplies B rows by every weight of the model, so what a kernel does
at each row count decides both the step at batch 1 and whether a batch collapses. Here
`--layers` blocks' worth of one shape's linears (qkv, o, gate_up and down; no attention, so
only the weight kernels are timed) are built once in float, then for each kernel quantized as
the lab quantizes a model (`lab.quant.quantize_model`). int8-weight takes torchao's path at
one row and the lab's Triton kernel from two rows (`lab.quant.int8_rows`); int4-weight, group
128, takes torchao's tinygemm below `int4_rows.MIN_ROWS` rows and the lab's kernel on a plain
copy of the same values from there (`lab.quant.int4_rows`). The forward over all of them is
compiled (Inductor's default mode; a CPU smoke stays eager), captured as one CUDA graph and
timed over its replays (median of `--repeats`). Rows state ms, the weight bytes read, GB/s and
its share of the measured copy bandwidth, and the error against the float32 product of the
same float weights.

`--tiles KERNEL...` adds, for each named kernel at each row count it takes, every tile
configuration of the lab's kernel from a small grid, the same way (int4's at one row too).
Dummy weights: speed, and the kernels' own error. Writes <stem>.json and <stem>.md.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import itertools
import statistics
import sys
from functools import partial
from pathlib import Path

import torch
from engine_ladder import _free, copy_bandwidth
from torch import nn
from tqdm import tqdm

from lab.bench.report import markdown_table, recorded_args, run_meta, save_report
from lab.engine.llm import LM_SHAPES
from lab.metrics.repeats import timed_repeats
from lab.quant import int4_rows, int8_rows, tensor_bytes
from lab.quant.precision import DTYPES, quantize_model

KERNELS = ("none", "int8-weight", "int4-weight")
# Each lab kernel's module and the grid its `--tiles` sweep tries (everything but the row
# tile, which follows the rows); int4's sweep also forces one row through the kernel, where
# the code sends it to tinygemm, to see which is faster there. The int4 kernel's output tile
# is the tall side of its w x^T product, so its sweep runs from 32 to 128 outputs.
TILE_SWEEPS = {
    "int8-weight": (int8_rows, {"block_n": (16, 32, 64), "block_k": (128, 256),
                                "warps": (4, 8), "stages": (3, 4)}),
    "int4-weight": (int4_rows, {"block_n": (32, 64, 128), "warps": (4, 8),
                                "stages": (2, 3, 4)}),
}
COLUMNS = ["kernel", "applied", "tiles", "rows", "ms", "x_float", "mb_read", "gb_per_s",
           "pct_of_copy_bw", "rel_err", "error"]


def linears(shape: str, layers: int) -> nn.ModuleList:
    """The linears of `layers` blocks of `shape`, in the LM's own layout (fused qkv, fused
    gate and up), float32 on the CPU, seeded."""
    cfg = LM_SHAPES[shape]
    qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    sides = [(cfg.dim, qkv), (cfg.n_heads * cfg.head_dim, cfg.dim),
             (cfg.dim, 2 * cfg.intermediate_size), (cfg.intermediate_size, cfg.dim)]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return nn.ModuleList(nn.Linear(i, o, bias=False) for _ in range(layers) for i, o in sides)


def inputs(layer_set: nn.ModuleList, rows: int, device, dtype) -> dict[int, torch.Tensor]:
    """One input per input width, seeded by the row count."""
    gen = torch.Generator().manual_seed(rows)
    widths = sorted({m.in_features for m in layer_set})
    return {w: torch.randn(rows, w, generator=gen).to(device, dtype) for w in widths}


def forward(layer_set: nn.ModuleList, xs: dict[int, torch.Tensor]) -> list[torch.Tensor]:
    return [m(xs[m.in_features]) for m in layer_set]


def captured(fn, device):
    """`fn` as a replay of one CUDA graph (warmed on a side stream first), or `fn` itself off
    CUDA."""
    if device.type != "cuda":
        return fn
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()

    def replay():
        graph.replay()
        return out

    return replay


def median_ms(fn, device, repeats: int) -> tuple[float, list[torch.Tensor]]:
    """Median ms of `repeats` calls after one untimed, and the last call's outputs: between
    CUDA events on a GPU (a replay is too short for a host clock), else the lab's wall-clock
    repeats."""
    if device.type != "cuda":
        spread, outs = timed_repeats(fn, repeats)
        return spread.median, outs[-1]
    out = fn()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times), out


@contextlib.contextmanager
def tiles_fixed(kernel: str, config: tuple[int, ...] | None):
    """`kernel`'s lab kernel with one tile configuration (its `TILE_SWEEPS` grid's order), its
    row tile still following the rows, and taking every row count; None leaves the code's
    own choice."""
    if config is None:
        yield
        return
    module = TILE_SWEEPS[kernel][0]
    chosen, least = module.tiles, module.MIN_ROWS
    module.tiles = lambda rows, n: (chosen(rows, n)[0], *config)
    module.MIN_ROWS = 1
    try:
        yield
    finally:
        module.tiles, module.MIN_ROWS = chosen, least


def quantized(base: nn.ModuleList, kernel: str, args, device) -> tuple[nn.ModuleList, str]:
    layer_set = copy.deepcopy(base).to(device, DTYPES[args.dtype])
    done = quantize_model(layer_set, kernel, DTYPES[args.dtype], device)
    return layer_set, done.applied


def measure(layer_set, applied: str, rows: int, reference, args, device, bandwidth) -> dict:
    """One row: compiled (off the CPU smoke), captured, timed; bytes, bandwidth, and error
    against `reference`, the float32 layers on the same device."""
    xs = inputs(layer_set, rows, device, DTYPES[args.dtype])
    fn = lambda: forward(layer_set, xs)  # noqa: E731
    if device.type == "cuda":
        fn = torch.compile(fn, fullgraph=True)
    with torch.no_grad():
        ms, out = median_ms(captured(fn, device), device, args.repeats)
    read = sum(tensor_bytes(m.weight) for m in layer_set)
    with torch.no_grad():
        want = forward(reference, {w: x.float() for w, x in xs.items()})
    err = max(((o.float() - r).norm() / r.norm()).item() for o, r in zip(out, want, strict=True))
    row = {"applied": applied, "rows": rows, "ms": round(ms, 4), "mb_read": round(read / 1e6, 1),
           "gb_per_s": round(read / ms / 1e6, 1), "rel_err": round(err, 4)}
    if bandwidth:
        row["pct_of_copy_bw"] = round(100 * read / ms * 1e3 / bandwidth, 1)
    return row


def guarded(job, **row) -> dict:
    """The job's row, or the error that stopped it, so that the other rows go on."""
    try:
        return {**row, **job()}
    except Exception as err:
        return {**row, "error": f"{type(err).__name__}: {str(err)[:200]}"}
    finally:
        torch._dynamo.reset()
        _free()


def jobs(args) -> list[tuple[str, tuple[int, ...] | None, int]]:
    """(kernel, fixed tiles or None, rows) for every row to time."""
    todo = [(k, None, r) for k in args.kernels for r in args.rows]
    for kernel in args.tiles:
        module, grid = TILE_SWEEPS[kernel]
        least = 1 if kernel == "int4-weight" else module.MIN_ROWS
        todo += [(kernel, t, r) for r in args.rows if r >= least
                 for t in itertools.product(*grid.values())]
    return todo


def relate(rows: list[dict]) -> None:
    """'x float': the unquantized row's ms (in --dtype) at the same row count over this row's."""
    plain = {r["rows"]: r["ms"] for r in rows if r["kernel"] == "none" and "ms" in r}
    for r in rows:
        if "ms" in r and r["rows"] in plain:
            r["x_float"] = round(plain[r["rows"]] / r["ms"], 2)


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", default="orpheus-3b", choices=sorted(LM_SHAPES))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 16, 64, 256])
    ap.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=KERNELS)
    ap.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    ap.add_argument("--tiles", nargs="*", default=[], choices=sorted(TILE_SWEEPS),
                    help="sweep these lab kernels' tiles too")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--device", default="cuda", help="cpu only for a smoke run")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--stem", default="linear_kernels")
    return ap.parse_args(argv)


def run(args) -> dict:
    device = torch.device(args.device)
    base = linears(args.shape, args.layers)
    reference = copy.deepcopy(base).to(device)
    bandwidth = copy_bandwidth(device)
    built: dict[str, tuple[nn.ModuleList, str]] = {}
    rows = []
    for kernel, tiles, n in tqdm(jobs(args), desc="rows", file=sys.stdout):
        if kernel not in built:
            built[kernel] = quantized(base, kernel, args, device)
        layer_set, applied = built[kernel]
        with tiles_fixed(kernel, tiles):
            job = partial(measure, layer_set, applied, n, reference, args, device, bandwidth)
            rows.append(guarded(job, kernel=kernel,
                                tiles="/".join(map(str, tiles or ())) or "code's"))
        print(markdown_table(rows[-1:], [c for c in COLUMNS if c in rows[-1]]), flush=True)
    relate(rows)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    return {"meta": run_meta(device=name), "shape": args.shape, "layers": args.layers,
            "dtype": args.dtype, "weights": "dummy (random): speed and the kernels' own error",
            "copy_bandwidth_gb_s": bandwidth and bandwidth / 1e9,
            "args": recorded_args(args), "rows": rows}


def render(report: dict) -> str:
    """The markdown of a report, with the hand-written `notes` of its JSON, if any."""
    rows, notes = report["rows"], report.get("notes", [])
    return (f"# Linear layers through each weight kernel ({report['shape']} x "
            f"{report['layers']} blocks, {report['dtype']})\n\n"
            f"Device: {report['meta']['device']}. Weights: {report['weights']}. "
            f"Command: `python {report['meta']['command']}`.\n\n"
            "'tiles': the lab kernel's tile grid (int8 rows kernel, two rows or more: "
            "block_n/block_k/warps/stages; int4 rows kernel, every row count: "
            "block_n/warps/stages), or the code's own choice. 'x_float': the unquantized "
            "row's ms at the same row count over this row's. 'rel_err': against the float32 "
            "product of the same float weights.\n\n"
            + markdown_table(rows, [c for c in COLUMNS if any(c in r for r in rows)])
            + "".join(["\n\n## Notes\n"] + [f"\n- {n}" for n in notes] if notes else []))


def main(argv=None) -> None:
    args = parse_args(argv)
    report = run(args)
    print(save_report(report, args.out, args.stem, render))


if __name__ == "__main__":
    main()
