"""The app and the CLI agree, from one declaration, on which knobs each family honours.

For every registered family and every knob of the panel: selecting the family greys the
widget out exactly when the family declares the knob unsupported, with the family's refusal
sentence as its info line; the panel refuses a moved value of exactly those knobs; and
`lab synth` refuses the same knobs with the same sentence.
"""

from __future__ import annotations

import json

import gradio as gr
import pytest

from lab.cli import main
from lab.config import (
    CHOICES,
    LIMITS,
    SAMPLING_LIMITS,
    PipelineConfig,
    list_presets,
    load_preset,
)
from lab.models.registry import FAMILIES, backend_class, family
from lab.ui.knobs import (
    GOVERNED,
    KNOB_FIELDS,
    LABELS,
    SAMPLING_FIELDS,
    KnobError,
    build_knobs,
    config_from_knobs,
    config_knob,
    family_note,
    knob_values,
)
from lab.ui.panel import preset_outputs


def _cpu_presets() -> dict[str, str]:
    """One shipped preset per family that runs without a GPU."""
    found: dict[str, str] = {}
    for name in list_presets():
        cfg = load_preset(name)
        if cfg.device != "cuda":
            found.setdefault(cfg.family, name)
    return found


PRESETS = _cpu_presets()
CASES = [(fam, knob) for fam in FAMILIES for knob in GOVERNED]


class Loaded(ValueError):
    """Raised where a backend would load: the config got past the family check."""


@pytest.fixture
def no_loading(monkeypatch):
    """Backends that stop at load, so the CLI runs its real checks without any weights."""
    def stop(cls, config, device):
        raise Loaded(f"{cls.family.name} would load")

    for name in FAMILIES:
        monkeypatch.setattr(backend_class(name), "load", classmethod(stop))


def _moved(name: str, base: PipelineConfig) -> object:
    """A valid value of widget `name` other than its default, for the preset `base` (the
    first chunk's bounds follow its decode interval and overlap)."""
    default = dict(zip(KNOB_FIELDS, knob_values(PipelineConfig()), strict=True))[name]
    if name in ("first_chunk_frames", "first_chunk_wait"):
        return base.decode_interval + base.overlap
    if name in CHOICES:
        return next(c for c in CHOICES[name] if c != default)
    if isinstance(default, bool):
        return not default
    low, high = {**LIMITS, **SAMPLING_LIMITS}[name]
    return high if default != high else low


def _refusal(fam: str, name: str) -> str | None:
    """The family's sentence for the knob behind widget `name`, or None if it acts."""
    knob = config_knob(name)
    declared = family(fam)
    return None if declared.supports(knob) else declared.refusals({knob})[0]


def _family_handler(built_app, panel: str = "synth"):
    (handler,) = built_app.handlers(f"{panel}-family", "change")
    return handler


def test_every_family_has_a_shipped_preset():
    assert set(PRESETS) == set(FAMILIES)


@pytest.mark.parametrize(("fam", "name"), CASES)
def test_selecting_a_family_greys_exactly_its_unsupported_knobs(built_app, fam, name):
    _, *updates, engine = _family_handler(built_app).fn(fam, "real")
    assert engine["open"] is family(fam).autoregressive, "the engine section opens for AR"
    update = dict(zip(GOVERNED, updates, strict=True))[name]
    refusal = _refusal(fam, name)
    assert update["interactive"] is (refusal is None)
    if refusal is not None:
        assert update["info"] == refusal
        default = dict(zip(KNOB_FIELDS, knob_values(PipelineConfig()), strict=True))[name]
        assert update["value"] == default, "a greyed widget must hold the default"
    else:
        assert "value" not in update and "does not apply" not in update["info"]


@pytest.mark.parametrize(("fam", "name"), CASES)
def test_the_panel_refuses_exactly_the_greyed_knobs(fam, name):
    base = load_preset(PRESETS[fam])
    values = dict(zip(KNOB_FIELDS, knob_values(base), strict=True))
    values[name] = _moved(name, base)
    refusal = _refusal(fam, name)
    if refusal is None:
        config_from_knobs(base, [values[k] for k in KNOB_FIELDS])
    else:
        with pytest.raises(KnobError) as err:
            config_from_knobs(base, [values[k] for k in KNOB_FIELDS])
        assert refusal in str(err.value)


@pytest.mark.parametrize(("fam", "name"), CASES)
def test_the_cli_refuses_exactly_the_greyed_knobs(fam, name, no_loading, tmp_path, capsys):
    key = f"sampling.{name}" if name in SAMPLING_FIELDS else name
    code = main(["synth", "Hi.", "-o", str(tmp_path / "out.wav"), "--preset", PRESETS[fam],
                 "--set", f"{key}={json.dumps(_moved(name, load_preset(PRESETS[fam])))}"])
    err = capsys.readouterr().err
    refusal = _refusal(fam, name)
    assert code == 2
    if refusal is None:
        assert err.strip().endswith("would load"), err
    else:
        assert err.strip() == f"error: {refusal}"


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_a_panel_built_on_a_family_starts_greyed_from_its_declaration(fam):
    with gr.Blocks():
        knobs = build_knobs(load_preset(PRESETS[fam]), "t")
    for name, widget in zip(GOVERNED, knobs.governed(), strict=True):
        refusal = _refusal(fam, name)
        assert widget.interactive is (refusal is None), name
        if refusal is not None:
            assert widget.info == refusal


@pytest.mark.parametrize("fam", list(FAMILIES))
def test_the_note_names_every_unsupported_knob_from_the_declaration(fam):
    note = family_note(fam, "real")
    declared = family(fam)
    for knob, reason in declared.unsupported.items():
        assert LABELS.get(knob, f"`{knob}`") in note and reason in note
    assert ("do not apply" in note) is bool(declared.unsupported)


def test_a_preset_with_a_refused_knob_is_invalid_as_in_the_cli(tmp_path):
    path = tmp_path / "kv.yaml"
    path.write_text("family: piper-vits\nkv_cache: dynamic\n")
    out = preset_outputs(str(path), "kv.yaml", width=len(KNOB_FIELDS) + 3)
    assert all(v == gr.skip() for v in out[:-1])
    assert family("piper-vits").refusals({"kv_cache"})[0] in out[-1]
