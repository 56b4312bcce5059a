"""Driving the running app in headless Chromium: the app as a subprocess, and the page steps
the browser tests share.

The app runs as `python app.py` on a free local port with its own data directory, exactly as
a user starts it, so these tests cover the wiring between Gradio and the lab as well as the
lab itself.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Page

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
    """`python app.py` on a free port with LAB_DATA_DIR pointing at `data_dir`.

    Every app started is listed in `App.started`, so that a failing test's report can show
    what the app logged (conftest.py)."""

    started: list[App] = []

    def __init__(self, data_dir: Path, log: Path) -> None:
        self.data_dir, self.log = data_dir, log
        App.started.append(self)
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

    def log_tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, the way a crash or an OOM kill ends a process."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)


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


KNOBS = "Knobs: precision, compile, batching, streaming, engine"


def show_knobs(page: Page, key: str = "synth") -> None:
    """Unfold a panel's knobs (folded on Synthesize for a simple first view)."""
    if not page.locator(f"#{key}-batch-size").is_visible():
        page.locator(f"#{key}-knobs").get_by_text(KNOBS).click()
        page.wait_for_selector(f"#{key}-batch-size", state="visible")


def upload_preset(page: Page, path: Path) -> None:
    with page.expect_file_chooser() as chooser:
        page.click("#synth-preset-upload")
    chooser.value.set_files(str(path))


def pick_preset(page: Page, name: str) -> None:
    page.click("#synth-preset input")
    page.get_by_role("option", name=name, exact=True).click()


def run_sweep(page: Page, url: str, values: str, texts: int) -> str:
    """A batch-size sweep on the Benchmark tab over `values`, `texts` texts; its status."""
    open_tab(page, url, "Benchmark")
    page.fill("#bench-values textarea", values)
    page.fill("#bench-n input[type=number]", str(texts))
    page.press("#bench-n input[type=number]", "Enter")
    page.click("#bench-go")
    points = len(values.split(","))
    return wait_text(page, "#bench-status", f"{points}/{points} points", "⚠️")
