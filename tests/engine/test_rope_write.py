"""A decode step rotates q and k as it writes K/V, in one kernel (checks in
`rope_write_checks.py`; without a GPU they run under Triton's interpreter, see
`tests/kernel_checks.py`); an fp8 cache and a step that is not a real-lengths decode keep the
unfused path."""

from pathlib import Path

import torch

from lab.engine.cache import StaticLayer
from lab.engine.llm import Attention, LMConfig
from tests.kernel_checks import run_check

CHECKS = Path(__file__).with_name("rope_write_checks.py")
CFG = LMConfig(vocab_size=64, dim=32, n_layers=1, n_heads=2, n_kv_heads=1,
               intermediate_size=48, max_seq_len=16)


def test_the_kernel_matches_the_unfused_step_and_decoding_is_unchanged():
    run_check(CHECKS, "all_checks")


def test_only_a_real_lengths_decode_over_a_plain_cache_rotates_as_it_writes():
    attn = Attention(CFG)
    attn.real_lengths = True
    k = torch.zeros(2, 1, 16, 16)
    plain, scaled = StaticLayer(k, k), StaticLayer(k, k, torch.ones(2, 1, 16), torch.ones(2, 1, 16))
    assert attn._rotates_as_it_writes(1, True, plain)
    assert not attn._rotates_as_it_writes(1, True, scaled)  # fp8: a scale per vector
    assert not attn._rotates_as_it_writes(2, True, plain)  # a prompt chunk
    assert not attn._rotates_as_it_writes(1, False, plain)  # rows that are not slots [0, B)
    attn.fuses_rope = False
    assert not attn._rotates_as_it_writes(1, True, plain)
