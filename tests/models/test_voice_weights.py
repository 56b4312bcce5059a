"""The voice LM's weights file: one fp16 safetensors file with its config, and errors that
name the file for every way it can be wrong."""

import json

import pytest
import torch
from safetensors.torch import save_file

from lab.engine.llm import LM, LMConfig
from lab.engine.weights import WeightsError
from lab.models.voice_format import VoiceLayout
from lab.models.voice_weights import load_voice_lm, save_voice_lm
from lab.training.trainer import init_weights

LAYOUT = VoiceLayout(levels=2, codebook_size=16)
CFG = LMConfig(vocab_size=LAYOUT.vocab_size, dim=64, n_layers=2, n_heads=4, n_kv_heads=2,
               intermediate_size=128, max_seq_len=256, tie_embeddings=True)


def fresh(seed: int = 0) -> LM:
    return init_weights(LM(CFG), seed)


def test_weights_file_round_trips_with_its_config(tmp_path):
    model = fresh()
    path = save_voice_lm(model, tmp_path / "voice.safetensors")
    assert list(tmp_path.iterdir()) == [path]
    loaded, cfg = load_voice_lm(path)
    assert cfg == CFG and loaded.lm_head.weight is loaded.embed.weight
    tokens = torch.tensor([[LAYOUT.bos, 3, 4, LAYOUT.start_audio]])
    positions = torch.arange(4)[None]
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens, positions), model(tokens, positions),
                                   rtol=1e-2, atol=1e-3)


def test_weights_file_errors_name_the_file(tmp_path):
    path = save_voice_lm(fresh(), tmp_path / "voice.safetensors")
    with pytest.raises(WeightsError, match="not found: .*absent"):
        load_voice_lm(tmp_path / "absent.safetensors")
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(WeightsError, match="cut.safetensors is not a readable safetensors"):
        load_voice_lm(cut)
    tensors = {k: v.half() for k, v in fresh().state_dict().items() if k != "lm_head.weight"}
    meta = {"lm_config": json.dumps({**CFG.__dict__, "intermediate_size": 96})}
    save_file(tensors, str(tmp_path / "shape.safetensors"), metadata=meta)
    with pytest.raises(WeightsError, match="shape.safetensors: tensor shapes do not match"):
        load_voice_lm(tmp_path / "shape.safetensors")
    del tensors["norm.weight"]
    save_file(tensors, str(tmp_path / "short.safetensors"),
              metadata={"lm_config": json.dumps(CFG.__dict__)})
    with pytest.raises(WeightsError, match=r"short.safetensors .*missing \['norm.weight'\]"):
        load_voice_lm(tmp_path / "short.safetensors")
