"""Quality meters: MOS proxy, intelligibility and fidelity, and the verdict on an optimisation.

Names load from their modules on first use: importing one light piece (the mel filterbank,
say) must not load the recogniser and the MOS models, which a GPU training machine lacks.
"""

from importlib import import_module

_HOMES = {
    "transcribe": "asr",
    "AudioError": "audio",
    "Fidelity": "fidelity", "fidelity": "fidelity", "mel_cepstral_distortion": "fidelity",
    "MosScores": "mos", "dnsmos": "mos",
    "Check": "report", "QualityReport": "report", "QualityScores": "report",
    "compare": "report", "evaluate": "report", "mean_scores": "report",
    "TextCompareError": "text_compare", "cer": "text_compare",
    "normalize_text": "text_compare", "wer": "text_compare",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'lab.quality' has no attribute {name!r}")
    return getattr(import_module(f"lab.quality.{_HOMES[name]}"), name)
