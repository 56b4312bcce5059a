"""The lab's own voice's token format: phonemes, then codec codes interleaved with the phonemes.

A small language model cannot be trusted to learn where each phoneme falls in the audio from
20 hours of speech, so the format tells it. The prompt is the whole phoneme sequence (so the
model sees what comes next), then the audio: before each group of codec frames come the
phonemes whose sound starts in that group, as the teacher's durations placed them. The model
therefore decides *when* to move on to the next phoneme, but never *which* phoneme comes next:
`PhonemeAlignedConstraint` offers it only the next one of its own prompt. Everything a decoder
needs is fixed by the layout below:

    [BOS] p1 p2 ... pn [AUDIO]  p1 c(0,0) .. c(0,K-1)  c(1,0) .. c(1,K-1)  p2 c(2,0) ..  [END]

Phoneme ids are the Piper voice's own (below `n_phonemes`), so the voice's frontend feeds the
model unchanged; code `c` at level `k` of a group is `audio_offset + k * codebook_size + c`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from lab.engine.request import Request
from lab.engine.sampler import Candidates
from lab.engine.transfer import to_device

VOCAB_MULTIPLE = 64
MAX_GROUPS_PER_PHONEME = 8
"""The most codec groups one phoneme may hold before the next is forced (0.37 s at 4 frames a
group). The teacher never gives a phoneme, or the silence after the last one, more than 6."""


class VoiceFormatError(ValueError):
    """Tokens or alignments that do not fit the layout."""


@dataclass(frozen=True)
class VoiceLayout:
    """Where the voice's phonemes, special tokens and codes sit in the vocabulary."""

    levels: int = 4
    codebook_size: int = 1024
    n_phonemes: int = 256

    @property
    def bos(self) -> int:
        return self.n_phonemes

    @property
    def start_audio(self) -> int:
        return self.n_phonemes + 1

    @property
    def end(self) -> int:
        return self.n_phonemes + 2

    @property
    def pad(self) -> int:
        return self.n_phonemes + 3

    @property
    def audio_offset(self) -> int:
        return self.n_phonemes + 4

    @property
    def vocab_size(self) -> int:
        """Rounded up so the head's matmul has friendly shapes."""
        needed = self.audio_offset + self.levels * self.codebook_size
        return -(-needed // VOCAB_MULTIPLE) * VOCAB_MULTIPLE

    def code_token(self, level: int, code: int) -> int:
        return self.audio_offset + level * self.codebook_size + code

    def is_phoneme(self, token: int) -> bool:
        return 0 <= token < self.n_phonemes


def lm_phonemes(piper_ids: Sequence[int]) -> list[int]:
    """The phonemes of a Piper id sequence [^ _ p1 _ p2 _ ... pn _ $], without BOS, pads, EOS.

    The pads carry no sound of their own to speak of: their frames belong to the phoneme before.
    """
    if len(piper_ids) < 3 or len(piper_ids) % 2 == 0:
        raise VoiceFormatError(f"not a Piper id sequence (^ _ p _ ... $): {len(piper_ids)} ids")
    return list(piper_ids[2:-1:2])


def phoneme_groups(piper_durations: Sequence[int], group_frames: int) -> list[int]:
    """The codec group in which each phoneme's sound starts, from the teacher's frames per
    Piper id (BOS, pads and EOS included)."""
    starts = np.concatenate([[0], np.cumsum(piper_durations)[:-1]])
    return [int(s) // group_frames for s in starts[2:-1:2]]


def prompt(layout: VoiceLayout, phonemes: Sequence[int]) -> list[int]:
    if not phonemes:
        raise VoiceFormatError("there are no phonemes to speak")
    bad = [p for p in phonemes if not layout.is_phoneme(p)]
    if bad:
        raise VoiceFormatError(f"phoneme ids {bad[:5]} lie outside [0, {layout.n_phonemes})")
    return [layout.bos, *phonemes, layout.start_audio]


def audio_tokens(layout: VoiceLayout, phonemes: Sequence[int], groups: Sequence[int],
                 codes: np.ndarray) -> list[int]:
    """The continuation after the prompt: each group's starting phonemes, its K codes; END.

    A phoneme starting past the last group (the teacher gave it no frames) is placed before
    the end, so every phoneme is always emitted, as the constraint demands at inference.
    """
    if len(phonemes) != len(groups):
        raise VoiceFormatError(f"{len(phonemes)} phonemes but {len(groups)} group indices")
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.shape[1] != layout.levels:
        raise VoiceFormatError(f"codes must be [groups, {layout.levels}]; got {codes.shape}")
    offsets = layout.audio_offset + np.arange(layout.levels) * layout.codebook_size
    out, i = [], 0
    for g, row in enumerate(codes):
        while i < len(phonemes) and groups[i] <= g:
            out.append(phonemes[i])
            i += 1
        out.extend((offsets + row).tolist())
    return [*out, *phonemes[i:], layout.end]


def training_sequence(layout: VoiceLayout, phonemes: Sequence[int], groups: Sequence[int],
                      codes: np.ndarray) -> tuple[list[int], int]:
    """(prompt + continuation, prompt length) for one utterance."""
    head = prompt(layout, phonemes)
    return head + audio_tokens(layout, phonemes, groups, codes), len(head)


class GroupAssembler:
    """Collects one request's codes into K-code groups as tokens arrive; phonemes and the end
    token carry no audio and are passed over."""

    def __init__(self, layout: VoiceLayout) -> None:
        self.layout = layout
        self.partial: list[int] = []

    def feed(self, tokens: Sequence[int]) -> list[list[int]]:
        lay, groups = self.layout, []
        for token in tokens:
            code = token - lay.audio_offset - len(self.partial) * lay.codebook_size
            if not 0 <= code < lay.codebook_size:
                continue
            self.partial.append(code)
            if len(self.partial) == lay.levels:
                groups.append(self.partial)
                self.partial = []
        return groups


class PhonemeAlignedConstraint:
    """Logits processor: the next token is the code of the next level, or, at a group
    boundary, the request's next phoneme (END once every phoneme has been emitted). A phoneme
    that has held `max_groups` groups is made to give way: the next phoneme (or END) is then
    the only choice, so a model that lingers cannot run on.

    The level follows from the previous token alone; how many phonemes a request has emitted
    and how many codes since the last one are counted on the device, per slot, so no step
    waits for the host to learn what was sampled. Each row's candidates are that one
    phoneme-or-END entry and the level's codes.
    """

    def __init__(self, layout: VoiceLayout, max_groups: int = MAX_GROUPS_PER_PHONEME) -> None:
        self.layout, self.max_groups = layout, max_groups
        self.consumed: torch.Tensor | None = None  # [slots] phonemes emitted so far
        self.since: torch.Tensor | None = None     # [slots] codes since the last phoneme
        self.count: torch.Tensor | None = None     # [slots] phonemes in the prompt
        self.phonemes: torch.Tensor | None = None  # [slots, longest prompt]

    def _start(self, requests: list[Request], device: torch.device) -> None:
        fresh = [r for r in requests if r.n_launched == 0]
        if not fresh:
            return
        slots = max(r.slot for r in requests) + 1
        width = max(len(r.prompt_ids) for r in fresh)
        self._grow(slots, width, device)
        for r in fresh:
            ids = r.prompt_ids[1:-1]
            self.phonemes[r.slot, :len(ids)] = to_device(ids, torch.long, device)
            self.count[r.slot] = len(ids)
            self.consumed[r.slot] = 0
            self.since[r.slot] = 0

    def _grow(self, slots: int, width: int, device: torch.device) -> None:
        if self.phonemes is not None and self.phonemes.shape[0] >= slots \
                and self.phonemes.shape[1] >= width:
            return
        old = self.phonemes
        rows = max(slots, 0 if old is None else old.shape[0])
        cols = max(width, 0 if old is None else old.shape[1])
        self.phonemes = torch.zeros(rows, cols, dtype=torch.long, device=device)
        fresh = [torch.zeros(rows, dtype=torch.long, device=device) for _ in range(3)]
        if old is not None:
            self.phonemes[:old.shape[0], :old.shape[1]] = old
            for new, kept in zip(fresh, (self.count, self.consumed, self.since), strict=True):
                new[:old.shape[0]] = kept
        self.count, self.consumed, self.since = fresh

    def __call__(self, logits: torch.Tensor, requests: list[Request],
                 previous: torch.Tensor | None = None) -> Candidates:
        lay, device = self.layout, logits.device
        self._start(requests, device)
        slots = to_device([r.slot for r in requests], torch.long, device)
        started = to_device([r.n_launched > 0 for r in requests], torch.bool, device)
        if previous is None:
            raise VoiceFormatError("the constraint needs each row's previous token")
        prev = torch.where(started, previous, lay.start_audio)
        said = started & (prev < lay.n_phonemes)
        consumed = self.consumed[slots] + said
        self.consumed[slots] = consumed
        is_code = prev >= lay.audio_offset
        since = torch.where(said, 0, self.since[slots] + (started & is_code))
        self.since[slots] = since
        level = torch.where(is_code, ((prev - lay.audio_offset) // lay.codebook_size + 1)
                            % lay.levels, 0)
        remaining = consumed < self.count[slots]
        upcoming = self.phonemes[slots, consumed.clamp_max(self.phonemes.shape[1] - 1)]
        special = torch.where(remaining, upcoming, lay.end)
        codes = lay.audio_offset + level[:, None] * lay.codebook_size + torch.arange(
            lay.codebook_size, device=device)
        allowed = torch.ones(codes.shape[0], codes.shape[1] + 1, dtype=torch.bool,
                             device=device)
        allowed[:, 0] = level == 0
        allowed[:, 1:] &= ~((level == 0) & (since >= self.max_groups * lay.levels))[:, None]
        return Candidates(torch.cat([special[:, None], codes], dim=1), allowed)


@dataclass(frozen=True)
class VoiceFormat:
    """The voice's tokens as `lab.models.token_tts` reads them: a unit is a sentence's
    phonemes (Piper ids, without BOS, pads and EOS)."""

    layout: VoiceLayout

    @property
    def end(self) -> int:
        return self.layout.end

    @property
    def codebook_size(self) -> int:
        return self.layout.codebook_size

    @property
    def vocab_needed(self) -> int:
        return self.layout.vocab_size

    def prompt(self, unit: Sequence[int], voice: str | None) -> list[int]:
        return prompt(self.layout, unit)

    def assembler(self) -> GroupAssembler:
        return GroupAssembler(self.layout)
