"""int8-static: the voice's vocoder in int8 sounds like fp32, masked or not, and runs int8
kernels, with its float work in fp32 or in bf16; a 1-D convolution fed time-major frames (as
the flow is) comes out right, and where static int8 cannot apply the chain falls back with the
reason."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from lab.config import PipelineConfig
from lab.engine import load_lm
from lab.frontend import sentence_set
from lab.metrics.timers import StageTimer
from lab.models.piper_backend import PIPER_PLAN, STATIC_PARTS, PiperBackend
from lab.models.piper_voice import load_voice
from lab.models.token_backend import LM_PLAN
from lab.quality import fidelity
from lab.quant.plan import StaticParts, apply_knobs
from lab.quant.precision import DTYPES, unsupported_reason
from lab.quant.pt2e import activations_saturate, agreement_db, quantize_static_int8

CPU = torch.device("cpu")


def _vocode(backend: PiperBackend, latents: list) -> list:
    with torch.inference_mode():
        return [backend.model.vocode(lat.z, lat.mask)[0].float().numpy() for lat in latents]


def _agreement_floor() -> tuple[float, float]:
    """The least agreement (dB) and PESQ-WB an int8 take must keep against the fp32 one, for
    the activations this CPU's kernels take. Measured on these sentences: with 8-bit ones
    (VNNI), PESQ 4.1-4.2 and 15-21 dB; with 7-bit ones (no VNNI, `activations_saturate`),
    PESQ 3.49-3.67 and 12.7-15.4 dB, one bit less. Either floor stays far above a broken
    kernel: noise at 10 dB SNR scores PESQ under 2, and a kernel that saturates, or reads its
    input with the wrong strides, scores below 0 dB."""
    return (10.0, 3.2) if activations_saturate() else (12.0, 3.5)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_int8_vocoder_sounds_like_fp32_and_runs_int8_kernels(dtype):
    backend = PiperBackend.load(PipelineConfig(device="cpu", stream=False), CPU)
    latents = [backend.latents(backend.prepare(text)[0], [0], StageTimer(CPU))
               for text in sentence_set("short")[:3]]
    reference = _vocode(backend, latents)
    static = StaticParts({"dec": "forward"}, backend._calibrate, backend._float_tail())
    report = apply_knobs(backend.model, replace(PIPER_PLAN, static=static), dtype=dtype,
                         quant="int8-static", compile_mode="none", device=CPU)
    assert (report.quant, report.dtype) == ("int8-static", dtype), report.notes
    vocoder = backend.model.dec.forward
    assert vocoder.dtype == backend.model.dtype == DTYPES[dtype]
    assert ("float work between its int8 layers in bf16" in " ".join(report.notes)) == (
        dtype == "bf16")
    done = vocoder.report
    # Every layer marked for int8 became a oneDNN int8 kernel; none of them is the float tail.
    assert done.int8_kernels == len(done.quantized) >= 10
    assert report.quantized == [f"dec.{layer}" for layer in done.quantized]
    # The upsampling layers run as plain convolutions (`FrameUpsample`), so they are int8 too.
    assert "conv_post" not in done.quantized and "ups.2" in done.quantized
    min_db, min_pesq = _agreement_floor()
    for take, ref in zip(_vocode(backend, latents), reference, strict=True):
        assert agreement_db(torch.from_numpy(take), torch.from_numpy(ref)) > min_db
        scores = fidelity(take, ref, backend.sample_rate)
        assert scores.pesq_wb > min_pesq and scores.stoi > 0.95
    # A sentence whose frames fill its padded length exactly reaches the vocoder unmasked.
    lat, ref = latents[0], reference[0]
    n = int(lat.lengths[0])
    with torch.inference_mode():
        whole = backend.model.vocode(lat.z[..., :n], lat.mask[..., :n])[0].float()
    assert agreement_db(whole, torch.from_numpy(ref[: len(whole)])) > min_db


def test_a_1d_convolution_is_quantized_and_reads_time_major_frames_right():
    conv = nn.Conv1d(16, 32, 5, padding=4, dilation=2).eval()
    gen = torch.Generator().manual_seed(0)
    run, report = quantize_static_int8(conv, [(torch.randn(1, 16, 64, generator=gen),)] * 2)
    assert report.quantized == [""] and report.int8_kernels == 1
    frames = torch.randn(2, 50, 16, generator=gen).transpose(1, 2)
    with torch.inference_mode():
        assert agreement_db(run(frames), conv(frames)) > 25


def test_where_it_cannot_apply_int8_static_falls_back_and_says_why():
    assert "in fp32 or bf16" in unsupported_reason("int8-static", CPU, torch.float16)
    voice = load_voice("default").model
    failing = StaticParts(STATIC_PARTS, calibrate=lambda: 1 / 0)
    broken = apply_knobs(voice, replace(PIPER_PLAN, static=failing), dtype="bf16",
                         quant="int8-static", compile_mode="none", device=CPU)
    assert broken.quant == "none" and "ZeroDivisionError" in " ".join(broken.notes)
    held = {next(voice.get_submodule(part).parameters()).dtype for part in STATIC_PARTS}
    assert held == {torch.bfloat16}, "a failed calibration leaves its parts in the model's dtype"
    lm, _ = load_lm("dummy", shape="tiny-llama", dtype="fp32", device=CPU, seed=0)
    no_parts = apply_knobs(lm, LM_PLAN, dtype="fp32", quant="int8-static", compile_mode="none",
                           device=CPU)
    assert no_parts.quant == "int8-dynamic"
    assert any("names no part to quantize whole" in n for n in no_parts.notes)
    with pytest.raises(ValueError, match="no 2-D convolution or linear layer"):
        quantize_static_int8(nn.Tanh(), [(torch.randn(1, 4, 8),)])
