"""The VITS port's fast paths give the numbers of the plain ones they replace.

The vocoder runs channels-last 2-D convolutions with in-place sums and skips its mask where no
item is padded; the text encoder builds its attention layout once; the duration predictor runs
its kernel-1 and depthwise convolutions as matrix products and shifted sums. Small random
models: the parity test holds the real voice against onnxruntime.
"""

import pytest
import torch
from torch.nn import functional as F

from lab.models.vits.attention import AttentionLayout
from lab.models.vits.frames import FrameConv, FrameUpsample, from_frames, to_frames
from lab.models.vits.generator import Generator, MaskTails, Tails
from lab.models.vits.layers import depthwise, pointwise, same_padding, sequence_mask
from lab.models.vits.text_encoder import TextEncoder


@pytest.fixture(scope="module")
def generator() -> Generator:
    torch.manual_seed(0)
    return Generator(in_channels=8, channels=16, upsample_rates=(2, 2),
                     upsample_kernels=(4, 4)).eval()


def test_frame_convolutions_equal_their_1d_originals():
    torch.manual_seed(0)
    conv = FrameConv(6, 5, 5, dilation=2, padding=4)
    x = torch.randn(2, 6, 11)
    framed = from_frames(conv(to_frames(x)))
    assert torch.allclose(framed, F.conv1d(x, conv.weight, conv.bias, padding=4, dilation=2),
                          atol=1e-5)
    assert conv.weight.shape == (5, 6, 5), "weights keep Conv1d's shape, so they load by name"


@pytest.mark.parametrize("kernel, stride, padding, phased", [(8, 4, 2, True), (16, 8, 4, True),
                                                             (7, 3, 2, False)])
@pytest.mark.parametrize("batch", [1, 3])
def test_an_upsampling_layer_equals_its_transposed_convolution(kernel, stride, padding, phased,
                                                                batch):
    """HiFi-GAN's shape (kernel twice the stride) runs as phases of a plain convolution, one
    item as a view of its output; any other shape as the transposed convolution itself."""
    torch.manual_seed(0)
    up = FrameUpsample(6, 5, kernel, stride, padding=padding)
    x = torch.randn(batch, 6, 11)
    with torch.inference_mode():
        out = up(to_frames(x))
    ref = F.conv_transpose1d(x, up.weight, up.bias, stride, padding)
    assert up.phased == phased
    # The exact strides of a channels-last tensor: with any other batch stride, oneDNN's next
    # convolution would write its output in the plain layout.
    assert out.stride() == torch.empty_like(out, memory_format=torch.channels_last).stride()
    assert torch.allclose(from_frames(out), ref, atol=1e-5)
    with torch.no_grad():
        up.weight.mul_(2)
        twice = from_frames(up(to_frames(x)))
    assert torch.allclose(twice, F.conv_transpose1d(x, up.weight, up.bias, stride, padding),
                          atol=1e-5), "a changed weight is not served from the old phases"


def test_no_mask_is_the_all_ones_mask(generator):
    z = torch.randn(2, 8, 9)
    with torch.inference_mode():
        masked = generator(z, torch.ones(2, 1, 9))
        unmasked = generator(z, None)
    assert torch.allclose(masked, unmasked, atol=1e-6)


def test_a_padded_batch_vocodes_each_item_as_if_alone(generator):
    lengths = torch.tensor([9, 5])
    z = torch.randn(2, 8, 9)
    mask = sequence_mask(lengths).unsqueeze(1).float()
    with torch.inference_mode():
        batch = generator(z, mask)
        short = generator(z[1:, :, :5], None)
    hop = generator.hop_length
    assert torch.allclose(batch[1, : 5 * hop], short[0], atol=1e-5)
    assert torch.count_nonzero(batch[1, 5 * hop :]) == 0


def test_the_vocoder_backpropagates_to_its_input(generator):
    """The codec decoder trains through the vocoder: its in-place sums must not break autograd."""
    z = torch.randn(1, 8, 6, requires_grad=True)
    generator(z, torch.ones(1, 1, 6)).pow(2).sum().backward()
    assert z.grad is not None and torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


