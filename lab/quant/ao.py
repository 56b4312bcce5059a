"""torchao, imported once and quietly, through the one function the lab uses to reach it.

Importing torchao loads every compiled extension it ships. Extensions built for another Python
or CUDA build (its mxfp8 and CUTLASS kernels, on this machine) cannot load, and torchao logs a
warning for each; it also registers an Enum with a torch API that now logs a deprecation
warning. None of this concerns a lab user: the lab never calls those kernels, and when a mode
cannot run here the precision module's probe says so with the reason. So exactly these records
are dropped from the log, and kept: `dropped_notes()` returns them for anyone debugging torchao.
Every other warning, from torchao or torch, still reaches the user.
"""

from __future__ import annotations

import logging
from functools import cache
from types import ModuleType

_dropped: list[str] = []


class _ExtensionLoadFilter(logging.Filter):
    """Drops torchao's "Failed to load .../torchao/_C*.so" records."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith("Failed to load ") and "torchao" in message and "_C" in message:
            _dropped.append(message)
            return False
        return True


class _EnumConstantFilter(logging.Filter):
    """Drops torch's deprecation note about torchao registering its Enums as pytree constants."""

    def filter(self, record: logging.LogRecord) -> bool:
        owner = getattr(record.args[0], "__module__", "") if record.args else ""
        if "is an Enum subclass" in str(record.msg) and owner.startswith("torchao"):
            _dropped.append(record.getMessage())
            return False
        return True


@cache
def load() -> ModuleType:
    """The torchao module (ImportError if it is not installed), imported with the filters on."""
    logging.getLogger("torchao").addFilter(_ExtensionLoadFilter())
    logging.getLogger("torch.utils._pytree").addFilter(_EnumConstantFilter())
    import torchao

    return torchao


def quantization() -> ModuleType:
    """`torchao.quantization`, the part of torchao the lab calls."""
    load()
    import torchao.quantization

    return torchao.quantization


def dropped_notes() -> list[str]:
    """The torchao import messages that were kept off stderr, in the order they were logged."""
    return list(_dropped)
