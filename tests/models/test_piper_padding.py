"""The default voice pads its phoneme and frame axes to shared lengths, so a CPU reuses the
convolution kernels it built for an earlier sentence; the padding must not change the sound."""

from __future__ import annotations

import torch

from lab.config import PipelineConfig
from lab.metrics.timers import StageTimer
from lab.models.piper_backend import FRAME_STEP, ID_STEP, PiperBackend, padded_length


def test_padded_lengths_are_few_and_add_less_than_a_step_or_an_eighth():
    lengths = [padded_length(n, FRAME_STEP) for n in range(1, 2049)]
    assert all(p >= n and p % FRAME_STEP == 0 for n, p in enumerate(lengths, 1))
    assert all(p - n < max(FRAME_STEP, n / 8) for n, p in enumerate(lengths, 1))
    assert len(set(lengths)) <= 40
    assert padded_length(200, 32) == 224 and padded_length(224, 32) == 224


def test_a_padded_sentence_sounds_as_it_does_unpadded():
    """The backend's path (ids and frames padded, masks zeroing the padding) against the
    voice's own stages run at the sentence's exact lengths, with the same noise."""
    backend = PiperBackend.load(PipelineConfig(device="cpu", stream=False), torch.device("cpu"))
    ids = backend.prepare("Padding to shared lengths must leave every sample as it was.")[0][0]
    assert padded_length(len(ids), ID_STEP) > len(ids)  # this sentence does get padded
    audio = backend._batch([ids], [5], StageTimer("cpu"))[0]
    model, scales = backend.model, backend.scales
    with torch.inference_mode():
        hidden, mean, log_std, mask = model.encode(torch.tensor([ids]),
                                                   torch.tensor([len(ids)]))
        noise = backend._noise([5], (2,), [len(ids)], scales.noise_w, len(ids))
        frames = model.durations(hidden, mask, noise, scales.length)
        n = int(frames.sum())
        z_noise = backend._noise([6], (backend.channels,), [n], scales.noise, n)
        latents = model.latents(mean, log_std, frames, z_noise)
        plain = model.vocode(latents.z, latents.mask)[0].numpy()
    assert padded_length(n, FRAME_STEP) > n and len(audio) == len(plain)
    assert abs(audio - plain).max() < 1e-4 * abs(plain).max()


def test_a_cpu_vocodes_a_batch_in_groups_that_share_a_span():
    """In a padded batch every sentence would pay for the longest one's frames; on a CPU the
    vocoder takes together only the sentences whose padded spans are equal, each group over
    its span, with the sound each sentence has alone."""
    backend = PiperBackend.load(PipelineConfig(device="cpu", stream=False, batch_size=3),
                                torch.device("cpu"))
    ids = [backend.prepare(text)[0][0] for text in (
        "Short one.",
        "This second sentence is a good deal longer than the first, so it has more frames.",
        "Short one.")]
    seeds = [3, 4, 3]
    seen = []
    hook = backend.model.dec.register_forward_pre_hook(
        lambda _module, args: seen.append(tuple(args[0].shape)))
    try:
        batched = backend._batch(ids, seeds, StageTimer("cpu"))
        calls = list(seen)
        seen.clear()
        alone = [backend._batch([one], [seed], StageTimer("cpu"))[0]
                 for one, seed in zip(ids, seeds, strict=True)]
    finally:
        hook.remove()
    short, long = seen[0][-1], seen[1][-1]
    assert short < long and all(n == padded_length(n, FRAME_STEP) for n in (short, long))
    assert [(z[0], z[-1]) for z in calls] == [(2, short), (1, long)], calls
    for got, want in zip(batched, alone, strict=True):
        assert len(got) == len(want) and abs(got - want).max() < 1e-4 * abs(want).max()
