"""The voice's set-up says when bf16 will be emulated on this CPU, instead of just running slow."""

import pytest
import torch

import lab.models.voice_setup as voice_setup
from lab.config import PipelineConfig
from lab.models.piper_voice import load_voice

NOTE = "no native bf16"


@pytest.mark.parametrize(("native", "noted"), [(False, True), (True, False)])
def test_bf16_on_a_cpu_without_native_support_is_announced(monkeypatch, native, noted):
    monkeypatch.setattr(voice_setup, "native_bf16", lambda device: native)
    model = load_voice("default").model
    notes = voice_setup.prepare_model(model, PipelineConfig(dtype="bf16"), torch.device("cpu"))
    assert any(NOTE in n for n in notes) == noted
    fp32 = voice_setup.prepare_model(load_voice("default").model, PipelineConfig(),
                                     torch.device("cpu"))
    assert not any(NOTE in n for n in fp32)
