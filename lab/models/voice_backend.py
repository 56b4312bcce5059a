"""The lab's own autoregressive voice: a small Llama-style LM, trained here, that reads the Piper
voice's phonemes and speaks codes of the lab's latent codec, decoded by the voice's HiFi-GAN.

It runs through the same engine, caches, scheduler, graphs and quantization path as Orpheus
(`TokenBackend`), so every autoregressive knob acts on a model whose output is real speech.
The weights ship in the package (`lab/data/voice/`), with a learned codec decoder
(`decoder.safetensors`, `lab.models.latent_decoder`) trained on the LM's own codes; `model` may
name another directory holding `lm.safetensors` and `codebooks.safetensors`, and optionally a
decoder: without one, codes decode as the sum of their codebook rows.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from lab.config import PipelineConfig
from lab.device import native_bf16
from lab.engine.weights import load_lm
from lab.frontend import prepare
from lab.models.backend import Family
from lab.models.latent_codec import LatentCodec, load_codebooks
from lab.models.latent_decoder import load_decoder
from lab.models.piper_voice import PiperVoice, export_voice, load_voice
from lab.models.sizing import Plan, Work
from lab.models.token_backend import (
    LM_PLAN,
    TokenBackend,
    chosen_codec_dtype,
    engine_config,
    start_engine,
    tts_options,
)
from lab.models.token_tts import TokenTTS
from lab.models.voice_format import (
    PhonemeAlignedConstraint,
    VoiceFormat,
    VoiceLayout,
    lm_phonemes,
)
from lab.models.voice_sizing import CACHE_ROOM, size_voice
from lab.models.voice_weights import (
    CODEBOOK_FILE,
    DECODER_FILE,
    LM_FILE,
    WEIGHTS_DIR,
    load_voice_lm,
    read_voice_config,
    teacher_voice,
    weights_dir,
)
from lab.quant.plan import PrecisionReport, apply_knobs

GROUPS_PER_PHONEME = 6
"""Stop rule: at most this many codec groups (24 frames, 0.28 s) per phoneme on average, about
three times the teacher's pace, so a model that never moves on cannot run away."""

VOICE_FAMILY = Family(
    "ar-voice", "The lab's own voice: a small Llama-style LM over the Piper voice's phonemes, "
                "speaking latent-codec tokens that the voice's own HiFi-GAN decodes",
    autoregressive=True,
    quantization=(
        "quantization acts on the language model's linear layers (the codec's generator is "
        "not quantized: it runs in `codec_dtype`, by default the LM's precision, or fp32 when "
        "bf16 is asked on a CPU that emulates it); int8-weight and int8-dynamic run on CPU or "
        "GPU, "
        "int4-weight and fp8 need a CUDA GPU and bf16 (fp8 also compute capability 8.9+) "
        "and otherwise fall back to int8"),
    unsupported={
        **{knob: "it samples codec tokens; these scale the VITS voice's noise and durations "
                 "(see sampling instead)" for knob in ("noise_scale", "length_scale", "noise_w")},
        "voice": "the lab's voice has a single speaker",
        "prefix_cache": "its prompt is the sentence's phonemes alone: prompts share no voice "
                        "tokens to keep",
    },
    dummy_warning="dummy weights: the language model is random, so the audio is noise, "
                  "not speech")


def pack_folder(out: Path) -> Path:
    """A weights folder that carries its teacher (`teacher_voice`), for machines without the
    voice's package: the shipped files, and in `voice/` an fp32 export of the teacher keeping
    only its generator, the one part of it this family runs, so the folder travels small."""
    out.mkdir(parents=True, exist_ok=True)
    for path in WEIGHTS_DIR.glob("*.safetensors"):
        shutil.copyfile(path, out / path.name)
    export_voice(load_voice("default"), out / "voice", half=False, keep="dec")
    return out


def max_tokens_for(layout: VoiceLayout, n_phonemes: int) -> int:
    """Every phoneme once, plus codes for at most GROUPS_PER_PHONEME groups per phoneme."""
    return n_phonemes + layout.levels * (GROUPS_PER_PHONEME * n_phonemes + 4) + 1


