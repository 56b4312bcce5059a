"""The rate book on its own: what it keeps, what it refuses, and how its key is made.

How recorded rates replace the estimate's first guesses is tested with the estimate
(tests/test_estimate.py); these tests touch no pipeline and no model.
"""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from lab.config import PipelineConfig, load_preset
from lab.metrics.rates import KEEP, EstimateError, Measured, RateBook, rate_key

CPU = torch.device("cpu")


def test_only_finite_non_negative_figures_are_kept_and_only_the_last_few(tmp_path):
    book = RateBook(tmp_path)
    rates = book.add("k", {"rtf": 2.0, "load_s": None, "bad": math.nan, "neg": -1.0,
                           "inf": math.inf})
    assert rates == {"rtf": 2.0}
    for value in range(KEEP + 3):
        rates = book.add("k", {"rtf": float(value)})
    stored = json.loads((tmp_path / "rates.json").read_text())["rates"]["k"]["rtf"]
    assert stored == [float(v) for v in range(3, KEEP + 3)]
    assert rates["rtf"] == stored[KEEP // 2]
    assert book.rates("never measured") == {}


def test_a_book_that_is_not_a_rate_book_is_refused_with_the_way_out(tmp_path):
    (tmp_path / "rates.json").write_text(json.dumps({"something": "else"}))
    with pytest.raises(EstimateError, match="no 'rates' mapping; delete it"):
        RateBook(tmp_path).rates("k")


def test_a_batch_shares_its_wall_time_and_sums_its_text_and_audio():
    def result(text: str, total_ms: float, audio: float):
        return SimpleNamespace(text=text, metrics=SimpleNamespace(total_ms=total_ms,
                                                                  audio_seconds=audio))

    m = Measured.of([result("abc", 900.0, 1.0), result("de", 1000.0, 0.5)],
                    {"load_ms": 2000.0})
    assert m == Measured(chars=5, synth_s=1.0, audio_s=1.5, load_s=2.0, warmup_s=None)
    assert Measured.of(result("x", 10.0, 0.1)).chars == 1


def test_the_key_names_the_decode_knobs_only_for_autoregressive_families():
    voice = rate_key(PipelineConfig(device="cpu"), CPU)
    lm = rate_key(load_preset("orpheus-tiny-cpu"), CPU)
    assert voice.startswith("piper-vits:") and "kv=" not in voice
    assert lm.startswith("orpheus:") and "kv=" in lm and "max_tokens=" in lm
    assert "device=cpu/" in voice and "batch=" in voice
