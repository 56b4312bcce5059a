"""The server's memory plan: slots from free memory, the estimate's own byte counts, refusals
with numbers, and a real server that takes the plan's slots when none are given.

Plans for GPUs are made for memory that is not here (`free_bytes`), so nothing large loads.
"""

import math
import re

import httpx
import pytest

import lab.serve.memory_plan as memory_plan
from lab.config import load_preset
from lab.engine.llm import LM_SHAPES
from lab.estimate import HEADROOM, estimate
from lab.serve.memory_plan import (
    CARDS,
    CUDA_CONTEXT_BYTES,
    FRAGMENTATION,
    INTERLEAVED_STREAMS,
    MAX_SLOTS,
    SIZE_UNDER_LOAD,
    MemoryPlanError,
    plan_for_card,
    plan_memory,
)
from tests.serve.conftest import metric, running

GIB = 2**30
ORPHEUS = load_preset("orpheus-3b-dummy-gpu")


def on_gpu(cfg, gib: float, **kwargs):
    return plan_memory(cfg, free_bytes=int(gib * GIB), device="cuda", **kwargs)


def test_slots_grow_and_shrink_with_free_memory():
    free = (12, 16, 24, 32, 48, 64)
    plans = [on_gpu(ORPHEUS, gib) for gib in free]
    slots = [p.slots for p in plans]
    assert slots == sorted(slots) and slots[0] < slots[-1], slots
    assert all(p.bound == "memory" for p in plans[:-1])
    assert all(p.cache_len == plans[0].cache_len for p in plans)  # the length is kept
    assert [p.slots for p in (on_gpu(ORPHEUS, g) for g in reversed(free))] == slots[::-1]


@pytest.mark.parametrize("preset", ["orpheus-3b-dummy-gpu", "ar-voice-gpu", "gpu-bf16-compiled"])
def test_the_planned_bytes_never_exceed_the_free_bytes(preset):
    cfg = load_preset(preset)
    for gib in (7.5, 9, 12, 20, 40, 80, 141):
        try:
            plan = on_gpu(cfg, gib)
        except MemoryPlanError:
            continue
        assert plan.planned <= plan.budget <= plan.free_bytes
        assert plan.weights + plan.codec + plan.kv_cache + plan.activations == plan.planned


def test_the_plan_counts_what_the_estimate_counts():
    tiny = load_preset("orpheus-tiny-cpu")  # a CPU config: the estimate measures this machine
    plan = plan_memory(tiny)
    est = estimate(tiny.replace(batch_size=plan.slots), 100, texts=plan.slots)
    assert (plan.weights, plan.kv_cache, plan.codec) == (
        est.weights_bytes, est.kv_cache_bytes, est.codec_bytes)
    lm = LM_SHAPES["tiny-llama"]  # 280 tokens + 256 of prompt room, capped at its 512
    assert plan.cache_len == 512
    assert plan.kv_per_position == 2 * lm.n_layers * lm.n_kv_heads * lm.head_dim * 4


def test_a_preset_that_cannot_fit_one_slot_is_refused_with_the_numbers():
    with pytest.raises(MemoryPlanError) as refused:
        on_gpu(ORPHEUS, 6)
    message = str(refused.value)
    assert "cannot fit one stream" in message
    assert re.search(r"weights 7\.\d GiB", message) and "5.4 GiB (90% of 6.0 GiB" in message
    with pytest.raises(MemoryPlanError) as shorter:  # weights fit; a full-length slot does not
        on_gpu(ORPHEUS, 8)
    tokens = int(re.search(r"sampling\.max_tokens=(\d+)", str(shorter.value)).group(1))
    assert on_gpu(ORPHEUS.replace(**{"sampling.max_tokens": tokens}), 8).slots == 1
    with pytest.raises(MemoryPlanError, match="cannot fit"):
        on_gpu(ORPHEUS.replace(**{"sampling.max_tokens": tokens + 1}), 8)


def test_slots_asked_for_are_kept_or_refused_with_what_fits():
    fit = on_gpu(ORPHEUS, 20).slots
    assert on_gpu(ORPHEUS, 20, slots=fit - 1).slots == fit - 1
    with pytest.raises(MemoryPlanError, match=rf"cannot fit {fit + 1} slots.*at most {fit} fit"):
        on_gpu(ORPHEUS, 20, slots=fit + 1)


def test_the_plan_sets_the_engine_slots_and_leaves_the_voice_alone():
    plan = plan_for_card(ORPHEUS, CARDS["24 GB"])
    assert plan.apply(ORPHEUS).batch_size == plan.slots != ORPHEUS.batch_size
    assert plan.apply(ORPHEUS).sampling == ORPHEUS.sampling
    voice = load_preset("gpu-bf16-compiled")
    voice_plan = plan_for_card(voice, CARDS["24 GB"])
    assert voice_plan.slots == INTERLEAVED_STREAMS and voice_plan.cache_len == 0
    assert voice_plan.apply(voice) is voice


