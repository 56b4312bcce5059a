"""Text -> the voice's training corpus: phonemize (CPU), then render and code (GPU or CPU).

Phonemizing needs espeak-ng, which a GPU image may lack; rendering needs only torch. So the
two stages meet in a `Phonemized` file. Rendering keeps every latent frame on the device, fits
the codec's residual codebooks on the training sentences only (never the held-out ones), then
codes every sentence with them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tqdm import tqdm

from lab.frontend.errors import TextError
from lab.models.latent_codec import CodecShape, group_latents, quantize
from lab.models.voice_format import lm_phonemes, phoneme_groups
from lab.training.corpus import Phonemized, VoiceCorpus
from lab.training.rvq import train_rvq
from lab.training.teacher import Teacher


def phonemize(teacher: Teacher, train: Sequence[str], held_out: Sequence[str]) -> Phonemized:
    """One row per sentence the voice's frontend finds; a text of two sentences gives two.
    Held-out lines the frontend refuses (the edge set's punctuation-only lines) are left out;
    a refused training line is a generator bug and raises."""
    texts, ids, flags = [], [], []
    for text, held in tqdm([(t, False) for t in train] + [(t, True) for t in held_out],
                           desc="phonemize", unit="text", mininterval=5):
        try:
            sentences = teacher.ids(text)
        except TextError:
            if not held:
                raise
            continue
        for sentence in sentences:
            texts.append(text)
            ids.append(np.asarray(sentence, np.int16))
            flags.append(held)
    return Phonemized(texts, ids, np.array(flags))


def render(teacher: Teacher, data: Phonemized, shape: CodecShape, *, batch_size: int = 64,
           seed: int = 0, max_vectors: int = 2_000_000, kmeans_iters: int = 20
           ) -> tuple[VoiceCorpus, torch.Tensor]:
    """(corpus, codebooks [levels, size, dim]) for every sentence of `data`."""
    ids = [a.tolist() for a in data.ids]
    vectors, groups = [], []
    takes = teacher.takes(ids, batch_size=batch_size, seed=seed)
    for take in tqdm(takes, total=len(ids), desc="teacher", unit="sentence", mininterval=5):
        vectors.append(group_latents(take.latents.to(teacher.device), shape.group_frames))
        groups.append(np.asarray(phoneme_groups(take.durations, shape.group_frames), np.int32))
    train = torch.cat([v for v, h in zip(vectors, data.held_out, strict=True) if not h])
    pick = torch.randperm(len(train), generator=torch.Generator().manual_seed(seed))
    books = train_rvq(train[pick[:max_vectors].to(train.device)], shape.levels,
                      shape.codebook_size, kmeans_iters, seed)
    codes = [quantize(v, books).to(torch.int16).cpu().numpy()
             for v in tqdm(vectors, desc="code", unit="sentence", mininterval=5)]
    phonemes = [np.asarray(lm_phonemes(i), np.int16) for i in ids]
    return VoiceCorpus(shape, data.texts, phonemes, groups, codes, data.held_out), books
