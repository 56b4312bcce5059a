"""Orpheus' token format: a Llama language model that speaks by emitting SNAC codec tokens.

The prompt is a chat-style turn built from special tokens around "voice: text"; the model then
writes 7 audio tokens per 85 ms frame until its end-of-speech token. Audio token k of a frame is
`<custom_token_{10 + k * 4096 + code}>`, i.e. id `128266 + k * 4096 + code`, and the 7 codes of
a frame are SNAC's code tree flattened depth-first (see snac_codec). This module owns that
format: the vocabulary layout, the tokenizer, the prompt, the assembly of tokens into frames,
and a constraint that only lets the model emit a valid next audio token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lab.engine.request import Request
from lab.engine.sampler import Candidates
from lab.models.snac_codec import FRAME_CODES

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")


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
    """NOT Orpheus' tokenizer: UTF-8 bytes as ids 0..255, for dummy weights with a vocabulary
    too small for subword ids (the tiny test shapes)."""

    is_placeholder = True

    def __init__(self, bos: int) -> None:
        self.bos = bos

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return [self.bos, *ids] if add_special_tokens else ids


class SubwordStandIn:
    """NOT Orpheus' tokenizer: one id per four characters, as Llama-3's BPE averages on
    English, for dummy weights of the real shape. Dummy weights make noise whatever the ids
    mean, but prompt length is prefill work: bytes would make prompts about four times longer
    than the real model's and overstate what every arrival costs a serving GPU."""

    is_placeholder = True

    def __init__(self, bos: int, vocab: int) -> None:
        self.bos, self.vocab = bos, vocab

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        pieces = [text[i:i + 4] for i in range(0, len(text), 4)]
        ids = [sum(map(ord, p)) * 7919 % self.vocab for p in pieces]
        return [self.bos, *ids] if add_special_tokens else ids


def dummy_tokenizer(layout: OrpheusLayout) -> ByteTokenizer | SubwordStandIn:
    """The stand-in for a layout: subword-length prompts over the text ids below `bos` where
    the layout has a subword vocabulary (Orpheus' own), bytes in a compact one."""
    if layout.bos > 256:
        return SubwordStandIn(layout.bos, layout.bos)
    return ByteTokenizer(layout.bos)


def load_tokenizer(source: str, layout: OrpheusLayout = ORPHEUS):
    """Orpheus' tokenizer from a local directory or hub id; `"dummy"` gives a stand-in."""
    if source == "dummy":
        return dummy_tokenizer(layout)
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


@dataclass(frozen=True)
class OrpheusFormat:
    """Orpheus' tokens as `lab.models.token_tts` reads them: a unit is a sentence's text."""

    tokenizer: object
    layout: OrpheusLayout = ORPHEUS

    @property
    def end(self) -> int:
        return self.layout.end_of_speech

    @property
    def codebook_size(self) -> int:
        return self.layout.codebook_size

    @property
    def vocab_needed(self) -> int:
        return self.layout.vocab_needed

    def prompt(self, unit: str, voice: str | None) -> list[int]:
        return format_prompt(self.tokenizer, unit, voice, self.layout)

    def voice_prefix(self, voice: str | None) -> list[int]:
        """The tokens every prompt to `voice` starts with, whatever its text: the common start
        of two prompts whose texts differ from their first letter, so it holds for whatever
        tokenizer is loaded (a merge across the voice's name and the text would end it
        early, never make it wrong; the engine checks each prompt anyway)."""
        first, second = (self.prompt(text, voice) for text in ("a", "b"))
        shared = 0
        while first[shared] == second[shared]:
            shared += 1
        return first[:shared]

    def assembler(self) -> FrameAssembler:
        return FrameAssembler(self.layout)


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

    reads_previous = False  # frame positions follow from `n_launched` alone

    def __init__(self, layout: OrpheusLayout = ORPHEUS, allow_stop: bool = True) -> None:
        self.layout, self.allow_stop = layout, allow_stop
        self._tables: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}
        # Every token it can return: the engine computes logits for this span only.
        self.vocab_range = (min(layout.end_of_speech, layout.audio_offset), layout.vocab_needed)

    def __call__(self, logits: torch.Tensor, requests: list[Request],
                 previous: torch.Tensor | None = None) -> Candidates:
        ids, allowed = self._tables.get(logits.device) or self._table(logits.device)
        return Candidates(ids, allowed, rows=[r.n_launched % FRAME_CODES for r in requests])

    def _table(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Each frame position's shortlist, built once: a step only looks its rows up."""
        lay = self.layout
        index = torch.arange(FRAME_CODES, device=device)
        codes = torch.arange(lay.codebook_size, device=device)
        audio = lay.audio_offset + index[:, None] * lay.codebook_size + codes
        stop = torch.full_like(index, lay.end_of_speech)[:, None]
        allowed = torch.ones(FRAME_CODES, lay.codebook_size + 1, dtype=torch.bool, device=device)
        allowed[:, 0] = (index == 0) & self.allow_stop
        self._tables[device] = torch.cat([stop, audio], dim=1), allowed
        return self._tables[device]
