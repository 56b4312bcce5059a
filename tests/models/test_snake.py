"""The snake activation the codec runs is SNAC's own formula, on every device it runs on."""

from pathlib import Path

import pytest
import torch
from snac.layers import Snake1d
from snac.layers import snake as snac_snake

from lab.models.snac_codec import (
    SnacCodec,
    build_snac,
    fold_weight_norm,
    levels_from_frames,
    strip_noise,
)
from lab.models.snake import Snake, fuse_snake, snake, snake_reference
from tests.kernel_checks import run_check

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]


def _inputs(device: str, dtype: torch.dtype, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(length)
    x = 3 * torch.randn(3, 5, length, generator=gen)
    alpha = torch.rand(1, 5, 1, generator=gen) + 0.1
    return x.to(device, dtype), alpha.to(device, dtype)


def test_the_reference_is_snacs_own_snake():
    x, alpha = _inputs("cpu", torch.float32, 333)
    assert torch.equal(snake_reference(x, alpha), snac_snake(x, alpha))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("length", [1, 1000, 1025, 4096])
def test_snake_matches_the_reference_on_each_device(device, length):
    x, alpha = _inputs(device, torch.float32, length)
    got = snake(x, alpha)
    assert got.shape == x.shape and got.dtype == x.dtype
    torch.testing.assert_close(got, snake_reference(x, alpha), rtol=1e-5, atol=1e-5)


# CUDA's kernel computes in float32 and rounds once; eager bf16 rounds after every op.
BF16_RTOL = {"cuda": 1e-2, "cpu": 4e-2}


@pytest.mark.parametrize("device", DEVICES)
def test_snake_in_bf16_stays_within_rounding_of_float32(device):
    x, alpha = _inputs(device, torch.bfloat16, 2048)
    want = snake_reference(x.float(), alpha.float()).to(torch.bfloat16)
    rtol = BF16_RTOL[device]
    torch.testing.assert_close(snake(x, alpha), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("device", DEVICES)
def test_a_non_contiguous_input_gives_the_same_values(device):
    x, alpha = _inputs(device, torch.float32, 64)
    strided = x.transpose(0, 2).contiguous().transpose(0, 2)
    assert not strided.is_contiguous()
    torch.testing.assert_close(snake(strided, alpha), snake_reference(x, alpha))


def test_fuse_snake_swaps_every_snac_snake_and_keeps_its_alpha():
    model = build_snac(seed=0)
    alphas = [m.alpha for m in model.modules() if isinstance(m, Snake1d)]
    assert fuse_snake(model) == len(alphas) > 0
    swapped = [m for m in model.modules() if isinstance(m, Snake)]
    assert [m.alpha for m in swapped] == alphas
    assert not any(isinstance(m, Snake1d) for m in model.modules())
    assert fuse_snake(model) == 0


@pytest.mark.parametrize("device", DEVICES)
def test_the_codec_decodes_as_the_unswapped_snac_model(device):
    codec = SnacCodec(build_snac(seed=3), device=device, noise=False)
    plain = build_snac(seed=3)
    strip_noise(plain)
    fold_weight_norm(plain)
    plain = plain.to(device).eval()
    frames = torch.randint(0, codec.codebook_size, (2, 4, 7),
                           generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        want = plain.decode(levels_from_frames(frames.to(device)))[:, 0]
    torch.testing.assert_close(codec.decode(frames), want, rtol=1e-4, atol=1e-5)


def test_the_kernel_itself_matches_the_reference():
    """The Triton kernel, not the eager formula a CPU falls back on: on a GPU, or under
    Triton's interpreter on a CPU (`tests/kernel_checks.py`)."""
    run_check(Path(__file__).with_name("snake_checks.py"), "kernel_matches_reference")
