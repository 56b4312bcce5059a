"""The voice LM's training loop on CPU with a tiny model: it learns, resumes where it stopped,
travels between machines in small files, and leaves weights and a plot that others can read."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import torch

from lab.engine.llm import LM, LMConfig
from lab.models.voice_format import VoiceLayout, training_sequence
from lab.training.checkpoint import (
    export_portable,
    import_portable,
    load_state,
    model_from_state,
)
from lab.training.loss_plot import plot_losses
from lab.training.trainer import Batches, TrainConfig, init_weights, lr_at, train

LAYOUT = VoiceLayout(levels=2, codebook_size=16)
CFG = LMConfig(vocab_size=LAYOUT.vocab_size, dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
               intermediate_size=128, max_seq_len=256, tie_embeddings=True)


@pytest.fixture(autouse=True)
def _single_thread(one_thread):
    """One thread: faster for a tiny model, and runs that should agree do so exactly."""


def corpus(n: int = 8, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    """Utterances in the voice's format with random phonemes, alignments and codes."""
    rng = np.random.default_rng(seed)
    seqs, prompts = [], []
    for _ in range(n):
        phonemes = rng.integers(0, 40, int(rng.integers(3, 6))).tolist()
        groups = int(rng.integers(5, 9))
        starts = sorted(rng.integers(0, groups, len(phonemes)).tolist())
        codes = rng.integers(0, LAYOUT.codebook_size, (groups, LAYOUT.levels))
        seq, prompt = training_sequence(LAYOUT, phonemes, starts, codes)
        seqs.append(seq)
        prompts.append(prompt)
    return seqs, prompts


def config(**overrides) -> TrainConfig:
    base = dict(lr=3e-3, warmup_steps=4, total_steps=12, batch_tokens=128, max_len=64,
                log_every=1, eval_every=1000, compile=False, ckpt_every_s=600.0,
                time_budget_s=600.0)
    return TrainConfig(**{**base, **overrides})


def fresh(seed: int = 0) -> LM:
    return init_weights(LM(CFG), seed)


