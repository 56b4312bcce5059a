"""apply_knobs: every dtype x quant on the real voice and the tiny LM ends with the parameter
dtypes its report claims, fp32 islands survive quantization, and compile has one meaning."""

from __future__ import annotations

import copy

import pytest
import torch
import torch._inductor
from torch import nn

import lab.config
import lab.quant.plan as plan
from lab.engine import GraphedDecoder, StaticKVCache, load_lm
from lab.models.piper_backend import PIPER_PLAN
from lab.models.piper_voice import load_voice
from lab.models.snac_codec import SNAC_24KHZ, SnacCodec, build_snac
from lab.models.token_backend import LM_PLAN
from lab.quant import COMPILE_MODES, DTYPES, QUANTS, PrecisionError
from lab.quant.plan import PrecisionPlan, apply_knobs
from lab.quant.precision import is_quantized

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def voice() -> nn.Module:
    return load_voice("default").model


@pytest.fixture
def fresh_voice(voice) -> nn.Module:
    return copy.deepcopy(voice)


def _tiny_lm() -> nn.Module:
    lm, _ = load_lm("dummy", shape="tiny-llama", dtype="fp32", device=CPU, seed=0)
    return lm


def _real_dtypes(model: nn.Module) -> dict[str, torch.dtype]:
    return {name: p.dtype for name, p in model.named_parameters() if p.is_floating_point()}


