"""Turn a config's device name into a torch.device, and say what its hardware does natively."""

from __future__ import annotations

import torch

from lab.errors import ConfigError


def resolve_device(name: str | torch.device) -> torch.device:
    """'auto' means CUDA when visible; an explicit 'cuda' without a GPU is a clear error."""
    if str(name) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type not in ("cpu", "cuda"):
        raise ConfigError(f"device {str(name)!r} is not supported; use 'auto', 'cpu' or 'cuda'")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device={str(name)!r} but no CUDA GPU is visible here; "
                          "use 'auto' or 'cpu'")
    return device


def native_bf16(device: torch.device) -> bool:
    """Whether bf16 math runs natively here. A CPU without AVX512-BF16 or AMX (oneDNN's test)
    emulates it, and a voice in bf16 then runs tens of times slower than in fp32."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
