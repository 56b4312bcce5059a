import json

import pytest
import torch
from torch.profiler import record_function

from lab.metrics.profile import profile_call


def _workload():
    """A miniature pipeline: a cheap frontend stage and a convolution-heavy vocoder stage."""
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(16, 16, 31, padding=15)

    def run() -> torch.Tensor:
        with record_function("frontend"):
            ids = torch.arange(64).float()
        with record_function("vocoder"), torch.no_grad():
            x = torch.sin(ids.repeat(16, 400)).unsqueeze(0)
            for _ in range(3):
                x = torch.tanh(conv(x))
        return x

    return run


def test_stages_and_operators_are_reported():
    result = profile_call(_workload(), device="cpu")
    assert isinstance(result.value, torch.Tensor) and result.value.shape == (1, 16, 25600)
    stages = {row.name: row for row in result.stages}
    assert {"frontend", "vocoder"} <= set(stages)
    assert stages["vocoder"].total_ms > stages["frontend"].total_ms
    assert stages["vocoder"].calls == 1
    assert 0 < stages["vocoder"].pct <= 100.5
    names = [row.name for row in result.operators]
    assert "frontend" not in names and "vocoder" not in names
    assert any("conv" in n for n in names)
    selfs = [row.self_ms for row in result.operators]
    assert selfs == sorted(selfs, reverse=True)
    assert result.device_operators == [] and result.device_stages == []
    assert sum(row.self_ms for row in result.operators) <= result.wall_ms * 1.05


def test_top_limits_rows_and_markdown_reads():
    result = profile_call(_workload(), device="cpu", top=3)
    assert len(result.operators) == 3
    text = result.to_markdown()
    assert text.startswith("Wall time:")
    assert "### Stages (CPU time)" in text and "| `vocoder` | 1 |" in text
    assert "GPU" not in text
    assert "| name | calls | self ms | total ms | % |" in text


def test_export_trace_is_chrome_json_with_stage_labels(tmp_path):
    result = profile_call(_workload(), device="cpu")
    path = result.export_trace(tmp_path / "traces" / "run.json")
    trace = json.loads(path.read_text())
    names = {e.get("name") for e in trace["traceEvents"]}
    assert {"frontend", "vocoder"} <= names


def test_bad_device_is_a_clear_error():
    with pytest.raises(ValueError, match="not supported"):
        profile_call(lambda: None, device="meta")
    with pytest.raises(ValueError, match="top"):
        profile_call(lambda: None, device="cpu", top=0)


def test_cuda_device_profiles_kernels_or_says_cuda_is_missing():
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            profile_call(lambda: None, device="cuda")
        return
    conv = torch.nn.Conv1d(16, 16, 31, padding=15).cuda()
    x = torch.randn(4, 16, 48000, device="cuda")

    def run():
        with record_function("vocoder"):
            return conv(x).relu()

    result = profile_call(run, device="cuda")
    assert result.device_operators and result.device_operators[0].self_ms > 0
    assert sum(r.pct for r in result.device_operators) <= 100.5
    assert "vocoder" in {r.name for r in result.stages}
    (gpu_vocoder,) = [r for r in result.device_stages if r.name == "vocoder"]
    assert gpu_vocoder.total_ms >= result.device_operators[0].self_ms * 0.99
    assert "### Stages (GPU time)" in result.to_markdown()


def test_a_pipeline_request_is_profiled_on_its_worker_thread(voice_pipeline):
    """Requests run on the pipeline's own worker thread; the profile must still see them."""
    result = profile_call(lambda: voice_pipeline.synthesize("Profile me."), device="cpu")
    assert {"encode", "durations_flow", "vocoder"} <= {row.name for row in result.stages}
    assert result.operators
