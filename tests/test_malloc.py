"""glibc's allocator settings: applied once, observable in the process's memory, and a user's
own MALLOC_* variables win. Each case runs in a fresh interpreter: the settings are per process."""

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")

PROBE = """
import json, torch
from lab.malloc import keep_freed_memory
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
{setup}
note = keep_freed_memory() if {apply} else None
again = keep_freed_memory() if {apply} else None
block = torch.ones(64 * 2**20 // 4)  # 64 MB: above glibc's largest default mmap threshold
held = rss_mb()
del block
print(json.dumps({{"note": note, "again": again, "returned_mb": held - rss_mb()}}))
"""


def probe(apply: bool, env: dict[str, str] | None = None, setup: str = "") -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", PROBE.format(apply=apply, setup=setup)], check=True,
                         capture_output=True, text=True, env={**clean, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_freed_blocks_stay_in_the_process_once_applied():
    default, kept = probe(False), probe(True)
    assert default["returned_mb"] > 48, default  # glibc unmaps a freed 64 MB block
    assert kept["returned_mb"] < 16, kept        # kept for the next sentence's activations
    assert kept["note"].startswith("glibc malloc: one arena") and kept["again"] == kept["note"]


def test_a_users_own_malloc_variables_win():
    got = probe(True, {"MALLOC_ARENA_MAX": "4"})
    assert "MALLOC_ARENA_MAX" in got["note"] and "left as the environment" in got["note"]
    assert got["returned_mb"] > 48, got


def test_a_cpu_pipeline_applies_it():
    built = ("from lab.config import PipelineConfig\nfrom lab.pipeline import Pipeline\n"
             "Pipeline(PipelineConfig(device='cpu')).close()")
    assert probe(False, setup=built)["returned_mb"] < 16
