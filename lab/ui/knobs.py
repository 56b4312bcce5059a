"""The knob panel: Gradio widgets that stand for a PipelineConfig, and back again.

Every tab that runs a pipeline (synthesize, A/B, benchmark, profile) shows the same panel,
so one mapping between widgets and config fields lives here. Which knobs act is read from the
selected family's declaration (`lab.models.backend.Family`), never from a family name: a knob
the family cannot honour is greyed out with the family's reason, the same sentence the CLI
prints when a preset or `--set` asks for it, so a setting is never silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import gradio as gr

from lab.config import (
    CHOICES,
    LIMITS,
    SAMPLING_LIMITS,
    ConfigError,
    PipelineConfig,
    from_dict,
    to_dict,
)
from lab.models.backend import Family
from lab.models.registry import family as family_info

KNOB_FIELDS = (
    "family",
    "weights",
    "device",
    "dtype",
    "codec_dtype",
    "quant",
    "compile",
    "batch_size",
    "decode_interval",
    "max_decode_interval",
    "grow_lead_ms",
    "rush_lead_ms",
    "first_chunk_frames",
    "first_chunk_wait",
    "overlap",
    "crossfade_ms",
    "seed",
    "kv_cache",
    "kv_dtype",
    "mixed_prefill",
    "admit_lead_ms",
    "admit_round_ms",
    "continuous_batching",
    "cuda_graphs",
    "prefix_cache",
    "codec_side_stream",
    "temperature",
    "top_p",
)
SAMPLING_FIELDS = ("temperature", "top_p")
# Every widget but the family picker: each one's state follows the selected family.
GOVERNED = tuple(n for n in KNOB_FIELDS if n != "family")
LABELS = {
    "family": "Model family",
    "weights": "Weights",
    "device": "Device",
    "dtype": "Precision",
    "codec_dtype": "Codec precision",
    "quant": "Quantization",
    "compile": "torch.compile",
    "batch_size": "Batch size",
    "decode_interval": "Decode interval (frames)",
    "max_decode_interval": "Grow chunks up to (frames; 0 = fixed)",
    "grow_lead_ms": "Grow chunks once audio in hand exceeds (ms)",
    "rush_lead_ms": "Send a chunk early, with less right context, at audio in hand (ms; 0 = off)",
    "first_chunk_frames": "First chunk (frames; 0 = decode interval)",
    "first_chunk_wait": "First chunk waits for (frames; 0 = decode interval + overlap)",
    "overlap": "Window overlap (frames)",
    "crossfade_ms": "Crossfade (ms)",
    "seed": "Sampling seed",
    "kv_cache": "KV cache",
    "kv_dtype": "KV storage",
    "mixed_prefill": "Prompt tokens carried per decode step",
    "admit_lead_ms": "Admit new streams while every started listener holds (ms; 0 = always)",
    "admit_round_ms": "Admit new streams while the engine's rounds take at most (ms; 0 = always)",
    "prefix_cache": "Voice prefix cache",
    "codec_side_stream": "Codec on a side CUDA stream",
    "continuous_batching": "Continuous batching",
    "cuda_graphs": "CUDA graphs (decode step)",
    "temperature": "Temperature",
    "top_p": "Top-p",
    "sampling": "Sampling (temperature, top-p)",
}
STEPS = {"batch_size": 1, "decode_interval": 1, "max_decode_interval": 1, "grow_lead_ms": 10,
         "rush_lead_ms": 10, "first_chunk_frames": 1, "first_chunk_wait": 1, "mixed_prefill": 8,
         "admit_lead_ms": 10, "admit_round_ms": 0.5, "overlap": 1, "crossfade_ms": 0.5,
         "temperature": 0.05, "top_p": 0.01}


class KnobError(ValueError):
    """The knobs ask for something this family or this machine cannot do."""


DUMMY_HEADING = "## ⚠️ DUMMY WEIGHTS: THIS WILL SOUND LIKE NOISE"


def _defaults() -> dict:
    flat = to_dict(PipelineConfig())
    sampling = flat.pop("sampling")
    return {**flat, **{k: sampling[k] for k in SAMPLING_FIELDS}}


def knob_values(cfg: PipelineConfig) -> list:
    """Widget values for `cfg`, in KNOB_FIELDS order."""
    flat = to_dict(cfg)
    sampling = flat.pop("sampling")
    flat.update({k: sampling[k] for k in SAMPLING_FIELDS})
    return [flat[name] for name in KNOB_FIELDS]


INTEGER_FIELDS = frozenset(f.name for f in fields(PipelineConfig) if f.type == "int")
"""The config's whole-number knobs, read from its field types."""


def _typed(name: str, value: object) -> object:
    """Sliders hand back floats; integer fields must stay integers for validation."""
    if name in INTEGER_FIELDS and value is not None:
        if float(value) != int(float(value)):
            raise KnobError(f"{name}={value} must be a whole number")
        return int(float(value))
    return value


