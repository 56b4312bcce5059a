"""The knob panel maps to PipelineConfig and back, and says when a family ignores a knob."""

import gradio as gr
import pytest

from lab.config import LIMITS, SAMPLING_LIMITS, PipelineConfig, list_presets, load_preset, to_dict
from lab.models.registry import FAMILIES, family
from lab.ui.knobs import (
    DUMMY_HEADING,
    GOVERNED,
    KNOB_FIELDS,
    KnobError,
    Knobs,
    check_machine,
    config_from_knobs,
    family_note,
    knob_values,
)
from lab.ui.panel import build_panel, panel_config, preset_outputs
from lab.ui.pipelines import PipelineCache


def _with(cfg: PipelineConfig, **changes) -> list:
    values = dict(zip(KNOB_FIELDS, knob_values(cfg), strict=True))
    values.update(changes)
    return [values[k] for k in KNOB_FIELDS]


def test_round_trip_keeps_every_field_including_preset_only_ones():
    cfg = PipelineConfig(family="orpheus", weights="dummy", dtype="bf16", batch_size=4,
                         kv_cache="dynamic", crossfade_ms=7.0, max_chars=300)
    assert config_from_knobs(cfg, knob_values(cfg)) == cfg


def test_slider_floats_become_integers_and_fractions_are_refused():
    cfg = PipelineConfig()
    out = config_from_knobs(cfg, _with(cfg, batch_size=4.0, decode_interval=16.0))
    assert (out.batch_size, out.decode_interval) == (4, 16)
    with pytest.raises(KnobError, match="batch_size=2.5 must be a whole number"):
        config_from_knobs(cfg, _with(cfg, batch_size=2.5))


def test_invalid_value_is_a_knob_error_naming_the_field():
    with pytest.raises(KnobError, match="quant='int3'"):
        config_from_knobs(PipelineConfig(), _with(PipelineConfig(), quant="int3"))


@pytest.mark.parametrize(
    ("knob", "value"),
    [("kv_cache", "dynamic"), ("continuous_batching", False), ("temperature", 1.2),
     ("weights", "dummy")],
)
def test_autoregressive_knobs_are_refused_for_piper(knob, value):
    cfg = PipelineConfig(family="piper-vits")
    with pytest.raises(KnobError, match="does not apply to piper-vits"):
        config_from_knobs(cfg, _with(cfg, **{knob: value}))


def test_same_knobs_are_fine_for_orpheus():
    cfg = PipelineConfig(family="orpheus")
    out = config_from_knobs(cfg, _with(cfg, kv_cache="dynamic", temperature=1.2))
    assert out.kv_cache == "dynamic" and out.sampling.temperature == 1.2


def test_cuda_device_without_gpu_is_refused():
    with pytest.raises(KnobError, match="no CUDA GPU"):
        check_machine(PipelineConfig(device="cuda"), cuda_available=False)
    check_machine(PipelineConfig(device="cuda"), cuda_available=True)


def test_family_note_warns_loudly_about_dummy_orpheus_only():
    assert DUMMY_HEADING in family_note("orpheus", "dummy")
    assert "NOISE" in family_note("orpheus", "dummy")
    assert DUMMY_HEADING not in family_note("orpheus", "real")
    assert "do not apply" in family_note("piper-vits", "real")


def test_preset_loader_fills_knobs_or_warns_without_changing_them(tmp_path):
    good = preset_outputs("cpu-default", "cpu-default", width=len(KNOB_FIELDS) + 3)
    assert good[0] == to_dict(load_preset("cpu-default"))
    assert good[-1].startswith("Loaded preset")
    bad = tmp_path / "bad.yaml"
    bad.write_text("famly: piper-vits\n")
    out = preset_outputs(str(bad), "bad.yaml", width=len(KNOB_FIELDS) + 3)
    assert "unknown key 'famly'" in out[-1]
    assert all(v == gr.skip() for v in out[:-1])
    broken = tmp_path / "broken.yaml"
    broken.write_text("family: [unclosed\n")
    assert "not valid YAML" in preset_outputs(str(broken), "broken.yaml", width=4)[-1]


def test_panel_builds_inside_blocks_and_reads_configs():
    with gr.Blocks():
        panel = build_panel(PipelineConfig(), "t", preset="cpu-default")
    assert isinstance(panel.knobs, Knobs)
    assert len(panel.knobs.inputs()) == len(KNOB_FIELDS)
    data = {panel.base: to_dict(PipelineConfig(batch_size=3))}
    data.update(zip(panel.knobs.inputs(), knob_values(PipelineConfig(dtype="bf16")), strict=True))
    assert panel.config(data) == PipelineConfig(dtype="bf16")
    with pytest.raises(KnobError, match="no longer valid"):
        panel_config({"family": "nope"}, *knob_values(PipelineConfig()))


