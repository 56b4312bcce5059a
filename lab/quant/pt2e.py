"""Static int8 for whole parts of a model, through torchao's PT2E flow and Inductor's x86 kernels.

torchao's `quantize_` swaps the weights of nn.Linear layers; the Piper voice is convolutions, so
every other quant mode finds nothing to act on there. Static int8 works on the exported graph
instead: `torch.export` with the batch and time dims left free, the x86 Inductor quantizer's
default static config (uint8 activations per tensor, int8 weights per channel) on every 2-D
convolution and linear, observers that record activation ranges while the family renders a few
sentences, conversion to quantize/dequantize pairs, and compilation ahead of time by
AOTInductor with freezing on, where Inductor folds each pair and its layer into one oneDNN int8
kernel. Run without Inductor, the pairs would execute in fp32 around a float layer and be slower
than no quantization at all, so a statically quantized part always runs compiled, whatever the
compile knob says.

Calibration and conversion are always done in fp32. A model in bf16 gets its parts compiled
under bf16 autocast (torchao's int8-mixed-bf16): the int8 layers are the same, and what runs in
float between them (the layers kept float, the activations) runs in bf16, as the rest of the
model does. On a CPU with native bf16 that speeds up what int8 cannot take: the vocoder's
full-rate last stage, which must stay float, is over a third of its fp32 time.

Importing this module imports torchao's x86 quantizer, which registers Inductor's int8 fusion
passes and sets `torch._inductor.config.pre_grad_custom_pass` for the whole process; the lab
imports it only when int8-static is asked for.
"""

from __future__ import annotations

import copy
import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch._dynamo.utils import counters
from torch.export import Dim

from lab.quant import ao
from lab.quant.precision import dtype_name

ao.load()
from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e  # noqa: E402
from torchao.quantization.pt2e.quantizer import QuantizationAnnotation  # noqa: E402
from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (  # noqa: E402
    QUANT_ANNOTATION_KEY,
    X86InductorQuantizer,
    get_default_x86_inductor_quantization_config,
)

if TYPE_CHECKING:
    from torchao.quantization.pt2e.quantizer import QuantizationConfig

    from lab.quant.precision import Quantized, Target

aten = torch.ops.aten
QUANTIZED_OPS = (aten.conv2d.default, aten.linear.default)
_TRANSPOSED = ("a transposed convolution: the x86 quantizer has no recipe for one, and Inductor's "
               "int8 lowering takes plain convolutions only")
FLOAT_OPS = {aten.conv_transpose1d.default: _TRANSPOSED, aten.conv_transpose2d.input: _TRANSPOSED}
# aten.conv1d's arguments after input and weight: bias, stride, padding, dilation, groups.
CONV1D_DEFAULTS = (None, [1], [0], [1], 1)
# The quantized part's output on a calibration input must stay this close to float's (signal to
# error, dB). The voice's vocoder measures 16-19 dB with 7-bit activations and 20-24 dB with 8;
# saturating kernels or a broken lowering give noise, below 5 dB.
MIN_AGREEMENT_DB = 10.0


@dataclass
class StaticReport:
    """What `quantize_static_int8` did: the layers marked for int8, the layers left float
    (path, why), the int8 kernels Inductor really lowered them to (per program, the fewest:
    below `len(quantized)`, some marked layer runs as float between quantize steps), and what
    else the user should know."""

    quantized: list[str] = field(default_factory=list)
    kept_float: dict[str, str] = field(default_factory=dict)
    int8_kernels: int = 0
    notes: list[str] = field(default_factory=list)


@cache
def activations_saturate() -> bool:
    """Whether this CPU's int8 convolutions clip full-range uint8 activations.

    Without VNNI, oneDNN multiplies uint8 by int8 with `vpmaddubsw`, which adds each pair of
    products into int16 and saturates: 255 * 127 twice overflows. Asked of the kernel itself, on
    exactly that worst case, rather than read from CPU flags.
    """
    channels = 4
    x = torch.full((1, channels, 1, 1), 255, dtype=torch.uint8)
    w = torch.full((1, channels, 1, 1), 127, dtype=torch.int8)
    one, zero = torch.ones(1), torch.zeros(1, dtype=torch.long)
    packed = torch.ops.onednn.qconv_prepack(w, one, 1.0, 0, [1, 1], [0, 0], [1, 1], 1, None)
    y = torch.ops.onednn.qconv_pointwise(x, 1.0, 0, packed, one, zero, None, [1, 1], [0, 0],
                                         [1, 1], 1, 1.0, 0, torch.float32, "none", [], "")
    return float(y) != channels * 255 * 127


