"""Quality meters: MOS proxies, intelligibility and fidelity, and the verdict on an optimisation."""

from lab.quality.asr import transcribe
from lab.quality.audio import AudioError
from lab.quality.distill_mos import distill_mos
from lab.quality.fidelity import Fidelity, fidelity, mel_cepstral_distortion
from lab.quality.mos import MosScores, mos_fields, mos_label, mos_scores
from lab.quality.paired import Judgement
from lab.quality.report import (
    Check,
    QualityReport,
    QualityScores,
    Spread,
    compare,
    evaluate,
    mean_scores,
)
from lab.quality.text_compare import TextCompareError, cer, normalize_text, wer
from lab.quality.worst import Worst

__all__ = [
    "AudioError",
    "Check",
    "Fidelity",
    "Judgement",
    "MosScores",
    "QualityReport",
    "QualityScores",
    "Spread",
    "TextCompareError",
    "Worst",
    "cer",
    "compare",
    "distill_mos",
    "evaluate",
    "fidelity",
    "mean_scores",
    "mel_cepstral_distortion",
    "mos_fields",
    "mos_label",
    "mos_scores",
    "normalize_text",
    "transcribe",
    "wer",
]
