"""Quality of one rendering, and the verdict on a candidate against a baseline over sentences.

An optimisation is only worth keeping if listeners would not notice it. The lab's rule of thumb:
every MOS proxy stays within 5% of the baseline, and the word and character error rates do not
grow by more than 2 percentage points. All thresholds are arguments, so a stricter sweep can
tighten them.

Baseline and candidate render the same sentences with the same seeds, so every metric is judged
on paired per-sentence differences with a bootstrap interval (`lab.quality.paired`): each check
is pass, fail, or inconclusive with the number of sentences that would settle it. Error rates
are judged as the change from the baseline, never as absolutes: the recogniser's own error rate
on the baseline rendering is its floor, and that floor is reported beside every candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from lab.quality import paired
from lab.quality.asr import transcribe
from lab.quality.audio import METER_RATE, prepare
from lab.quality.fidelity import Fidelity, fidelity
from lab.quality.mos import MosScores, mos_fields, mos_label, mos_scores
from lab.quality.text_compare import Normalizer, TextCompareError, cer, normalize_text, wer
from lab.quality.worst import Worst, worst_sentences

MOS_TOLERANCE = 0.05
WER_POINTS = 0.02
CER_POINTS = 0.02
_FIDELITY = {"mcd_db": ("MCD (dB)", False), "pesq_wb": ("PESQ-WB", True), "stoi": ("STOI", True)}


@dataclass(frozen=True)
class QualityScores:
    """Every meter's reading for one rendering of `text`.

    `wer` and `cer` are fractions (0.02 is two points) and can exceed 1.0; `fidelity` is only
    measured when a reference rendering was given.
    """

    mos: MosScores
    wer: float
    cer: float
    transcript: str
    fidelity: Fidelity | None = None
    text: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> QualityScores:
        fid = data.get("fidelity")
        return cls(mos=MosScores(**data["mos"]), wer=data["wer"], cer=data["cer"],
                   transcript=data["transcript"],
                   fidelity=None if fid is None else Fidelity(**fid), text=data.get("text", ""))


@dataclass(frozen=True)
class Check:
    """One metric's paired verdict: means, the mean difference with its interval, the limit.

    For WER and CER `baseline` is the recogniser's floor (its own error rate on the baseline
    rendering); only `delta` is judged.
    """

    name: str
    metric: str
    outcome: str
    verdict: str
    candidate: float
    baseline: float
    delta: float
    low: float
    high: float
    limit: float
    n: int
    settle: int | None
    detail: str

    @property
    def passed(self) -> bool:
        return self.outcome == paired.PASS

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


@dataclass(frozen=True)
class Spread:
    """A per-sentence figure's mean with its bootstrap interval (fidelity to the baseline)."""

    name: str
    mean: float
    low: float
    high: float
    higher_is_better: bool


@dataclass(frozen=True)
class QualityReport:
    """The verdict on a candidate: pass only if every check passes, fail if any fails.

    `candidate` and `baseline` are the means over the sentences; `candidates` and `baselines`
    the per-sentence scores the checks were judged on.
    """

    checks: list[Check]
    candidate: QualityScores
    baseline: QualityScores
    candidates: list[QualityScores] = field(default_factory=list)
    baselines: list[QualityScores] = field(default_factory=list)
    fidelity: list[Spread] = field(default_factory=list)
    settings: dict = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        outcomes = {check.outcome for check in self.checks}
        if paired.FAIL in outcomes:
            return paired.FAIL
        return paired.PASS if outcomes == {paired.PASS} else paired.INCONCLUSIVE

    @property
    def passed(self) -> bool:
        return self.outcome == paired.PASS

    @property
    def sentences(self) -> int:
        return len(self.candidates)

    def check(self, metric: str) -> Check:
        """The check on `metric` ("WER", "CER" or a MOS field name such as "ovrl")."""
        for check in self.checks:
            if metric in (check.metric, check.name):
                return check
        raise KeyError(f"no check on {metric!r}; checks: {[c.metric for c in self.checks]}")

    def worst(self, k: int = 3) -> list[Worst]:
        """The sentences that got worst: the `k` largest WER growths and the `k` largest MOS
        drops (a sentence in both lists appears once)."""
        return worst_sentences(self.candidates, self.baselines, mos_fields(), k)

    def to_dict(self, audio: dict[int, dict[str, str]] | None = None, k: int = 3) -> dict:
        """Everything, JSON-ready; `audio` maps a sentence index to its audio files."""
        return {
            "outcome": self.outcome,
            "passed": self.passed,
            "sentences": self.sentences,
            "settings": self.settings,
            "checks": [check.to_dict() for check in self.checks],
            "fidelity": [asdict(s) for s in self.fidelity],
            "worst": [{**w.to_dict(), **(audio or {}).get(w.index, {})} for w in self.worst(k)],
            "candidate": self.candidate.to_dict(),
            "baseline": self.baseline.to_dict(),
            "per_sentence": [{"candidate": c.to_dict(), "baseline": b.to_dict()}
                             for c, b in zip(self.candidates, self.baselines, strict=True)],
        }

    def to_markdown(self, audio: dict[int, dict[str, str]] | None = None, k: int = 3,
                    title: bool = True) -> str:
        """Headline, checks, fidelity and the `k` worst sentences (`audio` links them)."""
        from lab.quality.report_markdown import report_markdown

        return report_markdown(self, audio, k, title)


