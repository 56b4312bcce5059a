"""How a static cache stores K and V: in the model's dtype, or in fp8 with one scale per vector.

A 3B model's cache at 128 slots of 2048 positions is ~29 GB in bf16, four times its weights;
fp8 halves it, so the same memory holds twice the slots or twice the context. Each head vector
(one position of one KV head: `head_dim` values) is stored as float8_e4m3fn with its own fp32
scale, its largest magnitude over 448 (e4m3's largest value), computed as it is written:

- per vector, not per head or per tensor: nothing to calibrate and no static scale to go stale,
  and an outlier position (the first token's keys are often many times larger than the rest)
  costs precision in its own vector only;
- computed from the vector inside the step: writing stays a fixed-shape, sync-free sequence of
  kernels that a CUDA graph can replay;
- fp32: 4 bytes per `head_dim` bytes (3% at head_dim 128), exact to store and to apply.

The real-length decode attention (`decode_attention`) reads fp8 K/V as stored and applies
the scales to its scores and weights. Every other read dequantizes the prefix to the compute
dtype before attention, which saves memory, not time: the prefix is written out once more in
the compute dtype for attention to read. On an H100 (3B shape, 128 rows) a compiled step, which
fuses the dequantization into one kernel, took 5.9 ms over 128 keys and 30 ms over 2048 (bf16:
4.8 and 15); a plain CUDA-graph step, which runs it as separate kernels, 13 and 100 ms (bf16:
5.7 and 15.7).
"""

from __future__ import annotations

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max
SCALE_DTYPE = torch.float32
KV_DTYPES: dict[str, torch.dtype | None] = {"auto": None, "fp8-e4m3": FP8}
"""`kv_dtype` names: 'auto' stores K/V in the model's dtype."""


def storage_dtype(name: str, model_dtype: torch.dtype,
                  device: torch.device) -> tuple[torch.dtype, str | None]:
    """The dtype a static cache keeps K/V in for `kv_dtype=name`, and why it is not the one
    asked for (None when it is)."""
    if name not in KV_DTYPES:
        raise ValueError(f"kv_dtype={name!r}; choose one of {list(KV_DTYPES)}")
    wanted = KV_DTYPES[name]
    if wanted is None:
        return model_dtype, None
    try:  # what the cache does with it: cast both ways, write and read at indices
        probe = torch.zeros(2, dtype=wanted, device=device)
        probe[torch.tensor([1], device=device)] = torch.ones(1, device=device).to(wanted)
        probe[torch.tensor([0, 1], device=device)].to(torch.float32)
    except (RuntimeError, TypeError, NotImplementedError) as err:
        return model_dtype, (f"kv_dtype={name}: {device.type} cannot store {wanted} "
                             f"({type(err).__name__}: {err}); K/V kept in {model_dtype}")
    return wanted, None


def is_scaled(dtype: torch.dtype) -> bool:
    return dtype == FP8


def kv_bytes_per_slot(n_layers: int, n_kv_heads: int, head_dim: int, length: int,
                      dtype: torch.dtype) -> int:
    """K and V of one slot: `length` positions of every layer and KV head, each vector with its
    scale when scaled. The one formula for the engine's cache and for the sizers' plans."""
    vector = head_dim * dtype.itemsize + (SCALE_DTYPE.itemsize if is_scaled(dtype) else 0)
    return 2 * n_layers * n_kv_heads * length * vector


def store(buffer: torch.Tensor, scale: torch.Tensor | None, at, x: torch.Tensor) -> None:
    """Write vectors `x` [..., head_dim] into `buffer[at]`, quantized when `scale` is kept.
    The clamp catches x / s rounding just past 448, which e4m3fn has no infinity to hold."""
    if scale is None:
        buffer[at] = x
        return
    x = x.float()
    amax = x.abs().amax(-1).clamp(min=1e-12)
    s = amax / FP8_MAX
    buffer[at] = (x / s.unsqueeze(-1)).clamp(-FP8_MAX, FP8_MAX).to(buffer.dtype)
    scale[at] = s


def load(buffer: torch.Tensor, scale: torch.Tensor | None, rows, n: int,
         dtype: torch.dtype) -> torch.Tensor:
    """Slots `rows` of `buffer` [slots, kv, L, hd], positions [0, n), in `dtype`: a view when
    unscaled and `rows` is a slice, else a copy."""
    if scale is None:
        return buffer[rows, :, :n]
    return buffer[rows, :, :n].to(dtype) * scale[rows, :, :n].unsqueeze(-1).to(dtype)
