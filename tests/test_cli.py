"""The `lab` command: synth writes a real WAV and prints timings; bad input exits with a message."""

import json

import numpy as np
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
