"""The Serve tab in headless Chromium: start a server for the shared config, sweep it, cancel
a sweep (its slots free), stop the server; and refuse, with the reason, a URL off this
machine, a loopback port with no server, and a port already in use, leaving the tab usable.

The app runs as a subprocess exactly as a user starts it (see browser.py); it has loaded
`cpu-default` at startup, so Start serves it at once from the app's pipeline cache.
"""

from __future__ import annotations

import json
import re
import socket

import httpx
import pytest
from browser import open_tab, wait_text
from playwright.sync_api import Page

from lab.metrics.telemetry import gpu_status

GPU = not gpu_status().startswith("no NVIDIA GPU")
BUSY, HOST_CHART = (("GPU util %", "GPU telemetry") if GPU else
                    ("CPU % (no GPU)", "Host telemetry (no GPU)"))


def start(page: Page, port: int = 0, expect: str = "Serving") -> str:
    page.fill("#serve-port input[type=number]", str(port))
    page.click("#serve-start")
    return wait_text(page, "#serve-status", expect)


def attach(page: Page, url: str, expect: str) -> str:
    page.fill("#serve-url textarea", url)
    page.click("#serve-attach")
    return wait_text(page, "#serve-status", expect)


def table_rows(page: Page, table: str = "#serve-table") -> list[dict[str, str]]:
    """A table as the browser shows it, one dict per row, keyed by header."""
    heads, cells = (page.evaluate(
        f"() => [...document.querySelectorAll('{table} [role={role}]')]"
        ".map(c => c.innerText.trim())") for role in ("columnheader", "gridcell"))
    return [dict(zip(heads, cells[i:i + len(heads)], strict=True))
            for i in range(0, len(cells), len(heads) or 1)]


def capacity_of(rows: list[dict[str, str]]) -> str:
    """A pattern for the capacity verdict the shown table implies: whether each of two streams
    kept real time on a shared machine is the machine's to decide, but the verdict must agree
    with it. The highest point that held carries its streams and TTFA in brackets."""
    held = [r["Load"] for r in rows if r["OK"] == r["Requests"] and r["At real time"] == "100%"]
    missed = [r for r in rows if r["Load"] not in held]
    verdict = (rf"closed: every stream in real time up to {held[-1]} \([^)]*TTFA p95[^)]*\)"
               if held else "closed: no point kept every stream in real time")
    return verdict + (f"; not at {missed[0]['Load']}:" if missed else "(\n|$)")


@pytest.fixture(autouse=True)
def no_server_left(app, page):
    """A test that fails half-way leaves no server behind for the next one to trip on."""
    yield
    open_tab(page, app.url, "Serve")
    page.click("#serve-stop")
    wait_text(page, "#serve-status", "Stopped", "No server", "Detached")


