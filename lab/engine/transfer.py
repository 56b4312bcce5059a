"""Host-to-device copies that never make the host wait for queued device work.

A pageable copy to the GPU synchronises with everything queued before it; going through pinned
memory with `non_blocking=True` lets the host build the next step while the device still runs
this one.
"""

from __future__ import annotations

import functools

import numpy as np
import torch


def to_device(data, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host list as a device tensor without stalling the host on queued device work."""
    host = _staged(data, dtype, device)
    return host if device.type != "cuda" else host.to(device, non_blocking=True)


def copy_from_host(dst: torch.Tensor, data, dtype: torch.dtype) -> None:
    """Fill the device tensor `dst` from a host list the same way: one pinned, non-blocking
    copy into memory that a captured graph reads."""
    dst.copy_(_staged(data, dtype, dst.device), non_blocking=True)


def _staged(data, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The host side of a copy: pinned where the copy goes to a GPU, and filled there directly
    (pinning a finished tensor would allocate and fill a second one). numpy reads a list of
    Python numbers in about half the time `torch.tensor` takes (a step's 144 rows of sampling
    settings, timed side by side on a CPU), and a step stages a dozen such lists."""
    array = np.asarray(data, dtype=_numpy_dtype(dtype))
    host = torch.empty(array.shape, dtype=dtype, pin_memory=device.type == "cuda")
    host.numpy()[...] = array
    return host


@functools.cache
def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    return torch.empty(0, dtype=dtype).numpy().dtype
