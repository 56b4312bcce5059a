"""Every notebook runs top to bottom on a CPU, draws its charts, and is stored without outputs."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = [
    "01_profile_baseline.ipynb",
    "02_quantization.ipynb",
    "03_kv_cache_complexity.ipynb",
    "04_batching.ipynb",
    "05_streaming.ipynb",
    "06_blind_ab_quality.ipynb",
]
TIMEOUT_S = 480  # per cell; a 2-core machine without native bf16 is slow
PLOTLY = "application/vnd.plotly.v1+json"


def test_every_notebook_is_listed():
    assert sorted(p.name for p in NOTEBOOK_DIR.glob("*.ipynb")) == NOTEBOOKS


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_is_stored_without_outputs(name):
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, f"{name} has no code"
    assert all(not c.outputs and c.execution_count is None for c in code), (
        f"{name} is stored with outputs; clear them before saving"
    )


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_draws(name, tmp_path):
    nb = nbformat.read(NOTEBOOK_DIR / name, as_version=4)
    client = NotebookClient(
        nb, timeout=TIMEOUT_S, kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any(PLOTLY in o.get("data", {}) for o in outputs), f"{name} drew no chart"
