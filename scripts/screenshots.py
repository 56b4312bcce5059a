"""Take one screenshot per app tab, each after doing that tab's job once.

    python scripts/screenshots.py [--out docs/screenshots] [--chromium /usr/bin/chromium]
                                  [--only NAME]

Starts the app on a free local port with a throwaway data directory under runs/, drives it
in headless Chromium (synthesize, check a bf16 take's quality, cast a blind vote, run a small
sweep, watch the live view, profile one request, serve the config and load it) and writes
synthesize.png, quality.png, ab.png, benchmark.png, live.png, profile.png and serve_tab.png.
`--only serve_tab` (any of those names) takes that one picture alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
CHROME_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
WAIT_MS = 300_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_app(data_dir: str, port: int) -> subprocess.Popen:
    env = {**os.environ, "LAB_DATA_DIR": data_dir}
    proc = subprocess.Popen([sys.executable, "app.py", "--port", str(port)], cwd=ROOT, env=env)
    url = f"http://127.0.0.1:{port}/"
    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit("the app exited before it answered")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the app did not answer in 600 s")


def screenshot_args(description: str, default_out: Path) -> argparse.Namespace:
    """`--out` and `--chromium`, as each one-picture script takes them; the folder is made."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    return args


def wait_text(page: Page, selector: str, needle: str) -> None:
    page.wait_for_function(
        f"() => {{ const e = document.querySelector({selector!r});"
        f" return e && e.innerText.includes({needle!r}); }}",
        timeout=WAIT_MS,
    )


def settle(page: Page, *plots: str) -> None:
    """Wait for plotly charts to draw and give the layout a moment to stop moving."""
    for plot in plots:
        page.wait_for_selector(f"{plot} .js-plotly-plot", timeout=60_000)
    time.sleep(1.5)


def synthesize(page: Page) -> None:
    page.click("#synth-go")
    wait_text(page, "#synth-status", "Done")
    page.click("#synth-quality-go")
    wait_text(page, "#synth-quality-report", "Quality")
    settle(page, "#synth-chart")


AB_INTERVALS = (16, 4, 8)
"""Config B's decode interval for each blind vote: three candidates against one baseline
make four configurations, enough for the ranking to show (with the wide intervals that a
vote per pair leaves)."""


KNOBS = "Knobs: precision, compile, batching, streaming, engine"


def quality(page: Page) -> str:
    """A bf16 take judged against its fp32 reference on its sentences and the short set: the
    verdict with an interval per check, the recogniser's floor and the worst sentences with
    both renderings. Only the quality check's panel is pictured."""
    page.get_by_role("tab", name="Synthesize").click()
    if not page.locator("#synth-batch-size").is_visible():
        page.locator("#synth-knobs").get_by_text(KNOBS).click()
    page.click("#synth-dtype input")
    page.get_by_role("option", name="bf16", exact=True).click()
    page.check("#synth-slow input")  # bf16 is emulated on a CPU without native support
    page.click("#synth-go")
    wait_text(page, "#synth-status", "Done")
    page.click("#synth-quality-go")
    wait_text(page, "#synth-quality-report", "against the fp32 reference")
    page.wait_for_selector("#synth-worst-0", state="visible")
    settle(page)
    return "#synth-quality"


def ab(page: Page) -> None:
    page.get_by_role("tab", name="A/B").click()
    page.get_by_text("Configurations", exact=True).click()
    page.wait_for_selector("#ab-b-decode-interval", state="visible")
    for n, interval in enumerate(AB_INTERVALS, 1):
        field = page.locator("#ab-b-decode-interval input[type=number]")
        field.fill(str(interval))
        field.press("Enter")
        page.click("#ab-render")
        wait_text(page, "#ab-status", "Play X and Y")
        for side in ("x", "y"):
            page.evaluate(f"() => document.querySelector('#ab-{side} audio').play()")
        page.wait_for_function("() => !document.querySelector('#ab-vote-x').disabled")
        page.click("#ab-vote-x")
        wait_text(page, "#ab-status", f"Vote #{n} saved")
        wait_text(page, "#ab-reveal", "Quality")
    wait_text(page, "#ab-rank-notes", "Neighbours")
    page.get_by_text("Configurations", exact=True).click()
    settle(page, "#ab-win-chart", "#ab-quality-chart", "#ab-rank-chart")


def benchmark(page: Page) -> None:
    page.get_by_role("tab", name="Benchmark").click()
    page.fill("#bench-values textarea", "1, 2, 4")
    page.click("#bench-go")
    wait_text(page, "#bench-status", "3/3 points")
    settle(page, "#bench-chart-a", "#bench-chart-b")


def live(page: Page) -> None:
    page.get_by_role("tab", name="Live").click()
    time.sleep(5)
    settle(page, "#live-telemetry", "#live-latency")


def profile(page: Page) -> None:
    page.get_by_role("tab", name="Profile").click()
    page.click("#profile-go")
    wait_text(page, "#profile-status", "Done")
    settle(page, "#profile-stages", "#profile-ops")


def serve(page: Page) -> None:
    """A server for the default config, swept at three concurrencies, with its metrics."""
    page.get_by_role("tab", name="Serve").click()
    page.click("#serve-start")
    wait_text(page, "#serve-status", "Serving")
    page.fill("#serve-concurrency textarea", "1, 2, 4")
    page.fill("#serve-requests input[type=number]", "6")
    page.press("#serve-requests input[type=number]", "Enter")
    page.click("#serve-go")
    wait_text(page, "#serve-sweep-status", "3/3 points")
    wait_text(page, "#serve-metrics", "active slots 0")
    settle(page, "#serve-chart", "#serve-telemetry")


STEPS = {"synthesize": synthesize, "quality": quality, "ab": ab, "benchmark": benchmark,
         "live": live, "profile": profile, "serve_tab": serve}


@contextmanager
def app_page(data_dir: str, chromium: str) -> Iterator[Page]:
    """A fresh app on a free port, and a headless browser page open on it; both stop after."""
    shutil.rmtree(ROOT / data_dir, ignore_errors=True)
    port = free_port()
    app = start_app(data_dir, port)
    try:
        with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
            context = pw.chromium.launch_persistent_context(
                user_data_dir=Path(tmp) / "chromium", executable_path=chromium,
                headless=True, args=CHROME_ARGS, viewport={"width": 1400, "height": 1000},
            )
            page = context.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.wait_for_selector("#synth-go", timeout=60_000)
            yield page
            context.close()
    finally:
        app.send_signal(signal.SIGTERM)
        app.wait(timeout=30)
        shutil.rmtree(ROOT / data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    parser.add_argument("--only", choices=list(STEPS), help="take this one picture alone")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    steps = {args.only: STEPS[args.only]} if args.only else STEPS
    with app_page("runs/lab-data-screenshots", args.chromium) as page:
        for name, step in steps.items():
            part = step(page)  # a step may name the one element worth picturing
            path = args.out / f"{name}.png"
            if part:
                page.locator(part).screenshot(path=str(path))
            else:
                page.screenshot(path=str(path), full_page=True)
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
