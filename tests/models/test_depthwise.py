"""SNAC's depthwise convolutions as sums of shifted slices (`lab.models.depthwise`): the same
output as the convolution, swapped in only where the codec compiles for a GPU."""

import pytest
import torch
from torch import nn

from lab.models.depthwise import ShiftedDepthwise, shift_depthwise
from lab.models.snac_codec import SnacCodec, build_snac, levels_from_frames, sums_depthwise


@pytest.mark.parametrize(("dilation", "bias", "length"), [(1, True, 1), (3, True, 50),
                                                          (9, False, 37)])
def test_the_shifted_sum_is_the_convolution(dilation, bias, length):
    torch.manual_seed(0)
    conv = nn.Conv1d(6, 6, 7, dilation=dilation, padding=3 * dilation, groups=6, bias=bias)
    x = torch.randn(3, 6, length)
    with torch.inference_mode():
        torch.testing.assert_close(ShiftedDepthwise(conv)(x), conv(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("conv", [nn.Conv1d(6, 6, 7, padding=3),  # not depthwise
                                  nn.Conv1d(6, 6, 7, stride=2, padding=3, groups=6),
                                  nn.Conv1d(6, 6, 7, padding=3, groups=6,
                                            padding_mode="reflect")])
def test_other_convolutions_are_refused_and_left_alone(conv):
    with pytest.raises(ValueError, match="not a depthwise convolution"):
        ShiftedDepthwise(conv)
    model = nn.Sequential(conv)
    assert shift_depthwise(model) == 0 and model[0] is conv


def _depthwise_convs(model: nn.Module) -> int:
    return sum(isinstance(m, nn.Conv1d) and m.groups > 1 for m in model.modules())


@pytest.mark.parametrize(("mode", "device", "expected"), [
    ("default", "cuda", True), ("max-autotune", "cuda", True), ("none", "cuda", False),
    ("default", "cpu", False)])
def test_only_a_codec_compiled_for_a_gpu_sums_its_depthwise_convolutions(mode, device,
                                                                           expected):
    assert sums_depthwise(mode, torch.device(device)) is expected


def test_the_swapped_codec_decodes_the_same_and_a_cpu_codec_keeps_its_convolutions():
    plain = SnacCodec(build_snac(), noise=False, compile_mode="default")
    assert _depthwise_convs(plain.model) == 26
    swapped = SnacCodec(build_snac(), noise=False)
    assert shift_depthwise(swapped.model) == 26 and _depthwise_convs(swapped.model) == 0
    frames = torch.randint(0, 4096, (2, 3, 7), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        want, got = (codec.model.decode(levels_from_frames(frames))
                     for codec in (plain, swapped))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)


def test_compiled_with_dynamic_lengths_it_matches_the_convolution():
    """As the codec compiles it: snake, the shifted sum, snake, over lengths that vary."""
    from snac.layers import Snake1d

    torch.manual_seed(1)
    conv = nn.Conv1d(8, 8, 7, dilation=3, padding=9, groups=8)
    unit = nn.Sequential(Snake1d(8), conv, Snake1d(8)).eval()
    shifted = torch.compile(nn.Sequential(unit[0], ShiftedDepthwise(conv), unit[2]),
                            dynamic=True)
    with torch.inference_mode():
        for length in (5, 40, 41):
            x = torch.randn(2, 8, length)
            torch.testing.assert_close(shifted(x), unit(x), atol=1e-5, rtol=1e-4)
