"""The `lab` command: synth writes a real WAV and prints timings; bad input exits with a message."""

import json
import re

import numpy as np
import pytest
import soundfile as sf

from lab.cli import main

GIB = 2**30


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch):
    """Each test keeps its rate book in its own folder."""
    folder = tmp_path / "lab-data"
    monkeypatch.setenv("LAB_DATA_DIR", str(folder))
    return folder


def no_loading(monkeypatch):
    import lab.pipeline

    def refuse_to_load(*_args, **_kwargs):
        raise AssertionError("a pipeline was built after the estimate refused the run")

    monkeypatch.setattr(lab.pipeline.Pipeline, "__init__", refuse_to_load)


def with_ram(monkeypatch, gib: float) -> None:
    import lab.estimate

    monkeypatch.setattr(lab.estimate, "host_available", lambda: int(gib * GIB))


def test_synth_writes_audio_and_prints_timings(tmp_path, capsys):
    out = tmp_path / "hello.wav"
    assert main(["synth", "Hello from the lab.", "-o", str(out), "--set", "stream=false"]) == 0
    audio, rate = sf.read(out)
    assert rate == 22050 and len(audio) > rate // 2 and np.abs(audio).max() > 0.05
    printed = capsys.readouterr()
    for name in ("stage vocoder", "ttfb", "real-time factor"):
        assert name in printed.out
    assert printed.err.splitlines()[:2] == [
        "loading piper-vits weights (default) onto cpu",
        "warming up (compile, graph capture, first-call kernels)"], "set-up goes to stderr"


def test_bad_override_and_empty_text_exit_with_clear_errors(tmp_path, capsys):
    assert main(["synth", "Hi.", "--set", "dtyp=bf16", "-o", str(tmp_path / "x.wav")]) == 2
    assert "unknown key 'dtyp'" in capsys.readouterr().err
    assert main(["synth", "   ", "-o", str(tmp_path / "y.wav")]) == 2
    assert "whitespace" in capsys.readouterr().err
    assert not (tmp_path / "y.wav").exists()


def test_presets_lists_the_shipped_files(capsys):
    assert main(["presets"]) == 0
    assert "cpu-default" in capsys.readouterr().out.split()


