"""Orpheus: a Llama language model that speaks by emitting SNAC codec tokens.

The prompt is a chat-style turn built from special tokens around "voice: text"; the model then
writes 7 audio tokens per 85 ms frame until its end-of-speech token. Audio token k of a frame is
`<custom_token_{10 + k * 4096 + code}>`, i.e. id `128266 + k * 4096 + code`, and the 7 codes of
a frame are SNAC's code tree flattened depth-first (see snac_codec). This module owns that
format, the tokenizer, a constraint that only lets the model emit a valid next audio token, and
`OrpheusTTS`, which runs text through the serving engine and the streaming codec.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from lab.config import PipelineConfig, SamplingConfig
from lab.device import resolve_device
from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.graphs import decode_mode
from lab.engine.request import Request, SamplingParams
from lab.engine.sampler import Candidates
from lab.engine.scheduler import POLICIES
from lab.engine.transfer import to_device
from lab.engine.weights import load_lm
from lab.metrics.timers import StageTimer
from lab.models.snac_codec import (
    FRAME_CODES,
    HUB_ID,
    SNAC_24KHZ,
    AudioChunk,
    SnacCodec,
    StreamingDecoder,
    StreamWindow,
    build_snac,
)

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
DEFAULT_MODEL = "canopylabs/orpheus-3b-0.1-ft"
PROMPT_ROOM = 256
"""Cache positions reserved for the prompt when sizing the cache from `max_tokens`."""
# A codec small enough for CPU tests, with SNAC 24 kHz's rates (so its frames and context match).
TINY_SNAC = {**SNAC_24KHZ, "encoder_dim": 8, "decoder_dim": 64}


class OrpheusError(ValueError):
    """Unknown voice, or a tokenizer that cannot be loaded."""


@dataclass(frozen=True)
class OrpheusLayout:
    """Where Orpheus' special and audio tokens sit in the vocabulary (defaults: the real model)."""

    bos: int = 128000
    end_of_text: int = 128009
    start_of_speech: int = 128257
    end_of_speech: int = 128258
    start_of_human: int = 128259
    end_of_human: int = 128260
    start_of_ai: int = 128261
    end_of_ai: int = 128262
    pad: int = 128263
    audio_offset: int = 128266
    codebook_size: int = 4096

    @property
    def vocab_needed(self) -> int:
        return self.audio_offset + FRAME_CODES * self.codebook_size

    @classmethod
    def compact(cls, codebook_size: int) -> OrpheusLayout:
        """The same format squeezed after the 256 byte tokens, for tiny test vocabularies."""
        return cls(bos=256, end_of_text=257, start_of_speech=258, end_of_speech=259,
                   start_of_human=260, end_of_human=261, start_of_ai=262, end_of_ai=263,
                   pad=264, audio_offset=266, codebook_size=codebook_size)

    @classmethod
    def fitting(cls, vocab_size: int) -> OrpheusLayout:
        """The real layout when the vocabulary holds it, else the largest compact one."""
        if vocab_size >= ORPHEUS.vocab_needed:
            return ORPHEUS
        offset = cls.compact(1).audio_offset
        if vocab_size < offset + FRAME_CODES:
            raise OrpheusError(f"a vocabulary of {vocab_size} cannot hold Orpheus' tokens")
        return cls.compact((vocab_size - offset) // FRAME_CODES)

    def audio_token(self, index: int, code: int) -> int:
        """Token id of `code` at position `index` (0..6) of a frame."""
        return self.audio_offset + (index % FRAME_CODES) * self.codebook_size + code

    def code_of(self, token: int, index: int) -> int | None:
        """The code a token carries at frame position `index`, or None if it is not one."""
        code = token - self.audio_offset - (index % FRAME_CODES) * self.codebook_size
        return code if 0 <= code < self.codebook_size else None


ORPHEUS = OrpheusLayout()


class ByteTokenizer:
    """NOT Orpheus' tokenizer: UTF-8 bytes as ids 0..255, for dummy weights only.

    Dummy weights make noise whatever the prompt, so they need only a tokenizer that runs
    offline and gives a realistic prompt length; the real Llama-3 tokenizer is not bundled.
    """

    is_placeholder = True

    def __init__(self, bos: int) -> None:
        self.bos = bos

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos, *ids] if add_special_tokens else ids