def config_knob(name: str) -> str:
    """The config knob a widget sets: both sampling sliders set `sampling`."""
    return "sampling" if name in SAMPLING_FIELDS else name


def config_from_knobs(base: PipelineConfig, values: list | tuple) -> PipelineConfig:
    """`base` (a preset) with the widget values applied, validated like a preset.

    Raises KnobError for a value the config rejects, or for a knob the family declares it
    cannot honour moved away from its default.
    """
    if len(values) != len(KNOB_FIELDS):
        raise KnobError(f"expected {len(KNOB_FIELDS)} knob values, got {len(values)}")
    knobs = {name: _typed(name, v) for name, v in zip(KNOB_FIELDS, values, strict=True)}
    _check_family(knobs)
    data = to_dict(base)
    data["sampling"] = {**data["sampling"], **{k: knobs.pop(k) for k in SAMPLING_FIELDS}}
    try:
        return from_dict({**data, **knobs})
    except ConfigError as err:
        raise KnobError(str(err)) from err


def _check_family(knobs: dict) -> None:
    defaults = _defaults()
    changed = {config_knob(n) for n in KNOB_FIELDS if knobs[n] != defaults[n]}
    problems = family_info(knobs["family"]).refusals(changed)
    if problems:
        raise KnobError("; ".join(problems) + ". Reset these knobs or choose a family that "
                        "supports them.")


def check_machine(cfg: PipelineConfig, cuda_available: bool) -> None:
    """Reject a config this machine cannot run at all (fallbacks are the pipeline's job)."""
    if cfg.device == "cuda" and not cuda_available:
        raise KnobError("device=cuda asked for, but there is no CUDA GPU here; use auto or cpu")


def _knob_name(knob: str) -> str:
    return LABELS.get(knob, f"`{knob}`")


def _unsupported_lines(fam: Family) -> list[str]:
    """One bullet per declared reason, naming every knob that reason covers."""
    by_reason: dict[str, list[str]] = {}
    for knob, reason in fam.unsupported.items():
        by_reason.setdefault(reason, []).append(_knob_name(knob))
    return [f"- **{', '.join(names)}**: {reason}." for reason, names in by_reason.items()]


def family_note(name: str, weights: str) -> str:
    """Markdown under the panel: what the family ignores and why, and the dummy-weights alarm."""
    fam = family_info(name)
    lines = _unsupported_lines(fam)
    note = f"**{fam.name}**: {fam.description}. "
    note += ("These knobs do not apply (those on the panel are greyed out):\n"
             + "\n".join(lines)) if lines else "Every knob applies."
    note += f"\n\n**Quantization:** {fam.quantization}."
    if weights == "dummy" and fam.dummy_warning:
        note = (f"{DUMMY_HEADING}\n{fam.dummy_warning.capitalize()}. Timings are real. Point "
                f"`model` at local weights for real output.\n\n{note}")
    return note


def widget_state(name: str, fam: Family) -> dict:
    """Whether the widget for `name` can be turned under `fam`, and what its info line says:
    the family's own refusal sentence when it cannot."""
    knob = config_knob(name)
    if not fam.supports(knob):
        return {"interactive": False, "info": fam.refusals({knob})[0]}
    return {"interactive": True, "info": fam.quantization if name == "quant" else ""}


def family_view(name: str, weights: str) -> list:
    """The note, one update per widget in GOVERNED and the engine section's fold, for a newly
    selected family: the autoregressive engine's knobs open for a family that has one.

    A greyed-out widget is also put back to its default, so a value the family refuses can
    never be left behind where the user cannot change it.
    """
    fam, defaults = family_info(name), _defaults()
    updates = []
    for knob in GOVERNED:
        state = widget_state(knob, fam)
        if not state["interactive"]:
            state["value"] = defaults[knob]
        updates.append(gr.update(**state))
    shown = weights if fam.supports("weights") else defaults["weights"]
    return [family_note(name, shown), *updates, gr.update(open=fam.autoregressive)]


