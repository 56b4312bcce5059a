"""Judge a candidate against a baseline on a sentence set: render both alike, score, compare.

The steps every verdict takes, in one place for the app's quality check, the CLI and the
benchmarks: both sides render the same sentences one by one, so each sentence gets the same
seed on both sides; the baseline's renderings and scores come from the score cache when it has
them; the candidate is scored (in parallel) and judged sentence by sentence.

Fidelity to the baseline (MCD, PESQ, STOI) is only meaningful when the candidate would
reproduce the baseline's waveform but for the optimisation: same seed and a variant that draws
the same noise. The caller says so (`paired_waveforms`): the Piper voice draws its noise from
the seed on the CPU whatever the precision, while a sampling autoregressive voice drifts to
other tokens after the first changed logit, and its waveforms no longer line up.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from lab.quality.report import QualityReport, compare
from lab.quality.score_cache import ScoreCache, Scored, cache_key
from lab.quality.scoring import score_many
from lab.quality.text_compare import normalize_text

Render = Callable[[str], tuple[np.ndarray, int]]
"""One text to (audio, sample rate): a pipeline's `synthesize`, adapted by `renderer`."""


@dataclass(frozen=True)
class Takes:
    """One side's renderings of a sentence set, in order."""

    texts: list[str]
    audio: list[np.ndarray]
    sample_rate: int


@dataclass(frozen=True)
class Verdict:
    """A report with the renderings it judged and what the metering cost."""

    report: QualityReport
    candidate: Takes
    baseline: Takes
    cache_hit: bool
    seconds: dict[str, float] = field(default_factory=dict)


LOSSY_KNOBS = {"dtype": "fp32", "quant": "none", "compile": "none", "kv_dtype": "auto",
               "codec_dtype": "auto"}
"""The knobs that may change the sound, at the values a reference takes: K/V stored in fp8
rounds every attention input, as a cast or quantization rounds the weights; a codec in half
precision rounds its convolutions ("auto" with an fp32 LM is fp32 in every family)."""


def reference_config(config: object) -> object:
    """The same config in fp32, unquantized, uncompiled, with K/V in the model's precision (a
    `PipelineConfig`, seed and every other knob kept): what an optimisation must not sound
    worse than."""
    return config.replace(**LOSSY_KNOBS)


def lossy_changes(config: object, reference: object) -> dict[str, object]:
    """The lossy knobs where `config` differs from its reference, with the config's values:
    what a verdict names as the thing it judged."""
    return {k: getattr(config, k) for k in LOSSY_KNOBS
            if getattr(config, k) != getattr(reference, k)}


def paired_waveforms(pipeline: object) -> bool:
    """Whether a pipeline's takes would reproduce its reference's waveform but for the
    optimisation, so fidelity to it means something: a voice that draws its noise from the
    seed does; one that samples tokens drifts onto other tokens after the first changed
    logit, unless it decodes greedily."""
    return not pipeline.family.autoregressive or pipeline.config.sampling.temperature == 0


def judgeable(text: str) -> bool:
    """Whether a verdict can use `text`: the lab's normaliser leaves words, all in the
    recogniser's alphabet. The recogniser knows US English only, so a Cyrillic sentence would
    read as 100% WER on both sides and a sentence of punctuation says nothing at all."""
    words = normalize_text(text)
    return bool(words) and words.isascii()


def renderer(pipeline: object) -> Render:
    """`pipeline.synthesize` as a `Render` (anything with that method returning a Synthesis)."""
    def render(text: str) -> tuple[np.ndarray, int]:
        result = pipeline.synthesize(text)
        return result.audio, result.sample_rate

    return render


def render_takes(render: Render, texts: Sequence[str], desc: str = "rendering") -> Takes:
    """Each text rendered alone, in order, so its seed does not depend on its neighbours."""
    texts = _checked(texts)
    audio, rates = [], set()
    for text in tqdm(texts, desc=desc, unit="sentence"):
        samples, rate = render(text)
        audio.append(np.asarray(samples, dtype=np.float32))
        rates.add(int(rate))
    if len(rates) != 1:
        raise ValueError(f"renderings came back at several sample rates: {sorted(rates)}")
    return Takes(list(texts), audio, rates.pop())


def scored_baseline(texts: Sequence[str], config: Mapping, seed: int,
                    render: Callable[[], Render], *, cache: ScoreCache | None = None,
                    workers: int | None = None) -> tuple[Scored, bool]:
    """The baseline's renderings and scores and whether they came from `cache`. `render` is
    only called (a pipeline loaded) on a miss; `config` and `seed` make the cache key."""
    texts = _checked(texts)
    key = cache_key(texts, config, seed)
    if cache is not None and (hit := cache.load(key)) is not None:
        return hit, True
    takes = render_takes(render(), texts, "rendering the baseline")
    scores = score_many(takes.audio, takes.sample_rate, takes.texts, workers=workers,
                        desc="scoring the baseline")
    scored = Scored(takes.texts, takes.audio, takes.sample_rate, scores)
    if cache is not None:
        cache.save(key, scored)
    return scored, False


def judge_takes(candidate: Takes, baseline: Scored, *, paired_waveforms: bool,
                workers: int | None = None, **tolerances: float) -> QualityReport:
    """Score the candidate (with fidelity to the baseline's renderings when `paired_waveforms`)
    and judge it sentence by sentence; `tolerances` go to `compare`."""
    if list(candidate.texts) != list(baseline.texts):
        raise ValueError("candidate and baseline rendered different sentences; a paired verdict "
                         "needs the same sentences in the same order")
    refs = baseline.audio if paired_waveforms else None
    scores = score_many(candidate.audio, candidate.sample_rate, candidate.texts, refs,
                        baseline.sample_rate, workers=workers, desc="scoring the candidate")
    return compare(scores, baseline.scores, **tolerances)


def judge(candidate: Render, texts: Sequence[str], *, baseline: Callable[[], Render],
          baseline_config: Mapping, seed: int, paired_waveforms: bool,
          cache: ScoreCache | None = None, workers: int | None = None,
          **tolerances: float) -> Verdict:
    """Render `texts` through the candidate, take the baseline from the cache or render it,
    score both and judge: the whole verdict, with seconds per step."""
    started = time.perf_counter()
    base, hit = scored_baseline(texts, baseline_config, seed, baseline, cache=cache,
                                workers=workers)
    based = time.perf_counter()
    takes = render_takes(candidate, texts, "rendering the candidate")
    rendered = time.perf_counter()
    report = judge_takes(takes, base, paired_waveforms=paired_waveforms, workers=workers,
                         **tolerances)
    done = time.perf_counter()
    seconds = {"baseline_s": based - started, "candidate_render_s": rendered - based,
               "candidate_score_s": done - rendered}
    return Verdict(report, takes, Takes(base.texts, base.audio, base.sample_rate), hit,
                   {k: round(v, 2) for k, v in seconds.items()})


def _checked(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("texts must be a list of sentences, not one string")
    texts = list(texts)
    if not texts:
        raise ValueError("the sentence list is empty; a verdict needs at least one sentence")
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise ValueError(f"sentence {bad[0]} is empty; every sentence needs words to judge")
    return texts
