"""Turn a config's device name into a torch.device, refusing CUDA where there is none."""

from __future__ import annotations

import torch

from lab.config import ConfigError


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
