"""benchmarks/peers.py: the rows of the lab as its engine serves Orpheus (head narrowed to the
format's tokens) choose what the whole head would choose within that span, and count only the
head rows they read."""

from __future__ import annotations

import pytest
import torch
from conftest import benchmark_module

from lab.engine import generate

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def peers():
    with benchmark_module("peers") as module:
        yield module


def _args(peers, *extra: str):
    return peers.parse_args(["--device", "cpu", "--shape", "tiny-llama", "--dtype", "fp32",
                             "--batches", "2", "--steps", "12", "--repeats", "1",
                             "--max-len", "64", *extra])


def test_a_narrowed_head_chooses_what_the_whole_head_chooses_in_its_span(peers):
    args = _args(peers)
    full, cfg = peers.load_model(args, CPU)
    start, stop = peers.head_span(cfg)
    prompt = peers.prompt_for(2, cfg, args, CPU)
    within = generate(full, prompt, args.steps, "static",
                      lambda logits: logits[:, start:stop].argmax(-1) + start).tokens
    served, name = peers.served_model(args, CPU, "none")
    row, tokens = peers.served_row(served, prompt, args, name)
    assert "error" not in row and f"narrowed to {stop - start:,} tokens" in row["row"]
    assert "attention over the key bucket (no GPU" in row["row"]
    assert torch.equal(tokens, within)
    assert torch.equal(tokens[:, :args.prompt_len], prompt)
    assert ((tokens[:, args.prompt_len:] >= start) & (tokens[:, args.prompt_len:] < stop)).all()


def test_a_narrowed_head_counts_only_the_rows_it_reads(peers):
    args = _args(peers)
    full, cfg = peers.load_model(args, CPU)
    served, _ = peers.served_model(args, CPU, "none")
    whole, kept = cfg.vocab_size, served.head_range[1] - served.head_range[0]
    head_bytes = full.lm_head.weight.numel() * full.lm_head.weight.element_size()
    assert peers.streamed_bytes(full) - peers.streamed_bytes(served) == pytest.approx(
        head_bytes * (whole - kept) / whole, abs=1)
    kept_whole, name = peers.served_model(_args(peers, "--no-narrow-head"), CPU, "none")
    assert kept_whole.head_range is None and "narrowed" not in name
    assert peers.streamed_bytes(kept_whole) == peers.streamed_bytes(full)


def test_the_apart_row_keeps_every_norm_apart_and_says_so(peers):
    args = _args(peers)
    apart, name = peers.served_model(args, CPU, "none", fold=False)
    assert not any(layer.attn_norm.folds or layer.mlp_norm.folds for layer in apart.layers)
    assert name.endswith(", norms apart from their projections")
    served, name = peers.served_model(args, CPU, "none")
    assert all(layer.attn_norm.folds and layer.mlp_norm.folds for layer in served.layers)
    assert name.endswith(", norms apart from their projections"), "no kernel runs on a CPU"
    assert args.apart and not _args(peers, "--no-apart").apart


def test_the_rope_apart_row_rotates_apart_from_the_cache_write(peers):
    """On a CPU the engine reads the key bucket, where neither path acts: the row says so by
    saying nothing of rope."""
    apart, name = peers.served_model(_args(peers), CPU, "none", rope=False)
    assert not any(layer.attn.fuses_rope for layer in apart.layers)
    served, served_name = peers.served_model(_args(peers), CPU, "none")
    assert all(layer.attn.fuses_rope for layer in served.layers)
    assert "rope" not in name and "rope" not in served_name


@pytest.mark.parametrize(("quant", "says"), [("int8-weight", True), ("int8-dynamic", False)])
def test_a_quantized_row_names_its_norms_where_the_kernel_reads_its_weights(peers, quant, says):
    """int8 weight-only folds a single token's norms as the float model does; int8 with
    quantized activations has kernels of its own, and its row says nothing of norms."""
    _, name = peers.served_model(_args(peers), CPU, quant)
    assert name.endswith(", norms apart from their projections") == says, name
    assert ("norms" in name) == says, name


def test_render_rewrites_the_markdown_from_the_json_with_its_notes(peers, tmp_path):
    from lab.bench.report import run_meta, write_json

    args = {k: str(v) for k, v in vars(_args(peers)).items()}
    row = {"batch": 1, "row": "lab, static cache + CUDA graph", "ms_per_step": 2.5}
    report = {"meta": run_meta(device="H100", transformers="5", torchao="0.1"), "shape": "s",
              "dtype": "bf16", "weights": "dummy", "floor_ms_batch1": 2.2,
              "copy_bandwidth_gb_s": 2990.0, "args": args, "rows": [row],
              "notes": ["Measured twice."]}
    write_json(report, tmp_path, "p")
    peers.main(["--render", "--out", str(tmp_path), "--stem", "p"])
    text = (tmp_path / "p.md").read_text()
    assert "| 1 | lab, static cache + CUDA graph | 2.50 |" in text
    assert "2.2 ms at 2990 GB/s" in text and text.endswith("## Notes\n\n- Measured twice.\n")
