"""Run a file's Triton kernel checks: on the GPU in this process, or on a CPU under Triton's
interpreter, which executes the same kernels there. The interpreter has to be chosen before
any kernel is defined, long past in a test process, so on a CPU the check runs in a process of
its own with TRITON_INTERPRET=1."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import torch


def run_check(path: Path, name: str) -> None:
    """Call `name(device)` from the file at `path`; raise with its output if it fails."""
    if torch.cuda.is_available():
        runpy.run_path(str(path))[name]("cuda")
        return
    script = f"import runpy; runpy.run_path({str(path)!r})[{name!r}]('cpu')"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


class OpCalls(torch.utils._python_dispatch.TorchDispatchMode):
    """Under it, `rows` lists the first argument's row count of every call of `op`: which
    products a kernel's custom op computed."""

    def __init__(self, op) -> None:
        super().__init__()
        self.op, self.rows = op, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is self.op:
            self.rows.append(args[0].shape[0])
        return func(*args, **(kwargs or {}))