def load_tokenizer(source: str, layout: OrpheusLayout = ORPHEUS):
    """Orpheus' tokenizer from a local directory or hub id; `"dummy"` gives a ByteTokenizer."""
    if source == "dummy":
        return ByteTokenizer(layout.bos)
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(source)
    except Exception as err:
        raise OrpheusError(
            f"could not load the Orpheus tokenizer from {source!r} ({type(err).__name__}: "
            f"{err}). Offline, pass a local directory holding tokenizer.json and "
            "tokenizer_config.json, or run with dummy weights.") from err


def check_voice(voice: str | None) -> str | None:
    if voice is not None and voice not in VOICES:
        raise OrpheusError(f"unknown Orpheus voice {voice!r}; choose one of {list(VOICES)}")
    return voice


def format_prompt(tokenizer, text: str, voice: str | None = "tara",
                  layout: OrpheusLayout = ORPHEUS) -> list[int]:
    """[start-of-human] "voice: text" [end-of-text, end-of-human, start-of-ai, start-of-speech]."""
    if not text.strip():
        raise OrpheusError("text is empty: there is nothing to speak")
    spoken = f"{check_voice(voice)}: {text}" if voice else text
    ids = list(tokenizer.encode(spoken, add_special_tokens=True))
    return [layout.start_of_human, *ids, layout.end_of_text, layout.end_of_human,
            layout.start_of_ai, layout.start_of_speech]


def frames_from_tokens(tokens: Sequence[int], layout: OrpheusLayout = ORPHEUS) -> torch.Tensor:
    """Complete frames [n, 7] of codes from generated tokens (invalid tokens skipped)."""
    frames = FrameAssembler(layout).feed(tokens)
    return torch.tensor(frames, dtype=torch.long).reshape(-1, FRAME_CODES)


class FrameAssembler:
    """Collects one request's audio tokens into 7-code frames as they arrive.

    A token that is not a valid audio token for the next frame position (possible only without
    the constraint below) is skipped and counted, as the reference decoder does.
    """

    def __init__(self, layout: OrpheusLayout = ORPHEUS) -> None:
        self.layout = layout
        self.partial: list[int] = []
        self.skipped = 0

    def feed(self, tokens: Sequence[int]) -> list[list[int]]:
        """The frames completed by these tokens (usually none: one token arrives per step)."""
        frames = []
        for token in tokens:
            code = self.layout.code_of(token, len(self.partial))
            if code is None:
                self.skipped += token != self.layout.end_of_speech
                continue
            self.partial.append(code)
            if len(self.partial) == FRAME_CODES:
                frames.append(self.partial)
                self.partial = []
        return frames


class AudioTokenConstraint:
    """Logits processor: only the audio tokens valid at the next frame position may be sampled,
    and end-of-speech only at a frame boundary, so every frame decodes. `allow_stop=False`
    forbids end-of-speech altogether (fixed-length runs for benchmarks on dummy weights).

    It returns a shortlist (end-of-speech, then the position's 4096 codes) rather than a masked
    vocabulary, so sampling touches 4097 entries per row instead of ~157k.
    """

    def __init__(self, layout: OrpheusLayout = ORPHEUS, allow_stop: bool = True) -> None:
        self.layout, self.allow_stop = layout, allow_stop

    def __call__(self, logits: torch.Tensor, requests: list[Request]) -> Candidates:
        lay, device = self.layout, logits.device
        index = to_device([r.n_launched % FRAME_CODES for r in requests], torch.long, device)
        codes = torch.arange(lay.codebook_size, device=device)
        audio = lay.audio_offset + index[:, None] * lay.codebook_size + codes
        stop = torch.full_like(index, lay.end_of_speech)[:, None]
        allowed = torch.ones(audio.shape[0], audio.shape[1] + 1, dtype=torch.bool, device=device)
        allowed[:, 0] = (index == 0) & self.allow_stop
        return Candidates(torch.cat([stop, audio], dim=1), allowed)


