"""Drive the real app in headless Chromium: synthesize, vote, survive a kill, sweep.

The app runs as a subprocess on a free local port with its own data directory, exactly as
a user starts it, so these tests cover the wiring between Gradio and the lab as well as the
lab itself.
"""

from __future__ import annotations

import io
import re
import time

import numpy as np
import pytest
import soundfile as sf
from browser import (
    RUN_TIMEOUT_MS,
    App,
    open_tab,
    pick_preset,
    run_sweep,
    show_knobs,
    upload_preset,
    wait_text,
)
from playwright.sync_api import Page

from lab.config import list_presets


def rms_of(page: Page, url: str) -> float:
    body = page.request.get(url).body()
    audio, _ = sf.read(io.BytesIO(body), dtype="float32")
    return float(np.sqrt(np.mean(np.square(audio))))


def test_bad_inputs_are_reported_and_leave_the_app_usable(app, page, tmp_path):
    open_tab(page, app.url)
    page.fill("#synth-text textarea", "")
    page.click("#synth-go")
    assert "text is empty" in wait_text(page, "#synth-status", "⚠️")

    page.fill("#synth-text textarea", "word " * 1001)
    page.click("#synth-go")
    assert "over the limit" in wait_text(page, "#synth-status", "over the limit")

    bad = tmp_path / "typo.yaml"
    bad.write_text("family: piper-vits\nbatch_sise: 4\n")
    upload_preset(page, bad)
    assert "unknown key 'batch_sise'" in wait_text(page, "#synth-preset-status", "Invalid")

    combo = tmp_path / "kv.yaml"
    combo.write_text("family: piper-vits\nkv_cache: dynamic\n")
    upload_preset(page, combo)
    status = wait_text(page, "#synth-preset-status", "does not apply")
    assert "Invalid preset" in status and "kv_cache does not apply to piper-vits" in status


def test_family_greys_out_the_knobs_it_declares_unsupported(app, page):
    open_tab(page, app.url)
    show_knobs(page)
    page.get_by_text("Autoregressive engine").first.click()
    kv_cache = "#synth-kv-cache input"
    assert page.locator(kv_cache).is_disabled()
    assert "kv_cache does not apply to piper-vits" in page.inner_text("#synth-kv-cache")
    pick_preset(page, "orpheus-tiny-cpu")
    wait_text(page, "#synth-preset-status", "Loaded preset")
    page.wait_for_function(f"() => !document.querySelector({kv_cache!r}).disabled")
    assert not page.locator("#synth-temperature input[type=number]").is_disabled()
    page.click("#synth-family input")
    page.get_by_role("option", name="piper-vits", exact=True).click()
    page.wait_for_function(f"() => document.querySelector({kv_cache!r}).disabled")
    assert page.input_value("#synth-weights input") == "real"


def test_presets_beyond_the_old_slider_range_reach_the_pipeline(app, page, tmp_path):
    """batch_size 64 (shipped) and 48 (uploaded) once stopped at a slider capped at 32."""
    open_tab(page, app.url)
    show_knobs(page)
    pick_preset(page, "orpheus-3b-dummy-gpu")
    wait_text(page, "#synth-preset-status", "Loaded preset")
    assert page.input_value("#synth-batch-size input[type=number]") == "64"
    page.click("#synth-go")
    shown = wait_text(page, "body", "no CUDA GPU", "maximum value")
    assert "maximum value" not in shown
    assert "no CUDA GPU" in page.inner_text("#synth-status")

    open_tab(page, app.url)
    wide = tmp_path / "batch48.yaml"
    wide.write_text("family: piper-vits\ndevice: cpu\nbatch_size: 48\n")
    upload_preset(page, wide)
    wait_text(page, "#synth-preset-status", "(uploaded)")
    assert page.input_value("#synth-preset input") == "batch48 (uploaded)"
    show_knobs(page)
    assert page.input_value("#synth-batch-size input[type=number]") == "48"
    page.fill("#synth-text textarea", "Hello.")
    page.click("#synth-go")
    assert "Done" in wait_text(page, "#synth-status", "Done", "⚠️")


