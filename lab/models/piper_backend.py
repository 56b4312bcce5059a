"""The Piper VITS voice for the pipeline: batched one-shot synthesis and windowed streaming.

Sentences are the unit of work. Each sentence draws its noise from a generator seeded by
(config seed, sentence position), so a sentence sounds the same whether it is synthesized alone
or inside a padded batch, and a batch's output equals one-by-one synthesis.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import numpy as np
import torch

from lab.config import PipelineConfig
from lab.frontend import prepare, sentence_set
from lab.metrics.timers import RequestMeter, StageTimer
from lab.models.backend import Family
from lab.models.piper_voice import PiperVoice, load_voice
from lab.models.sizing import Plan, Work
from lab.models.vits.synthesizer import Latents
from lab.quant.plan import PrecisionPlan, StaticParts, apply_knobs
from lab.stream import Crossfader, plan_windows

NOT_AUTOREGRESSIVE = ("it is not autoregressive: it renders a sentence's frames in one pass, "
                      "so there is no KV cache, token sampling or request scheduling")
PIPER_FAMILY = Family(
    "piper-vits", "Piper VITS voice (non-autoregressive) with a HiFi-GAN vocoder",
    autoregressive=False,
    quantization=(
        "int8-static quantizes the convolutions of the vocoder and the flow to int8 on a CPU "
        "(exported, calibrated on the lab's own text and compiled ahead of time to oneDNN int8 "
        "kernels), keeping the text encoder and the vocoder's last stage and output "
        "convolution in float: fp32, or bf16 with dtype bf16, the faster of the two on "
        "a CPU with native bf16; elsewhere it falls back. "
        "int8-weight, int8-dynamic, int4-weight and fp8 act on linear layers only; this "
        "voice is convolutions, so those fall back to unquantized weights in the chosen "
        "precision (the run's fallback notes say so)"),
    unsupported={
        **dict.fromkeys(("kv_cache", "kv_dtype", "mixed_prefill", "prefix_cache",
                         "continuous_batching", "admit_lead_ms", "admit_round_ms",
                         "sampling"),
                        NOT_AUTOREGRESSIVE),
        "cuda_graphs": "CUDA graphs need fixed shapes, and the voice's durations vary per text",
        "codec_side_stream": "its vocoder renders each chunk from frames it already has, so "
                             "there is no next decode step for a side stream to overlap",
        **dict.fromkeys(("max_decode_interval", "grow_lead_ms", "rush_lead_ms",
                         "first_chunk_frames", "first_chunk_wait"),
                        "its chunks are planned from the sentence's frames, which all exist "
                        "before the first chunk: no token stream paces them"),
        "codec_dtype": "its vocoder is part of the voice's one network and runs in the "
                       "pipeline's dtype with the rest of it",
        "voice": "the embedded voice has a single speaker",
        "weights": "the embedded voice ships with its real weights only",
    })
# The duration predictor is an fp32 island: half precision is fine for the encoder, flow and
# vocoder, but the predictor is a tiny share of the work and its spline inverse breaks down in
# bf16. The vocoder is compiled: it dominates synthesis time.
PIPER_PLAN = PrecisionPlan(
    fp32_islands={"dp": "it is the duration predictor, whose spline inverse breaks down in "
                        "half precision (a sentence can collapse to one frame)"},
    compile=("dec",))
# int8-static's parts: the vocoder and the flow, which runs backwards at synthesis. The text
# encoder stays float: its attention asks whether any item is padded (`bool(mask.all())`), a
# question about data that torch.export cannot trace, and it runs at phoneme rate.
STATIC_PARTS = {"dec": "forward", "flow": "inverse"}
CALIBRATION_LINES = (2, 5)  # of lab/data/sentences/edge.txt
FLOAT_TAIL = ("it writes the waveform at the full rate, where int8 rounding is heard as hiss "
              "(PESQ against fp32 fell from 4.2 to 2.0 on medium sentences when the last stage "
              "and output convolution were quantized too); at 32 channels it gains least")


ID_STEP, FRAME_STEP = 8, 16  # the finest padding of the phoneme and frame axes


def padded_length(n: int, step: int) -> int:
    """`n` rounded up to a multiple of `step`, or of an eighth of its power of two once that is
    coarser: less than `step` or an eighth more work, and 40 frame lengths up to 2,048.

    On a CPU, oneDNN builds (JIT-compiles) a kernel for every new convolution shape: the
    vocoder took 69 ms for a 201-frame sentence the first time and 36 ms for it again. Every
    sentence has its own length, so without padding each one pays that; padded to shared
    lengths (zeros beyond each item's mask, as a padded batch already is), the sound stays that
    of the item alone and the kernels are reused. The steps are a trade between that build and
    the padding's work: once the upsampling layers stopped paying a deconvolution's build
    (`FrameUpsample`), 16-frame and 8-id steps rendered 2-second sentences 5-8% faster than
    32 and 16 did, warm, with the first pass no slower.
    """
    step = max(step, 1 << max(0, n.bit_length() - 4))
    return -(-n // step) * step


@dataclass(frozen=True)
class NoiseScales:
    noise: float
    length: float
    noise_w: float


def scales_for(config: PipelineConfig, voice: PiperVoice) -> NoiseScales:
    s = voice.settings
    pick = lambda value, default: default if value is None else value  # noqa: E731
    return NoiseScales(pick(config.noise_scale, s.noise_scale),
                       pick(config.length_scale, s.length_scale),
                       pick(config.noise_w, s.noise_w))


class PiperBackend:
    """Meets `lab.models.backend.Backend` for the Piper voice."""

    family = PIPER_FAMILY

    def __init__(self, voice: PiperVoice, config: PipelineConfig, device: torch.device) -> None:
        self.voice = voice
        self.model = voice.model
        self.config = config
        self.device = device
        self.scales = scales_for(config, voice)
        self.sample_rate = voice.settings.sample_rate
        self.hop = self.model.hop_length
        self.channels = self.model.hyper.channels
        plan = replace(PIPER_PLAN, static=StaticParts(STATIC_PARTS, self._calibrate,
                                                      self._float_tail()))
        self.precision = apply_knobs(self.model, plan, dtype=config.dtype, quant=config.quant,
                                     compile_mode=config.compile, device=device)

    @classmethod
    def load(cls, config: PipelineConfig, device: torch.device) -> PiperBackend:
        return cls(load_voice(config.model), config, device)

    @classmethod
    def size(cls, work: Work) -> Plan:
        """What `work` would hold and do, from shapes alone, before anything loads."""
        from lab.models.piper_sizing import size_piper

        return size_piper(work)

    def _float_tail(self) -> dict[str, str]:
        """The vocoder layers int8-static leaves float: its last stage's resblocks and the
        output convolution."""
        dec = self.model.dec
        last = range(len(dec.resblocks) - dec.n_kernels, len(dec.resblocks))
        return dict.fromkeys([*(f"dec.resblocks.{i}" for i in last), "dec.conv_post"],
                             FLOAT_TAIL)

    def _calibrate(self) -> None:
        """What int8-static calibrates on: two sentences of the lab's edge set (money and
        abbreviations; none of the short or medium sentences quality is judged on), rendered
        as requests render them: one by one, and as a batch when batches hold several
        sentences (the flow then runs on a padded batch, the vocoder on `_vocode`'s groups)."""
        edge = sentence_set("edge")
        ids = [i for line in CALIBRATION_LINES for i in self.prepare(edge[line])[0]]
        timer = StageTimer(self.device)
        for seed, one in enumerate(ids):
            self._batch([one], [seed], timer)
        # A sentence whose frames fill its padded length reaches the vocoder with no mask, a
        # call of its own shape: calibrate one such call too.
        latents = self.latents(ids[:1], [0], timer)
        n = int(latents.lengths[0])
        with torch.inference_mode():
            self.model.vocode(latents.z[..., :n], latents.mask[..., :n])
        if self.config.batch_size > 1:
            batch = ids[: self.config.batch_size]
            self._batch(batch, list(range(len(batch))), timer)

    def fallbacks(self) -> list[str]:
        return list(self.precision.notes)

    def memory_facts(self) -> dict[str, str]:
        return {}

    def engine_queue(self) -> None:
        return None

    def applied(self) -> dict[str, object]:
        p = self.precision
        return {"dtype": p.dtype, "quant": p.quant, "compile": p.compile}

    def _noise(self, seeds: list[int], shape: tuple[int, ...], lengths: list[int],
               scale: float, width: int) -> torch.Tensor:
        """Per-sentence noise [B, C, width], drawn on the CPU so every device hears the same
        take, zero beyond each sentence's length."""
        out = torch.zeros(len(seeds), shape[0], width)
        for row, (seed, length) in enumerate(zip(seeds, lengths, strict=True)):
            gen = torch.Generator().manual_seed(seed)
            out[row, :, :length] = torch.randn(shape[0], length, generator=gen) * scale
        return out.to(self.device, self.model.dtype)

    def latents(self, ids: list[list[int]], seeds: list[int], timer: StageTimer):
        """Text ids -> latent frames for a padded batch of sentences."""
        lengths = [len(x) for x in ids]
        width = padded_length(max(lengths), ID_STEP)
        padded = torch.zeros(len(ids), width, dtype=torch.long)
        for row, seq in enumerate(ids):
            padded[row, : len(seq)] = torch.tensor(seq)
        with torch.inference_mode():
            with timer.stage("encode"):
                hidden, mean, log_std, mask = self.model.encode(
                    padded.to(self.device), torch.tensor(lengths, device=self.device))
            with timer.stage("durations_flow"):
                noise = self._noise(seeds, (2,), lengths, self.scales.noise_w, width)
                frames = self.model.durations(hidden, mask, noise, self.scales.length)
                n_frames = frames.sum(dim=1).clamp_min(1).tolist()
                span = padded_length(max(n_frames), FRAME_STEP)
                z_noise = self._noise([s + 1 for s in seeds], (self.channels,), n_frames,
                                      self.scales.noise, span)
                return self.model.latents(mean, log_std, frames, z_noise, span)

    def prepare(self, text: str) -> tuple[list[list[int]], list[str]]:
        """Text -> phoneme ids per sentence, plus notes for the user."""
        s = self.voice.settings
        prepared = prepare(text, s.phoneme_id_map, s.espeak_voice, self.config.max_chars)
        return prepared.ids, prepared.warnings

    def warm_up(self, texts: tuple[str, ...]) -> None:
        """Run each text once through the path this config's requests take (streamed or
        batched), so compilation and first-call set-up happen before any request."""
        for text in texts:
            ids = self.prepare(text)[0][0]
            meter = RequestMeter(StageTimer(self.device))
            if self.config.stream:
                for _ in self.stream(ids, 0, meter):
                    pass
            else:
                self.synthesize([ids], [0], meter)

    def synthesize(self, ids: list[list[int]], seeds: list[int],
                   meter: RequestMeter) -> list[np.ndarray]:
        """One-shot synthesis in padded batches of `batch_size` sentences."""
        size = self.config.batch_size
        out: list[np.ndarray] = []
        for start in range(0, len(ids), size):
            out += self._batch(ids[start : start + size], seeds[start : start + size],
                               meter.timer)
        return out

    def _batch(self, ids: list[list[int]], seeds: list[int],
               timer: StageTimer) -> list[np.ndarray]:
        """Decode every sentence's latents at once; one array per sentence."""
        latents = self.latents(ids, seeds, timer)
        with torch.inference_mode(), timer.stage("vocoder"):
            audio = self._vocode(latents)
        with timer.stage("to_cpu"):
            audio = audio.float().cpu().numpy()
        lengths = (latents.lengths * self.hop).tolist()
        return [audio[row, :n] for row, n in enumerate(lengths)]

    def _vocode(self, latents: Latents) -> torch.Tensor:
        """Audio [B, width * hop] for a padded batch's latents. A GPU takes the batch at once:
        that is what fills it. A CPU takes together only the sentences that share a padded
        span (`padded_length`), each group over its own span: one sentence already keeps the
        cores busy, and in a batch every sentence pays for the longest one's frames. Over the
        lab's 25 sentences in batches of 8 (27% of their frames padding), the vocoder took
        0.77x the batched time in fp32 and 0.83x with int8-static, on 2 cores."""
        if self.device.type != "cpu":
            return self.model.vocode(latents.z, latents.mask)
        audio = latents.z.new_zeros(latents.z.shape[0], latents.z.shape[-1] * self.hop)
        spans = [padded_length(int(n), FRAME_STEP) for n in latents.lengths.tolist()]
        for span in sorted(set(spans)):
            rows = [row for row, s in enumerate(spans) if s == span]
            audio[rows, : span * self.hop] = self.model.vocode(
                latents.z[rows, :, :span], latents.mask[rows, :, :span])
        return audio

    def stream(self, ids: list[int], seed: int, meter: RequestMeter) -> Iterator[np.ndarray]:
        """One sentence, vocoded in fixed windows; yields final audio as soon as it exists."""
        timer = meter.timer
        latents = self.latents([ids], [seed], timer)
        n_frames = int(latents.lengths[0])
        fade = round(self.config.crossfade_ms * self.sample_rate / 1000)
        windows = plan_windows(n_frames, self.config.decode_interval, self.config.overlap,
                               self.hop, fade)
        joiner = Crossfader(fade)
        for i, w in enumerate(windows):
            with torch.inference_mode(), timer.stage("vocoder"):
                z = latents.z[:, :, w.start : w.stop]
                audio = self.model.vocode(z, latents.mask[:, :, w.start : w.stop])
            with timer.stage("to_cpu"):
                piece = audio[0, w.keep_from : w.keep_to].float().cpu().numpy()
            yield joiner.push(piece, last=i == len(windows) - 1)