def test_a_padded_item_backpropagates_through_its_zeroed_tails(generator):
    """Eagerly the padding is zeroed in place; after an in-place activation autograd needs
    that activation as it was, so the zeroing must not touch it."""
    z = torch.randn(2, 8, 6, requires_grad=True)
    mask = sequence_mask(torch.tensor([6, 4])).unsqueeze(1).float()
    generator(z, mask).pow(2).sum().backward()
    assert torch.count_nonzero(z.grad[1, :, 4:]) == 0 and z.grad[1, :, :4].abs().sum() > 0


@pytest.mark.parametrize("rank", ["frames", "audio"])
def test_the_compiled_paths_mask_zeroes_what_the_eager_tails_zero(rank):
    mask = sequence_mask(torch.tensor([7, 3, 5]), 7).unsqueeze(1).float()
    eager, traced = Tails.of(mask).scaled(4), MaskTails.of(mask).scaled(4)
    assert eager.lengths == (28, 12, 20) and eager.width == 28
    x = torch.randn(3, 6, 1, 28).contiguous(memory_format=torch.channels_last)
    if rank == "audio":
        x = from_frames(x)[:, 0]
    want = traced.zero(x)
    assert torch.equal(eager.zero(x.clone()), want)
    assert torch.count_nonzero(want[1, ..., 12:]) == 0 and torch.count_nonzero(want[0]) > 0


@pytest.mark.parametrize("batch", [1, 2])
def test_the_vocoder_compiles_in_one_graph_and_sounds_as_eager(generator, batch):
    """The compile knob's path: the upsampling phases' views trace without a graph break,
    and the compiled vocoder (masked where an item is padded) gives the eager audio."""
    z = torch.randn(batch, 8, 9)
    mask = sequence_mask(torch.tensor([9, 6][:batch]), 9).unsqueeze(1).float()
    mask = None if batch == 1 else mask
    compiled = torch.compile(generator, fullgraph=True)
    with torch.inference_mode():
        assert torch.allclose(compiled(z, mask), generator(z, mask), atol=1e-5)


def test_attention_layout_blocks_only_padded_pairs():
    full = AttentionLayout.of(torch.ones(2, 1, 4), window=1)
    assert full.blocked is None
    padded = AttentionLayout.of(sequence_mask(torch.tensor([4, 2])).unsqueeze(1).float(), 1)
    assert not padded.blocked[0].any()
    assert padded.blocked[1, 0, :2, :2].logical_not().all() and padded.blocked[1, 0, 2:].all()
    assert padded.index.shape == (4, 4) and padded.index[0, 3] == 3, "offset 3 is off the window"


def test_the_encoder_reads_a_padded_item_as_if_alone():
    torch.manual_seed(0)
    encoder = TextEncoder(20, channels=16, hidden=32, n_heads=2, n_layers=2).eval()
    ids = torch.randint(1, 20, (2, 7))
    lengths = torch.tensor([7, 4])
    mask = sequence_mask(lengths).unsqueeze(1).float()
    with torch.inference_mode():
        _, mean, _ = encoder(ids, mask)
        _, alone, _ = encoder(ids[1:, :4], torch.ones(1, 1, 4))
    assert torch.allclose(mean[1, :, :4], alone[0], atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_kernel_1_convolution_as_a_matrix_product_equals_the_convolution(bias, dtype):
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(12, 7, 1, bias=bias).to(dtype)
    for batch, length in ((1, 9), (3, 40)):
        x = torch.randn(batch, 12, length, dtype=dtype)
        tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
        torch.testing.assert_close(pointwise(conv, x), conv(x), **tol)


@pytest.mark.parametrize(("kernel", "dilation"), [(3, 1), (3, 3), (3, 9), (5, 2)])
@pytest.mark.parametrize("bias", [True, False])
def test_a_depthwise_convolution_as_shifted_sums_equals_the_convolution(kernel, dilation, bias):
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(6, 6, kernel, groups=6, dilation=dilation,
                           padding=same_padding(kernel, dilation), bias=bias)
    for batch, length in ((1, 5), (2, 37)):
        x = torch.randn(batch, 6, length)
        torch.testing.assert_close(depthwise(conv, x), conv(x))
