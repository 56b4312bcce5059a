"""The `lab` command: synth writes a real WAV and prints timings; bad input exits with a message."""

import json
import re

import numpy as np
import pytest
import soundfile as sf

from lab.cli import main


def test_synth_writes_audio_and_prints_timings(tmp_path, capsys):
    out = tmp_path / "hello.wav"
    assert main(["synth", "Hello from the lab.", "-o", str(out), "--set", "stream=false"]) == 0
    audio, rate = sf.read(out)
    assert rate == 22050 and len(audio) > rate // 2 and np.abs(audio).max() > 0.05
    printed = capsys.readouterr().out
    for name in ("stage vocoder", "ttfb", "real-time factor"):
        assert name in printed


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
    for name in ("DNSMOS SIG/BAK/OVRL", "WER", "PESQ wb", "STOI"):
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
    from lab.cli import _overrides
    from lab.config import load_preset

    assert main(["synth", "Hi.", "--set", "quantization=int8", "-o", str(tmp_path / "a.wav")]) == 2
    assert "did you mean 'quant'?" in capsys.readouterr().err
    assert main(["synth", "Hi.", "--set", "quant=int8", "-o", str(tmp_path / "a.wav")]) == 2
    assert "did you mean 'int8-weight' or 'int8-dynamic'?" in capsys.readouterr().err
    cfg = load_preset("orpheus-tiny-cpu", **_overrides(["sampling.temperature=0.7"]))
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