# Seconds of synthesis even on a fast CPU, so the run is still going when a test cancels it.
LONG_TEXT = " ".join(f"Sentence number {n} keeps the voice busy for a while longer."
                     for n in range(1, 76))


def heard_ms(page: Page) -> float:
    line = wait_text(page, "#synth-heard", "Heard: first sound")
    return float(re.search(r"first sound (\d+) ms", line).group(1))


def player(page: Page) -> dict:
    return page.evaluate("() => window.labPlayer.last")


def start_long_run(page: Page) -> str:
    """Start synthesizing LONG_TEXT and return its run id once audio is playing. The run is
    meant to be long, so the slow-run gate is passed: on a slow CPU the app's estimate, once
    it has timed a take, puts this text past a minute and would hold it back."""
    page.fill("#synth-text textarea", LONG_TEXT)
    page.check("#synth-slow input")
    page.click("#synth-go")
    page.wait_for_function("() => { const m = window.labPlayer.last;"
                           " return m && m.chunks >= 1; }", timeout=RUN_TIMEOUT_MS)
    return player(page)["runId"]


def run_state(app: App, page: Page, run_id: str) -> dict:
    return page.request.get(app.url + "lab/runs").json()[run_id]


def test_synthesize_streams_and_returns_audible_audio(app, page):
    """The player streams every sample of the take, with no ffmpeg involved, and the time
    from the click to the first sound is shown beside the server's time to first byte."""
    open_tab(page, app.url)
    page.fill("#synth-text textarea", "Streaming speech starts before the sentence ends.")
    page.click("#synth-go")
    assert "Done" in wait_text(page, "#synth-status", "Done", "⚠️")
    page.wait_for_function("() => window.labPlayer.last && window.labPlayer.last.done")
    heard = heard_ms(page)
    metrics = page.inner_text("#synth-metrics")
    ttfb = float(re.search(r"(\d+) ms", metrics).group(1))
    assert 0 < ttfb < heard, "the first sound cannot come before the server's first byte"
    src = page.get_attribute("#synth-take audio", "src")
    assert src and src.endswith(".wav")
    body = page.request.get(src).body()
    take, rate = sf.read(io.BytesIO(body), dtype="float32")
    assert float(np.sqrt(np.mean(np.square(take)))) > 0.01
    streamed = player(page)
    assert streamed["sampleRate"] == rate and streamed["samples"] == len(take)
    assert "Time to first byte" in metrics and "Real-time factor" in metrics
    page.wait_for_selector("#synth-chart .js-plotly-plot", timeout=30_000)
    assert "not autoregressive" in page.inner_text("#synth-engine")
    notes = page.inner_text("#synth-notes")
    assert "Fallbacks fired" in notes
    assert "Startup: model load" in notes and "not counted in request timings" in notes


def test_cancel_frees_the_worker_within_a_second(app, page):
    open_tab(page, app.url)
    run_id = start_long_run(page)
    page.click("#synth-cancel")
    status = wait_text(page, "#synth-status", "Cancelled:", "Nothing to cancel")
    freed = float(re.search(r"let go of the request (\d+) ms", status).group(1))
    assert freed < 1000
    state = run_state(app, page, run_id)
    assert state["state"] == "cancelled" and state["streamed_s"] < 30
    page.fill("#synth-text textarea", "Still here.")
    page.click("#synth-go")
    assert "Done" in wait_text(page, "#synth-status", "Done", "⚠️")


def test_a_closed_tab_cancels_its_run(app, browser):
    page = browser.new_page()
    open_tab(page, app.url)
    run_id = start_long_run(page)
    page.close()
    probe = browser.new_page()
    deadline = time.monotonic() + 10
    while run_state(app, probe, run_id)["state"] != "cancelled":
        assert time.monotonic() < deadline, run_state(app, probe, run_id)
        time.sleep(0.2)
    probe.close()


