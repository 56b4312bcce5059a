"""Presets and overrides are validated against the typed config, naming what is wrong."""

import pytest

from lab.config import ConfigError, PipelineConfig, from_dict, list_presets, load_preset


def test_every_shipped_preset_loads():
    names = list_presets()
    assert "cpu-default" in names
    for name in names:
        assert isinstance(load_preset(name), PipelineConfig)


def test_unknown_key_names_itself_and_the_valid_keys():
    with pytest.raises(ConfigError) as err:
        from_dict({"dtyp": "bf16"})
    assert "'dtyp'" in str(err.value) and "dtype" in str(err.value)


def test_bad_choice_lists_the_valid_choices():
    with pytest.raises(ConfigError, match=r"quant='int3'.*int8-weight"):
        from_dict({"quant": "int3"})


def test_wrong_types_are_rejected():
    with pytest.raises(ConfigError, match="batch_size"):
        from_dict({"batch_size": "four"})
    with pytest.raises(ConfigError, match="stream"):
        from_dict({"stream": "yes"})
    with pytest.raises(ConfigError, match="batch_size=0"):
        from_dict({"batch_size": 0})


def test_nested_sampling_keys_are_checked():
    cfg = from_dict({"sampling": {"temperature": 0.9}})
    assert cfg.sampling.temperature == 0.9 and cfg.sampling.top_k == 50
    with pytest.raises(ConfigError, match="'sampling.temp'"):
        from_dict({"sampling": {"temp": 1}})


def test_overrides_take_a_sampling_object_or_a_mapping():
    from lab.config import SamplingConfig

    cfg = load_preset("cpu-default", sampling=SamplingConfig(max_tokens=9))
    assert cfg.sampling.max_tokens == 9
    assert load_preset("cpu-default", sampling={"top_k": 5}).sampling.top_k == 5


def test_invalid_preset_file_is_reported(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("dtype: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_preset(bad)
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_preset(wrong)
    with pytest.raises(ConfigError, match="not found"):
        load_preset("no-such-preset")


def test_replace_validates_and_leaves_the_original_intact():
    cfg = PipelineConfig()
    assert cfg.replace(dtype="bf16").dtype == "bf16"
    with pytest.raises(ConfigError):
        cfg.replace(dtype="fp64")
    assert cfg.dtype == "fp32"


def test_numeric_knobs_are_checked_against_one_bounds_table():
    from lab.config import LIMITS

    for name, (low, high) in LIMITS.items():
        with pytest.raises(ConfigError, match=f"{name}=.*between"):
            PipelineConfig(**{name: type(high)(high * 2 + 1)})
        assert getattr(PipelineConfig(**{"crossfade_ms": 0.0, name: low}), name) == low
    assert PipelineConfig(batch_size=64).batch_size == 64


def test_overrides_change_one_nested_field_and_keep_the_rest():
    cfg = load_preset("orpheus-tiny-cpu", **{"sampling.top_k": 7})
    assert cfg.sampling.top_k == 7 and cfg.sampling.max_tokens == 280
    assert cfg.replace(sampling={"top_p": 0.5}).sampling.max_tokens == 280
    with pytest.raises(ConfigError, match="did you mean 'top_k'"):
        load_preset("cpu-default", **{"sampling.topk": 3})


def test_presets_and_sentence_sets_ship_inside_the_package():
    """Package data, declared in pyproject.toml, so an installed lab finds them too."""
    from importlib.resources import files
    from pathlib import Path

    from lab.frontend import list_sentence_sets

    shipped = {p.name for p in files("lab").joinpath("presets").iterdir()}
    assert {f"{name}.yaml" for name in list_presets()} == shipped
    sets = {p.name for p in files("lab").joinpath("data", "sentences").iterdir()}
    assert {f"{name}.txt" for name in list_sentence_sets()} == sets
    assert {"short", "medium", "long", "edge"} <= set(list_sentence_sets())
    project = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    for data in ("presets/*.yaml", "data/sentences/*.txt", "data/voice/*.safetensors",
                 "ui/player.js", "training/words/*.txt"):
        assert f'"{data}"' in project, data


def test_sampling_values_are_checked_against_their_bounds():
    from lab.config import SAMPLING_LIMITS, SamplingConfig

    for name, (low, high) in SAMPLING_LIMITS.items():
        with pytest.raises(ConfigError, match=f"sampling.{name}=.*between"):
            from_dict({"sampling": {name: type(high)(high * 2 + 1)}})
        assert getattr(SamplingConfig(**{name: low}), name) == low


def test_chunks_may_only_grow_from_the_decode_interval():
    with pytest.raises(ConfigError, match="max_decode_interval=4 is below decode_interval=8"):
        PipelineConfig(decode_interval=8, max_decode_interval=4)
    assert PipelineConfig(decode_interval=8, max_decode_interval=8).max_decode_interval == 8
    assert PipelineConfig(decode_interval=8).max_decode_interval == 0


def test_a_first_chunk_lies_between_the_decode_interval_and_its_right_context():
    with pytest.raises(ConfigError, match=r"first_chunk_frames=4 must lie in "
                                          r"\[decode_interval, decode_interval \+ overlap\] "
                                          r"= \[1, 3\]"):
        PipelineConfig(decode_interval=1, overlap=2, first_chunk_frames=4)
    with pytest.raises(ConfigError, match="first_chunk_frames=1 must lie in"):
        PipelineConfig(decode_interval=2, overlap=2, first_chunk_frames=1)
    cfg = PipelineConfig(decode_interval=1, overlap=2, first_chunk_frames=3)
    assert cfg.first_chunk_frames == 3
    with pytest.raises(ConfigError, match=r"first_chunk_wait=4 must lie in "
                                          r"\[decode_interval, decode_interval \+ overlap\] "
                                          r"= \[1, 3\]"):
        PipelineConfig(decode_interval=1, overlap=2, first_chunk_wait=4)
    with pytest.raises(ConfigError, match=r"first_chunk_frames=3 must lie in "
                                          r"\[decode_interval, first_chunk_wait\] = \[1, 2\]"):
        PipelineConfig(decode_interval=1, overlap=2, first_chunk_frames=3, first_chunk_wait=2)
    cfg = PipelineConfig(decode_interval=1, overlap=2, first_chunk_frames=2, first_chunk_wait=2)
    assert (cfg.first_chunk_frames, cfg.first_chunk_wait) == (2, 2)
    with pytest.raises(ConfigError, match=r"grow_lead_ms=-5.0 is out of range"):
        PipelineConfig(grow_lead_ms=-5.0)
    with pytest.raises(ConfigError, match=r"rush_lead_ms=-1.0 is out of range"):
        PipelineConfig(rush_lead_ms=-1.0)
    with pytest.raises(ConfigError, match=r"rush_lead_ms > 0 .* needs overlap >= 1"):
        PipelineConfig(overlap=0, crossfade_ms=0, rush_lead_ms=100)
