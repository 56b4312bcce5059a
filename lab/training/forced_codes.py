"""The voice LM's own codes for audio whose true latents are known, under teacher forcing.

A codec decoder trained only on the codes of true latents learns to undo the quantizer's
errors. The language model's sampled codes err another way (a plausible neighbour of the true
code, drawn at the voice's temperature), and those corrections then mislead: the decoder made
the voice's own speech less intelligible than the plain sum did. Feeding the model each true
sequence and drawing every code from its prediction at that position gives codes the model
would speak, still aligned frame for frame with the latents they stand for: the
vocoder-on-predicted-features recipe of TTS training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from lab.engine.llm import LM
from lab.engine.sampler import Candidates, SamplingBatch, sample
from lab.models.voice_format import VoiceLayout, training_sequence


@dataclass(frozen=True)
class Draw:
    """How codes are drawn from the model's predictions: the voice's sampling settings."""

    temperature: float = 0.4
    top_k: int = 50
    top_p: float = 0.95


def forced_codes(model: LM, layout: VoiceLayout, phonemes: Sequence[Sequence[int]],
                 groups: Sequence[Sequence[int]], codes: Sequence[np.ndarray], draw: Draw,
                 seed: int = 0, batch_size: int = 64) -> list[np.ndarray | None]:
    """Per utterance, [groups, levels] codes drawn from the model given the true history, in
    place of `codes`; None where the utterance is longer than the model's context (it never
    speaks one so long at once). Utterances are batched by length so padding stays small."""
    sequences = [training_sequence(layout, list(p), list(g), np.asarray(c))[0]
                 for p, g, c in zip(phonemes, groups, codes, strict=True)]
    fits = [i for i, s in enumerate(sequences) if len(s) - 1 <= model.cfg.max_seq_len]
    order = sorted(fits, key=lambda i: len(sequences[i]))
    generator = torch.Generator().manual_seed(seed)
    out: dict[int, np.ndarray | None] = dict.fromkeys(range(len(sequences)))
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        drawn = _draw_batch(model, layout, [sequences[i] for i in chunk], draw, generator)
        out.update(zip(chunk, drawn, strict=True))
    return list(out.values())


@torch.no_grad()
def _draw_batch(model: LM, layout: VoiceLayout, sequences: list[list[int]], draw: Draw,
                generator: torch.Generator) -> list[np.ndarray]:
    device = next(model.parameters()).device
    width = max(len(s) for s in sequences) - 1
    tokens = torch.full((len(sequences), width), layout.pad, dtype=torch.long)
    targets = torch.full((len(sequences), width), layout.pad, dtype=torch.long)
    for row, seq in enumerate(sequences):
        t = torch.tensor(seq, dtype=torch.long)
        tokens[row, :len(t) - 1], targets[row, :len(t) - 1] = t[:-1], t[1:]
    positions = torch.arange(width).expand(len(sequences), width)
    logits = model(tokens.to(device), positions.to(device))
    code = targets - layout.audio_offset
    is_code = (code >= 0) & (code < layout.levels * layout.codebook_size)
    level = (code[is_code] // layout.codebook_size).to(device)
    picked = logits[is_code.to(device)]
    shortlist = Candidates(layout.audio_offset + level[:, None] * layout.codebook_size
                           + torch.arange(layout.codebook_size, device=device))
    n = len(level)
    settings = SamplingBatch(
        temperature=torch.full((n,), draw.temperature, device=device),
        top_p=torch.full((n,), draw.top_p, device=device),
        top_k=torch.full((n,), draw.top_k, dtype=torch.long, device=device),
        penalty=torch.ones(n, device=device),
        uniforms=torch.rand(n, generator=generator, dtype=torch.float64).to(device),
        cheap_topk=[0 < draw.top_k] * n)
    drawn = (sample(picked, settings, shortlist=shortlist) - layout.audio_offset
             - level * layout.codebook_size).cpu()
    per_row = is_code.sum(dim=1).tolist()
    return [c.reshape(-1, layout.levels).numpy().astype(np.int16)
            for c in torch.split(drawn, per_row)]