def test_the_first_view_is_text_examples_and_a_preset(app, page):
    open_tab(page, app.url)
    assert not page.locator("#synth-batch-size").is_visible(), "knobs should start folded"
    assert page.locator("#synth-preset").is_visible()
    assert re.fullmatch(r"\d+ / 5000 characters", page.inner_text("#synth-count").strip())
    page.locator("#synth-examples").get_by_text("Short.", exact=True).click()
    page.wait_for_function("() => document.querySelector('#synth-text textarea').value"
                           " === 'Short.'")
    wait_text(page, "#synth-count", "6 / 5000 characters")


def test_knob_state_is_shared_across_tabs_and_ar_presets_open_the_engine(app, page, tmp_path):
    open_tab(page, app.url)
    pick_preset(page, "orpheus-tiny-cpu")
    wait_text(page, "#synth-preset-status", "Loaded preset")
    show_knobs(page)
    page.wait_for_selector("#synth-kv-cache", state="visible")
    page.get_by_role("tab", name="Benchmark").click()
    page.wait_for_function("() => document.querySelector('#bench-preset input').value"
                           " === 'orpheus-tiny-cpu'")
    assert page.input_value("#bench-family input") == "orpheus"

    mine = tmp_path / "my-voice.yaml"
    mine.write_text("family: piper-vits\ndevice: cpu\nbatch_size: 3\n")
    with page.expect_file_chooser() as chooser:
        page.click("#bench-preset-upload")
    chooser.value.set_files(str(mine))
    wait_text(page, "#bench-preset-status", "(uploaded)")
    page.get_by_role("tab", name="Synthesize").click()
    page.wait_for_function("() => document.querySelector('#synth-preset input').value"
                           " === 'my-voice (uploaded)'")
    assert page.input_value("#synth-batch-size input[type=number]") == "3"
    assert page.input_value("#synth-family input") == "piper-vits"


QUALITY_TEXT = ("The quality check listens to this sentence. It judges each sentence on its "
                "own. The floor comes from the reference.")


def test_quality_check_judges_the_take_against_its_fp32_reference(app, page):
    """A bf16 take of three sentences, judged on them alone: a verdict with an interval per
    check, the recogniser's floor, and the worst sentences with both renderings to play."""
    open_tab(page, app.url)
    show_knobs(page)
    page.click("#synth-dtype input")
    page.get_by_role("option", name="bf16", exact=True).click()
    page.fill("#synth-text textarea", QUALITY_TEXT)
    page.check("#synth-slow input")  # bf16 is emulated on a CPU without native support
    page.click("#synth-go")
    status = wait_text(page, "#synth-status", "Done", "⚠️")
    assert "Done" in status, status
    page.click("#synth-quality-set input")
    page.get_by_role("option", name="none (the take's sentences only)", exact=True).click()
    page.click("#synth-quality-go")
    report = wait_text(page, "#synth-quality-report", "Quality PASS", "Quality FAIL",
                       "Quality INCONCLUSIVE", "Error")
    assert "against the fp32 reference" in report and "on 3 sentences" in report
    assert "paired bootstrap intervals" in report and "Change (95% CI)" in report
    assert "DNSMOS OVRL" in report and "(ASR floor)" in report and "MCD (dB)" in report
    assert re.search(r"[+-]\d\.\d{3} \([+-]\d\.\d{3} to [+-]\d\.\d{3}\)", report), report
    src = page.get_attribute("#synth-reference audio", "src")
    assert src and src.endswith(".wav")
    # bf16 moves every MOS reading a little, so some sentence always fell: it is listed, and
    # both of its renderings can be played.
    assert "Worst sentences" in report
    page.wait_for_selector("#synth-worst-0", state="visible")
    assert "fp32 heard" in page.inner_text("#synth-worst-0-text")
    for side in ("base", "take"):
        assert page.get_attribute(f"#synth-worst-0-{side} audio", "src").endswith(".wav")


@pytest.mark.parametrize("preset", list_presets())
def test_every_shipped_preset_runs_or_is_refused_with_its_reason(app, page, preset):
    open_tab(page, app.url)
    pick_preset(page, preset)
    wait_text(page, "#synth-preset-status", "Loaded preset")
    page.fill("#synth-text textarea", "Every preset gets one sentence.")
    page.click("#synth-go")
    status = wait_text(page, "#synth-status", "Done", "⚠️")
    if "Done" in status:
        return
    refused = re.search(r"no CUDA GPU|Refused before loading: .*\d GiB|take minutes: .*\d", status)
    assert refused, f"{preset} failed without a reason a user can act on: {status}"