def evaluate(
    audio: object,
    sample_rate: int,
    text: str,
    reference: object | None = None,
    *,
    reference_rate: int | None = None,
    normalizer: Normalizer = normalize_text,
) -> QualityScores:
    """Run every meter on one rendering of `text`.

    `reference` is another rendering of the same text (say the fp32 baseline) at
    `reference_rate`, which defaults to `sample_rate`; with it, fidelity is measured too.
    The text is checked before any model runs, so a bad request fails fast.
    """
    if not isinstance(text, str) or not normalizer(text):
        raise TextCompareError(f"text {text!r} has no words to compare the transcript with")
    samples = prepare(audio, sample_rate)
    ref = None
    if reference is not None:
        ref = prepare(reference, reference_rate or sample_rate, name="reference")
    transcript = transcribe(samples, METER_RATE)
    return QualityScores(
        mos=mos_scores(samples, METER_RATE),
        wer=wer(text, transcript, normalizer),
        cer=cer(text, transcript, normalizer),
        transcript=transcript,
        fidelity=None if ref is None else fidelity(samples, ref, METER_RATE),
        text=text,
    )


def mean_scores(scores: Sequence[QualityScores]) -> QualityScores:
    """Average over a text set: the headline figures beside each verdict."""
    if not scores:
        raise ValueError("mean_scores needs at least one QualityScores")
    fidelities = [s.fidelity for s in scores]
    return QualityScores(
        mos=_mean_of(MosScores, [s.mos for s in scores]),
        wer=float(np.mean([s.wer for s in scores])),
        cer=float(np.mean([s.cer for s in scores])),
        transcript=" / ".join(s.transcript for s in scores),
        fidelity=None if None in fidelities else _mean_of(Fidelity, fidelities),
        text=" / ".join(s.text for s in scores),
    )


def compare(
    candidate: QualityScores | Sequence[QualityScores],
    baseline: QualityScores | Sequence[QualityScores],
    *,
    mos_tolerance: float = MOS_TOLERANCE,
    wer_points: float = WER_POINTS,
    cer_points: float = CER_POINTS,
    confidence: float = paired.CONFIDENCE,
    resamples: int = paired.RESAMPLES,
    seed: int = paired.SEED,
) -> QualityReport:
    """Judge a candidate against a baseline, sentence by sentence.

    The two lists hold the same sentences in the same order (rendered with the same seeds).
    Every MOS proxy may drop by at most `mos_tolerance` of the baseline's mean; WER and CER may
    grow by at most `wer_points` and `cer_points`. Where every candidate carries fidelity to
    its baseline rendering, its mean and interval are reported too. One sentence gives no
    spread, so its checks are point comparisons.
    """
    cand, base = _paired_lists(candidate, baseline)
    idx = paired.resample_indices(len(cand), resamples, seed)

    def judge(values: tuple[list[float], list[float]], limit: float, up: bool) -> paired.Judgement:
        return paired.judge(*values, limit, higher_is_better=up, confidence=confidence,
                            indices=idx)

    checks = []
    for name in mos_fields():
        values = ([getattr(s.mos, name) for s in cand], [getattr(s.mos, name) for s in base])
        if None in values[0] + values[1]:  # a proxy that was not measured on every sentence
            continue
        limit = -mos_tolerance * float(np.mean(values[1]))
        checks.append(_mos_check(name, judge(values, limit, True), values, mos_tolerance))
    for metric, points in (("WER", wer_points), ("CER", cer_points)):
        key = metric.lower()
        values = ([getattr(s, key) for s in cand], [getattr(s, key) for s in base])
        checks.append(_rate_check(metric, judge(values, points, False), values, points))
    spreads = []
    if all(s.fidelity is not None for s in cand):
        for name, (label, up) in _FIDELITY.items():
            mean, low, high = paired.interval([getattr(s.fidelity, name) for s in cand],
                                              confidence, idx)
            spreads.append(Spread(label, mean, low, high, up))
    settings = {"mos_tolerance": mos_tolerance, "wer_points": wer_points,
                "cer_points": cer_points, "confidence": confidence, "resamples": resamples,
                "seed": seed, "interval": "percentile bootstrap over sentences (paired)"}
    return QualityReport(checks, mean_scores(cand), mean_scores(base), cand, base, spreads,
                         settings)


