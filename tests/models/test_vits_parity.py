"""The PyTorch VITS port against onnxruntime running the voice's own ONNX graph."""

import numpy as np
import onnxruntime as ort
import pytest
import torch

from lab.frontend import prepare
from lab.models.piper_voice import load_voice, resolve_voice_file
from lab.models.vits import Synthesizer, VoiceFileError, load_onnx_weights

TEXT = "Quiet rivers carry small boats past the old mill every morning."


def snr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    error = reference - candidate
    return float(10 * np.log10(np.sum(reference**2) / max(np.sum(error**2), 1e-20)))


@pytest.fixture(scope="module")
def voice():
    return load_voice("default")


def torch_render(model: Synthesizer, ids: list[int]) -> np.ndarray:
    x = torch.tensor([ids])
    with torch.inference_mode():
        hidden, mean, log_std, mask = model.encode(x, torch.tensor([len(ids)]))
        frames = model.durations(hidden, mask, torch.zeros(1, 2, len(ids)), 1.0)
        latents = model.latents(mean, log_std, frames, torch.zeros(1, 192, int(frames.sum())))
        return model.vocode(latents.z, latents.mask)[0].numpy()


def test_waveform_matches_onnxruntime_with_noise_off(voice):
    ids = prepare(TEXT, voice.settings.phoneme_id_map).sentences[0].ids
    session = ort.InferenceSession(str(voice.source), providers=["CPUExecutionProvider"])
    reference = session.run(None, {
        "input": np.array([ids], dtype=np.int64),
        "input_lengths": np.array([len(ids)], dtype=np.int64),
        "scales": np.array([0.0, 1.0, 0.0], dtype=np.float32),
    })[0].reshape(-1)
    ours = torch_render(voice.model, ids)
    assert ours.shape == reference.shape
    snr = snr_db(reference, ours)
    print(f"PyTorch vs onnxruntime SNR: {snr:.1f} dB")
    assert snr > 60.0


def test_every_parameter_is_loaded_from_the_file(voice):
    fresh = Synthesizer(voice.model.hyper)
    load_onnx_weights(fresh, voice.source)
    for (name, a), (_, b) in zip(fresh.state_dict().items(), voice.model.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
    assert torch.count_nonzero(fresh.dp.flows["0"].logs) > 0


def test_missing_voice_files_give_clear_errors(tmp_path):
    with pytest.raises(VoiceFileError, match="not found"):
        resolve_voice_file(str(tmp_path / "absent.onnx"))
    with pytest.raises(VoiceFileError, match="no .onnx or .safetensors voice file"):
        resolve_voice_file(str(tmp_path))
    with pytest.raises(VoiceFileError, match="unknown voice"):
        resolve_voice_file("not-a-voice")


def test_safetensors_export_loads_the_same_weights(voice, tmp_path):
    from lab.models.piper_voice import export_voice

    exported = load_voice(str(export_voice(voice, tmp_path, half=False)))
    for (name, a), (_, b) in zip(exported.model.state_dict().items(),
                                 voice.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert exported.settings == voice.settings


def test_an_export_that_keeps_one_part_zeroes_the_rest(voice, tmp_path):
    from lab.models.piper_voice import export_voice

    kept = load_voice(str(export_voice(voice, tmp_path, half=False, keep="dec")))
    for (name, a), b in zip(kept.model.state_dict().items(),
                            voice.model.state_dict().values(), strict=True):
        assert torch.equal(a, b if name.startswith("dec.") else torch.zeros_like(b)), name
    with pytest.raises(ValueError, match=r"no part 'decoder'; its parts are \['dec', 'dp'"):
        export_voice(voice, tmp_path / "bad", keep="decoder")
    assert not (tmp_path / "bad").exists()


def test_hub_reference_fails_clearly_offline(monkeypatch):
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(VoiceFileError, match="offline, pass a local"):
        resolve_voice_file("rhasspy/piper-voices:en/en_US/joe/medium/en_US-joe-medium.onnx")
