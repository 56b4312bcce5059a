"""Live and Benchmark in headless Chromium: a sweep's requests are not counted as users', and
the sweep's table and charts stay readable in a narrow window.

The app runs as a subprocess exactly as a user starts it (see browser.py).
"""

from __future__ import annotations

from browser import open_tab, run_sweep, wait_text
from playwright.sync_api import Page

NARROW = {"width": 400, "height": 900}


def traces(page: Page) -> dict[str, int]:
    """Points per trace of the Live request chart, gaps left out."""
    return page.evaluate(
        "() => Object.fromEntries(document.querySelector('#live-latency .js-plotly-plot').data"
        ".map(t => [t.name, t.y.filter(y => y !== null).length]))")


def live_summary(page: Page, *needles: str) -> str:
    page.get_by_role("tab", name="Live").click()
    return wait_text(page, "#live-requests", *needles)


def test_live_counts_user_requests_apart_from_benchmark_traffic(app, page):
    assert "1/1 points" in run_sweep(page, app.url, "1", texts=2)

    # One warm-up and two texts, all the benchmark's: none of them is a user's request.
    summary = live_summary(page, "Benchmark traffic")
    assert "No user requests" in summary and "Benchmark traffic: 3 requests" in summary
    page.wait_for_selector("#live-latency .js-plotly-plot", timeout=30_000)
    assert traces(page)["benchmark requests, total ms"] == 3
    assert traces(page)["total ms"] == 0

    page.get_by_role("tab", name="Synthesize").click()
    page.fill("#synth-text textarea", "One request from a person.")
    page.click("#synth-go")
    assert "Done" in wait_text(page, "#synth-status", "Done", "⚠️")
    summary = live_summary(page, "1 user request")
    assert "Benchmark traffic: 3 requests" in summary
    page.wait_for_function(
        "() => document.querySelector('#live-latency .js-plotly-plot').data[0]"
        ".y.filter(y => y !== null).length === 1", timeout=30_000)
    assert traces(page) == {"total ms": 1, "TTFB ms": 1, "benchmark requests, total ms": 3}


def test_the_sweep_stays_readable_in_a_narrow_window(app, browser):
    narrow = browser.new_page()
    try:
        open_tab(narrow, app.url, "Benchmark")  # a narrow window folds the tabs into a menu
        narrow.set_viewport_size(NARROW)
        narrow.fill("#bench-values textarea", "1, 2")
        narrow.fill("#bench-n input[type=number]", "1")
        narrow.press("#bench-n input[type=number]", "Enter")
        narrow.click("#bench-go")
        assert "2/2 points" in wait_text(narrow, "#bench-status", "2/2 points", "⚠️")
        narrow.wait_for_selector("#bench-table [role=gridcell]", timeout=30_000)
        headers = narrow.evaluate(
            "() => [...document.querySelectorAll('#bench-table th')].map(th => {"
            " const s = getComputedStyle(th);"
            " return [th.innerText.trim(), th.getBoundingClientRect().height,"
            " parseFloat(s.lineHeight) || 20]; })")
        names = [name for name, _, _ in headers]
        assert names[:3] == ["Batch size", "Config (as run)", "Latency p50 (ms)"]
        assert not [n for n in names if "_" in n], names
        assert all(h < 2.5 * line for _, h, line in headers), headers
        assert narrow.evaluate(
            "() => { const w = document.querySelector('#bench-table .virtual-table-viewport');"
            " return w.scrollWidth > w.clientWidth; }"), "a narrow table should scroll sideways"
        a, b = (narrow.locator(f"#bench-chart-{c}").bounding_box() for c in "ab")
        assert b["y"] >= a["y"] + a["height"] - 1, "the charts should stack, not squeeze"
        assert a["width"] > 0.8 * NARROW["width"] - 80
    finally:
        narrow.close()
