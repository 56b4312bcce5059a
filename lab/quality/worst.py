"""The sentences a candidate got most wrong: where a verdict's numbers come from, to listen to.

A mean change of +3 WER points may be one sentence the candidate garbled or noise spread over
all of them; listing the largest per-sentence WER growths and MOS drops, with both transcripts,
lets a person hear which it is before trusting or dismissing a verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.quality.report import QualityScores

MIN_MOS_DROP = 0.01
"""A smaller fall is float noise between near-identical waveforms, below the reports' 0.01."""


@dataclass(frozen=True)
class Worst:
    """One sentence that got worse, and why it is listed.

    `mos_field` is the MOS proxy reading that fell most in relative terms on this sentence,
    `mos_drop` its fall (baseline minus candidate, positive is worse).
    """

    index: int
    reasons: tuple[str, ...]
    text: str
    baseline_transcript: str
    candidate_transcript: str
    wer_delta: float
    mos_field: str
    mos_drop: float
    mos_baseline: float

    def to_dict(self) -> dict:
        return asdict(self)


def worst_sentences(candidates: Sequence[QualityScores], baselines: Sequence[QualityScores],
                    mos_fields: Sequence[str], k: int = 3,
                    min_mos_drop: float = MIN_MOS_DROP) -> list[Worst]:
    """Up to `k` sentences whose WER grew most, then up to `k` whose MOS fell most (a
    sentence in both appears once, with both reasons). Sentences that did not get worse on a
    measure (WER grew by nothing, MOS fell by less than `min_mos_drop`) are not listed."""
    rows = [_row(i, c, b, mos_fields) for i, (c, b) in
            enumerate(zip(candidates, baselines, strict=True))]
    by_wer = sorted((r for r in rows if r.wer_delta > 0), key=lambda r: -r.wer_delta)[:k]
    by_mos = sorted((r for r in rows if r.mos_drop >= min_mos_drop),
                    key=lambda r: -r.mos_drop / max(r.mos_baseline, 1e-9))[:k]
    listed: dict[int, Worst] = {}
    for reason, picked in (("WER grew", by_wer), ("MOS fell", by_mos)):
        for row in picked:
            before = listed.get(row.index, row)
            listed[row.index] = Worst(**{**asdict(before),
                                         "reasons": (*before.reasons, reason)})
    return list(listed.values())


def _row(index: int, cand: QualityScores, base: QualityScores,
         mos_fields: Sequence[str]) -> Worst:
    drops = {}
    for name in mos_fields:
        before, after = getattr(base.mos, name), getattr(cand.mos, name)
        if before is not None and after is not None:
            drops[name] = (before - after, before)
    name = max(drops, key=lambda n: drops[n][0] / max(drops[n][1], 1e-9)) if drops else ""
    drop, before = drops.get(name, (0.0, 0.0))
    return Worst(index, (), cand.text or base.text, base.transcript, cand.transcript,
                 cand.wer - base.wer, name, float(drop), float(before))