def _hand_planned(slots: int) -> tuple[int, int, int, int]:
    """Orpheus-3B in bf16 with `slots` slots, counted by hand from its `LMConfig`: (weights,
    KV bytes a position, positions a slot, planned bytes before the codec)."""
    lm, b = LM_SHAPES["orpheus-3b"], 2  # bf16
    params = lm.n_params  # embeddings and head untied: about 3.8e9
    assert 3.7e9 < params < 3.9e9
    weights = params * b + 2 * lm.max_seq_len * lm.head_dim * b  # plus the rotary tables
    positions = min(ORPHEUS.sampling.max_tokens + 256, lm.max_seq_len)  # + the prompt room
    per_position = 2 * lm.n_layers * lm.n_kv_heads * lm.head_dim * b  # K and V, every layer
    # Activations of `slots` rows: a prefill chunk of 4096 tokens (hidden states and attention
    # scores over the cache), fp32 logits and sampling per row, the token mask, and the SNAC's
    # longest window (2 + 8 + 2 frames: chunks grow to 8, with 2 of context each side, of 2048
    # samples at 1300 bytes a sample) per row.
    hidden = (2 * lm.intermediate_size + (lm.n_heads + 2 * lm.n_kv_heads) * lm.head_dim
              + 4 * lm.dim) * b
    activations = (4096 * (hidden + lm.n_heads * positions * 4) + slots * lm.vocab_size * 24
                   + slots * lm.vocab_size + slots * 12 * 2048 * 1300)
    planned = (weights + per_position * positions * slots
               + math.ceil(activations * (1 + FRAGMENTATION)))
    return weights, per_position, positions, planned


def test_the_80_gb_row_for_orpheus_3b_in_bf16_is_the_hand_computation():
    """On an H100 memory binds: the most slots whose hand count fits 90% of free memory."""
    free = 81559 * 2**20 - GIB  # nvidia-smi's H100 total less the CUDA context
    plan = plan_for_card(ORPHEUS, CARDS["80 GB"])
    slots = plan.slots
    weights, per_position, positions, planned = _hand_planned(slots)
    assert planned + plan.codec <= HEADROOM * free < _hand_planned(slots + 1)[3] + plan.codec
    assert slots == 326 < MAX_SLOTS and plan.bound == "memory"
    assert plan.free_bytes == free and CUDA_CONTEXT_BYTES == GIB
    assert plan.weights == weights and round(weights / GIB, 1) == 7.0
    assert plan.cache_len == positions == 1456
    assert plan.kv_per_position == per_position == 112 * 2**10
    assert plan.kv_per_slot == per_position * positions
    assert plan.planned == planned + plan.codec  # the SNAC codec, counted in fp32
    assert round(plan.planned / GIB, 1) == 70.7


def test_the_141_gb_row_takes_the_largest_batch_size():
    plan = plan_for_card(ORPHEUS, CARDS["141 GB"])
    assert plan.slots == MAX_SLOTS == 512 and plan.bound.startswith("the largest batch_size")
    assert plan.planned == _hand_planned(MAX_SLOTS)[3] + plan.codec


def test_a_plan_that_chose_a_gpu_engines_slots_says_to_size_them_under_load():
    """Memory bounds the 80 GB row and the batch_size ceiling the 141 GB row: both picked the
    slots themselves; slots asked for, an engine paced by a round ceiling, a CPU's slots and the
    voice's streams need no sizing."""
    for plan in (plan_for_card(ORPHEUS, CARDS["80 GB"]), plan_for_card(ORPHEUS, CARDS["141 GB"])):
        first, _, hint = plan.summary().splitlines()
        assert f"{plan.slots} slots" in first and hint.strip() == SIZE_UNDER_LOAD
    paced = plan_for_card(ORPHEUS.replace(admit_round_ms=7.0), CARDS["141 GB"])
    assert paced.paced and paced.slots == plan.slots
    chosen = (paced, on_gpu(ORPHEUS, 80, slots=192),
              plan_memory(ORPHEUS.replace(device="cpu"), free_bytes=64 * GIB, device="cpu"),
              plan_memory(load_preset("cpu-default"), free_bytes=8 * GIB, device="cpu"))
    for plan in chosen:
        assert len(plan.summary().splitlines()) == 2 and "--slots" not in plan.summary()


def test_a_server_without_slots_takes_the_plans(serve_pipeline, monkeypatch):
    roomy = plan_memory(serve_pipeline.config, loaded=True)
    assert roomy.slots == INTERLEAVED_STREAMS and roomy.loaded
    per_stream = roomy.activations / roomy.slots
    tight = int(2.5 * per_stream / HEADROOM)  # room for two streams' activations, not three
    monkeypatch.setattr(memory_plan, "available_bytes", lambda _device: (tight, "RAM"))
    with running(serve_pipeline) as server:
        assert server.app.state.served.admission.slots == 2
        assert metric(server.url, "lab_slots") == 2
        assert httpx.get(f"{server.url}/ready").json()["slots"] == 2
    with running(serve_pipeline, slots=3) as server:  # --slots wins over the plan
        assert server.app.state.served.admission.slots == 3
