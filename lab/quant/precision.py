"""Weight precision: cast to fp32/fp16/bf16, then optionally quantize linears with torchao.

Decode at small batch streams every weight once per token, so bytes per weight set the floor
on step time; this module makes that trade one call, `apply_precision`, and reports what it
really applied. Each quant mode needs hardware and shapes that fit its kernel; when they do not,
it steps down a fallback chain and records why, instead of silently running something else.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from lab.quant import ao

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
QUANTS = ("none", "int8-weight", "int8-dynamic", "int4-weight", "fp8")
FALLBACK_CHAIN = {
    "fp8": ("fp8", "int8-dynamic", "int8-weight", "none"),
    "int4-weight": ("int4-weight", "int8-weight", "none"),
    "int8-dynamic": ("int8-dynamic", "int8-weight", "none"),
    "int8-weight": ("int8-weight", "none"),
    "none": ("none",),
}
INT4_GROUP = 128


class PrecisionError(ValueError):
    """An unknown dtype or quant name."""


@dataclass
class PrecisionResult:
    applied: str
    fallbacks: list[str] = field(default_factory=list)
    weight_bytes: int = 0
    dtype: str = ""
    skipped: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "applied": self.applied,
            "dtype": self.dtype,
            "weight_bytes": self.weight_bytes,
            "fallbacks": list(self.fallbacks),
            "skipped": list(self.skipped),
        }


def tensor_bytes(t: torch.Tensor) -> int:
    """Storage of a tensor, looking inside torchao subclasses (int data + scales + zeros)."""
    if type(t) in (torch.Tensor, nn.Parameter) or not hasattr(t, "__tensor_flatten__"):
        return t.numel() * t.element_size()
    names, _ = t.__tensor_flatten__()
    return sum(tensor_bytes(getattr(t, n)) for n in names if getattr(t, n) is not None)


def weight_bytes(model: nn.Module) -> int:
    """Bytes held by the model's parameters (tied weights counted once)."""
    return sum(tensor_bytes(p) for p in model.parameters())