def codec_dtype(lm_dtype: torch.dtype, device: torch.device, notes: list[str]) -> torch.dtype:
    """The generator's precision for `codec_dtype: auto`: the LM's, except in bf16 on a CPU
    that emulates it: there its convolutions run many times slower than in fp32, while the
    small LM's matrix-vector products, bound by memory, still gain from weights of half the
    bytes."""
    if lm_dtype != torch.bfloat16 or native_bf16(device):
        return lm_dtype
    notes.append("the codec's generator stays in fp32: this CPU emulates bf16, which slows its "
                 "convolutions many times over (the LM still runs bf16)")
    return torch.float32


def build_tts(cfg: PipelineConfig, device: torch.device, voice: PiperVoice
              ) -> tuple[TokenTTS, PrecisionReport]:
    """LM (cast and quantized by the shared plan), engine, codec and format for a config."""
    folder = weights_dir(cfg.model)
    books = load_codebooks(folder / CODEBOOK_FILE)
    if cfg.weights == "dummy":  # the trained shape, filled at random: its tensors stay unread
        shape = read_voice_config(folder / LM_FILE)
        lm, lm_cfg = load_lm("dummy", shape=shape, dtype="fp32", device="cpu", seed=cfg.seed)
    else:
        lm, lm_cfg = load_voice_lm(folder / LM_FILE)
    lm = lm.to(device)
    layout = VoiceLayout(levels=books.shape[0], codebook_size=books.shape[1])
    report = apply_knobs(lm, LM_PLAN, dtype=cfg.dtype, quant=cfg.quant, compile_mode="none",
                         device=device)
    codec_compile = cfg.compile if device.type == "cuda" else "none"
    decoder_path = folder / DECODER_FILE
    decoder = load_decoder(decoder_path, books) if decoder_path.is_file() else None
    codec = LatentCodec(books, voice.model.dec, device=device,
                        dtype=chosen_codec_dtype(cfg, device, report.notes)
                        or codec_dtype(lm.embed.weight.dtype, device, report.notes),
                        compile_mode=codec_compile, decoder=decoder,
                        cuda_graphs=cfg.cuda_graphs and device.type == "cuda",
                        max_batch=cfg.batch_size)
    room = min(cfg.sampling.max_tokens + CACHE_ROOM, lm_cfg.max_seq_len)
    engine = start_engine(lm, engine_config(cfg, max_len=room), PhonemeAlignedConstraint(layout))
    tts = TokenTTS(engine, codec, VoiceFormat(layout), **tts_options(cfg))
    codec.capture(tts.decoder.window.frames, tts.decoder.window.lengths)
    return tts, report


class VoiceBackend(TokenBackend):
    """Meets `lab.models.backend.Backend` for the lab's voice: a unit is a sentence's
    phonemes, as the Piper voice's frontend gives them."""

    family = VOICE_FAMILY

    def __init__(self, config: PipelineConfig, voice: PiperVoice, tts: TokenTTS,
                 precision: PrecisionReport) -> None:
        super().__init__(config, tts, precision)
        self.voice = voice
        self.layout = tts.format.layout

    @classmethod
    def load(cls, config: PipelineConfig, device: torch.device) -> VoiceBackend:
        voice = load_voice(teacher_voice(config.model))
        return cls(config, voice, *build_tts(config, device, voice))

    @classmethod
    def size(cls, work: Work) -> Plan:
        """What `work` would hold and do, from shapes alone, before anything loads."""
        return size_voice(work)

    def prepare(self, text: str) -> tuple[list[list[int]], list[str]]:
        s = self.voice.settings
        prepared = prepare(text, s.phoneme_id_map, s.espeak_voice, self.config.max_chars)
        return [lm_phonemes(ids) for ids in prepared.ids], prepared.warnings

    def max_tokens(self, unit: list[int]) -> int:
        """The stop rule, within what the cache holds after the prompt (phonemes + 2)."""
        room = self.tts.engine.config.max_len - (len(unit) + 2) - 1
        return min(max_tokens_for(self.layout, len(unit)), room)
