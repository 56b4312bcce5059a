"""A preset picker over a knob panel, and panels on several tabs kept in one state.

A panel is a preset (shipped, or an uploaded YAML file that then shows in the list) over the
knob widgets of `lab.ui.knobs`. The tabs that run one config (Synthesize, Benchmark,
Profile) each lay out their own panel, and a `PanelGroup` keeps them showing the same
settings, so a knob turned on one tab is the knob on the others.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import gradio as gr

from lab.config import ConfigError, PipelineConfig, from_dict, list_presets, load_preset, to_dict
from lab.models.registry import family as family_info
from lab.ui.knobs import KnobError, Knobs, build_knobs, config_from_knobs, family_note, knob_values


@dataclass
class Panel:
    """A preset picker (shipped or uploaded YAML) over a knob panel.

    `base` holds the preset as plain data, so fields without a widget (voice, max_chars,
    noise scales, the rest of sampling) travel with the request instead of being reset.
    `edits` are the preset loads, which `PanelGroup` follows (with each knob's own `.input`)
    to keep panels in step.
    """

    preset: gr.Dropdown
    upload: gr.UploadButton
    status: gr.Markdown
    base: gr.State
    knobs: Knobs
    edits: list = field(default_factory=list)

    def inputs(self) -> list:
        return [self.base, *self.knobs.inputs()]

    def outputs(self) -> list:
        return [self.base, *self.knobs.inputs(), self.knobs.note, self.status]

    def state(self) -> list:
        """What another panel copies to show the same settings: preset, base and knobs."""
        return [self.preset, self.base, *self.knobs.inputs()]

    def config(self, data: dict) -> PipelineConfig:
        """The config from a handler's `{component: value}` inputs (KnobError if invalid)."""
        return panel_config(data[self.base], *(data[c] for c in self.knobs.inputs()))


def panel_config(base: dict, *values: object) -> PipelineConfig:
    """The config a panel describes: its preset with the knob values applied."""
    try:
        preset = from_dict(base)
    except ConfigError as err:
        raise KnobError(f"the loaded preset is no longer valid: {err}") from err
    return config_from_knobs(preset, values)


def preset_outputs(source: str | None, label: str, width: int) -> list:
    """Panel outputs for a preset, or unchanged knobs and a warning when it is invalid.

    A preset that sets a knob its family refuses is invalid here as it is in the CLI, since
    the panel would show that knob greyed out, holding a value nobody could change.
    """
    if not source:
        return [gr.skip()] * (width - 1) + [""]
    try:
        cfg = load_preset(source)
        family_info(cfg.family).check(cfg)
    except ConfigError as err:
        gr.Warning(f"Invalid preset: {err}")
        return [gr.skip()] * (width - 1) + [f"⚠️ **Invalid preset {label}**: {err}"]
    values = [to_dict(cfg), *knob_values(cfg), family_note(cfg.family, cfg.weights)]
    return [*values, f"Loaded preset **{label}**."]


UPLOADED = " (uploaded)"


def picker_choices(value: str | None) -> list:
    """The shipped presets, plus `value` when it is an uploaded file (shown by its name)."""
    choices: list = [(name, name) for name in list_presets()]
    if value and value not in list_presets():
        choices.append((Path(value).stem + UPLOADED, value))
    return choices


def picker_update(value: str | None) -> dict:
    """Show `value` selected in a preset dropdown, adding it to the choices if uploaded."""
    return gr.update(choices=picker_choices(value), value=value)


def _uploaded(path: str | None, width: int) -> list:
    """Load an uploaded preset; when valid it becomes the dropdown's selection."""
    if not path:
        return [gr.skip(), *preset_outputs(None, "", width)]
    out = preset_outputs(path, f"{Path(path).name} (uploaded)", width)
    return [picker_update(path) if out[-1].startswith("Loaded") else gr.skip(), *out]


def build_panel(cfg: PipelineConfig, key: str, preset: str | None = None,
                folded: bool = False) -> Panel:
    """Preset dropdown + YAML upload + knobs, wired so that a preset fills the knobs.

    `folded` puts the knobs in a closed section under the preset, for a first view that
    asks for nothing but text and a preset.
    """
    with gr.Row():
        picker = gr.Dropdown(picker_choices(preset), value=preset, label="Preset", scale=3,
                             elem_id=f"{key}-preset")
        upload = gr.UploadButton("Upload a preset (YAML)", file_types=[".yaml", ".yml"],
                                 type="filepath", scale=1, elem_id=f"{key}-preset-upload")
    status = gr.Markdown(elem_id=f"{key}-preset-status")
    base = gr.State(to_dict(cfg))
    with gr.Accordion("Knobs: precision, compile, batching, streaming, engine", open=not folded,
                      elem_id=f"{key}-knobs"):
        knobs = build_knobs(cfg, key)
    panel = Panel(picker, upload, status, base, knobs)
    outputs = panel.outputs()
    width = len(outputs)
    panel.edits.append(picker.input(lambda name: preset_outputs(name, f"`{name}`", width),
                                    picker, outputs))
    panel.edits.append(upload.upload(lambda path: _uploaded(path, width), upload,
                                     [picker, *outputs]))
    if _collecting:
        _collecting[-1].append(panel)
    return panel


_collecting: list[list[Panel]] = []


class PanelGroup:
    """Panels on different tabs that show one knob state: a change on one shows on all.

    Tabs build their own panels; the app collects the ones to share while they are built
    (`with group.collect(): tab.build(...)`) and links them once all exist. Copies follow
    only a person's edits (`.input`, a preset load), never programmatic updates, so a copy
    never triggers another copy.
    """

    def __init__(self) -> None:
        self.panels: list[Panel] = []

    @contextmanager
    def collect(self) -> Iterator[list[Panel]]:
        _collecting.append(self.panels)
        try:
            yield self.panels
        finally:
            _collecting.pop()

    def link(self) -> None:
        for src in self.panels:
            others = [p for p in self.panels if p is not src]
            if not others:
                continue
            targets = [c for p in others for c in p.state()]
            copy = partial(_copies, len(others))
            for edit in src.edits:
                edit.then(copy, src.state(), targets, show_progress="hidden")
            for widget in src.knobs.inputs():
                widget.input(copy, src.state(), targets, show_progress="hidden")


def _copies(n: int, preset: str | None, *rest: object) -> list:
    """`n` copies of one panel's state, the preset as a dropdown update (it may be uploaded)."""
    return [picker_update(preset), *rest] * n