def logged(run_dir, key: str = "loss") -> list[dict]:
    lines = (run_dir / "log.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if key in r]


def test_batches_cover_each_epoch_once_in_a_seeded_order():
    seqs, prompts = corpus(12)
    seqs.append(list(range(70)))  # over max_len: dropped
    prompts.append(5)
    data = Batches(seqs, prompts, batch_tokens=128, max_len=64, pad=LAYOUT.pad)
    assert len(data) == 12 and data.dropped == 1
    first = data.epoch(seed=0, epoch=0)
    assert sorted(np.concatenate(first).tolist()) == list(range(12))
    assert all(len(rows) * data.width(data.lengths[rows].max()) <= 128 for rows in first)
    assert [r.tolist() for r in data.epoch(0, 0)] == [r.tolist() for r in first]
    assert [r.tolist() for r in data.epoch(0, 1)] != [r.tolist() for r in first]


def test_loss_weights_skip_pads_and_weigh_the_prompt_as_configured():
    seqs, prompts = corpus(2)
    data = Batches(seqs, prompts, batch_tokens=128, max_len=64, pad=LAYOUT.pad)
    batch = data.collate(np.array([0, 1]), 0.25, torch.device("cpu"))
    for row, (seq, prompt) in enumerate(zip(seqs, prompts, strict=True)):
        n = len(seq) - 1
        w = batch.weights[row]
        assert torch.all(w[: prompt - 1] == 0.25)  # targets 1 .. prompt-1 are prompt tokens
        assert torch.all(w[prompt - 1 : n] == 1.0)  # every continuation token, END included
        assert torch.all(w[n:] == 0.0) and torch.all(batch.tokens[row, n:] == LAYOUT.pad)
        assert batch.targets[row, n - 1] == LAYOUT.end
    assert torch.all(batch.weights[2:] == 0)  # rows of pads that fill the token budget


def test_a_tiny_lm_memorises_a_small_fixed_set(tmp_path):
    """Initial loss is about ln(V): the init gives near-zero logits. The codes are random, so
    a model that knew the format but not these utterances would still lose ln(16) = 2.8 nats
    on each code; 10% of ln(V) = 0.58 can only be reached by learning the set itself."""
    seqs, prompts = corpus(8)
    result = train(fresh(), seqs, prompts, config(total_steps=100, warmup_steps=10,
                                                  batch_tokens=512, eval_every=50),
                   tmp_path, eval_sequences=seqs, eval_prompt_lengths=prompts, layout=LAYOUT)
    initial = logged(tmp_path)[0]["loss"]
    assert initial == pytest.approx(math.log(CFG.vocab_size), rel=0.1)
    assert result.finished and result.step == 100
    assert result.loss < 0.1 * initial and result.eval_loss < 0.1 * initial
    evals = logged(tmp_path, "eval_loss")
    assert [r["step"] for r in evals] == [50, 100]
    assert min(evals[-1]["eval_acc_level"]) > 0.9


def test_resuming_from_state_repeats_the_uninterrupted_run(tmp_path):
    seqs, prompts = corpus(8)  # 4 batches an epoch: 12 steps cross two epoch boundaries
    whole = train(fresh(), seqs, prompts, config(), tmp_path / "whole")
    half = train(fresh(), seqs, prompts, config(), tmp_path / "split", stop_step=6)
    assert (half.step, half.stop) == (6, "stop_step")
    resumed = train(fresh(seed=1), seqs, prompts, config(), tmp_path / "split")
    assert (resumed.step, resumed.epoch) == (whole.step, whole.epoch) == (12, 3.0)
    a, b = logged(tmp_path / "whole"), logged(tmp_path / "split")
    assert [r["step"] for r in b] == list(range(1, 13))
    assert [r["lr"] for r in a] == [r["lr"] for r in b]
    np.testing.assert_allclose([r["loss"] for r in b], [r["loss"] for r in a], rtol=1e-5)
    for name, tensor in load_state(tmp_path / "whole").model.items():
        torch.testing.assert_close(load_state(tmp_path / "split").model[name], tensor)
    other = LMConfig(**{**CFG.__dict__, "intermediate_size": 96})
    with pytest.raises(ValueError, match="holds a model shaped"):
        train(LM(other), seqs, prompts, config(), tmp_path / "split")


def test_time_budget_stops_before_a_step_and_still_checkpoints(tmp_path):
    seqs, prompts = corpus(4)
    result = train(fresh(), seqs, prompts, config(time_budget_s=0.0), tmp_path)
    assert (result.stop, result.step, result.loss) == ("time_budget", 0, None)
    assert load_state(tmp_path).step == 0


def test_portable_export_travels_in_small_files_and_resumes_in_place(tmp_path):
    seqs, prompts = corpus(8)
    cfg = config(total_steps=8)
    train(fresh(), seqs, prompts, cfg, tmp_path / "gpu", stop_step=4)
    max_bytes = 20_000  # below the 40 kB embedding, which must then be split
    files = export_portable(tmp_path / "gpu", tmp_path / "out", max_bytes=max_bytes)
    assert sum(f.suffix == ".safetensors" for f in files) >= 3
    assert all(f.stat().st_size <= max_bytes for f in files)
    assert import_portable(tmp_path / "out", tmp_path / "gpu") == 4  # full state kept
    assert load_state(tmp_path / "gpu").optimizer is not None

    assert import_portable(tmp_path / "out", tmp_path / "next") == 4
    source, copy = load_state(tmp_path / "gpu"), load_state(tmp_path / "next")
    assert copy.optimizer is None
    assert (copy.step, copy.epoch, copy.position) == (source.step, source.epoch, source.position)
    for name, tensor in source.model.items():
        torch.testing.assert_close(copy.model[name], tensor, rtol=2**-8, atol=1e-6)
    torch.testing.assert_close(model_from_state(tmp_path / "next").embed.weight,
                               copy.model["embed.weight"])

    result = train(fresh(seed=1), seqs, prompts, cfg, tmp_path / "next")
    records = logged(tmp_path / "next")
    assert [r["step"] for r in records] == list(range(1, 9))  # the log travelled too
    assert result.step == 8
    assert records[4]["lr"] == pytest.approx(lr_at(cfg, step=4, age=0))  # fresh moments


def test_loss_plot_is_a_self_contained_svg(tmp_path):
    log = tmp_path / "log.jsonl"
    records = [{"event": "start", "step": 0}]
    records += [{"step": s, "loss": 6.0 / s} for s in range(1, 21)]
    records += [{"step": 10, "eval_loss": 1.0}, {"step": 20, "eval_loss": 0.5}]
    records += [{"step": 20, "loss": 0.25}]  # a resumed run logs step 20 again: it wins
    log.write_text("\n".join(map(json.dumps, records)) + "\n")
    svg = plot_losses(log, tmp_path / "loss.svg", title="tiny <voice>").read_text()
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    lines = root.findall(f"{ns}polyline")
    assert len(lines) == 2 and len(lines[0].get("points").split()) == 20
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert {"train", "eval", "step", "loss", "tiny <voice>"} <= set(texts)
    log.write_text(json.dumps({"event": "start", "step": 0}) + "\n")
    with pytest.raises(ValueError, match="no train or eval loss"):
        plot_losses(log, tmp_path / "empty.svg")