def engine_config(cfg: PipelineConfig, *, n_slots: int | None = None,
                  max_len: int = 2048) -> EngineConfig:
    """The engine's settings for a pipeline config: slots default to its batch size, and
    `continuous_batching`, `kv_cache`, `compile` and `cuda_graphs` become plain engine values
    (the engine never sees the app's config)."""
    return EngineConfig(n_slots=n_slots or cfg.batch_size, max_len=max_len,
                        policy=POLICIES[0] if cfg.continuous_batching else POLICIES[1],
                        kv_cache=cfg.kv_cache,
                        decode_mode=decode_mode(cfg.compile, cfg.cuda_graphs))


def sampling_params(cfg: SamplingConfig, *, seed: int | None = None) -> SamplingParams:
    """A pipeline config's sampling section as the engine's per-request settings."""
    return SamplingParams(temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
                          repetition_penalty=cfg.repetition_penalty, max_tokens=cfg.max_tokens,
                          seed=seed)


@dataclass
class Utterance:
    """One submitted text and its audio so far, with the times that define latency."""

    request_id: str
    text: str
    voice: str | None
    submitted: float
    assembler: FrameAssembler
    chunks: list[AudioChunk] = field(default_factory=list)
    first_audio: float | None = None
    done: float | None = None

    @property
    def ttfa_ms(self) -> float | None:
        return None if self.first_audio is None else (self.first_audio - self.submitted) * 1e3

    def audio(self) -> np.ndarray:
        parts = [c.audio.numpy() for c in sorted(self.chunks, key=lambda c: c.index)]
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)