@dataclass
class Knobs:
    """The widgets of one panel; `inputs()` lists them in KNOB_FIELDS order."""

    family: gr.Dropdown
    weights: gr.Dropdown
    device: gr.Dropdown
    dtype: gr.Dropdown
    codec_dtype: gr.Dropdown
    quant: gr.Dropdown
    compile: gr.Dropdown
    batch_size: gr.Slider
    decode_interval: gr.Slider
    max_decode_interval: gr.Slider
    grow_lead_ms: gr.Slider
    rush_lead_ms: gr.Slider
    first_chunk_frames: gr.Slider
    first_chunk_wait: gr.Slider
    overlap: gr.Slider
    crossfade_ms: gr.Slider
    seed: gr.Number
    kv_cache: gr.Dropdown
    kv_dtype: gr.Dropdown
    mixed_prefill: gr.Slider
    admit_lead_ms: gr.Slider
    admit_round_ms: gr.Slider
    continuous_batching: gr.Checkbox
    cuda_graphs: gr.Checkbox
    prefix_cache: gr.Checkbox
    codec_side_stream: gr.Checkbox
    temperature: gr.Slider
    top_p: gr.Slider
    note: gr.Markdown
    engine: gr.Accordion

    def inputs(self) -> list[gr.components.Component]:
        return [getattr(self, name) for name in KNOB_FIELDS]

    def governed(self) -> list[gr.components.Component]:
        """The widgets a family can grey out, in GOVERNED order."""
        return [getattr(self, name) for name in GOVERNED]


def _elem_id(key: str, name: str) -> str:
    return f"{key}-{name.replace('_', '-')}"


def _dropdown(name: str, value: str, key: str, fam: Family) -> gr.Dropdown:
    """A choice knob offering exactly the values the config accepts."""
    return gr.Dropdown(list(CHOICES[name]), value=value, label=LABELS[name],
                       elem_id=_elem_id(key, name), **widget_state(name, fam))


def _slider(name: str, value: float, key: str, fam: Family) -> gr.Slider:
    """A numeric knob whose range is the config's own bound, so any valid preset fits it."""
    low, high = {**LIMITS, **SAMPLING_LIMITS}[name]
    return gr.Slider(low, high, value=value, step=STEPS[name], label=LABELS[name],
                     elem_id=_elem_id(key, name), **widget_state(name, fam))


def _checkbox(name: str, value: bool, key: str, fam: Family) -> gr.Checkbox:
    return gr.Checkbox(value=value, label=LABELS[name], elem_id=_elem_id(key, name),
                       **widget_state(name, fam))


def _seed(value: int, key: str, fam: Family) -> gr.Number:
    low, high = LIMITS["seed"]
    return gr.Number(value=value, precision=0, minimum=low, maximum=high, label=LABELS["seed"],
                     elem_id=_elem_id(key, "seed"), **widget_state("seed", fam))


def build_knobs(cfg: PipelineConfig, key: str) -> Knobs:
    """Lay out the panel inside the current Blocks context, initialised from `cfg`.

    Selecting a family regreys the panel from that family's declaration; changing the
    weights only rewrites the note (its dummy-weights alarm).
    """
    v = dict(zip(KNOB_FIELDS, knob_values(cfg), strict=True))
    fam = family_info(cfg.family)
    with gr.Row():
        family, weights, device, dtype, codec_dtype, quant, compile_mode = (
            _dropdown(n, v[n], key, fam)
            for n in ("family", "weights", "device", "dtype", "codec_dtype", "quant", "compile"))
    with gr.Row():
        batch_size, decode_interval, overlap, crossfade = (
            _slider(n, v[n], key, fam)
            for n in ("batch_size", "decode_interval", "overlap", "crossfade_ms"))
        seed = _seed(v["seed"], key, fam)
    with gr.Accordion("Autoregressive engine", open=fam.autoregressive,
                      elem_id=f"{key}-ar-engine") as engine:
        with gr.Row():
            kv_cache, kv_dtype = (_dropdown(n, v[n], key, fam) for n in ("kv_cache", "kv_dtype"))
            mixed_prefill, admit_lead, admit_round, max_interval, grow_lead, rush_lead, \
                first_chunk, first_wait = (
                    _slider(n, v[n], key, fam)
                    for n in ("mixed_prefill", "admit_lead_ms", "admit_round_ms",
                              "max_decode_interval", "grow_lead_ms", "rush_lead_ms",
                              "first_chunk_frames", "first_chunk_wait"))
            batching, graphs, prefix_cache, side_stream = (
                _checkbox(n, v[n], key, fam)
                for n in ("continuous_batching", "cuda_graphs", "prefix_cache",
                          "codec_side_stream"))
        with gr.Row():
            temperature, top_p = (_slider(n, v[n], key, fam) for n in SAMPLING_FIELDS)
    note = gr.Markdown(family_note(v["family"], v["weights"]), elem_id=f"{key}-family-note")
    knobs = Knobs(family, weights, device, dtype, codec_dtype, quant, compile_mode, batch_size,
                  decode_interval, max_interval, grow_lead, rush_lead, first_chunk, first_wait,
                  overlap, crossfade, seed, kv_cache, kv_dtype, mixed_prefill, admit_lead,
                  admit_round, batching, graphs, prefix_cache, side_stream, temperature, top_p,
                  note, engine)
    family.change(family_view, [family, weights], [note, *knobs.governed(), engine],
                  show_progress="hidden")
    weights.change(family_note, [family, weights], note, show_progress="hidden")
    return knobs
