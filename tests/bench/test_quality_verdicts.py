"""benchmarks/quality_verdicts.py: its table from a run's JSON, on synthetic scores."""


import numpy as np
import pytest

from lab.quality import MosScores, QualityScores, compare, mos_fields, mos_label
from tests.bench.conftest import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("quality_verdicts") as module:
        yield module


def _scores(n: int, wer_shift: float) -> tuple[list[QualityScores], list[QualityScores]]:
    rng = np.random.default_rng(0)
    base, cand = [], []
    for i in range(n):
        wer = float(rng.uniform(0.0, 0.4))
        mos = MosScores(*(float(v) for v in rng.uniform(3.0, 4.0, len(mos_fields()))))
        base.append(QualityScores(mos, wer, wer / 2, "heard", None, f"sentence {i}"))
        cand.append(QualityScores(mos, wer + wer_shift * (i % 2), wer / 2, "said", None,
                                  f"sentence {i}"))
    return cand, base


def test_markdown_shows_every_check_with_its_interval_and_the_floor(bench):
    report = compare(*_scores(8, 0.25))
    data = report.to_dict(audio={w.index: {"baseline": "a/fp32.wav", "candidate": "a/c.wav"}
                                 for w in report.worst()})
    judged = {"config": "bf16", "applied": {"dtype": "bf16", "quant": "none"}, "setup_s": 1.0,
              "render_s": 2.0, "score_s": 3.0,
              **{k: data[k] for k in ("outcome", "checks", "fidelity", "worst")}}
    fell_back = {"config": "int8-weight", "applied": {"dtype": "fp32", "quant": "none"},
                 "setup_s": 1.0, "outcome": "not judged: fell back to quant none"}
    result = {"meta": {"command": "python benchmarks/quality_verdicts.py", "device": "cpu"},
              "sets": ["short"], "sentences": 8, "baseline_s": 9.0, "cache_hit": True,
              "workers": 1, "weights": "the embedded voice", "baseline": "fp32",
              "settings": report.settings, "rows": [judged, fell_back]}
    md = bench.markdown(result)
    assert "Command: `python benchmarks/quality_verdicts.py`" in md
    assert "- Baseline: fp32" in md and "from the cache" in md
    wer = report.check("WER")
    assert wer.outcome != "pass"
    assert (f"| bf16 | WER | {wer.baseline * 100:.1f}% (floor) | {wer.candidate * 100:.1f}% | "
            f"{wer.delta * 100:+.1f} ({wer.low * 100:+.1f} to {wer.high * 100:+.1f}) points | "
            f"{wer.verdict} |") in md
    for name in mos_fields():  # every MOS proxy reading, a new one included
        assert f"| bf16 | {mos_label(name)} |" in md
    assert "| int8-weight | not judged: fell back to quant none |" in md
    assert "## Worst sentences: bf16" in md and "[fp32](a/fp32.wav)" in md