class _Loaded:
    """Stands for a loaded pipeline: the cache only keys, returns and closes it."""

    def __init__(self, cfg, closed: list) -> None:
        self.cfg, self.closed = cfg, closed

    def close(self) -> None:
        self.closed.append(self.cfg)


def test_pipeline_cache_loads_once_and_evicts_least_recent():
    built, closed = [], []

    def factory(cfg, on_stage=None):
        built.append(cfg)
        if on_stage is not None:
            on_stage(f"loading {cfg.family}")
        return _Loaded(cfg, closed)

    cache = PipelineCache(capacity=2, factory=factory)
    a, b, c = PipelineConfig(seed=1), PipelineConfig(seed=2), PipelineConfig(seed=3)
    first = cache.get(a)
    assert cache.get(a) is first and len(built) == 1
    cache.get(b)
    cache.get(a)
    cache.get(c)
    assert a in cache and c in cache and b not in cache
    assert closed == [b]  # the evicted pipeline's worker is released
    messages = []
    cache.get(b, on_load=messages.append)
    assert len(built) == 4 and messages and "loading piper-vits" in messages[0]


def test_pipeline_cache_keeps_nothing_when_loading_fails():
    def factory(cfg, on_stage=None):
        raise OSError("weights not found")

    cache = PipelineCache(factory=factory)
    with pytest.raises(OSError, match="weights not found"):
        cache.get(PipelineConfig())
    assert len(cache) == 0


def _knob(app, panel: str, name: str):
    return app.component(f"{panel}-{name.replace('_', '-')}")


@pytest.mark.parametrize("preset", list_presets())
def test_every_shipped_preset_fits_every_panel_and_round_trips(built_app, preset):
    """What Gradio does to each value before a handler sees it (a bounds or choices check)
    must pass, and the values it hands over must rebuild the same config."""
    cfg = load_preset(preset)
    for panel in built_app.panels:
        handed = []
        for name, value in zip(KNOB_FIELDS, knob_values(cfg), strict=True):
            widget = _knob(built_app, panel, name)
            try:
                handed.append(widget.preprocess(value))
            except gr.Error as err:
                pytest.fail(f"{preset}: {panel} {name}={value!r} does not fit its widget: {err}")
        assert panel_config(to_dict(cfg), *handed) == cfg
        assert panel_config(to_dict(cfg), *knob_values(cfg)) == cfg


def test_numeric_knob_ranges_are_the_config_limits(built_app):
    limits = {**LIMITS, **SAMPLING_LIMITS}
    numeric = [n for n in KNOB_FIELDS if n in limits]
    assert numeric == ["batch_size", "decode_interval", "max_decode_interval", "grow_lead_ms",
                       "rush_lead_ms", "first_chunk_frames", "first_chunk_wait", "overlap",
                       "crossfade_ms", "seed", "mixed_prefill", "admit_lead_ms", "admit_round_ms",
                       "temperature", "top_p"]
    for panel in built_app.panels:
        for name in numeric:
            widget = _knob(built_app, panel, name)
            assert (widget.minimum, widget.maximum) == limits[name], (panel, name)
    ab_seed = built_app.component("ab-seed")
    assert (ab_seed.minimum, ab_seed.maximum) == LIMITS["seed"]


def test_quantization_is_explained_by_the_family_declaration(built_app):
    piper = family("piper-vits").quantization
    assert "linear layers only" in piper and "convolutions" in piper
    orpheus = family("orpheus").quantization
    assert "language model's linear layers" in orpheus and "CUDA" in orpheus
    for name in FAMILIES:
        assert f"**Quantization:** {family(name).quantization}" in family_note(name, "real")
    assert "precision, quantization" not in family_note("piper-vits", "real")
    for panel in built_app.panels:
        name = _knob(built_app, panel, "family").value
        assert _knob(built_app, panel, "quant").info == family(name).quantization


def test_changing_family_rewrites_the_quant_info_and_the_note(built_app):
    for panel in built_app.panels:
        (handler,) = built_app.handlers(f"{panel}-family", "change")
        note = built_app.component(f"{panel}-family-note")
        assert handler.outputs[0] == note
        assert handler.outputs[1:-1] == [_knob(built_app, panel, n) for n in GOVERNED]
        assert handler.outputs[-1] == built_app.component(f"{panel}-ar-engine")
        text, *updates, engine = handler.fn("orpheus", "dummy")
        assert engine["open"] is True
        quant = dict(zip(GOVERNED, updates, strict=True))["quant"]
        assert quant["info"] == family("orpheus").quantization
        assert DUMMY_HEADING in text and family("orpheus").quantization in text


def test_changing_weights_rewrites_only_the_note(built_app):
    for panel in built_app.panels:
        (handler,) = built_app.handlers(f"{panel}-weights", "change")
        assert handler.outputs == [built_app.component(f"{panel}-family-note")]
        assert DUMMY_HEADING in handler.fn("orpheus", "dummy")
