"""Precision and quantization: one call casts and quantizes a model, reporting what it did."""

from lab.quant.precision import (
    DTYPES,
    FALLBACK_CHAIN,
    QUANTS,
    PrecisionError,
    PrecisionResult,
    apply_precision,
    unsupported_reason,
    weight_bytes,
)

__all__ = [
    "DTYPES",
    "FALLBACK_CHAIN",
    "QUANTS",
    "PrecisionError",
    "PrecisionResult",
    "apply_precision",
    "unsupported_reason",
    "weight_bytes",
]