def x86_config() -> QuantizationConfig:
    """The x86 Inductor quantizer's default static config; activations get 7 bits where this
    CPU's kernels would saturate 8 (the quantizer's `reduce_range`, made for such CPUs)."""
    return get_default_x86_inductor_quantization_config(reduce_range=activations_saturate())


def layer_path(node: torch.fx.Node) -> str:
    """The module path, inside the exported part, of the layer that produced `node`."""
    stack = node.meta.get("nn_module_stack") or {}
    return next(reversed(stack.values()))[0] if stack else node.name


class LayerQuantizer(X86InductorQuantizer):
    """The x86 Inductor quantizer, told which layers to take by their aten op.

    Its own recipe finds a convolution by the module or function that made it
    (`source_fn_stack`), which torch.export does not record for a 2-D convolution called inside
    a module of another type (the voice's FrameConv, a Conv1d running `conv2d`): it would find no
    layer in the vocoder. So every 2-D convolution and linear is marked here with the config's
    own specs, every layer of `keep_float` and of `FLOAT_OPS` is marked float with its reason,
    and elementwise products are marked float (its recipe would take a product of two
    same-shape tensors, here the waveform and its mask: 8-bit audio is audible noise). Its
    recipe then runs on whatever is left.
    """

    def __init__(self, config: QuantizationConfig, keep_float: Mapping[str, str]) -> None:
        super().__init__()
        self.set_global(config)
        self.keep_float = keep_float
        self.report = StaticReport()

    def transform_for_annotation(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        """Every 1-D convolution rewritten as the 2-D one of height 1: torch's shape rule for a
        prepacked 1-D int8 weight reads the kernel as width 1, so Inductor cannot compile a 1-D
        int8 convolution, while the 2-D one lowers fine."""
        for node in list(model.graph.nodes):
            if node.target is aten.conv1d.default:
                _as_conv2d(model.graph, node)
        model.recompile()
        return model

    def annotate(self, model: torch.fx.GraphModule) -> torch.fx.GraphModule:
        for node in model.graph.nodes:
            path = layer_path(node)
            why = FLOAT_OPS.get(node.target) or (
                self._kept(path) if node.target in QUANTIZED_OPS else None)
            if why is not None:
                self.report.kept_float[path] = why
            if node.target in QUANTIZED_OPS and why is None:
                self._mark(node)
                self.report.quantized.append(path)
            elif why is not None or node.target is aten.mul.Tensor:
                node.meta[QUANT_ANNOTATION_KEY] = QuantizationAnnotation(_annotated=True)
        return super().annotate(model)

    def _kept(self, path: str) -> str | None:
        """Why the layer at `path` stays float, when it lies inside a `keep_float` entry."""
        return next((why for kept, why in self.keep_float.items()
                     if path == kept or path.startswith(kept + ".")), None)

    def _mark(self, node: torch.fx.Node) -> None:
        x, w = node.args[:2]
        specs = {x: self.global_config.input_activation, w: self.global_config.weight}
        node.meta[QUANT_ANNOTATION_KEY] = QuantizationAnnotation(input_qspec_map=specs,
                                                                 _annotated=True)


def _as_conv2d(graph: torch.fx.Graph, conv1d: torch.fx.Node) -> None:
    """Replace `conv1d` by unsqueeze -> conv2d (height 1) -> squeeze, keeping its module path
    and giving each new node the fake value torch.export would have."""
    x, w, bias, stride, padding, dilation, groups = (
        *conv1d.args, *CONV1D_DEFAULTS[len(conv1d.args) - 2:])
    fake_mode = torch._guards.detect_fake_mode([x.meta["val"]])

    def add(op, *args) -> torch.fx.Node:
        node = graph.call_function(op, args)
        node.meta.update(nn_module_stack=conv1d.meta.get("nn_module_stack"))
        with fake_mode:
            node.meta["val"] = op(*(a.meta["val"] if isinstance(a, torch.fx.Node) else a
                                    for a in args))
        return node

    with graph.inserting_before(conv1d):
        y = add(aten.conv2d.default, add(aten.unsqueeze.default, x, 2),
                add(aten.unsqueeze.default, w, 2), bias, [1, *stride], [0, *padding],
                [1, *dilation], groups)
        out = add(aten.squeeze.dim, y, 2)
    conv1d.replace_all_uses_with(out)
    graph.erase_node(conv1d)


Args = tuple[torch.Tensor | None, ...]


def _pattern(args: Args) -> tuple[bool, ...]:
    return tuple(a is None for a in args)


def _entry(module: nn.Module, method: str) -> nn.Module:
    """`module` with `method` as its forward, for torch.export, which traces forward: a shallow
    copy sharing every submodule and weight, so layer paths stay those inside `module`."""
    if method == "forward":
        return module
    view = copy.copy(module)
    view.forward = getattr(module, method)
    return view


def _export(module: nn.Module, example: Args) -> torch.export.ExportedProgram:
    """`module` exported with every dim free that its code leaves free (channel counts are
    fixed by the weights, the batch and time dims are not). torch fixes any dim it traces at
    size 1, so the example's batch (dim 0) is doubled for the trace, and the other dims of
    size 1 (a mask's broadcast channel) are fixed outright."""
    doubled = tuple(None if a is None else torch.cat([a, a]) for a in example)
    dims = tuple(None if a is None else {d: Dim.AUTO for d, n in enumerate(a.shape) if n > 1}
                 for a in doubled)
    return torch.export.export(module, doubled, dynamic_shapes=dims)


def _lowered() -> int:
    """Int8 convolutions and linears Inductor has lowered to oneDNN kernels in this process."""
    return sum(counters["inductor"][f"{op}_weight_prepack_matcher_count"]
               for op in ("qconv", "qlinear"))


def _compile(graph: torch.fx.GraphModule, example: Args, float_dtype: torch.dtype) -> Callable:
    """`graph` compiled ahead of time by AOTInductor, with freezing on: only then does Inductor
    fold the int8 weights and lower each quantize/dequantize pair with its layer to one oneDNN
    kernel. Ahead of time rather than through torch.compile, whose guards on the sizes at which
    oneDNN picks a convolution algorithm would recompile the vocoder for each band of lengths
    (five bands below 110 frames, 10-30 s each). Exported under autocast to `float_dtype`
    when that is not fp32, so the program's float work runs in it."""
    mixed = torch.autocast("cpu", dtype=float_dtype, enabled=float_dtype != torch.float32)
    with torch.no_grad(), mixed, tempfile.TemporaryDirectory() as folder:
        package = torch._inductor.aoti_compile_and_package(
            _export(graph, example), package_path=str(Path(folder) / "part.pt2"),
            inductor_configs={"freezing": True})
        return torch._inductor.aoti_load_package(package)


def _contiguous(args: Args) -> Args:
    """AOTInductor compiles for the strides of its example (contiguous) and does not check them
    at run time: a tensor with other strides (the flow's input comes time-major) would be read
    as garbage."""
    return tuple(None if a is None else a.contiguous() for a in args)


def _as_fp32(args: Args) -> Args:
    """Floating arguments in fp32, the dtype every part is calibrated and exported in."""
    return tuple(a.float() if a is not None and a.is_floating_point() else a for a in args)


class StaticInt8:
    """A part's method, run by its compiled int8 programs: one per pattern of None arguments
    seen in calibration (the vocoder takes a mask only for padded batches); `report` says what
    they quantized. It takes and returns `dtype`, the model's, whatever its programs take."""

    def __init__(self, programs: dict[tuple[bool, ...], Callable], report: StaticReport,
                 dtype: torch.dtype = torch.float32) -> None:
        self.programs = programs
        self.report = report
        self.dtype = dtype

    def __call__(self, *args: torch.Tensor | None) -> torch.Tensor:
        program = self.programs.get(_pattern(args))
        if program is None:
            raise ValueError(f"int8-static was calibrated on calls with None at "
                             f"{list(self.programs)}, not {_pattern(args)}")
        return program(*_contiguous(_as_fp32(args))).to(self.dtype)


def agreement_db(got: torch.Tensor, want: torch.Tensor) -> float:
    """Signal (`want`) to error (`got - want`) in dB."""
    error = (got.float() - want.float()).pow(2).sum().item()
    return math.inf if error == 0 else 10 * math.log10(want.float().pow(2).sum().item() / error)


def _program(module: nn.Module, inputs: Sequence[Args], config: QuantizationConfig,
             keep_float: Mapping[str, str], float_dtype: torch.dtype
             ) -> tuple[Callable, StaticReport]:
    """One None-pattern of `module`'s forward: export, mark, calibrate on every input,
    convert, compile, and check the compiled program against fp32 on the first input."""
    quantizer = LayerQuantizer(config, keep_float)
    prepared = prepare_pt2e(_export(module, inputs[0]).module(), quantizer)
    with torch.no_grad():
        for args in inputs:
            prepared(*args)
    report = quantizer.report
    if not report.quantized:
        raise ValueError("no 2-D convolution or linear layer to quantize in the exported graph")
    before = _lowered()
    program = _compile(convert_pt2e(prepared), inputs[0], float_dtype)
    report.int8_kernels = _lowered() - before
    with torch.inference_mode():
        db = agreement_db(program(*_contiguous(inputs[0])), module(*inputs[0]))
    if db < MIN_AGREEMENT_DB:
        raise ValueError(f"the compiled int8 output is {db:.1f} dB from float on a calibration "
                         f"input (at least {MIN_AGREEMENT_DB:.0f} dB needed)")
    return program, report


def quantize_static_int8(
    module: nn.Module,
    calibration_inputs: Sequence[Args],
    keep_float: Mapping[str, str] | None = None,
    config: QuantizationConfig | None = None,
    method: str = "forward",
    float_dtype: torch.dtype = torch.float32,
) -> tuple[StaticInt8, StaticReport]:
    """`module.<method>` as compiled static-int8 programs, and what was quantized.

    `module` is in fp32, and so are `calibration_inputs`: positional arguments the method
    receives on real input, batched along dim 0; a None argument (an optional mask) gives its
    own program. `keep_float` maps layer paths inside `module` to the reason they stay float;
    float work runs in `float_dtype` (fp32 or bf16), which the returned callable also takes
    and returns.
    Raises ValueError when nothing can be quantized or the int8 output strays from float.
    """
    if not calibration_inputs:
        raise ValueError(f"no calibration input: calibration never called {method}")
    module = _entry(module, method)
    config = config or x86_config()
    keep_float = keep_float or {}
    groups: dict[tuple[bool, ...], list[Args]] = {}
    for args in calibration_inputs:
        groups.setdefault(_pattern(args), []).append(args)
    programs, reports = {}, []
    for pattern, inputs in groups.items():
        programs[pattern], report = _program(module, inputs, config, keep_float, float_dtype)
        reports.append(report)
    report.int8_kernels = min(r.int8_kernels for r in reports)
    if report.int8_kernels < len(report.quantized):
        report.notes.append(f"Inductor lowered {report.int8_kernels} of the "
                            f"{len(report.quantized)} layers marked for int8 to int8 kernels")
    if config.input_activation.quant_max == 127:
        report.notes.append("int8-static keeps activations to 7 bits: this CPU's int8 kernels "
                            "(no VNNI) saturate on full-range 8-bit ones")
    if float_dtype != torch.float32:
        report.notes.append(f"int8-static runs the float work between its int8 layers in "
                            f"{dtype_name(float_dtype)}")
    return StaticInt8(programs, report, float_dtype), report


def _record(model: nn.Module, parts: Mapping[str, str], calibrate: Callable[[], None],
            dtype: torch.dtype) -> dict[str, list[Args]]:
    """The positional arguments each part's method receives while the family calibrates, in
    fp32, copied out of inference mode so that torch.export can trace with them. The parts are
    in fp32 meanwhile, and the rest of the model in `dtype`: each call is cast on the way in
    and its result back on the way out."""
    seen: dict[str, list[Args]] = {path: [] for path in parts}

    def recorder(method: Callable, calls: list[Args]) -> Callable:
        def record(*args):
            calls.append(_as_fp32(args))
            return method(*calls[-1]).to(dtype)
        return record

    modules = {path: model.get_submodule(path) for path in parts}
    for path, method in parts.items():
        setattr(modules[path], method, recorder(getattr(modules[path], method), seen[path]))
    try:
        calibrate()
    finally:
        for path, method in parts.items():
            delattr(modules[path], method)
    return {path: [tuple(None if a is None else a.clone() for a in args) for args in calls]
            for path, calls in seen.items()}


def quantize_parts(target: Target, config: QuantizationConfig, done: Quantized) -> str | None:
    """int8-static's step in the quant chain: quantize every part the family's plan names, or
    say why not. Parts change only once all of them have quantized and passed their check."""
    static = target.static
    if static is None:
        return "the family's plan names no part to quantize whole with its own calibration text"
    modules = {part: target.model.get_submodule(part) for part in static.parts}
    try:
        for module in modules.values():
            module.float()
        inputs = _record(target.model, static.parts, static.calibrate, target.dtype)
        results = {part: quantize_static_int8(modules[part], inputs[part],
                                              _inside(part, static.keep_float), config, method,
                                              target.dtype)
                   for part, method in static.parts.items()}
    except Exception as err:  # export and compiler errors run to pages: their first line
        return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0]}"
    finally:
        for module in modules.values():
            module.to(target.dtype)
    for part, (run, report) in results.items():
        setattr(target.model.get_submodule(part), static.parts[part], run)
        done.quantized += [f"{part}.{layer}" for layer in report.quantized]
        done.skipped += [f"{part}.{layer} kept float: {why}"
                         for layer, why in report.kept_float.items()]
        done.notes += [note for note in report.notes if note not in done.notes]
        done.compiled.append(part)
    return None


def _inside(part: str, paths: Mapping[str, str]) -> dict[str, str]:
    """The entries of `paths` (model paths) inside `part`, by their path relative to it."""
    return {path[len(part) + 1:]: why for path, why in paths.items()
            if path.startswith(part + ".")}