def unsupported_reason(quant: str, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why `quant` cannot run on this device and dtype, or None if it should."""
    if quant in ("none", "int8-weight"):
        return None
    try:
        ao.load()
    except ImportError as err:
        return f"torchao is not importable ({err})"
    cuda = device.type == "cuda"
    if quant == "int8-dynamic":
        return None
    if quant == "int4-weight":
        if not cuda:
            return "int4 weight-only uses the tinygemm CUDA kernel; no CUDA device"
        if dtype != torch.bfloat16:
            return f"int4 weight-only (tinygemm) needs bf16 activations; model dtype is {dtype}"
        return None
    if quant == "fp8":
        if not cuda:
            return "fp8 matmuls need a CUDA GPU of compute capability 8.9+; no CUDA device"
        cap = torch.cuda.get_device_capability(device)
        if cap < (8, 9):
            return f"fp8 matmuls need compute capability 8.9+; this GPU is sm_{cap[0]}{cap[1]}"
        if dtype != torch.bfloat16:
            return f"fp8 rowwise scaling needs bf16 weights; model dtype is {dtype}"
        return None
    raise PrecisionError(f"quant {quant!r} is not valid; choose one of {list(QUANTS)}")


def quant_config(quant: str):
    """The torchao config object for a quant mode."""
    q = ao.quantization()
    if quant == "int8-weight":
        return q.Int8WeightOnlyConfig()
    if quant == "int8-dynamic":
        return q.Int8DynamicActivationInt8WeightConfig()
    if quant == "int4-weight":
        return q.Int4WeightOnlyConfig(group_size=INT4_GROUP,
                                      int4_packing_format="tile_packed_to_4d")
    if quant == "fp8":
        return q.Float8DynamicActivationFloat8WeightConfig(granularity=q.PerRow())
    raise PrecisionError(f"quant {quant!r} has no torchao config")


def shape_fits(quant: str, linear: nn.Linear) -> bool:
    """Whether a linear's shape suits the mode's kernel (others stay in the float dtype).

    int8-dynamic compiles to torch._int_mm, which needs both matrix sides in multiples of 8:
    Orpheus's 156,940-row output head failed compilation on an H100 and fell back to eager.
    """
    n, k = linear.out_features, linear.in_features
    if quant == "int4-weight":
        return k % INT4_GROUP == 0 and n % 8 == 0
    if quant == "fp8":
        return k % 16 == 0 and n % 16 == 0
    if quant == "int8-dynamic":
        return k % 8 == 0 and n % 8 == 0
    return True


def _probe(quant: str, dtype: torch.dtype, device: torch.device) -> None:
    """Quantize and run one small linear at decode (1 row) and prefill (17 rows) sizes, so a
    kernel that cannot run here fails now, not halfway through the model."""
    probe = nn.Sequential(nn.Linear(256, 256, bias=False)).to(device=device, dtype=dtype)
    ao.quantization().quantize_(probe, quant_config(quant))
    with torch.inference_mode():
        for rows in (1, 17):
            y = probe(torch.randn(rows, 256, device=device, dtype=dtype))
            if not torch.isfinite(y).all():
                raise RuntimeError(f"probe output for {rows} row(s) is not finite")


def _quantize(model: nn.Module, quant: str, skipped: list[str]) -> int:
    def fits(module: nn.Module, fqn: str) -> bool:
        if not isinstance(module, nn.Linear):
            return False
        if shape_fits(quant, module):
            return True
        skipped.append(f"{fqn} [{module.out_features}x{module.in_features}] kept unquantized")
        return False

    n_fit = sum(isinstance(m, nn.Linear) and shape_fits(quant, m) for m in model.modules())
    if n_fit:
        ao.quantization().quantize_(model, quant_config(quant), filter_fn=fits)
    return n_fit


def apply_precision(
    model: nn.Module,
    dtype: str = "bf16",
    quant: str = "none",
    device: torch.device | str | None = None,
) -> PrecisionResult:
    """Cast `model` to `dtype` on `device`, then quantize its linears with `quant` in place.

    If `quant` cannot run here, the next mode in its fallback chain is tried and the reason is
    recorded (e.g. fp8 -> int8-dynamic -> int8-weight -> none).
    """
    if dtype not in DTYPES:
        raise PrecisionError(f"dtype {dtype!r} is not valid; choose one of {list(DTYPES)}")
    if quant not in QUANTS:
        raise PrecisionError(f"quant {quant!r} is not valid; choose one of {list(QUANTS)}")
    torch_dtype = DTYPES[dtype]
    if device is None:
        device = next(model.parameters()).device
    device = torch.device(device)
    model.to(device=device, dtype=torch_dtype)
    if hasattr(model, "reset_rope"):
        model.reset_rope()
    if hasattr(model, "tie_weights"):
        model.tie_weights()
    result = PrecisionResult(applied="none", dtype=dtype)
    for mode in FALLBACK_CHAIN[quant]:
        if mode == "none":
            break
        reason = unsupported_reason(mode, device, torch_dtype)
        if reason is None:
            reason = _try_quantize(model, mode, torch_dtype, device, result.skipped)
        if reason is None:
            result.applied = mode
            break
        result.fallbacks.append(f"{mode} unavailable: {reason}")
    if result.applied != quant:
        result.fallbacks.append(f"requested {quant}, applied {result.applied} ({dtype})")
    result.weight_bytes = weight_bytes(model)
    return result


def _try_quantize(model, mode, dtype, device, skipped: list[str]) -> str | None:
    try:
        _probe(mode, dtype, device)
    except Exception as err:
        return f"probe failed ({type(err).__name__}: {err})"
    if _quantize(model, mode, skipped) == 0:
        return "no linear layer has a shape its kernel accepts"
    return None
