"""torchao's import noise is dropped at its source, and nothing else is."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging
import torch
from lab.quant import ao
from lab.quant.precision import apply_precision

model = torch.nn.Sequential(torch.nn.Linear(32, 32))
apply_precision(model, "fp32", "int8-weight", "cpu")
logging.getLogger("torchao").warning("an unrelated torchao warning")
logging.getLogger("torch.utils._pytree").warning("an unrelated pytree warning")
print("dropped", len(ao.dropped_notes()))
"""


def run() -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=300, check=True)


def test_quantizing_prints_no_torchao_import_noise_but_keeps_other_warnings():
    done = run()
    assert "Failed to load" not in done.stderr
    assert "is an Enum subclass" not in done.stderr
    assert "an unrelated torchao warning" in done.stderr
    assert "an unrelated pytree warning" in done.stderr


def test_every_dropped_line_is_one_a_bare_import_prints():
    """What the lab keeps off stderr is exactly torchao's own import noise, line for line."""
    bare = subprocess.run([sys.executable, "-c", "import torchao.quantization"],
                          capture_output=True, text=True, timeout=300, check=True)
    noise = [line for line in bare.stderr.splitlines()
             if "Failed to load" in line or "is an Enum subclass" in line]
    dropped = int(run().stdout.split()[-1])
    assert dropped == len(noise)
