"""Quality of one rendering, and a pass/fail verdict on an optimised rendering against a baseline.

An optimisation is only worth keeping if listeners would not notice it. The lab's rule of thumb:
the MOS proxy (DNSMOS overall) stays within 5% of the baseline and the word error rate does not
grow by more than 2 percentage points. Both thresholds are arguments, so a stricter sweep can
tighten them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields

import numpy as np

from lab.quality.asr import transcribe
from lab.quality.audio import METER_RATE, prepare
from lab.quality.fidelity import Fidelity, fidelity
from lab.quality.mos import MosScores, dnsmos
from lab.quality.text_compare import Normalizer, TextCompareError, cer, normalize_text, wer

MOS_TOLERANCE = 0.05
WER_POINTS = 0.02
_SLACK = 1e-9


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


@dataclass(frozen=True)
class Check:
    """One pass/fail criterion with the two numbers it compared."""

    name: str
    passed: bool
    candidate: float
    baseline: float
    detail: str


@dataclass(frozen=True)
class QualityReport:
    """The verdict on a candidate: it passes only if every check does."""

    checks: list[Check]
    candidate: QualityScores
    baseline: QualityScores

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "checks": [asdict(check) for check in self.checks],
            "candidate": self.candidate.to_dict(),
            "baseline": self.baseline.to_dict(),
        }

    def to_markdown(self) -> str:
        lines = [
            f"**Quality: {'PASS' if self.passed else 'FAIL'}**",
            "",
            "| Check | Result | Candidate | Baseline | Detail |",
            "|---|---|---|---|---|",
        ]
        for check in self.checks:
            verdict = "pass" if check.passed else "FAIL"
            lines.append(
                f"| {check.name} | {verdict} | {check.candidate:.3f} | {check.baseline:.3f} "
                f"| {check.detail} |"
            )
        lines += ["", "| Metric | Candidate | Baseline |", "|---|---|---|"]
        for label, cand, base in _metric_rows(self.candidate, self.baseline):
            lines.append(f"| {label} | {cand} | {base} |")
        return "\n".join(lines) + "\n"


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
        mos=dnsmos(samples, METER_RATE),
        wer=wer(text, transcript, normalizer),
        cer=cer(text, transcript, normalizer),
        transcript=transcript,
        fidelity=None if ref is None else fidelity(samples, ref, METER_RATE),
        text=text,
    )


def mean_scores(scores: Sequence[QualityScores]) -> QualityScores:
    """Average over a text set, so one odd sentence does not decide a comparison."""
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
) -> QualityReport:
    """Judge a candidate against a baseline; lists of scores are averaged first."""
    cand, base = _single(candidate, "candidate"), _single(baseline, "baseline")
    return QualityReport(
        checks=[
            _mos_check(cand.mos.ovrl, base.mos.ovrl, mos_tolerance),
            _wer_check(cand.wer, base.wer, wer_points),
        ],
        candidate=cand,
        baseline=base,
    )


def _mos_check(cand: float, base: float, tolerance: float) -> Check:
    floor = (1.0 - tolerance) * base
    change = f"{(cand / base - 1.0) * 100.0:+.1f}%" if base > 0 else "n/a"
    return Check(
        name=f"MOS proxy within {tolerance:.0%} of baseline",
        passed=cand >= floor - _SLACK,
        candidate=cand,
        baseline=base,
        detail=f"DNSMOS OVRL {cand:.2f} vs {base:.2f} ({change}); needs at least {floor:.2f}",
    )


def _wer_check(cand: float, base: float, points: float) -> Check:
    growth = cand - base
    return Check(
        name=f"WER not worse by more than {points * 100:g} points",
        passed=growth <= points + _SLACK,
        candidate=cand,
        baseline=base,
        detail=(
            f"WER {cand:.1%} vs {base:.1%} ({growth * 100:+.1f} points; limit +{points * 100:g})"
        ),
    )


def _single(scores: QualityScores | Sequence[QualityScores], name: str) -> QualityScores:
    if isinstance(scores, QualityScores):
        return scores
    if isinstance(scores, Sequence) and all(isinstance(s, QualityScores) for s in scores):
        return mean_scores(scores)
    kind = type(scores).__name__
    raise TypeError(f"{name} must be QualityScores or a sequence of them, got {kind}")


def _mean_of(cls: type, items: list) -> object:
    """Field-by-field mean of dataclasses whose fields are all numbers."""
    return cls(**{f.name: float(np.mean([getattr(i, f.name) for i in items])) for f in fields(cls)})


_FIDELITY_ROWS = (
    ("MCD (dB)", "mcd_db", ".2f"),
    ("PESQ-WB", "pesq_wb", ".2f"),
    ("STOI", "stoi", ".3f"),
)


def _field(scores: Fidelity | None, name: str) -> float | None:
    return None if scores is None else getattr(scores, name)


def _metric_rows(cand: QualityScores, base: QualityScores) -> list[tuple[str, str, str]]:
    def show(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    rows = [
        (f"DNSMOS {field.upper()}", getattr(cand.mos, field), getattr(base.mos, field), ".2f")
        for field in ("ovrl", "sig", "bak", "p808")
    ]
    rows += [("WER", cand.wer, base.wer, ".1%"), ("CER", cand.cer, base.cer, ".1%")]
    for label, name, fmt in _FIDELITY_ROWS:
        rows.append((label, _field(cand.fidelity, name), _field(base.fidelity, name), fmt))
    return [(label, show(c, fmt), show(b, fmt)) for label, c, b, fmt in rows]