def test_start_sweep_and_stop_a_server(app, page):
    open_tab(page, app.url, "Serve")
    status = start(page)
    assert "Serving cpu-default (piper-vits) at http://127.0.0.1:" in status, status
    url = re.search(r"http://127\.0\.0\.1:\d+", status).group(0)
    assert httpx.get(f"{url}/ready", trust_env=False).json()["ready"] is True
    assert "active slots 0 / 4" in wait_text(page, "#serve-metrics", "active slots")
    assert f"{url}/v1/audio/speech" in page.inner_text("#serve-curl")
    assert f'base_url="{url}/v1"' in page.inner_text("#serve-python")
    again = start(page, expect="already loads")  # one server at a time, still shown
    assert "⚠️" in again and f"Serving cpu-default (piper-vits) at {url}" in again, again

    page.fill("#serve-concurrency textarea", "1, 2")
    page.fill("#serve-requests input[type=number]", "2")
    page.press("#serve-requests input[type=number]", "Enter")
    page.fill("#serve-processes input[type=number]", "2")  # the cancel below runs with them
    page.press("#serve-processes input[type=number]", "Enter")
    page.click("#serve-go")
    done = wait_text(page, "#serve-sweep-status", "2/2 points ·", "⚠️")  # not the bar's
    assert "2/2 points" in done and f"telemetry: {gpu_status()}" in done, done
    page.wait_for_selector("#serve-chart .js-plotly-plot", timeout=30_000)
    titles = page.inner_text("#serve-chart")
    assert "TTFA ms (concurrency)" in titles and "streams at real time" in titles
    assert "errors (concurrency)" in titles
    assert HOST_CHART in page.inner_text("#serve-telemetry")
    page.wait_for_selector("#serve-table [role=gridcell]", timeout=30_000)
    rows = table_rows(page)
    assert [r["Load"] for r in rows] == ["1 in flight", "2 in flight"], rows
    assert re.search(f"Capacity so far: {capacity_of(rows)}", done), (rows, done)
    assert rows[0]["Streams in flight"] == "1.0", rows  # measured over the point's middle half
    for row in rows:
        assert row["Requests"] == row["OK"] == "2" and row["Errors"] == "0", row
        assert row["At real time"].endswith("%") and row[BUSY], row
        # the serving thread's share of the point on host work, and its mean round
        assert row["Serving thread on host"].endswith("%"), row
        assert float(row["Round (ms)"].replace(",", "")) > 0, row
        assert float(row["TTFA p95 (ms)"].replace(",", "")) > 0, row
    split = table_rows(page, "#serve-split")  # each point's TTFA by the server's own split
    assert [(r["shape"], r["load"]) for r in split] == [("closed", "1"), ("closed", "2")], split
    for row in split:
        for part in ("ttfa ms", "outside ms", "queue ms", "first-audio ms", "engine ms"):
            assert re.fullmatch(r"\d+ / \d+ / \d+", row[part]), row
    assert re.search(r"serve-[\d-]+\s*\.md", page.inner_text("#serve-files"))
    (report,) = (app.data_dir / "loadtest").glob("*.json")
    assert "--processes 2" in json.loads(report.read_text())["meta"]["command"]
    assert "200: 5" in wait_text(page, "#serve-metrics", "200: 5"), "warm-up + 2 + 2 answered"
    line = wait_text(page, "#serve-metrics", "serving thread")  # from the second look on
    assert re.search(r"serving thread on host work \d+% since the last look", line), line

    page.fill("#serve-concurrency textarea", "4")
    page.fill("#serve-requests input[type=number]", "40")
    page.press("#serve-requests input[type=number]", "Enter")
    page.click("#serve-go")
    wait_text(page, "#serve-metrics", "active slots 4 / 4")
    page.click("#serve-cancel")
    assert "Cancelled after 0/1 points" in wait_text(page, "#serve-sweep-status", "Cancelled")
    assert table_rows(page) == [], "the point under way is dropped, not half-reported"
    wait_text(page, "#serve-metrics", "active slots 0 / 4")  # the dropped requests' slots

    page.click("#serve-stop")
    assert f"Stopped the server on {url}." in wait_text(page, "#serve-status", "Stopped")
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health", trust_env=False)


def test_bad_targets_are_refused_with_the_reason(app, page):
    open_tab(page, app.url, "Serve")
    refused = attach(page, "http://example.com:8000", "not a loopback address")
    assert "⚠️ refusing 'http://example.com:8000'" in refused, refused

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        assert "⚠️ no speech server answers at" in attach(  # bound, nothing answers yet
            page, f"http://127.0.0.1:{port}", "no speech server")
        taken.listen()
        assert f"⚠️ cannot listen on 127.0.0.1:{port}" in start(page, port, "cannot listen")
    page.click("#serve-go")
    assert "start a server or attach to one first" in wait_text(
        page, "#serve-sweep-status", "⚠️")

    status = start(page)  # after every refusal the tab still serves
    assert "Serving" in status, status
    page.click("#serve-stop")
    assert "Stopped the server on" in wait_text(page, "#serve-status", "Stopped")
