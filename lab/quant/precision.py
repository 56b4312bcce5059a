"""Weight precision: the dtype table, and quant modes registered torchao style.

Decode at small batch streams every weight once per token, so bytes per weight set the floor
on step time. Each quant mode needs hardware and shapes that fit its kernel; when they do not,
it steps down its fallback chain and records why, instead of silently running something else.

A mode is one `QuantMode` in `QUANT_MODES`: its torchao config, where it can run, which linears
its kernel takes, how it quantizes, and the mode to try next. Most modes swap linear weights one
by one; int8-static quantizes whole parts a family names, through `lab.quant.pt2e`.
`quantize_model` walks a chain without naming any mode, so a new mode is one `register(...)`
call. Families reach this through `lab.quant.plan.apply_knobs`; `apply_precision` is the plain
whole-model call that benchmarks and tests use on the LM.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

import torch
from torch import nn

from lab.quant import ao, int4_rows, int8_rows
from lab.stages import stage

if TYPE_CHECKING:
    from lab.quant.plan import StaticParts

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
INT4_GROUP = 128


class PrecisionError(ValueError):
    """An unknown dtype or quant name."""


def _torchao_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    try:
        ao.load()
    except ImportError as err:
        return f"torchao is not importable ({err})"
    return None


def _runs_anywhere(device: torch.device, dtype: torch.dtype) -> str | None:
    return None


def _int4_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    if reason := _torchao_reason(device, dtype):
        return reason
    if device.type != "cuda":
        return "int4 weight-only uses the tinygemm CUDA kernel; no CUDA device"
    if dtype != torch.bfloat16:
        return f"int4 weight-only (tinygemm) needs bf16 activations; model dtype is {dtype}"
    return None


def _fp8_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    if reason := _torchao_reason(device, dtype):
        return reason
    if device.type != "cuda":
        return "fp8 matmuls need a CUDA GPU of compute capability 8.9+; no CUDA device"
    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 9):
        return f"fp8 matmuls need compute capability 8.9+; this GPU is sm_{cap[0]}{cap[1]}"
    if dtype != torch.bfloat16:
        return f"fp8 rowwise scaling needs bf16 weights; model dtype is {dtype}"
    return None


def _static_reason(device: torch.device, dtype: torch.dtype) -> str | None:
    if reason := _torchao_reason(device, dtype):
        return reason
    if device.type != "cpu" or platform.machine().lower() not in ("x86_64", "amd64"):
        return (f"static int8 lowers to oneDNN's x86 CPU kernels; the model is on {device} "
                f"({platform.machine()})")
    if dtype not in (torch.float32, torch.bfloat16):
        return (f"static int8 runs the float work around its int8 layers in fp32 or bf16; "
                f"model dtype is {dtype_name(dtype)}")
    if not torch.backends.mkldnn.is_available():
        return "static int8 needs oneDNN, which this torch build lacks"
    return None


def _any_shape(linear: nn.Linear) -> bool:
    return True


def _sides(k_step: int, n_step: int) -> Callable[[nn.Linear], bool]:
    """A shape rule: input features a multiple of `k_step`, output features of `n_step`."""
    return lambda linear: linear.in_features % k_step == 0 and linear.out_features % n_step == 0


@dataclass
class Target:
    """What a quant mode may act on: the model in the dtype and on the device it now has, the
    linears the family's plan lets quantization touch, and the parts it lets int8-static
    quantize whole (None where the family cannot calibrate)."""

    model: nn.Module
    dtype: torch.dtype
    device: torch.device
    linears: dict[str, nn.Linear]
    static: StaticParts | None = None


@dataclass
class Quantized:
    """What `quantize_model` did: the mode applied, why the modes before it in the chain were
    not, the layers its kernel could not take, those really quantized, and the parts it has
    compiled itself (int8-static runs only compiled)."""

    applied: str
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    quantized: list[str] = field(default_factory=list)
    compiled: list[str] = field(default_factory=list)


def _probe(mode: QuantMode, dtype: torch.dtype, device: torch.device) -> None:
    """Quantize and run one small linear at decode (1 row) and prefill (17 rows) sizes, so a
    kernel that cannot run here fails now, not halfway through the model."""
    probe = nn.Sequential(nn.Linear(256, 256, bias=False)).to(device=device, dtype=dtype)
    q = ao.quantization()
    q.quantize_(probe, mode.config(q))
    with torch.inference_mode():
        for rows in (1, 17):
            y = probe(torch.randn(rows, 256, device=device, dtype=dtype))
            if not torch.isfinite(y).all():
                raise RuntimeError(f"probe output for {rows} row(s) is not finite")


def _quantize_linears(mode: QuantMode, target: Target, done: Quantized) -> str | None:
    """Quantize the linears that fit `mode`, recording them in `done`; or say why not."""
    if not target.linears:
        return "there is no linear layer to quantize"
    fitting = {fqn for fqn, linear in target.linears.items() if mode.fits(linear)}
    if not fitting:
        return "no linear layer has a shape its kernel accepts"
    try:
        _probe(mode, target.dtype, target.device)
    except Exception as err:
        return f"probe failed ({type(err).__name__}: {err})"
    q = ao.quantization()
    q.quantize_(target.model, mode.config(q), filter_fn=lambda module, fqn: fqn in fitting)
    done.quantized = [fqn for fqn in target.linears
                      if is_quantized(target.model.get_submodule(fqn).weight)]
    if not done.quantized:
        return "torchao left every linear layer in float"
    if mode.after is not None:
        mode.after(target.model, done.quantized)
    done.skipped = [f"{fqn} [{m.out_features}x{m.in_features}] kept unquantized"
                    for fqn, m in target.linears.items() if fqn not in fitting]
    return None


def _x86_static(q: ModuleType) -> object:
    from lab.quant import pt2e  # torchao's PT2E stack loads only when int8-static is asked for

    return pt2e.x86_config()


def _quantize_parts(mode: QuantMode, target: Target, done: Quantized) -> str | None:
    from lab.quant import pt2e

    return pt2e.quantize_parts(target, mode.config(ao.quantization()), done)


@dataclass(frozen=True)
class QuantMode:
    """One quant choice: how to build its torchao config (from `torchao.quantization`; None
    leaves weights in the float dtype), why it cannot run on a device and dtype (None if it
    can), which linears its kernel takes (the others stay float), how it quantizes a `Target`
    (or why it cannot), what it does to the quantized linears after torchao (given the model
    and their names), and what to try instead."""

    name: str
    config: Callable[[ModuleType], object] | None = None
    fallback: str | None = None
    unavailable: Callable[[torch.device, torch.dtype], str | None] = _torchao_reason
    fits: Callable[[nn.Linear], bool] = _any_shape
    apply: Callable[[QuantMode, Target, Quantized], str | None] = _quantize_linears
    after: Callable[[nn.Module, list[str]], None] | None = None


QUANT_MODES: dict[str, QuantMode] = {}


def register(mode: QuantMode) -> QuantMode:
    """Add a mode. Its fallback must be registered already, and every chain ends in the one
    float mode, so a walk down any chain terminates in something that runs."""
    if (mode.fallback is None) != (mode.config is None):
        raise ValueError(f"{mode.name}: only the float mode may end a chain, and it must")
    if mode.fallback is not None and mode.fallback not in QUANT_MODES:
        raise ValueError(f"{mode.name}: fallback {mode.fallback!r} is not registered")
    QUANT_MODES[mode.name] = mode
    return mode


register(QuantMode("none", unavailable=_runs_anywhere))
# Two rows or more run through the lab's own kernel (see lab.quant.int8_rows).
register(QuantMode("int8-weight", lambda q: q.Int8WeightOnlyConfig(), fallback="none",
                   after=int8_rows.route))
# int8-dynamic compiles to torch._int_mm, which needs both matrix sides in multiples of 8:
# Orpheus's 156,940-row output head failed compilation on an H100 and fell back to eager.
register(QuantMode("int8-dynamic", lambda q: q.Int8DynamicActivationInt8WeightConfig(),
                   fallback="int8-weight", fits=_sides(8, 8)))
# int8-static quantizes whole parts that a family names and calibrates on its own text: the one
# mode that reaches convolutions (the Piper voice's vocoder and flow). See lab.quant.pt2e.
register(QuantMode("int8-static", _x86_static, fallback="int8-dynamic",
                   unavailable=_static_reason, apply=_quantize_parts))
# Many rows run through the lab's kernel on a plain copy (see lab.quant.int4_rows).
register(QuantMode("int4-weight", lambda q: q.Int4WeightOnlyConfig(
    group_size=INT4_GROUP, int4_packing_format="tile_packed_to_4d"),
    fallback="int8-weight", unavailable=_int4_reason, fits=_sides(INT4_GROUP, 8),
    after=int4_rows.route))
register(QuantMode("fp8", lambda q: q.Float8DynamicActivationFloat8WeightConfig(
    granularity=q.PerRow()), fallback="int8-dynamic", unavailable=_fp8_reason, fits=_sides(16, 16)))
QUANTS = tuple(QUANT_MODES)


def dtype_of(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise PrecisionError(f"dtype {name!r} is not valid; choose one of {list(DTYPES)}")
    return DTYPES[name]


def dtype_name(dtype: torch.dtype) -> str:
    return next((name for name, value in DTYPES.items() if value == dtype), str(dtype))


def quant_mode(name: str) -> QuantMode:
    if name not in QUANT_MODES:
        raise PrecisionError(f"quant {name!r} is not valid; choose one of {list(QUANTS)}")
    return QUANT_MODES[name]


def chain(quant: str) -> list[QuantMode]:
    """The modes tried for `quant`, in order, ending with the float mode."""
    modes = [quant_mode(quant)]
    while modes[-1].fallback is not None:
        modes.append(QUANT_MODES[modes[-1].fallback])
    return modes


def unsupported_reason(quant: str, device: torch.device, dtype: torch.dtype) -> str | None:
    """Why `quant` cannot run on this device and dtype, or None if it should."""
    return quant_mode(quant).unavailable(torch.device(device), dtype)


def is_plain(t: torch.Tensor) -> bool:
    """Whether `t` is a plain tensor or parameter. The one test that also holds in code
    torch.compile traces, where a torchao subclass answers `hasattr(t, "__tensor_flatten__")`
    with False and reports its float dtype."""
    return type(t) in (torch.Tensor, nn.Parameter)


def is_quantized(t: torch.Tensor) -> bool:
    """Whether `t` is a torchao tensor subclass (quantized data plus scales) rather than a
    plain tensor or parameter (eager code only: see `is_plain`)."""
    return not is_plain(t) and hasattr(t, "__tensor_flatten__")


def tensor_bytes(t: torch.Tensor) -> int:
    """Storage of a tensor, looking inside torchao subclasses (int data + scales + zeros)."""
    if not is_quantized(t):
        return t.numel() * t.element_size()
    names, _ = t.__tensor_flatten__()
    return sum(tensor_bytes(getattr(t, n)) for n in names if getattr(t, n) is not None)


def weight_bytes(model: nn.Module) -> int:
    """Bytes held by the model's parameters (tied weights counted once)."""
    return sum(tensor_bytes(p) for p in model.parameters())