def test_a_run_that_would_not_fit_is_refused_with_numbers_before_loading(app, page, tmp_path):
    huge = tmp_path / "huge.yaml"
    huge.write_text("family: orpheus\nweights: dummy\nmodel: orpheus-3b\ndevice: cpu\n"
                    "dtype: fp32\nbatch_size: 32\nkv_cache: static\ndecode_interval: 1\n"
                    "overlap: 2\ncrossfade_ms: 0.0\nsampling:\n  max_tokens: 4096\n")
    open_tab(page, app.url)
    upload_preset(page, huge)
    wait_text(page, "#synth-preset-status", "(uploaded)")
    page.check("#synth-slow input")
    started = time.monotonic()
    page.click("#synth-go")
    status = wait_text(page, "#synth-status", "⚠️")
    assert "Refused before loading" in status and "GiB" in status
    assert time.monotonic() - started < 60, "the refusal must come before any weights load"


def test_vote_is_kept_across_a_kill_and_restart(tmp_path, browser):
    data_dir = tmp_path / "lab-data"
    first = App(data_dir, tmp_path / "first.log")
    page = browser.new_page()
    try:
        open_tab(page, first.url, "A/B")
        page.click("#ab-render")
        wait_text(page, "#ab-status", "Play X and Y", "⚠️")
        for side in ("x", "y"):
            src = page.get_attribute(f"#ab-{side} audio", "src")
            assert src and rms_of(page, src) > 0.01
        for side in ("x", "y"):
            page.evaluate(f"() => document.querySelector('#ab-{side} audio').play()")
        page.wait_for_function("() => !document.querySelector('#ab-vote-y').disabled")
        page.click("#ab-vote-y")
        assert "saved" in wait_text(page, "#ab-status", "saved", "⚠️")
        reveal = wait_text(page, "#ab-reveal", "Y was")
        assert "X was" in reveal
        assert "PASS" in reveal or "FAIL" in reveal
    finally:
        first.kill()
    second = App(data_dir, tmp_path / "second.log")
    try:
        open_tab(page, second.url, "A/B")
        table = wait_text(page, "#ab-win-table", "stream/8 overlap=4")
        assert "stream/24" in table
        page.wait_for_selector("#ab-win-chart .js-plotly-plot", timeout=30_000)
    finally:
        second.kill()
        page.close()


def test_benchmark_sweep_draws_charts_and_saves_reports(app, page):
    assert "2/2 points" in run_sweep(page, app.url, "1, 2", texts=2)
    page.wait_for_selector("#bench-chart-a .js-plotly-plot", timeout=30_000)
    page.wait_for_selector("#bench-chart-b .js-plotly-plot", timeout=30_000)
    saved = sorted((app.data_dir / "bench").glob("sweep-batch_size-*.csv"))
    assert saved, "the sweep report was not written under the data directory"
    assert len(saved[-1].read_text().strip().splitlines()) == 3


def test_benchmark_sweep_can_be_cancelled_and_keeps_finished_points(app, page):
    open_tab(page, app.url, "Benchmark")
    before = set((app.data_dir / "bench").glob("sweep-decode_interval-*.csv"))
    page.check("#bench-axis input[value='decode interval']")
    page.wait_for_function(
        "() => document.querySelector('#bench-values textarea').value.startsWith('8,')")
    page.fill("#bench-values textarea", "8, 16, 32, 64, 128")
    page.click("#bench-go")
    wait_text(page, "#bench-status", "1/5 points", "⚠️")
    page.click("#bench-cancel")
    assert "Cancelled" in wait_text(page, "#bench-status", "Cancelled")
    time.sleep(3)
    assert "5/5" not in page.inner_text("#bench-status")
    (report,) = set((app.data_dir / "bench").glob("sweep-decode_interval-*.csv")) - before
    rows = report.read_text().strip().splitlines()[1:]
    assert 1 <= len(rows) < 5