class OrpheusTTS:
    """Text in, streamed 24 kHz audio out, for many utterances at once.

    Each `step()` runs one engine step (every active utterance gains a token), turns finished
    frames into codec input, and decodes all windows that became due in one batched call.
    The engine should carry an `AudioTokenConstraint` for `layout` as its logits processor
    (`from_config` builds it so); without one, invalid tokens are skipped, not spoken.
    """

    def __init__(self, engine: LLMEngine, codec: SnacCodec, tokenizer, *,
                 layout: OrpheusLayout = ORPHEUS, window: StreamWindow | None = None,
                 side_stream: bool = False, sampling: SamplingParams | None = None) -> None:
        if engine.vocab_size < layout.vocab_needed:
            raise OrpheusError(f"the LM's vocabulary ({engine.vocab_size}) is too small for the "
                               f"Orpheus layout ({layout.vocab_needed} ids needed)")
        if codec.codebook_size != layout.codebook_size:
            raise OrpheusError(f"codec codebook ({codec.codebook_size}) differs from the layout's "
                               f"({layout.codebook_size})")
        self.engine, self.codec, self.tokenizer, self.layout = engine, codec, tokenizer, layout
        self.decoder = StreamingDecoder(codec, window or StreamWindow(), side_stream)
        self.sampling = sampling or SamplingParams()
        self.utterances: dict[str, Utterance] = {}
        self.fallbacks: list[str] = []
        self.timer: StageTimer | None = None

    @classmethod
    def from_config(cls, cfg: PipelineConfig, *, n_slots: int | None = None,
                    max_len: int | None = None) -> OrpheusTTS:
        """Build LM, codec and tokenizer for a pipeline config.

        Real weights: `cfg.model` is a checkpoint directory or hub id ("default" is the
        Orpheus 3B fine-tune) holding the LM and its tokenizer; SNAC comes from its hub id.
        Dummy weights: `cfg.model` may name an LM shape (e.g. "tiny-llama"); vocabularies too
        small for Orpheus get the compact token layout and a tiny codec.
        """
        device = resolve_device(cfg.device)
        fallbacks: list[str] = []
        codec_compile = cfg.compile if device.type == "cuda" else "none"
        if cfg.weights == "dummy":
            shape = "orpheus-3b" if cfg.model == "default" else cfg.model
            lm, lm_cfg = load_lm("dummy", shape=shape, dtype=cfg.dtype, device=device,
                                 seed=cfg.seed)
            layout = OrpheusLayout.fitting(lm_cfg.vocab_size)
            base = SNAC_24KHZ if layout == ORPHEUS else TINY_SNAC
            snac_cfg = {**base, "codebook_size": layout.codebook_size}
            codec = SnacCodec(build_snac(snac_cfg, seed=cfg.seed), device=device, noise=False,
                              compile_mode=codec_compile, is_dummy=True)
            tokenizer = ByteTokenizer(layout.bos)
        else:
            source = DEFAULT_MODEL if cfg.model == "default" else cfg.model
            lm, lm_cfg = load_lm(source, dtype=cfg.dtype, device=device)
            layout, tokenizer = ORPHEUS, load_tokenizer(source)
            codec = SnacCodec.from_source(HUB_ID, device=device, noise=False,
                                          compile_mode=codec_compile)
        if cfg.quant != "none":
            from lab.quant.precision import apply_precision

            fallbacks += apply_precision(lm, cfg.dtype, cfg.quant, device).fallbacks
        room = max_len or cfg.sampling.max_tokens + PROMPT_ROOM
        engine = LLMEngine(lm, engine_config(cfg, n_slots=n_slots,
                                             max_len=min(room, lm_cfg.max_seq_len)),
                           logits_processor=AudioTokenConstraint(layout))
        window = StreamWindow(hop=cfg.decode_interval, left=cfg.overlap, right=cfg.overlap)
        sampling = sampling_params(cfg.sampling, seed=cfg.seed)
        tts = cls(engine, codec, tokenizer, layout=layout, window=window, sampling=sampling)
        tts.fallbacks = fallbacks
        return tts

    @property
    def sample_rate(self) -> int:
        return self.codec.sample_rate

    def submit(self, text: str, voice: str | None = "tara",
               sampling: SamplingParams | None = None) -> str:
        """Queue one utterance; returns its id. Bad text or voice raise OrpheusError."""
        prompt = format_prompt(self.tokenizer, text, voice, self.layout)
        params = sampling or self.sampling
        stops = tuple(sorted({*params.stop_token_ids, self.layout.end_of_speech}))
        params = dataclasses.replace(params, stop_token_ids=stops)
        rid = self.engine.add_request(prompt, params)
        self.utterances[rid] = Utterance(rid, text, voice, time.perf_counter(),
                                         FrameAssembler(self.layout))
        self.decoder.open(rid)
        return rid

    def abort(self, request_id: str) -> None:
        if self.engine.abort(request_id):
            self.decoder.close(request_id)

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished() or self.decoder.busy

    def _stage(self, name: str):
        return self.timer.stage(name) if self.timer is not None else contextlib.nullcontext()

    def step(self) -> list[AudioChunk]:
        """One engine step plus the codec work it made due; returns the audio ready now.

        With `self.timer` set, the LM step and the codec work are timed as separate stages.
        """
        chunks = self.decoder.collect()
        with self._stage("lm_step"):
            outs = self.engine.step()
        for out in outs:
            utt = self.utterances[out.request_id]
            frames = utt.assembler.feed(out.token_ids)
            if frames:
                self.decoder.push(out.request_id, torch.tensor(frames, dtype=torch.long))
            if out.finished:
                self.decoder.close(out.request_id)
        with self._stage("codec"):
            self.decoder.launch()
            if not self.engine.has_unfinished():
                chunks += self.decoder.collect(wait=True)
        return self._record(chunks)

    def _record(self, chunks: list[AudioChunk]) -> list[AudioChunk]:
        now = time.perf_counter()
        for chunk in chunks:
            utt = self.utterances[chunk.stream_id]
            utt.chunks.append(chunk)
            if utt.first_audio is None and len(chunk.audio):
                utt.first_audio = now
            if chunk.final:
                utt.done = now
        return chunks

    def run(self) -> None:
        while self.has_unfinished():
            self.step()

    def synthesize(self, texts: Sequence[str], voice: str | None = "tara",
                   sampling: SamplingParams | Sequence[SamplingParams] | None = None,
                   ) -> list[np.ndarray]:
        """Whole waveforms, one per text, generated concurrently (one sampling, or one each)."""
        params = sampling if isinstance(sampling, (list, tuple)) else [sampling] * len(texts)
        ids = [self.submit(t, voice, p) for t, p in zip(texts, params, strict=True)]
        self.run()
        for i in ids:
            self.engine.release(i)
        return [self.utterances.pop(i).audio() for i in ids]

    def stream(self, text: str, voice: str | None = "tara",
               sampling: SamplingParams | None = None) -> Iterator[AudioChunk]:
        """One utterance's chunks in order, each as soon as it is decoded."""
        rid = self.submit(text, voice, sampling)
        while self.utterances[rid].done is None:
            yield from (c for c in self.step() if c.stream_id == rid)
        self.utterances.pop(rid)
        self.engine.release(rid)
