"""One-click quality check on the Synthesize tab: the take's config against its fp32 reference.

An optimisation is judged against the same model without it: the same family, weights,
voice and seed in fp32, with no quantization and no compile. Both render the take's sentences
(and, by default, one of the lab's sentence sets) one by one with the same seeds; every meter
runs on every sentence, and each check is judged on the paired per-sentence differences with a
bootstrap interval: pass, fail, or inconclusive with the number of sentences that would settle
it. The recogniser's own error rate on the reference is shown as its floor, and the worst
sentences come with both renderings to listen to. The reference's scores are cached on disk,
so checking a second take of the same text costs only the take's own scoring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import gradio as gr
import numpy as np

from lab.config import to_dict
from lab.frontend import list_sentence_sets, sentence_set, split_sentences
from lab.quality import mos_label
from lab.quality.report_markdown import method
from lab.quality.score_cache import ScoreCache
from lab.quality.verdicts import (
    Verdict,
    judge,
    judgeable,
    lossy_changes,
    paired_waveforms,
    reference_config,
    renderer,
)
from lab.quality.worst import MIN_MOS_DROP
from lab.ui.common import PLAIN, PROGRESS, load, pcm16, verdict_span

if TYPE_CHECKING:
    from lab.config import PipelineConfig
    from lab.ui.context import LabContext

NO_SET = "none (the take's sentences only)"
DEFAULT_SET = "short"
WORST_SLOTS = 4
GAP_S = 0.25


def _knobs_changed(cfg: PipelineConfig, ref: PipelineConfig) -> str:
    changed = [f"{k} {v}" for k, v in lossy_changes(cfg, ref).items()]
    return ", ".join(changed) if changed else "nothing: this take is the reference config"


def sentences_to_judge(text: str, extra: str | None) -> list[str]:
    """The take's own sentences, then the chosen lab set's (each sentence once), keeping those
    the recogniser can judge."""
    own = split_sentences(text)
    more = sentence_set(extra) if extra and extra != NO_SET else []
    return [t for t in dict.fromkeys([*own, *more]) if judgeable(t)]


def run_check(ctx: LabContext, cfg: PipelineConfig, texts: list[str],
              progress: gr.Progress) -> Verdict:
    """Judge `cfg` against its fp32 reference on `texts` (the reference from the cache when
    it has been scored before)."""
    ref_cfg = reference_config(cfg)
    progress((0, 3), desc="loading the take's pipeline", unit="step")
    pipe = load(ctx, cfg, progress, steps=3)
    progress((1, 3), desc="the fp32 reference: cached scores, or render and score", unit="step")
    return judge(renderer(pipe), texts,
                 baseline=lambda: renderer(load(ctx, ref_cfg, progress, steps=3)),
                 baseline_config=to_dict(ref_cfg), seed=ref_cfg.seed,
                 paired_waveforms=paired_waveforms(pipe),
                 cache=ScoreCache(ctx.data_dir / "score-cache"))


def check(ctx: LabContext, last: dict | None, extra: str | None,
          progress: gr.Progress) -> list:
    """The verdict, the reference of the take's text, and the worst sentences' players."""
    if not last:
        raise gr.Error("Synthesize something first; the check judges the last take.")
    cfg, text = last["config"], last["text"]
    texts = sentences_to_judge(text, extra)
    if not texts:
        raise gr.Error("None of these sentences can be judged: the recogniser reads US English "
                       "words only. Add one of the lab's sentence sets.")
    verdict = run_check(ctx, cfg, texts, progress)
    report = verdict.report
    ref_cfg = reference_config(cfg)
    cached = "cached" if verdict.cache_hit else "rendered and scored now"
    worst = ("\n\n**Worst sentences** (largest WER growth, largest MOS drop), both renderings "
             "below." if report.worst() else "\n\nNo sentence got worse on WER or any MOS "
             "proxy.")
    md = (verdict_span(report.outcome, "Quality {verdict}") + " against the fp32 reference "
          f"(same seed {cfg.seed}, {cached}) on {len(texts)} sentences; the take differs from "
          f"it in {_knobs_changed(cfg, ref_cfg)}. Each check: {method(report)}.\n\n"
          f"{report.to_markdown(k=0, title=False)}{worst}")
    return [md, _reference_of_take(verdict, text), *_worst_updates(verdict)]


def _reference_of_take(verdict: Verdict, text: str) -> tuple[int, np.ndarray] | None:
    """The reference's renderings of the take's own sentences, joined by short pauses."""
    own = len(dict.fromkeys(t for t in split_sentences(text) if judgeable(t)))
    base = verdict.baseline
    if own == 0:
        return None
    gap = np.zeros(round(GAP_S * base.sample_rate), np.float32)
    joined = np.concatenate([x for a in base.audio[:own] for x in (a, gap)][:-1])
    return base.sample_rate, pcm16(joined)


def _worst_updates(verdict: Verdict) -> list:
    """Per slot: visibility, caption, the reference's and the take's audio of that sentence."""
    worst = verdict.report.worst(WORST_SLOTS // 2)[:WORST_SLOTS]
    out = []
    for slot in range(WORST_SLOTS):
        if slot >= len(worst):
            out += [gr.update(visible=False), "", None, None]
            continue
        w = worst[slot]
        base, cand = verdict.baseline, verdict.candidate
        drop = (f", {mos_label(w.mos_field)} -{w.mos_drop:.2f}" if w.mos_drop >= MIN_MOS_DROP
                else "")
        caption = (f"**{slot + 1}. {', '.join(w.reasons)}** (WER {w.wer_delta * 100:+.0f} "
                   f"points{drop}): “{w.text}”  \nfp32 heard: *{w.baseline_transcript or '—'}*"
                   f"  \ntake heard: *{w.candidate_transcript or '—'}*")
        out += [gr.update(visible=True), caption,
                (base.sample_rate, pcm16(base.audio[w.index])),
                (cand.sample_rate, pcm16(cand.audio[w.index]))]
    return out


@dataclass
class WorstSlot:
    row: gr.Column
    caption: gr.Markdown
    baseline: gr.Audio
    candidate: gr.Audio


@dataclass
class QualityOutputs:
    go: gr.Button
    stop: gr.Button
    extra: gr.Dropdown
    report: gr.Markdown
    reference: gr.Audio
    worst: list[WorstSlot]

    @classmethod
    def build(cls) -> QualityOutputs:
        with gr.Accordion("Quality check against the fp32 reference", open=True,
                          elem_id="synth-quality"):
            with gr.Row():
                go = gr.Button("Check quality of the last take", elem_id="synth-quality-go",
                               scale=3)
                stop = gr.Button("Cancel", variant="stop", elem_id="synth-quality-cancel",
                                 scale=1)
                extra = gr.Dropdown([NO_SET, *list_sentence_sets()], value=DEFAULT_SET, scale=2,
                                    label="Also judge on the lab's sentence set",
                                    elem_id="synth-quality-set")
            reference = gr.Audio(label="fp32 reference of the take's text (same seed)",
                                 type="numpy", format="wav", interactive=False,
                                 elem_id="synth-reference", waveform_options=PLAIN)
            report = gr.Markdown(elem_id="synth-quality-report")
            slots = []
            with gr.Column(elem_id="synth-worst"):
                for i in range(WORST_SLOTS):
                    with gr.Column(visible=False, elem_id=f"synth-worst-{i}") as row:
                        caption = gr.Markdown(elem_id=f"synth-worst-{i}-text")
                        with gr.Row():
                            base = gr.Audio(label="fp32 reference", type="numpy",
                                            format="wav", interactive=False,
                                            elem_id=f"synth-worst-{i}-base",
                                            waveform_options=PLAIN)
                            cand = gr.Audio(label="this take's config", type="numpy",
                                            format="wav", interactive=False,
                                            elem_id=f"synth-worst-{i}-take",
                                            waveform_options=PLAIN)
                    slots.append(WorstSlot(row, caption, base, cand))
        return cls(go, stop, extra, report, reference, slots)

    def results(self) -> list:
        return [self.report, self.reference,
                *(c for s in self.worst for c in (s.row, s.caption, s.baseline, s.candidate))]


def wire_quality_check(ctx: LabContext, last: gr.State, out: QualityOutputs) -> None:
    def handler(take: dict | None, extra: str | None, progress=PROGRESS):
        return check(ctx, take, extra, progress)

    def clear() -> list:
        return ["Checking…", None] + [gr.update(visible=False), "", None, None] * WORST_SLOTS

    run = out.go.click(clear, None, out.results()).then(handler, [last, out.extra],
                                                        out.results())
    out.stop.click(lambda: "Quality check cancelled.", None, out.report, cancels=[run])
