"""Host-to-device copies that never make the host wait for queued device work.

A pageable copy to the GPU synchronises with everything queued before it; going through pinned
memory with `non_blocking=True` lets the host build the next step while the device still runs
this one.
"""

from __future__ import annotations

import torch


def to_device(data, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A host list as a device tensor without stalling the host on queued device work."""
    host = torch.tensor(data, dtype=dtype)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def copy_from_host(dst: torch.Tensor, data, dtype: torch.dtype) -> None:
    """Fill the device tensor `dst` from a host list the same way: one pinned, non-blocking
    copy into memory that a captured graph reads."""
    host = torch.tensor(data, dtype=dtype)
    if dst.device.type == "cuda":
        host = host.pin_memory()
    dst.copy_(host, non_blocking=True)