def test_bench_writes_json_csv_and_markdown(tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_text("One small test.\nA second, slightly longer test line.\n")
    out = tmp_path / "bench"
    assert main(["bench", "--texts", str(texts), "--batch-sizes", "1,2", "--warmup", "0",
                 "--out", str(out), "--stem", "cpu"]) == 0
    rows = json.loads((out / "cpu.json").read_text())["rows"]
    assert [r["batch_size"] for r in rows] == [1, 2]
    assert all(r["audio_s"] > 0 and r["rtf"] > 0 for r in rows)
    assert (out / "cpu.csv").read_text().count("\n") == 3
    assert "batch_size" in (out / "cpu.md").read_text()


def test_eval_prints_meters_and_a_pass_against_its_own_reference(tmp_path, capsys):
    out = tmp_path / "take.wav"
    text = "The blue kettle boiled over on the stove."
    assert main(["synth", text, "-o", str(out)]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--text", text, "--ref", str(out)]) == 0
    printed = capsys.readouterr().out
    for name in ("DNSMOS SIG/BAK/OVRL", "Distill-MOS", "WER", "PESQ wb", "STOI"):
        assert name in printed
    assert "FAIL" not in printed and "PASS" in printed.upper()


def test_eval_of_a_missing_file_is_a_clear_error(capsys):
    assert main(["eval", "no-such.wav", "--text", "hi"]) == 2
    assert "audio file not found" in capsys.readouterr().err


def test_a_bad_output_path_fails_before_any_model_loads(tmp_path, capsys, monkeypatch):
    import lab.pipeline

    def no_load(*_args, **_kwargs):
        raise AssertionError("the pipeline was built before the output path was checked")

    monkeypatch.setattr(lab.pipeline.Pipeline, "__init__", no_load)
    for bad, message in ((tmp_path / "missing" / "x.wav", "does not exist"),
                         (tmp_path / "x.mp3", "must end in one of"),
                         (tmp_path, "must end in one of")):
        assert main(["synth", "Hello.", "-o", str(bad)]) == 2
        assert message in capsys.readouterr().err


def test_synth_refuses_to_overwrite_without_force(tmp_path, capsys):
    out = tmp_path / "take.wav"
    out.write_bytes(b"keep me")
    assert main(["synth", "Hello.", "-o", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and out.read_bytes() == b"keep me"
    assert main(["synth", "Hello.", "-o", str(out), "--force"]) == 0
    assert sf.info(out).samplerate == 22050
    printed = capsys.readouterr().out
    assert "warm-up (once)" in printed and "not part of the request's timings" in printed


def test_unreadable_audio_is_one_clear_line_and_exit_2(tmp_path, capsys):
    junk = tmp_path / "notes.wav"
    junk.write_text("this is not audio")
    assert main(["eval", str(junk), "--text", "hello"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read") and err.count("\n") == 1
    assert "Traceback" not in err


def test_eval_exits_1_when_the_verdict_fails(tmp_path, capsys):
    text = "The blue kettle boiled over on the stove."
    ref = tmp_path / "ref.wav"
    assert main(["synth", text, "-o", str(ref)]) == 0
    audio, rate = sf.read(ref)
    noisy = audio + np.random.default_rng(0).normal(0, 0.3, audio.shape)
    bad = tmp_path / "noisy.wav"
    sf.write(bad, np.clip(noisy, -1, 1), rate)
    capsys.readouterr()
    assert main(["eval", str(bad), "--text", text, "--ref", str(ref)]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_set_hints_the_closest_key_and_accepts_dotted_keys(tmp_path, capsys):
    from lab.config import load_preset, parse_overrides

    assert main(["synth", "Hi.", "--set", "quantization=int8", "-o", str(tmp_path / "a.wav")]) == 2
    assert "did you mean 'quant'?" in capsys.readouterr().err
    assert main(["synth", "Hi.", "--set", "quant=int8", "-o", str(tmp_path / "a.wav")]) == 2
    assert "did you mean 'int8-weight' or 'int8-dynamic' or 'int8-static'?" in \
        capsys.readouterr().err
    cfg = load_preset("orpheus-tiny-cpu", **parse_overrides(["sampling.temperature=0.7"]))
    assert cfg.sampling.temperature == 0.7 and cfg.sampling.max_tokens == 280


def test_malformed_batch_sizes_get_a_usage_message(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "--texts", "x.txt", "--batch-sizes", "1,four"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "usage: lab bench" in err and "'1,four' is not a comma-separated list" in err


def test_app_takes_a_data_dir_and_no_warm(tmp_path, monkeypatch):
    import lab.ui

    seen = {}
    monkeypatch.setattr(lab.ui, "launch", lambda **kwargs: seen.update(kwargs))
    assert main(["app", "--data-dir", str(tmp_path), "--no-warm", "--port", "7999"]) == 0
    assert seen == {"host": "127.0.0.1", "port": 7999, "data_dir": str(tmp_path), "warm": False}


@pytest.mark.parametrize("mode", ["none", "static"])
def test_synth_on_an_autoregressive_preset_reports_the_kv_cache_and_steps(tmp_path, capsys, mode):
    out = tmp_path / f"{mode}.wav"
    assert main(["synth", "Hi there.", "-o", str(out), "--preset", "orpheus-tiny-cpu",
                 "--set", f"kv_cache={mode}", "--set", "sampling.max_tokens=28"]) == 0
    printed = capsys.readouterr().out
    assert "ms per decode step" in printed and "tokens per s" in printed
    assert re.search(rf"^KV cache +{mode}\b", printed, re.M)


def test_synth_refuses_a_knob_the_family_cannot_honour(tmp_path, capsys):
    out = tmp_path / "x.wav"
    assert main(["synth", "Hi.", "-o", str(out), "--set", "cuda_graphs=true"]) == 2
    assert "cuda_graphs does not apply to piper-vits" in capsys.readouterr().err
    assert not out.exists()


def test_synth_prints_the_estimate_before_loading_and_records_the_rate(tmp_path, capsys,
                                                                      data_dir):
    out = tmp_path / "hi.wav"
    assert main(["synth", "Hello there.", "-o", str(out), "--set", "stream=false"]) == 0
    printed = capsys.readouterr().out
    assert printed.index("estimate on cpu:") < printed.index("model load (once)")
    book = json.loads((data_dir / "rates.json").read_text())["rates"]
    (key,) = book
    assert key.startswith("piper-vits:default") and "batch=1" in key
    assert {"rtf", "load_s", "warmup_s", "audio_s_per_char"} <= set(book[key])


THREE_B_ON_CPU = ["--preset", "orpheus-3b-dummy-gpu", "--set", "device=cpu", "--set",
                  "dtype=fp32", "--set", "batch_size=32"]


def test_a_3b_run_at_batch_32_that_would_not_fit_is_refused_before_loading(
        tmp_path, capsys, monkeypatch):
    with_ram(monkeypatch, 20)
    no_loading(monkeypatch)
    out = tmp_path / "x.wav"
    assert main(["synth", "Hello there.", "-o", str(out), *THREE_B_ON_CPU]) == 2
    captured = capsys.readouterr()
    assert "estimate on cpu:" in captured.out
    err = captured.err
    assert err.startswith("error: refused: needs about") and err.count("\n") == 1
    assert "20.0 GiB of RAM is available" in err and "--force" in err
    assert re.search(r"\d+\.\d GiB weights, \d+\.\d GiB KV cache", err)
    assert not out.exists()
    texts = tmp_path / "texts.txt"
    texts.write_text("One line.\n")
    assert main(["bench", "--texts", str(texts), "--batch-sizes", "1,32", "--out",
                 str(tmp_path / "b"), *THREE_B_ON_CPU]) == 2
    assert "refused: needs about" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()


def test_force_runs_past_a_refusal_with_a_warning(tmp_path, capsys, monkeypatch):
    with_ram(monkeypatch, 1 / 1024)  # 1 MiB: even the voice does not fit
    out = tmp_path / "forced.wav"
    assert main(["synth", "Hi.", "-o", str(out), "--set", "stream=false"]) == 2
    assert "refused" in capsys.readouterr().err and not out.exists()
    assert main(["synth", "Hi.", "-o", str(out), "--set", "stream=false", "--force"]) == 0
    assert "running despite the estimate (--force)" in capsys.readouterr().err
    assert sf.info(out).samplerate == 22050


def test_a_run_that_would_take_minutes_gets_a_warning_and_no_question(tmp_path, capsys,
                                                                      data_dir):
    from lab.config import load_preset
    from lab.estimate import Measured, record_rate

    cfg = load_preset("cpu-default", stream=False)
    record_rate(cfg, Measured(chars=10, synth_s=10_000.0, audio_s=1.0, load_s=1.0,
                              warmup_s=1.0), rates_dir=data_dir)
    out = tmp_path / "slow.wav"
    assert main(["synth", "Hi.", "-o", str(out), "--set", "stream=false"]) == 0
    err = capsys.readouterr().err
    assert "warning: would take about" in err and "min to synthesize" in err
    assert out.exists()


def test_bench_pins_threads_and_reports_each_pass(tmp_path, capsys, data_dir):
    import torch

    before = torch.get_num_threads()
    texts = tmp_path / "texts.txt"
    texts.write_text("One small test.\nA second line.\n")
    out = tmp_path / "bench"
    assert main(["bench", "--texts", str(texts), "--batch-sizes", "1", "--warmup", "0",
                 "--repeats", "2", "--threads", "1", "--set", "stream=false",
                 "--out", str(out), "--stem", "t"]) == 0
    assert torch.get_num_threads() == before
    report = json.loads((out / "t.json").read_text())
    (row,) = report["rows"]
    assert row["threads"] == 1 and report["meta"]["threads"] == 1
    assert len(row["pass_wall_s"]) == 2 and row["wall_s_min"] <= row["wall_s_max"]
    header = next(line for line in (out / "t.md").read_text().splitlines()
                  if line.startswith("| config"))
    assert {"threads", "wall_s", "load_ms", "warmup_ms"} <= {
        c.strip() for c in header.strip("|").split("|")}
    assert "estimate on cpu:" in capsys.readouterr().out
    book = json.loads((data_dir / "rates.json").read_text())["rates"]
    assert any("device=cpu/1 threads" in key for key in book)


def test_bench_rejects_a_bad_thread_count(tmp_path, capsys):
    texts = tmp_path / "texts.txt"
    texts.write_text("One line.\n")
    assert main(["bench", "--texts", str(texts), "--threads", "0"]) == 2
    assert "--threads 0 must be >= 1" in capsys.readouterr().err
