"""A family that can only emit a span of the vocabulary gets logits for that span alone: the
output head is narrowed to a view of its rows, and sampling maps shortlist ids to columns."""

import pytest
import torch
from torch import nn

from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.llm import LM, LM_SHAPES
from lab.engine.request import SamplingParams
from lab.models.orpheus_format import AudioTokenConstraint, OrpheusLayout

LAYOUT = OrpheusLayout.fitting(LM_SHAPES["tiny-llama"].vocab_size)
SPAN = (LAYOUT.end_of_speech, LAYOUT.vocab_needed)


def tiny_lm() -> LM:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return LM(LM_SHAPES["tiny-llama"]).eval().requires_grad_(False)


class Unnarrowed:
    """The same constraint without its declared span: the engine keeps the whole head."""

    def __init__(self) -> None:
        self.inner = AudioTokenConstraint(LAYOUT)

    def __call__(self, logits, requests, previous=None):
        return self.inner(logits, requests, previous)


def test_the_narrowed_head_gives_the_full_heads_columns_from_a_view_of_its_rows():
    lm = tiny_lm()
    tokens, positions = torch.tensor([[5, 9, 300]]), torch.arange(3)[None]
    full, weight = lm(tokens, positions), lm.lm_head.weight
    lm.narrow_head(*SPAN)
    assert lm.lm_head.rows.data_ptr() == weight[SPAN[0]].data_ptr()  # no copy
    assert sum(p.numel() for p in lm.parameters()) == lm.cfg.n_params  # the full head counts
    torch.testing.assert_close(lm(tokens, positions), full[..., SPAN[0]:SPAN[1]])
    lm.narrow_head(*SPAN)  # the same span again: nothing changes
    assert lm.head_range == SPAN
    with pytest.raises(ValueError, match="already narrowed"):
        lm.narrow_head(0, 10)
    with pytest.raises(ValueError, match="not a span"):
        tiny_lm().narrow_head(10, lm.cfg.vocab_size + 1)


class Doubled(nn.Linear):
    """A head whose rows are not all in its weight: slicing the weight would drop the x2."""

    def forward(self, x):
        return 2 * super().forward(x)


def test_a_head_whose_slice_disagrees_stays_whole_and_the_fallbacks_say_so():
    lm, plain = tiny_lm(), tiny_lm()
    for model in (lm, plain):
        doubled = Doubled(model.cfg.dim, model.cfg.vocab_size, bias=False)
        doubled.weight = model.lm_head.weight
        model.lm_head = doubled
    with pytest.raises(RuntimeError, match="differ from the full head"):
        lm.narrow_head(*SPAN)
    assert lm.head_range is None and isinstance(lm.lm_head, Doubled)
    engine = LLMEngine(lm, EngineConfig(n_slots=2, max_len=96),
                       logits_processor=AudioTokenConstraint(LAYOUT))
    assert any("computes every vocabulary row" in f for f in engine.fallbacks)
    reference = LLMEngine(plain, EngineConfig(n_slots=2, max_len=96),
                          logits_processor=Unnarrowed())
    params = SamplingParams(temperature=0.9, max_tokens=21, seed=4)
    assert engine.generate([[1, 2, 3]], params) == reference.generate([[1, 2, 3]], params)


@pytest.mark.parametrize("engine_kw", [{}, {"mixed_prefill": 8}, {"kv_cache": "dynamic"}])
def test_engine_tokens_are_the_same_with_the_narrowed_head(engine_kw):
    """Seeded sampling with top-k, top-p and a repetition penalty, prompts staggered through
    continuous batching (and carried in decode steps): the same tokens either way."""
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11, 12, 13], [7], [8, 9, 10, 11]]
    params = [SamplingParams(temperature=0.8, top_k=6, top_p=0.9, repetition_penalty=1.2,
                             max_tokens=28 + 7 * i, seed=i) for i in range(len(prompts))]
    results, spans = [], []
    for processor in (AudioTokenConstraint(LAYOUT), Unnarrowed()):
        engine = LLMEngine(tiny_lm(), EngineConfig(n_slots=3, max_len=96, **engine_kw),
                           logits_processor=processor)
        results.append(engine.generate(prompts, params))
        spans.append(engine.runner.head_range)
    assert spans == [SPAN, None]
    assert results[0] == results[1]
    assert len({t for out in results[0] for t in out}) > 20
    assert all(t == LAYOUT.end_of_speech or t >= LAYOUT.audio_offset
               for out in results[0] for t in out)


def test_a_span_declaring_processor_must_return_a_shortlist():
    class Masking(AudioTokenConstraint):
        def __call__(self, logits, requests, previous=None):
            return logits

    engine = LLMEngine(tiny_lm(), EngineConfig(n_slots=1, max_len=64),
                       logits_processor=Masking(LAYOUT))
    with pytest.raises(TypeError, match="must return a shortlist"):
        engine.generate([[1, 2]], SamplingParams(max_tokens=3))


class Watching(AudioTokenConstraint):
    """The constraint, noting what the runner hands it as each row's newest token."""

    def __init__(self, reads_previous: bool) -> None:
        super().__init__(LAYOUT)
        self.reads_previous, self.handed = reads_previous, []

    def __call__(self, logits, requests, previous=None):
        self.handed.append(None if previous is None else previous.tolist())
        return super().__call__(logits, requests, previous)


def test_a_processor_that_reads_no_previous_token_is_handed_none_and_samples_the_same():
    prompts, params = [[1, 2, 3], [4, 5]], SamplingParams(temperature=0.8, max_tokens=14, seed=2)
    runs = {}
    for reads in (True, False):
        processor = Watching(reads)
        engine = LLMEngine(tiny_lm(), EngineConfig(n_slots=2, max_len=64),
                           logits_processor=processor)
        runs[reads] = engine.generate(prompts, params), processor.handed
    (tokens, handed), (same, none) = runs[True], runs[False]
    assert same == tokens and set(map(str, none)) == {"None"}
    # Read, the first decode step's rows get the tokens their prompts' logits gave.
    assert handed[1] == [tokens[0][0], tokens[1][0]]
