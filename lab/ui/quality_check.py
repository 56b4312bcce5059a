"""One-click quality check on the Synthesize tab: the take against its fp32 reference.

An optimisation is judged against the same model without it: the same family, weights,
voice and seed in fp32, with no quantization and no compile. The reference renders the same
text, both takes go through the lab's meters (MOS proxy, ASR word error rate, fidelity to
the reference), and the lab's verdict says whether the take is within tolerance. With the
same seed the only differences left are the ones the precision knobs made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import gradio as gr

from lab.quality import compare, evaluate
from lab.ui.common import PLAIN, PROGRESS, load, pcm16, verdict_span

if TYPE_CHECKING:
    from lab.config import PipelineConfig
    from lab.ui.blocks import LabContext


def reference_config(cfg: PipelineConfig) -> PipelineConfig:
    """The same config in fp32 without quantization or compile: what an optimisation must
    not sound worse than."""
    return cfg.replace(dtype="fp32", quant="none", compile="none")


def _knobs_changed(cfg: PipelineConfig, ref: PipelineConfig) -> str:
    changed = [f"{k} {getattr(cfg, k)}" for k in ("dtype", "quant", "compile")
               if getattr(cfg, k) != getattr(ref, k)]
    return ", ".join(changed) if changed else "nothing: this take is the reference config"


def check(ctx: LabContext, last: dict | None, progress: gr.Progress) -> tuple[str, object]:
    """Render the reference, score both takes, and return the verdict and the reference."""
    if not last:
        raise gr.Error("Synthesize something first; the check judges the last take.")
    cfg, text = last["config"], last["text"]
    ref_cfg = reference_config(cfg)
    progress((0, 3), desc="rendering the fp32 reference", unit="step")
    ref = load(ctx, ref_cfg, progress, steps=3).synthesize(text)
    progress((1, 3), desc="scoring the reference (MOS proxy, ASR)", unit="step")
    base = evaluate(ref.audio, ref.sample_rate, text)
    progress((2, 3), desc="scoring the take against the reference", unit="step")
    cand = evaluate(last["audio"], last["sample_rate"], text, reference=ref.audio,
                    reference_rate=ref.sample_rate)
    report = compare(cand, base)
    md = (verdict_span(report.passed, "Quality {verdict}") + " against the fp32 reference "
          f"(same seed {cfg.seed}); the take differs from it in "
          f"{_knobs_changed(cfg, ref_cfg)}.\n\n{report.to_markdown()}")
    return md, (ref.sample_rate, pcm16(ref.audio))


@dataclass
class QualityOutputs:
    go: gr.Button
    stop: gr.Button
    report: gr.Markdown
    reference: gr.Audio

    @classmethod
    def build(cls) -> QualityOutputs:
        with gr.Accordion("Quality check against the fp32 reference", open=True,
                          elem_id="synth-quality"):
            with gr.Row():
                go = gr.Button("Check quality of the last take", elem_id="synth-quality-go",
                               scale=3)
                stop = gr.Button("Cancel", variant="stop", elem_id="synth-quality-cancel",
                                 scale=1)
            report = gr.Markdown(elem_id="synth-quality-report")
            reference = gr.Audio(label="fp32 reference (same seed)", type="numpy",
                                 format="wav", interactive=False, elem_id="synth-reference",
                                 waveform_options=PLAIN)
        return cls(go, stop, report, reference)


def wire_quality_check(ctx: LabContext, last: gr.State, out: QualityOutputs) -> None:
    def handler(take: dict | None, progress=PROGRESS):
        return check(ctx, take, progress)

    run = out.go.click(lambda: ("Checking…", None), None, [out.report, out.reference]).then(
        handler, last, [out.report, out.reference])
    out.stop.click(lambda: "Quality check cancelled.", None, out.report, cancels=[run])
