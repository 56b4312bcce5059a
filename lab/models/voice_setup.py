"""Put a voice model on its device in the requested precision, and compile it if asked.

Anything that cannot be honoured falls back to something that runs, and the reason is returned
so the user sees it next to the timings instead of wondering why a knob did nothing.
"""

from __future__ import annotations

import torch
from torch import nn

from lab.config import PipelineConfig
from lab.device import native_bf16
from lab.quant.precision import DTYPES, apply_precision


def _quantize(model: nn.Module, config: PipelineConfig, device: torch.device) -> list[str]:
    result = apply_precision(model, config.dtype, config.quant, device)
    return list(result.fallbacks)


def _compile(model: nn.Module, mode: str) -> list[str]:
    """Compile the vocoder, the stage that dominates synthesis time."""
    try:
        options = {} if mode == "default" else {"mode": mode}
        model.dec.forward = torch.compile(model.dec.forward, dynamic=True, **options)
    except Exception as err:  # compilation support differs by platform; fall back, say why
        return [f"torch.compile({mode}) failed ({type(err).__name__}: {err}); ran eager"]
    return []


def prepare_model(model: nn.Module, config: PipelineConfig, device: torch.device) -> list[str]:
    """Move, cast, quantize and compile in place; return the fallbacks that fired."""
    fallbacks: list[str] = []
    dtype = DTYPES[config.dtype]
    if device.type == "cpu" and dtype == torch.float16:
        fallbacks.append("fp16 convolutions are slow or missing on CPU; ran bf16 instead")
        dtype = torch.bfloat16
    if dtype == torch.bfloat16 and not native_bf16(device):
        fallbacks.append("this CPU has no native bf16 (no AVX512-BF16 or AMX): bf16 is "
                         "emulated and runs far slower than fp32 here")
    model.to(device=device, dtype=dtype)
    if dtype != torch.float32:
        model.keep_durations_fp32()
        fallbacks.append("duration predictor kept in fp32: its spline inverse is unstable "
                         "in half precision")
    if config.quant != "none":
        fallbacks += _quantize(model, config, device)
    if config.cuda_graphs:
        fallbacks.append("CUDA graphs need fixed shapes; VITS durations vary per text, "
                         "so the voice runs without graphs")
    if config.compile != "none":
        fallbacks += _compile(model, config.compile)
    return fallbacks
