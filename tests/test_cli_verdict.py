"""`lab verdict`: a config against its fp32 reference on the lab's sentence sets, with the
reference's scores cached in the data directory and the outcome in the exit code."""

import json

from lab.cli import main


def test_the_reference_config_passes_and_its_reference_is_cached(tmp_path, capsys):
    args = ["verdict", "--sets", "short", "--limit", "2", "--data-dir", str(tmp_path),
            "--json", str(tmp_path / "v.json")]
    assert main(args) == 0
    first = capsys.readouterr().out
    assert "reference rendered and scored" in first and "**Quality: PASS** on 2 sentences" in first
    assert "(ASR floor)" in first and "| MCD (dB) | 0.000 (0.000 to 0.000) |" in first
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["outcome"] == "pass" and data["sentences"] == 2
    assert list((tmp_path / "score-cache").glob("*.npz"))
    assert main(args) == 0
    assert "reference cached" in capsys.readouterr().out


def test_unknown_set_and_unjudgeable_text_are_clear_errors(tmp_path, capsys):
    assert main(["verdict", "--sets", "nosuch", "--data-dir", str(tmp_path)]) == 2
    assert "sentence set 'nosuch' not found" in capsys.readouterr().err
    assert main(["verdict", "--sets", "edge", "--limit", "0", "--data-dir", str(tmp_path)]) == 2
    assert "no sentence the recogniser can judge" in capsys.readouterr().err


def test_made_up_sentences_join_the_sets(tmp_path, capsys):
    args = ["verdict", "--sets", "short", "--limit", "1", "--made-up", "2", "--data-dir",
            str(tmp_path), "--json", str(tmp_path / "v.json")]
    assert main(args) == 0
    assert "**Quality: PASS** on 3 sentences" in capsys.readouterr().out
    assert json.loads((tmp_path / "v.json").read_text())["sentences"] == 3
    assert main(["verdict", "--made-up", "-1", "--data-dir", str(tmp_path)]) == 2
    assert "--made-up -1" in capsys.readouterr().err
