"""Quality meters: MOS proxies, intelligibility and fidelity, and the verdict on an optimisation."""

from lab.quality.asr import transcribe
from lab.quality.audio import AudioError
from lab.quality.distill_mos import distill_mos
from lab.quality.fidelity import Fidelity, fidelity, mel_cepstral_distortion
from lab.quality.mos import MosScores, dnsmos, mos_scores
from lab.quality.report import (
    Check,
    QualityReport,
    QualityScores,
    compare,
    evaluate,
    mean_scores,
)
from lab.quality.text_compare import TextCompareError, cer, normalize_text, wer

__all__ = [
    "AudioError",
    "Check",
    "Fidelity",
    "MosScores",
    "QualityReport",
    "QualityScores",
    "TextCompareError",
    "cer",
    "compare",
    "distill_mos",
    "dnsmos",
    "evaluate",
    "fidelity",
    "mean_scores",
    "mel_cepstral_distortion",
    "mos_scores",
    "normalize_text",
    "transcribe",
    "wer",
]
