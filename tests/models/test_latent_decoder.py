"""The codec's learned decoder: starts as the plain k-means decode, keeps streaming exact, and
its file is refused by name when it is wrong."""

import pytest
import torch

from lab.models.latent_codec import LatentCodec, dequantize
from lab.models.latent_decoder import LatentDecoder, load_decoder, save_decoder
from lab.models.piper_voice import load_voice
from lab.stream.codec_stream import CodecError, StreamWindow


@pytest.fixture(scope="module")
def books() -> torch.Tensor:
    return torch.randn(3, 32, 2 * 192, generator=torch.Generator().manual_seed(0)) * 0.3


@pytest.fixture(scope="module")
def trained(books) -> LatentDecoder:
    """A decoder whose correction is not zero, as after training."""
    decoder = LatentDecoder.from_codebooks(books, hidden=32)
    with torch.no_grad():
        for p in decoder.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return decoder.eval()


def codes(groups: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 32, (1, groups, 3), generator=torch.Generator().manual_seed(seed))


def test_a_new_decoder_is_the_sum_of_codebook_rows(books):
    decoder = LatentDecoder.from_codebooks(books, hidden=16)
    c = codes(7, 1)
    expected = dequantize(c[0], books).reshape(14, 192).T
    with torch.no_grad():
        assert torch.allclose(decoder(c)[0], expected, atol=1e-6)


def test_the_correction_reaches_only_its_stated_frames(trained):
    c = codes(12, 2)
    changed = c.clone()
    changed[0, 0] = (changed[0, 0] + 1) % 32
    with torch.no_grad():
        diff = (trained(c) - trained(changed)).abs().sum(dim=1)[0]
    moved = torch.nonzero(diff > 1e-6).flatten()
    assert moved.max() < 2 + trained.shape.reach   # group 0 is frames 0-1


def test_streamed_windows_with_a_trained_decoder_join_the_one_shot_decode(books, trained,
                                                                         streamed_snr):
    codec = LatentCodec(books, load_voice().model.dec, decoder=trained)
    assert streamed_snr(codec, codes(23, 3), StreamWindow(hop=4, left=4, right=4)) > 40


def test_decoder_files_round_trip(tmp_path, books, trained):
    path = save_decoder(trained, tmp_path / "decoder.safetensors")
    loaded = load_decoder(path, books)
    c = codes(5, 4)
    with torch.no_grad():
        assert torch.allclose(loaded(c), trained(c), atol=2e-2)
    assert loaded.shape == trained.shape


def test_bad_decoder_files_are_refused_by_name(tmp_path, books, trained):
    path = save_decoder(trained, tmp_path / "decoder.safetensors")
    (tmp_path / "cut.safetensors").write_bytes(path.read_bytes()[:200])
    with pytest.raises(CodecError, match="cut.safetensors"):
        load_decoder(tmp_path / "cut.safetensors", books)
    with pytest.raises(CodecError, match="missing.safetensors"):
        load_decoder(tmp_path / "missing.safetensors", books)
    with pytest.raises(CodecError, match="the codebooks are"):
        load_decoder(path, books[:2])
