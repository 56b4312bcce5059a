"""The voice codec: residual codes of the teacher's latents, decoded by the teacher's own
generator, in one shot or streamed in windows."""


import pytest
import torch

from lab.models.latent_codec import (
    LatentCodec,
    dequantize,
    group_latents,
    load_codebooks,
    quantize,
    save_codebooks,
)
from lab.models.piper_voice import load_voice
from lab.stream.codec_stream import CodecError, StreamWindow
from lab.training.rvq import train_rvq
from tests.models.conftest import check_compiled_capture


@pytest.fixture(scope="module")
def voice():
    return load_voice()


@pytest.fixture(scope="module")
def codec(voice) -> LatentCodec:
    books = torch.randn(3, 32, 2 * 192, generator=torch.Generator().manual_seed(0)) * 0.3
    return LatentCodec(books, voice.model.dec)


def test_grouping_pads_the_last_group_with_zero_frames():
    z = torch.arange(10.0).reshape(5, 2)
    groups = group_latents(z, 2)
    assert groups.shape == (3, 4) and groups[-1].tolist() == [8.0, 9.0, 0.0, 0.0]


def test_each_level_codes_what_the_levels_before_it_left():
    x = torch.randn(4000, 8, generator=torch.Generator().manual_seed(1))
    books = train_rvq(x, levels=3, size=32, iters=8)
    errors = [(x - dequantize(quantize(x, books[:n]), books[:n])).pow(2).mean().item()
              for n in (1, 2, 3)]
    assert errors[0] > errors[1] > errors[2]
    assert errors[2] < 0.5 * x.pow(2).mean().item()


def test_codes_of_codebook_rows_round_trip_exactly(codec):
    codes = torch.randint(0, 32, (1, 6, 3), generator=torch.Generator().manual_seed(2))
    vectors = dequantize(codes[0], codec.codebooks)
    assert torch.equal(quantize(vectors, codec.codebooks[:1])[:, 0], codes[0, :, 0])


def test_decode_is_the_generator_on_the_summed_codes(codec, voice):
    codes = torch.randint(0, 32, (2, 5, 3), generator=torch.Generator().manual_seed(3))
    audio = codec.decode(codes)
    assert audio.shape == (2, 5 * 2 * 256)
    z = dequantize(codes[1], codec.codebooks).reshape(10, 192).T[None]
    with torch.inference_mode():
        direct = voice.model.dec(z, torch.ones(1, 1, 10))[0]
    assert torch.allclose(audio[1], direct, atol=1e-5)


def _codes(b: int, g: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 32, (b, g, 3), generator=torch.Generator().manual_seed(seed))


def test_cuda_graphs_without_a_gpu_decode_uncaptured_and_say_so(codec, voice):
    graphed = LatentCodec(codec.codebooks, voice.model.dec, cuda_graphs=True)
    assert graphed.graphs is None
    assert graphed.fallbacks == ["The voice codec's CUDA graphs need a CUDA device; the codec "
                                 "is on cpu and decodes uncaptured"]
    graphed.capture(4)  # nothing to capture: no error, no further note
    assert len(graphed.fallbacks) == 1
    codes = _codes(2, 4, seed=5)
    assert torch.equal(graphed.decode(codes), codec.decode(codes))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_captured_window_decodes_replay_the_eager_decode(codec, voice):
    """Every batch bucket and window length is captured up front; a replay pads the batch to
    its bucket and gives each stream what the uncaptured codec gives it."""
    eager = LatentCodec(codec.codebooks, voice.model.dec, device="cuda")
    graphed = LatentCodec(codec.codebooks, voice.model.dec, device="cuda", cuda_graphs=True,
                          max_batch=4)
    graphed.capture(5)
    assert graphed.graphs.captured == [(b, f) for b in (1, 2, 4) for f in range(1, 6)]
    assert not graphed.fallbacks
    for b, g in ((1, 5), (3, 2), (4, 5)):
        codes = _codes(b, g, seed=10 + b)
        torch.testing.assert_close(graphed.decode(codes), eager.decode(codes))


def test_out_of_range_or_misshapen_codes_are_refused(codec):
    with pytest.raises(CodecError, match="must lie in"):
        codec.decode(torch.full((1, 2, 3), 32))
    with pytest.raises(CodecError, match=r"\[B, G, 3\]"):
        codec.decode(torch.zeros(1, 2, 4, dtype=torch.long))


def test_streamed_windows_join_into_the_one_shot_decode(codec, streamed_snr):
    codes = torch.randint(0, 32, (1, 23, 3), generator=torch.Generator().manual_seed(4))
    assert streamed_snr(codec, codes, StreamWindow(hop=4, left=4, right=4)) > 40


def test_codebook_files_round_trip_and_bad_files_are_named(tmp_path, codec):
    path = tmp_path / "books.safetensors"
    save_codebooks(codec.codebooks, path)
    assert torch.allclose(load_codebooks(path), codec.codebooks, atol=1e-2)
    with pytest.raises(CodecError, match="not found"):
        load_codebooks(tmp_path / "missing.safetensors")
    (tmp_path / "bad.safetensors").write_bytes(path.read_bytes()[:100])
    with pytest.raises(CodecError, match="bad.safetensors"):
        load_codebooks(tmp_path / "bad.safetensors")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_a_compiled_codec_captures_from_batch_two_and_one_frame_uncompiled(codec, voice):
    """A compiled generator specialises a size of 1, so its graphs start at a bucket of 2
    and one-frame windows run it eagerly: one compile in all, and every replay still gives
    what the uncaptured codec gives."""
    eager = LatentCodec(codec.codebooks, voice.model.dec, device="cuda")
    graphed = LatentCodec(codec.codebooks, voice.model.dec, device="cuda", cuda_graphs=True,
                          max_batch=4, compile_mode="default")
    check_compiled_capture(graphed, eager, _codes)