def quantize_model(
    model: nn.Module,
    quant: str,
    dtype: torch.dtype,
    device: torch.device,
    select: Callable[[str], bool] = lambda fqn: True,
    static: StaticParts | None = None,
) -> Quantized:
    """Quantize `model` in place, in the dtype it already has, with the first mode of `quant`'s
    chain that runs here: the nn.Linear layers whose names `select` accepts, or, for a mode
    that quantizes whole parts, the parts `static` names."""
    *tries, float_mode = chain(quant)
    done = Quantized(float_mode.name)
    linears = {fqn: m for fqn, m in model.named_modules()
               if isinstance(m, nn.Linear) and select(fqn)}
    target = Target(model, dtype, device, linears, static)
    for mode in tries:
        with stage(f"quantizing with {mode.name}"):
            reason = mode.unavailable(device, dtype) or mode.apply(mode, target, done)
        if reason is None:
            done.applied = mode.name
            break
        done.notes.append(f"{mode.name} unavailable: {reason}")
    if done.applied != quant:
        done.notes.append(f"requested {quant}, applied {done.applied} ({dtype_name(dtype)})")
    return done


@dataclass
class PrecisionResult:
    """What `apply_precision` applied; `fallbacks` holds every reason a mode was passed over."""

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


def apply_precision(
    model: nn.Module,
    dtype: str = "bf16",
    quant: str = "none",
    device: torch.device | str | None = None,
    *,
    after_cast: Callable[[nn.Module], None] | None = None,
) -> PrecisionResult:
    """Cast the whole `model` to `dtype` on `device`, run `after_cast` (a model whose derived
    tensors a cast spoils rebuilds them there), then quantize its linears with `quant`.

    If `quant` cannot run here, the next mode in its chain is tried and the reason is recorded
    (e.g. fp8 -> int8-dynamic -> int8-weight -> none). Names are checked before the model is
    touched.
    """
    torch_dtype = dtype_of(dtype)
    quant_mode(quant)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device=device, dtype=torch_dtype)
    if after_cast is not None:
        after_cast(model)
    done = quantize_model(model, quant, torch_dtype, device)
    return PrecisionResult(applied=done.applied, fallbacks=done.notes, dtype=dtype,
                           weight_bytes=weight_bytes(model), skipped=done.skipped)
