"""The codec decoder's training on CPU with the real voice's generator and real teacher latents:
it learns, resumes exactly where it stopped, and fits its schedule to the time it has."""

from __future__ import annotations

import json

import pytest
import torch

from lab.models.latent_codec import group_latents, quantize
from lab.models.latent_decoder import LatentDecoder
from lab.training.decoder_fit import (
    LOG_FILE,
    Crops,
    DecoderTrainConfig,
    fit_to_budget,
    lr_at,
    train_decoder,
)
from lab.training.rvq import train_rvq
from lab.training.teacher import Teacher

TEXTS = ("Seven quiet otters drift past the harbour wall.",
         "Did the parcel for Mrs. Okafor arrive on Tuesday?")


@pytest.fixture(autouse=True)
def _single_thread(one_thread):
    """One thread: runs that should agree do so exactly."""


@pytest.fixture(scope="module")
def teacher() -> Teacher:
    return Teacher("cpu")


@pytest.fixture(scope="module")
def data(teacher):
    """Two sentences' latents, coded by small residual codebooks fit on them."""
    latents = [t.latents for t in teacher.takes([teacher.ids(x)[0] for x in TEXTS])]
    books = train_rvq(torch.cat([group_latents(z, 2) for z in latents]), levels=2, size=16,
                      iters=4)
    codes = [quantize(group_latents(z, 2), books) for z in latents]
    return books, Crops(codes, latents, group_frames=2, crop_groups=8)


def config(steps: int) -> DecoderTrainConfig:
    return DecoderTrainConfig(steps=steps, batch=4, crop_groups=8, lr=3e-3, eval_every=1000)


def test_crops_stay_inside_one_sentence_and_match_their_codes(data):
    books, crops = data
    codes, latents = crops.take(crops.starts[:3])
    assert codes.shape == (3, 8, 2) and latents.shape == (3, 192, 16)
    ends = torch.cumsum(torch.tensor([len(c) for c in [crops.codes]]), 0)
    assert int(crops.starts.max()) + 8 <= int(ends[-1])
    assert torch.equal(quantize(latents[0].T.reshape(8, 384), books), codes[0])


def test_training_fits_one_crop_it_sees_again_and_again(tmp_path, teacher, data):
    """Two levels of 16 rows leave most error beyond any decoder's reach in general; one crop
    alone it can learn: the loss must fall by more than half in 30 steps."""
    books, crops = data
    codes, latents = crops.take(crops.starts[10:11])
    one = Crops([codes[0]], [latents[0].T], group_frames=2, crop_groups=8)
    decoder = LatentDecoder.from_codebooks(books, hidden=32)
    result = train_decoder(decoder, teacher.backend.model.dec, one, one,
                           DecoderTrainConfig(steps=30, batch=2, crop_groups=8, lr=1e-2),
                           tmp_path)
    first = json.loads((tmp_path / LOG_FILE).read_text().splitlines()[0])
    assert result["step"] == 30
    assert result["eval_loss"] < 0.5 * first["eval_loss"]


def test_a_resumed_run_ends_where_one_long_run_ends(tmp_path, teacher, data):
    books, crops = data
    whole = LatentDecoder.from_codebooks(books, hidden=16)
    train_decoder(whole, teacher.backend.model.dec, crops, crops, config(6), tmp_path / "a")
    half = LatentDecoder.from_codebooks(books, hidden=16)
    train_decoder(half, teacher.backend.model.dec, crops, crops, config(6), tmp_path / "b",
                  stop_step=3)
    fresh = LatentDecoder.from_codebooks(books, hidden=16)
    train_decoder(fresh, teacher.backend.model.dec, crops, crops, config(6), tmp_path / "b")
    for a, b in zip(whole.state_dict().values(), fresh.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_the_schedule_warms_up_then_falls_to_zero():
    cfg = DecoderTrainConfig(steps=100, lr=1.0)
    assert lr_at(cfg, 0) < lr_at(cfg, 4) == pytest.approx(1.0)
    assert lr_at(cfg, 50) < 1.0 and lr_at(cfg, 99) < 0.01


def test_a_short_budget_shortens_the_schedule_to_what_it_holds(tmp_path):
    """50 steps took 10 s of a 60 s budget: 90% of the 50 s left holds 225 more."""
    log = tmp_path / LOG_FILE
    cfg = DecoderTrainConfig(steps=100_000, time_budget_s=60)
    assert fit_to_budget(cfg, 50, 50, 10.0, log).steps == 275
    assert json.loads(log.read_text())["asked"] == 100_000
    roomy = DecoderTrainConfig(steps=200, time_budget_s=60)
    assert fit_to_budget(roomy, 50, 50, 10.0, log) is roomy
