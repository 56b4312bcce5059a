"""The voice's training data on disk: ragged integer arrays in one compressed `.npz`.

Two stages keep two files. `Phonemized` is text and the teacher's phoneme ids; it is made where
espeak-ng runs (any CPU). `VoiceCorpus` adds what the teacher and the codec made of each
sentence: the phonemes the language model reads, the codec group each phoneme starts in, and
the codes. Codes are int16 (a few megabytes per ten hours), so the corpus can travel with the
working tree to a GPU machine and back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lab.models.latent_codec import HOP, CodecShape
from lab.models.voice_format import VoiceLayout, training_sequence

SAMPLE_RATE = 22050


class CorpusError(ValueError):
    """A corpus file that is missing or does not hold what its stage writes."""


def pack(arrays: Sequence[np.ndarray], dtype) -> tuple[np.ndarray, np.ndarray]:
    """Ragged arrays -> (concatenation, offsets [n + 1])."""
    lengths = [len(a) for a in arrays]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    if not arrays:
        return np.zeros(0, dtype), offsets
    return np.concatenate([np.asarray(a, dtype) for a in arrays]), offsets


def unpack(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def _read(path: Path, keys: Sequence[str]) -> dict[str, np.ndarray]:
    if not Path(path).is_file():
        raise CorpusError(f"corpus file not found: {path}")
    with np.load(path, allow_pickle=False) as data:
        missing = [k for k in keys if k not in data]
        if missing:
            raise CorpusError(f"{path} lacks {missing}; was it written by another stage?")
        return {k: data[k] for k in data.files}


@dataclass
class Phonemized:
    """Sentences and the teacher's Piper ids for each ([^ _ p _ ... $])."""

    texts: list[str]
    ids: list[np.ndarray]
    held_out: np.ndarray  # bool per sentence: never trained on

    def save(self, path: Path) -> None:
        flat, offsets = pack(self.ids, np.int16)
        np.savez_compressed(path, texts=np.array(self.texts), ids=flat, offsets=offsets,
                            held_out=self.held_out)

    @classmethod
    def load(cls, path: Path) -> Phonemized:
        d = _read(path, ("texts", "ids", "offsets", "held_out"))
        return cls(list(map(str, d["texts"])), unpack(d["ids"], d["offsets"]), d["held_out"])


@dataclass
class VoiceCorpus:
    """Per sentence: LM phonemes, the codec group each starts in, and the codes [G, levels]."""

    shape: CodecShape
    texts: list[str]
    phonemes: list[np.ndarray]
    groups: list[np.ndarray]
    codes: list[np.ndarray]
    held_out: np.ndarray

    @property
    def seconds(self) -> float:
        groups = sum(len(c) for c in self.codes)
        return groups * self.shape.group_frames * HOP / SAMPLE_RATE

    def split(self, held_out: bool) -> VoiceCorpus:
        keep = [i for i, h in enumerate(self.held_out) if bool(h) == held_out]
        pick = lambda xs: [xs[i] for i in keep]  # noqa: E731
        return VoiceCorpus(self.shape, pick(self.texts), pick(self.phonemes), pick(self.groups),
                           pick(self.codes), self.held_out[keep])

    def sequences(self, layout: VoiceLayout) -> tuple[list[np.ndarray], list[int]]:
        """Token sequences and prompt lengths, in the format the model speaks."""
        seqs, prompts = [], []
        for ph, gr, co in zip(self.phonemes, self.groups, self.codes, strict=True):
            seq, n = training_sequence(layout, ph.tolist(), gr.tolist(), co)
            seqs.append(np.asarray(seq, np.int32))
            prompts.append(n)
        return seqs, prompts

    def save(self, path: Path) -> None:
        s = self.shape
        ph, ph_off = pack(self.phonemes, np.int16)
        gr, _ = pack(self.groups, np.int32)
        co, co_off = pack(self.codes, np.int16)
        np.savez_compressed(path, shape=np.array([s.group_frames, s.levels, s.codebook_size]),
                            texts=np.array(self.texts), phonemes=ph, phoneme_offsets=ph_off,
                            groups=gr, codes=co.reshape(-1, s.levels), code_offsets=co_off,
                            held_out=self.held_out)

    @classmethod
    def load(cls, path: Path) -> VoiceCorpus:
        d = _read(path, ("shape", "texts", "phonemes", "phoneme_offsets", "groups", "codes",
                         "code_offsets", "held_out"))
        group_frames, levels, size = (int(x) for x in d["shape"])
        return cls(CodecShape(group_frames, levels, size), list(map(str, d["texts"])),
                   unpack(d["phonemes"], d["phoneme_offsets"]),
                   unpack(d["groups"], d["phoneme_offsets"]),
                   unpack(d["codes"], d["code_offsets"]), d["held_out"])
