"""Drive the real app in headless Chromium: synthesize, vote, survive a kill, sweep.

The app runs as a subprocess on a free local port with its own data directory, exactly as
a user starts it, so these tests cover the wiring between Gradio and the lab as well as the
lab itself.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROME_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
START_TIMEOUT_S = 120
RUN_TIMEOUT_MS = 180_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class App:
    """`python app.py` on a free port with LAB_DATA_DIR pointing at `data_dir`."""

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.data_dir, self.log = data_dir, log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        env = {**os.environ, "LAB_DATA_DIR": str(data_dir), "GRADIO_ANALYTICS_ENABLED": "False"}
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "app.py", "--port", str(self.port)],
                cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            )
        self._wait()

    def _wait(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"app exited early:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.kill()
        raise RuntimeError(f"app did not answer in {START_TIMEOUT_S} s:\n{self.log.read_text()}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, the way a crash or an OOM kill ends a process."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    assert Path(CHROMIUM).exists(), "install Chromium: apt-get install -y chromium"
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            user_data_dir=Path(os.environ.get("TMPDIR", "/tmp")) / f"chromium-{os.getpid()}",
            executable_path=CHROMIUM, headless=True, args=CHROME_ARGS,
            viewport={"width": 1400, "height": 1000},
        )
        yield context
        context.close()


@pytest.fixture
def page(browser):
    page = browser.new_page()
    yield page
    page.close()


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    root = tmp_path_factory.mktemp("app")
    running = App(root / "lab-data", root / "app.log")
    yield running
    running.kill()


def open_tab(page: Page, url: str, tab: str | None = None) -> None:
    page.goto(url)
    page.wait_for_selector("#synth-go", timeout=60_000)
    if tab:
        page.get_by_role("tab", name=tab).click()


def wait_text(page: Page, selector: str, *needles: str) -> str:
    """Wait until the element's text holds any of `needles`; return that text."""
    checks = " || ".join(f"t.includes({n!r})" for n in needles)
    page.wait_for_function(
        f"() => {{ const e = document.querySelector({selector!r}); if (!e) return false;"
        f" const t = e.innerText; return {checks}; }}",
        timeout=RUN_TIMEOUT_MS,
    )
    return page.inner_text(selector)


def upload_preset(page: Page, path: Path) -> None:
    with page.expect_file_chooser() as chooser:
        page.click("#synth-preset-upload")
    chooser.value.set_files(str(path))


def pick_preset(page: Page, name: str) -> None:
    page.click("#synth-preset input")
    page.get_by_role("option", name=name, exact=True).click()


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
    wait_text(page, "#synth-preset-status", "(uploaded file)")
    assert page.input_value("#synth-batch-size input[type=number]") == "48"
    page.fill("#synth-text textarea", "Hello.")
    page.click("#synth-go")
    assert "Done" in wait_text(page, "#synth-status", "Done", "⚠️")


def test_synthesize_streams_and_returns_audible_audio(app, page):
    open_tab(page, app.url)
    page.fill("#synth-text textarea", "Streaming speech starts before the sentence ends.")
    page.click("#synth-go")
    assert "Done" in wait_text(page, "#synth-status", "Done", "⚠️")
    if shutil.which("ffmpeg"):
        stream_src = page.get_attribute("#synth-stream audio", "src")
        assert stream_src, "the streaming player never received audio"
    else:
        assert "needs `ffmpeg`" in page.content() or "needs ffmpeg" in page.inner_text("body")
    src = page.get_attribute("#synth-take audio", "src")
    assert src and src.endswith(".wav")
    assert rms_of(page, src) > 0.01
    metrics = page.inner_text("#synth-metrics")
    assert "TTFB" in metrics and "RTF" in metrics
    page.wait_for_selector("#synth-chart .js-plotly-plot", timeout=30_000)
    assert "not autoregressive" in page.inner_text("#synth-engine")
    notes = page.inner_text("#synth-notes")
    assert "Fallbacks fired" in notes
    assert "Startup: model load" in notes and "not counted in request timings" in notes


def test_vote_is_kept_across_a_kill_and_restart(tmp_path, browser):
    data_dir = tmp_path / "lab-data"
    first = App(data_dir, tmp_path / "first.log")
    page = browser.new_page()
    try:
        open_tab(page, first.url, "A/B")
        page.click("#ab-render")
        wait_text(page, "#ab-status", "then vote", "⚠️")
        for side in ("x", "y"):
            src = page.get_attribute(f"#ab-{side} audio", "src")
            assert src and rms_of(page, src) > 0.01
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
        table = wait_text(page, "#ab-win-table", "decode_interval=8")
        assert "decode_interval=24" in table
        page.wait_for_selector("#ab-win-chart .js-plotly-plot", timeout=30_000)
    finally:
        second.kill()
        page.close()


def test_benchmark_sweep_draws_charts_and_saves_reports(app, page):
    open_tab(page, app.url, "Benchmark")
    page.fill("#bench-values textarea", "1, 2")
    page.fill("#bench-n input[type=number]", "2")
    page.press("#bench-n input[type=number]", "Enter")
    page.click("#bench-go")
    assert "2/2 points" in wait_text(page, "#bench-status", "2/2 points", "⚠️")
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
