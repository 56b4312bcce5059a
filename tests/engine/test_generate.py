"""The generation loop, transformers' generate on the same weights, and the ladder smoke run."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch

from lab.engine import generate, hf_generate, load_lm, to_hf_model

LADDER = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_ladder.py"


@pytest.mark.parametrize("cache", ["dynamic", "static"])
@pytest.mark.parametrize("shape", ["tiny-llama", "tiny-qwen2"])
def test_transformers_generate_on_our_weights_matches_ours(shape, cache):
    lm, cfg = load_lm("dummy", shape=shape, seed=9)
    hf = to_hf_model(lm)
    assert hf.model.embed_tokens.weight.data_ptr() == lm.embed.weight.data_ptr()  # shared
    prompt = torch.randint(0, cfg.vocab_size, (2, 7), generator=torch.Generator().manual_seed(1))
    theirs = hf_generate(hf, prompt, 10, cache)
    ours = generate(lm, prompt, 10, "static")
    assert torch.equal(theirs.tokens, ours.tokens)
    assert theirs.label == f"transformers ({cache} cache)" and len(theirs.step_ms) == 9
    assert all(t > 0 for t in theirs.step_ms) and theirs.prefill_ms > 0


def test_result_reports_per_step_timing():
    lm, cfg = load_lm("dummy", shape="tiny-llama")
    res = generate(lm, torch.zeros(3, 4, dtype=torch.long), 6, "dynamic")
    assert res.new_tokens.shape == (3, 6) and len(res.step_ms) == 5
    assert math.isclose(res.tokens_per_second, 3 * 1e3 / res.ms_per_step)
    summary = res.summary()
    assert summary["batch"] == 3 and summary["new_tokens"] == 6


def test_sampling_function_is_used():
    lm, cfg = load_lm("dummy", shape="tiny-qwen2")

    def always_seven(logits: torch.Tensor) -> torch.Tensor:
        assert logits.shape == (2, cfg.vocab_size)
        return torch.full((logits.shape[0],), 7, dtype=torch.long)

    res = generate(lm, torch.ones(2, 3, dtype=torch.long), 5, "static", always_seven)
    assert torch.equal(res.new_tokens, torch.full((2, 5), 7))


def test_bad_requests_are_rejected():
    lm, cfg = load_lm("dummy", shape="tiny-llama")
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        generate(lm, torch.zeros(5, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(lm, torch.zeros(1, 5, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="cache mode"):
        generate(lm, torch.zeros(1, 5, dtype=torch.long), 2, "paged")
    with pytest.raises(ValueError, match="max_seq_len"):
        generate(lm, torch.zeros(1, 5, dtype=torch.long), cfg.max_seq_len)
    with pytest.raises(ValueError, match="do not fit"):
        generate(lm, torch.zeros(1, 5, dtype=torch.long), 8, "static", max_len=10)


def test_ladder_smoke_run_writes_its_tables(tmp_path):
    spec = importlib.util.spec_from_file_location("engine_ladder", LADDER)
    ladder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ladder)
    report = ladder.main(["--smoke", "--out", str(tmp_path)])
    rungs = {(r["batch"], r["rung"]) for r in report["ladder"]}
    assert rungs == {(b, rung) for b in (1, 2) for rung in ladder.RUNGS}
    assert all(r["tokens_match_static_eager"] for r in report["ladder"])  # fp32, tiny
    assert [r["context"] for r in report["nocache"]["rows"]] == [8, 16, 32]
    assert math.isfinite(report["nocache"]["exponent_all"])  # CPU timings here are too noisy
    applied = {r["quant"]: r["applied"] for r in report["precision"]}
    assert applied == {"none": "none", "int8-weight": "int8-weight",
                       "int4-weight": "int8-weight", "fp8": "int8-dynamic"}
    saved = json.loads((tmp_path / "engine_ladder_smoke.json").read_text())
    assert saved["shape"] == "tiny-llama"
    markdown = (tmp_path / "engine_ladder_smoke.md").read_text()
    assert markdown.startswith("Command: `python benchmarks/engine_ladder.py --smoke")
    assert "## Decode ladder" in markdown and "Fitted exponent" in markdown


def test_an_unknown_transformers_cache_is_refused():
    lm, _ = load_lm("dummy", shape="tiny-llama")
    with pytest.raises(ValueError, match="dynamic"):
        hf_generate(to_hf_model(lm), torch.zeros(1, 3, dtype=torch.long), 2, "paged")
