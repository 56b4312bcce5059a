"""The synthesize tab's decode-step view: the per-step chart and the engine table."""

from __future__ import annotations

import pytest

from lab.config import load_preset
from lab.pipeline import Pipeline
from lab.ui import charts, synth_tab


@pytest.fixture(scope="module")
def no_cache():
    """The tiny Orpheus pipeline without a KV cache, greedy, a few dozen steps."""
    pipe = Pipeline(load_preset("orpheus-tiny-cpu", kv_cache="none",
                                sampling={"temperature": 0.0, "max_tokens": 42}))
    yield pipe
    pipe.close()


def _annotation(fig) -> str:
    return fig.layout.annotations[0].text


def test_step_chart_plots_each_step_and_a_moving_median():
    steps = [float(i) for i in range(40)]
    fig = charts.step_times(steps)
    raw, trend = fig.data
    assert list(raw.x) == list(range(40)) and list(raw.y) == steps
    assert list(trend.y)[:4] == [0.0, 0.5, 1.0, 2.0]  # a window of 3 steps
    assert fig.layout.xaxis.title.text == "decode step" and fig.layout.yaxis.title.text == "ms"
    assert "off the chart" not in fig.layout.title.text


def test_a_stalled_step_neither_bends_the_trend_nor_flattens_the_curve():
    steps = [4.0] * 39 + [400.0]
    fig = charts.step_times(steps)
    assert max(fig.data[1].y) == 4.0
    assert tuple(fig.layout.yaxis.range) == (0, 8.0)
    assert "1 step(s) above 8 ms are off the chart" in fig.layout.title.text


def test_step_chart_says_why_it_is_blank():
    assert _annotation(charts.step_times([], blank="not autoregressive")) == "not autoregressive"


def test_the_voice_is_reported_as_not_autoregressive(voice_pipeline):
    syn = voice_pipeline.synthesize("Hello.")
    assert "not autoregressive" in synth_tab.engine_markdown(voice_pipeline, syn)
    assert "not autoregressive" in _annotation(synth_tab.step_chart(voice_pipeline, syn))


def test_an_orpheus_run_shows_its_steps_and_kv_cache(no_cache):
    syn = no_cache.synthesize("Hello world.")
    steps = syn.metrics.step_ms
    assert steps
    table = synth_tab.engine_markdown(no_cache, syn)
    header, _, row = table.splitlines()
    assert "ms / step" in header and "Tokens / s" in header and "KV cache" in header
    assert f"| {len(steps)} | {syn.metrics.ms_per_step:.2f} ms |" in row
    assert no_cache.memory_facts()["KV cache"] in row
    fig = synth_tab.step_chart(no_cache, syn)
    assert list(fig.data[0].y) == steps
