"""The voice's token format: interleaving phonemes with codes, and the constraint that holds the
model to it inside the engine, whichever cache mode runs."""

import numpy as np
import pytest
import torch

from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.llm import LM, LMConfig
from lab.engine.request import SamplingParams
from lab.models.voice_format import (
    GroupAssembler,
    PhonemeAlignedConstraint,
    VoiceFormatError,
    VoiceLayout,
    audio_tokens,
    lm_phonemes,
    phoneme_groups,
    prompt,
    training_sequence,
)

LAYOUT = VoiceLayout(levels=2, codebook_size=8, n_phonemes=16)


def test_layout_keeps_phoneme_ids_and_places_codes_after_the_specials():
    assert (LAYOUT.bos, LAYOUT.start_audio, LAYOUT.end, LAYOUT.pad) == (16, 17, 18, 19)
    assert LAYOUT.code_token(1, 3) == 20 + 8 + 3
    assert LAYOUT.vocab_size == 64 and LAYOUT.vocab_size % 64 == 0


def test_piper_ids_lose_bos_pads_and_eos_and_phonemes_find_their_groups():
    piper = [1, 0, 5, 0, 6, 0, 7, 0, 2]  # ^ _ a _ b _ c _ $
    assert lm_phonemes(piper) == [5, 6, 7]
    durations = [2, 1, 3, 0, 1, 2, 4, 1, 3]  # frames per id; a starts at 3, b at 6, c at 9
    assert phoneme_groups(durations, 4) == [0, 1, 2]
    with pytest.raises(VoiceFormatError):
        lm_phonemes([1, 0])


def test_each_phoneme_comes_before_the_group_its_sound_starts_in():
    codes = np.array([[1, 2], [3, 4], [5, 6]])
    tokens = audio_tokens(LAYOUT, [5, 6, 7], [0, 0, 2], codes)
    c = LAYOUT.code_token
    assert tokens == [5, 6, c(0, 1), c(1, 2), c(0, 3), c(1, 4), 7, c(0, 5), c(1, 6), LAYOUT.end]
    late = audio_tokens(LAYOUT, [5, 6], [0, 9], codes[:1])  # b was given no frames
    assert late == [5, c(0, 1), c(1, 2), 6, LAYOUT.end]
    seq, n = training_sequence(LAYOUT, [5, 6, 7], [0, 0, 2], codes)
    assert seq[:n] == [LAYOUT.bos, 5, 6, 7, LAYOUT.start_audio] and seq[n:] == tokens


def test_bad_input_is_refused_by_name():
    with pytest.raises(VoiceFormatError, match="no phonemes"):
        prompt(LAYOUT, [])
    with pytest.raises(VoiceFormatError, match="outside"):
        prompt(LAYOUT, [3, 40])
    with pytest.raises(VoiceFormatError, match="codes must be"):
        audio_tokens(LAYOUT, [5], [0], np.zeros((2, 3), int))


def test_the_assembler_keeps_only_codes_in_level_order():
    c = LAYOUT.code_token
    asm = GroupAssembler(LAYOUT)
    assert asm.feed([5, c(0, 1)]) == []
    assert asm.feed([c(1, 7), 6, c(0, 2), c(1, 0), LAYOUT.end]) == [[1, 7], [2, 0]]


def tiny_engine(kv_cache: str) -> LLMEngine:
    cfg = LMConfig(vocab_size=LAYOUT.vocab_size, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                   intermediate_size=64, max_seq_len=256, tie_embeddings=True)
    with torch.random.fork_rng():
        torch.manual_seed(1)
        lm = LM(cfg).eval().requires_grad_(False)
    return LLMEngine(lm, EngineConfig(n_slots=3, max_len=200, kv_cache=kv_cache),
                     logits_processor=PhonemeAlignedConstraint(LAYOUT))


def generate(engine: LLMEngine, phonemes: list[list[int]], temperature: float) -> list[list[int]]:
    params = [SamplingParams(temperature=temperature, top_k=0, top_p=1.0,
                             repetition_penalty=1.0, max_tokens=120, seed=i,
                             stop_token_ids=(LAYOUT.end,)) for i in range(len(phonemes))]
    prompts = [prompt(LAYOUT, p) for p in phonemes]
    return engine.generate(prompts, params)


def check_follows_format(tokens: list[int], phonemes: list[int]) -> None:
    """Codes come level by level; phonemes only between groups, in prompt order; END last."""
    level, said = 0, []
    for token in tokens:
        if token == LAYOUT.end:
            assert level == 0 and said == phonemes
            return
        if LAYOUT.is_phoneme(token):
            assert level == 0
            said.append(token)
            continue
        assert LAYOUT.code_token(level, 0) <= token < LAYOUT.code_token(level, 8)
        level = (level + 1) % LAYOUT.levels
    assert said == phonemes[:len(said)]  # ran out of tokens before the end: a prefix so far


@pytest.mark.parametrize("kv_cache", ["static", "dynamic", "none"])
def test_random_models_sampling_freely_still_follow_the_format(kv_cache):
    phonemes = [[3, 4, 5], [7], [9, 9, 2, 1]]
    for tokens, ph in zip(generate(tiny_engine(kv_cache), phonemes, 1.5), phonemes,
                          strict=True):
        check_follows_format(tokens, ph)


def test_cache_modes_give_the_same_greedy_tokens():
    phonemes = [[3, 4, 5], [7, 1]]
    runs = [generate(tiny_engine(kv), phonemes, 0.0) for kv in ("static", "dynamic", "none")]
    assert runs[0] == runs[1] == runs[2]
