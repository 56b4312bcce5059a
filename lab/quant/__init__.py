"""Precision, quantization and compile: the tables behind the dtype, quant and compile knobs.

`lab.quant.plan` (a family's `PrecisionPlan` and `apply_knobs`) is imported by its own name: it
reads `lab.device`, which reads `lab.config`, which reads the tables here.
"""

from lab.quant.compile import COMPILE_MODES, compile_note, compiled, inductor_mode
from lab.quant.precision import (
    DTYPES,
    QUANT_MODES,
    QUANTS,
    PrecisionError,
    PrecisionResult,
    QuantMode,
    apply_precision,
    register,
    tensor_bytes,
    unsupported_reason,
    weight_bytes,
)

__all__ = [
    "COMPILE_MODES",
    "DTYPES",
    "QUANTS",
    "QUANT_MODES",
    "PrecisionError",
    "PrecisionResult",
    "QuantMode",
    "apply_precision",
    "compile_note",
    "compiled",
    "inductor_mode",
    "register",
    "tensor_bytes",
    "unsupported_reason",
    "weight_bytes",
]