def _mos_check(name: str, j: paired.Judgement, values: tuple[list[float], list[float]],
               tolerance: float) -> Check:
    label = mos_label(name)
    cand, base = (float(np.mean(v)) for v in values)
    detail = (f"{label} {cand:.3f} vs {base:.3f}: change {j.delta:+.3f} "
              f"({_ci(j.low, j.high, '+.3f')}); may drop by {-j.limit:.3f} "
              f"({tolerance:.0%} of the baseline)")
    return Check(f"{label} within {tolerance:.0%} of baseline", name, j.outcome, j.describe(),
                 cand, base, j.delta, j.low, j.high, j.limit, j.n, j.settle, detail)


def _rate_check(metric: str, j: paired.Judgement, values: tuple[list[float], list[float]],
                points: float) -> Check:
    cand, base = (float(np.mean(v)) for v in values)
    pts = lambda x: f"{x * 100:+.1f}"  # noqa: E731
    detail = (f"ASR floor {base:.1%} (its own {metric} on the baseline), candidate {cand:.1%}: "
              f"change {pts(j.delta)} points ({pts(j.low)} to {pts(j.high)}); "
              f"limit +{points * 100:g}")
    return Check(f"{metric} not worse by more than {points * 100:g} points", metric, j.outcome,
                 j.describe(), cand, base, j.delta, j.low, j.high, j.limit, j.n, j.settle,
                 detail)


def _ci(low: float, high: float, fmt: str) -> str:
    return f"CI {format(low, fmt)} to {format(high, fmt)}"


def _paired_lists(candidate: QualityScores | Sequence[QualityScores],
                  baseline: QualityScores | Sequence[QualityScores]
                  ) -> tuple[list[QualityScores], list[QualityScores]]:
    cand, base = _as_list(candidate, "candidate"), _as_list(baseline, "baseline")
    if len(cand) != len(base):
        raise ValueError(f"candidate has {len(cand)} sentences but baseline has {len(base)}; "
                         "a paired verdict needs the same sentences on both sides")
    for i, (c, b) in enumerate(zip(cand, base, strict=True)):
        if c.text and b.text and c.text != b.text:
            raise ValueError(f"sentence {i} differs: candidate read {c.text!r}, baseline "
                             f"{b.text!r}; render the same sentences in the same order")
    return cand, base


def _as_list(scores: QualityScores | Sequence[QualityScores], name: str) -> list[QualityScores]:
    if isinstance(scores, QualityScores):
        return [scores]
    if isinstance(scores, Sequence) and not isinstance(scores, str) and all(
            isinstance(s, QualityScores) for s in scores):
        if not scores:
            raise ValueError(f"{name} holds no sentences; a verdict needs at least one")
        return list(scores)
    kind = type(scores).__name__
    raise TypeError(f"{name} must be QualityScores or a sequence of them, got {kind}")


def _mean_of(cls: type, items: list) -> object:
    """Field-by-field mean of dataclasses of numbers; a field missing anywhere stays None."""
    def mean(name: str) -> float | None:
        values = [getattr(i, name) for i in items]
        return None if None in values else float(np.mean(values))

    return cls(**{f.name: mean(f.name) for f in fields(cls)})
