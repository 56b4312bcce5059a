"""benchmarks/seed_units.py: its tables against the seed's figures, from synthetic rows."""

import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def seeds():
    sys.path.insert(0, str(BENCHMARKS))  # it reuses voice_bench's phoneme tables and header
    try:
        yield importlib.import_module("seed_units")  # imported, so its dataclass can resolve
    finally:
        sys.path.remove(str(BENCHMARKS))
        sys.modules.pop("seed_units", None)


def ident(family: str, weights: str = "real") -> dict:
    return {"family": family, "label": f"{family} label", "preset": f"{family}-preset",
            "model": "default", "weights": weights}


def result(seeds, device: str, latency_ms: float, per_s: float) -> dict:
    figures = {"latency_ms": latency_ms, "latency_ms_min": latency_ms - 5,
               "latency_ms_max": latency_ms + 5, "pass_latency_ms": [latency_ms],
               "ttfa_ms": 40.0, "streamed_ms": latency_ms + 20, "audio_s": 2.4, "chars": 50}
    latency = [{**ident("ar-voice"), **figures}, {**ident("orpheus", "dummy"), "error": "boom"}]
    throughput = [{**ident("ar-voice"), "batch": 8, "n": 32, "utterances_per_s": per_s,
                   "utterances_per_s_min": per_s, "utterances_per_s_max": per_s,
                   "audio_s_per_s": per_s * 2.4, "recompiles": 2}]
    return {"meta": {"command": "python benchmarks/seed_units.py", "device": "a device"},
            "device": device, "seed": seeds.SEED, "weights": seeds.weights_line(latency),
            "baseline": seeds.baseline_line(seeds.SEED), "anomalies": [], "notes": [],
            "sentences": {"seed": 0, "chars": "48-52", "latency": "A sentence.",
                          "throughput": ["x"] * 32},
            "settings": {"dummy_tokens": 280}, "latency": latency, "throughput": throughput}


@pytest.mark.parametrize(("value", "higher", "verdict"), [
    (150.0, False, "meets target"), (400.0, False, "beats baseline, misses target"),
    (900.0, False, "behind baseline, misses target"), (60.0, True, "meets target"),
    (20.0, True, "beats baseline, misses target"), (10.0, True, "behind baseline, misses target"),
])
def test_a_gpu_figure_stands_against_the_seed_baseline_and_target(seeds, value, higher, verdict):
    seed = seeds.SEED["utterances_per_s" if higher else "latency_ms"]
    assert seeds.seed_cells(value, seed, "", gpu=True)["vs seed"] == verdict


def test_a_cpu_figure_is_never_set_against_the_seed(seeds):
    cells = seeds.seed_cells(1.0, seeds.SEED["latency_ms"], " ms", gpu=False)
    assert cells == {"seed baseline (V100)": "800 ms", "seed target": "< 200 ms",
                     "vs seed": "not comparable (CPU)"}


def test_markdown_puts_the_seed_columns_beside_the_lab_and_says_why_a_row_is_missing(seeds):
    text = seeds.markdown(result(seeds, "cpu", 300.0, 4.0))
    assert text.startswith("# ") and "Command: `python benchmarks/seed_units.py`" in text
    assert "not comparable to the seed's GPU numbers" in text and "warmed" in text
    assert "| 300.0 (295.0-305.0) | 800 ms | < 200 ms | not comparable (CPU) |" in text
    assert "| 8 | 32 | 4.00 | 15/s | > 50/s | not comparable (CPU) |" in text
    assert "dummy: speed only" in text and "did not run (see anomalies)" in text
    assert "Dummy weights measure speed only" in text


def test_a_gpu_run_is_judged_and_names_its_gpu(seeds):
    text = seeds.markdown(result(seeds, "cuda", 150.0, 20.0))
    assert "| meets target |" in text and "| beats baseline, misses target |" in text
    assert "this run's GPU is a device" in text


def test_anomalies_name_a_family_that_did_not_run_and_a_compile_while_timed(seeds):
    rows = result(seeds, "cpu", 300.0, 4.0)
    notes = seeds.anomalies_of(rows["latency"], rows["throughput"])
    assert notes[0] == "orpheus label did not run: boom"
    assert "ar-voice label, batch 8: torch.compile built 2 graph(s)" in notes[1]


def test_defaults_follow_the_device_quick_and_recording(seeds):
    quick = seeds.parse_args(["--quick"])
    assert (quick.batch, quick.n, quick.repeats, quick.stem) == ([1, 4], 4, 1, "seed_units_cpu")
    gpu = seeds.parse_args(["--device", "cuda"])
    assert (gpu.batch, gpu.n, gpu.repeats) == ([1, 8, 32], 32, 3)
    assert seeds.parse_args(["--record-phonemes", "p.json"]).n == 32
    with pytest.raises(SystemExit):
        seeds.parse_args(["--batch", "1,8", "--n", "4"])
    with pytest.raises(SystemExit):
        seeds.parse_args(["--families", "piper-vits,nope"])
