"""The model knobs (dtype, quant, compile) applied to any family, from the plan it declares.

A family says which of its parts each knob may touch (`PrecisionPlan`); `apply_knobs` applies
the knobs in one fixed order, the way nano-vllm's model runner sets up: resolve the dtype for
the device, cast the whole model once, let the family rebuild what a cast spoils, put the fp32
islands back, quantize (linears, or whole parts for int8-static) in the dtype they now have,
then compile. No step undoes an earlier one (quantizing never recasts), so every note in the
report is still true at the end, and `PrecisionReport.expected_dtypes` lets a test hold the
report against the real parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import nn

from lab.device import native_bf16
from lab.quant.compile import compile_note, compiled, inductor_mode
from lab.quant.precision import (
    DTYPES,
    dtype_name,
    dtype_of,
    quant_mode,
    quantize_model,
    weight_bytes,
)


@dataclass(frozen=True)
class StaticParts:
    """What a family lets int8-static quantize whole (`lab.quant.pt2e`).

    `parts`: submodule paths, each with the method of it that is exported, quantized and
    compiled ("forward", or "inverse" for a flow run backwards). `calibrate`: renders a few
    texts through the family's own path, the calls a request makes; what each part receives on
    the way is recorded to set its activation ranges. `keep_float`: layers (model paths) left
    in float inside the parts, with the reason the user reads.
    """

    parts: Mapping[str, str]
    calibrate: Callable[[], None]
    keep_float: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PrecisionPlan:
    """Which parts of a family's model each knob may touch, by submodule path ("" = all).

    `quantize`: parts whose nn.Linear layers the quant knob may quantize. `fp32_islands`: parts
    kept in fp32 whatever the dtype, and never quantized, each with the reason the user reads.
    `compile`: parts whose `forward` the compile knob compiles, with dynamic shapes because
    they vary per text; a part with fixed
    shapes (the LM decode step) is compiled and captured by `lab.engine.graphs` instead, so a
    family leaves it out here and hands the knob to the engine. `after_cast`: rebuilds what a
    cast spoils (the LM's rotary tables and tied head), run right after the cast. `static`:
    the parts int8-static may quantize whole; None where the family cannot calibrate, and
    int8-static then falls back.
    """

    quantize: tuple[str, ...] = ("",)
    fp32_islands: Mapping[str, str] = field(default_factory=dict)
    compile: tuple[str, ...] = ()
    after_cast: Callable[[nn.Module], None] | None = None
    static: StaticParts | None = None


@dataclass
class PrecisionReport:
    """What `apply_knobs` really applied.

    `dtype` is the dtype the model runs in (after the device rules); `quant` the mode applied
    after fallbacks; `compile` the compile choice, or "none" when nothing was compiled here.
    `notes` holds every fallback and warning, `skipped` the layers a kernel could not take,
    `fp32_islands` the parts kept in fp32 and `quantized` the layers now quantized: linears
    whose weights are torchao tensors, or, under int8-static, layers of a part that now runs as
    a compiled int8 program (its module keeps its float weights for reference).
    """

    dtype: str
    quant: str = "none"
    compile: str = "none"
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    weight_bytes: int = 0
    fp32_islands: tuple[str, ...] = ()
    quantized: list[str] = field(default_factory=list)

    def expected_dtypes(self, model: nn.Module) -> dict[str, torch.dtype]:
        """The dtype each float parameter should report, by `named_parameters()` name: fp32
        inside the islands, the run dtype elsewhere.

        A torchao-quantized weight counts as the run dtype: it is a tensor subclass whose
        `.dtype` is its logical dtype (what its matmul takes and returns), while its int8 or
        fp8 storage shows in `weight_bytes` and its layer's name in `quantized`.
        """
        run = DTYPES[self.dtype]
        return {name: torch.float32 if _within(name, self.fp32_islands) else run
                for name, p in model.named_parameters() if p.is_floating_point()}


def _within(name: str, paths: tuple[str, ...]) -> bool:
    """Whether a module or parameter name lies inside one of the submodule paths."""
    return any(p == "" or name == p or name.startswith(p + ".") for p in paths)


def run_dtype(dtype: str, device: torch.device, notes: list[str] | None = None) -> torch.dtype:
    """The dtype the model can really run in here, with a note (added to `notes`, if given)
    wherever it differs from the request or will be slow."""
    notes = [] if notes is None else notes
    wanted = dtype_of(dtype)
    if device.type == "cpu" and wanted == torch.float16:
        notes.append("fp16 runs as bf16 on CPU: fp16 kernels there (convolutions especially) "
                     "are slow or missing")
        wanted = torch.bfloat16
    if wanted == torch.bfloat16 and not native_bf16(device):
        notes.append("this CPU has no native bf16 (no AVX512-BF16 or AMX): bf16 arithmetic "
                     "is emulated, so compute-bound work (convolutions above all) runs far "
                     "slower than fp32 here; only memory-bound matrix-vector products gain")
    return wanted


def _keep_islands(model: nn.Module, plan: PrecisionPlan, dtype: torch.dtype,
                  notes: list[str]) -> None:
    for path in plan.fp32_islands:
        model.get_submodule(path).float()
    if dtype != torch.float32:
        notes += [f"{path} kept in fp32 while the rest runs {dtype_name(dtype)}: {why}"
                  for path, why in plan.fp32_islands.items()]


def _compile(model: nn.Module, plan: PrecisionPlan, mode: str, done: list[str],
             notes: list[str]) -> str:
    """Compile the plan's parts, except those quantization has `done` compiling. Lazily: a
    compiler error surfaces at the first call, and the pipeline's warm-up at load makes that
    call before any user request."""
    if done:
        notes.append(f"{', '.join(done)}: int8 programs compiled by Inductor, whatever the "
                     "compile knob: uncompiled, int8 layers would be float kernels wrapped in "
                     "quantize/dequantize steps, slower than float")
    todo = tuple(path for path in plan.compile if path not in done)
    if inductor_mode(mode) is None or not todo:
        return "none"
    for path in todo:
        module = model.get_submodule(path)
        module.forward = compiled(module.forward, mode, dynamic=True)
    if note := compile_note(mode, ", ".join(todo)):
        notes.append(note)
    return mode


def apply_knobs(
    model: nn.Module,
    plan: PrecisionPlan,
    *,
    dtype: str,
    quant: str,
    compile_mode: str,
    device: torch.device | str,
) -> PrecisionReport:
    """Move `model` to `device` and apply the knobs in place, as `plan` allows; see the module
    docstring for the order. Names are checked before the model is touched."""
    dtype_of(dtype)
    quant_mode(quant)
    inductor_mode(compile_mode)
    device = torch.device(device)
    notes: list[str] = []
    run = run_dtype(dtype, device, notes)
    model.to(device=device, dtype=run)
    if plan.after_cast is not None:
        plan.after_cast(model)
    _keep_islands(model, plan, run, notes)
    done = quantize_model(
        model, quant, run, device,
        select=lambda fqn: _within(fqn, plan.quantize) and not _within(fqn, plan.fp32_islands),
        static=plan.static,
    )
    report = PrecisionReport(dtype=dtype_name(run), quant=done.applied,
                             notes=notes + done.notes, skipped=done.skipped,
                             fp32_islands=tuple(plan.fp32_islands), quantized=done.quantized)
    report.compile = _compile(model, plan, compile_mode, done.compiled, report.notes)
    report.weight_bytes = weight_bytes(model)
    return report