def _assert_report_is_true(model: nn.Module, report, dtype: str, quant: str) -> None:
    """Everything the report and its notes claim, checked against the model itself."""
    assert _real_dtypes(model) == report.expected_dtypes(model)
    run = "bf16" if dtype == "fp16" else dtype
    assert report.dtype == run
    assert any("runs as bf16" in n for n in report.notes) == (dtype == "fp16")
    assert any("kept in fp32" in n for n in report.notes) == bool(
        report.fp32_islands and run != "fp32")
    for island in report.fp32_islands:
        assert all(p.dtype == torch.float32 for p in model.get_submodule(island).parameters())
    linears = {fqn: m for fqn, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert {fqn for fqn, m in linears.items() if is_quantized(m.weight)} == set(report.quantized)
    assert bool(report.quantized) == (report.quant != "none")
    assert any(f"applied {report.quant}" in n for n in report.notes) == (report.quant != quant)


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_voice_ends_as_its_report_says(fresh_voice, dtype, quant):
    report = apply_knobs(fresh_voice, PIPER_PLAN, dtype=dtype, quant=quant, compile_mode="none",
                         device=CPU)
    _assert_report_is_true(fresh_voice, report, dtype, quant)
    assert report.fp32_islands == ("dp",)
    if quant != "none":  # the voice is convolutions: nothing for torchao to take
        assert report.quant == "none"
        assert any("no linear layer to quantize" in n for n in report.notes)


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_lm_ends_as_its_report_says(dtype, quant):
    lm = _tiny_lm()
    report = apply_knobs(lm, LM_PLAN, dtype=dtype, quant=quant, compile_mode="none", device=CPU)
    _assert_report_is_true(lm, report, dtype, quant)
    if quant != "none":  # on a CPU every chain reaches an int8 mode
        assert report.quant.startswith("int8")
    with torch.no_grad():
        logits = lm(torch.tensor([[1, 2, 3]]), torch.arange(3)[None])
    assert torch.isfinite(logits.float()).all()


class _Toy(nn.Module):
    """A body, a head and a duration-predictor-like island, each one linear."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(64, 64)
        self.head = nn.Linear(64, 64)
        self.dp = nn.Linear(64, 64)


@pytest.mark.parametrize("quant", [q for q in QUANTS if q != "none"])
def test_fp32_islands_survive_quantization_and_quant_stays_inside_its_paths(quant):
    toy = _Toy()
    toy_plan = PrecisionPlan(quantize=("body", "dp"), fp32_islands={"dp": "a toy island"})
    report = apply_knobs(toy, toy_plan, dtype="bf16", quant=quant, compile_mode="none",
                         device=CPU)
    _assert_report_is_true(toy, report, "bf16", quant)
    assert report.quantized == ["body"]
    assert type(toy.dp.weight) is nn.Parameter and toy.dp.weight.dtype == torch.float32
    assert type(toy.head.weight) is nn.Parameter and toy.head.weight.dtype == torch.bfloat16
    assert any("dp kept in fp32" in n for n in report.notes)


@pytest.mark.parametrize(("native", "noted"), [(False, True), (True, False)])
def test_bf16_on_a_cpu_without_native_support_is_announced(monkeypatch, fresh_voice, native,
                                                           noted):
    monkeypatch.setattr(plan, "native_bf16", lambda device: native)
    bf16 = apply_knobs(fresh_voice, PIPER_PLAN, dtype="bf16", quant="none",
                       compile_mode="none", device=CPU)
    assert any("no native bf16" in n for n in bf16.notes) == noted
    fp32 = apply_knobs(fresh_voice, PIPER_PLAN, dtype="fp32", quant="none",
                       compile_mode="none", device=CPU)
    assert fp32.notes == []


def test_bad_names_raise_before_the_model_is_touched(fresh_voice):
    for knobs, match in [({"dtype": "fp64"}, "dtype 'fp64'"), ({"quant": "int2"}, "quant 'int2'"),
                         ({"compile_mode": "turbo"}, "compile mode 'turbo'")]:
        kwargs = {"dtype": "bf16", "quant": "none", "compile_mode": "none", **knobs}
        with pytest.raises(ValueError, match=match):
            apply_knobs(fresh_voice, PIPER_PLAN, device=CPU, **kwargs)
    assert fresh_voice.dec.conv_pre.weight.dtype == torch.float32
    assert issubclass(PrecisionError, ValueError)


@pytest.fixture
def compile_calls(monkeypatch) -> list[str]:
    """torch.compile replaced by a recorder of the inductor mode each caller asked for."""
    calls: list[str] = []

    def record(fn, *, mode=None, options=None, **kwargs):
        calls.append(mode if options is None else options)
        return fn

    monkeypatch.setattr(torch, "compile", record)
    return calls


@pytest.mark.parametrize("mode", [m for m, c in COMPILE_MODES.items() if c.inductor])
def test_one_compile_mode_means_one_inductor_mode_everywhere(compile_calls, fresh_voice, mode):
    """The LM decode step, the codec and a family's plan all ask inductor for the same mode; the
    decode step's one-row version adds coordinate-descent tuning, whatever quantized before
    it, and its others turn it off."""
    lm = _tiny_lm()
    cfg = lm.cfg
    cache = StaticKVCache(cfg.n_layers, 2, 16, cfg.n_kv_heads, cfg.head_dim)
    GraphedDecoder(lm, cache, mode)
    codec = SnacCodec(build_snac({**SNAC_24KHZ, "encoder_dim": 8, "decoder_dim": 32}),
                      compile_mode=mode)
    report = apply_knobs(fresh_voice, PIPER_PLAN, dtype="fp32", quant="none", compile_mode=mode,
                         device=CPU)
    assert len(compile_calls) == 6  # the decoder's blocks and heads, the codec, the vocoder
    decoder, others = compile_calls[:4], compile_calls[4:]
    assert set(others) == {COMPILE_MODES[mode].inductor}
    mode_options = torch._inductor.list_mode_options(COMPILE_MODES[mode].inductor)
    one_row, rows = ({**mode_options, "coordinate_descent_tuning": tuned}
                     for tuned in (True, False))
    assert sorted(decoder, key=str) == sorted([one_row, one_row, rows, rows], key=str)
    assert "cudagraphs" not in COMPILE_MODES[mode].inductor.replace("no-cudagraphs", "")
    graphs_note = COMPILE_MODES[mode].wants_graphs
    assert report.compile == mode
    assert any("without CUDA graphs" in n for n in report.notes) == graphs_note
    assert any("without CUDA graphs" in n for n in codec.fallbacks) == graphs_note


def test_compile_none_compiles_nothing(compile_calls, fresh_voice):
    forward = fresh_voice.dec.forward
    report = apply_knobs(fresh_voice, PIPER_PLAN, dtype="fp32", quant="none",
                         compile_mode="none", device=CPU)
    assert compile_calls == [] and report.compile == "none"
    assert fresh_voice.dec.forward == forward


def test_the_config_offers_exactly_the_quant_tables():
    assert lab.config.DTYPES == tuple(DTYPES)
    assert lab.config.QUANTS == QUANTS
    assert lab.config.COMPILE_MODES == tuple(COMPILE_MODES)
    assert "max-autotune-no-cudagraphs" not in lab.config.COMPILE_MODES
