"""The A/B tab in headless Chromium: no vote before both clips are heard, the pair's count
beside the buttons, the baseline kept as the baseline, a render that can be cancelled, and
a ranking with intervals once votes cover three configurations.

The app runs as a subprocess exactly as a user starts it (see browser.py).
"""

from __future__ import annotations

from browser import open_tab, wait_text
from playwright.sync_api import Page

from lab.listening import Vote, VoteStore

VOTES = ("#ab-vote-x", "#ab-vote-same", "#ab-vote-y")


def play(page: Page, side: str) -> None:
    """Press the play control of player X or Y, as a listener does."""
    box = page.locator(f"#ab-{side} audio").bounding_box()
    page.mouse.click(box["x"] + 20, box["y"] + box["height"] / 2)
    page.wait_for_function(f"() => !document.querySelector('#ab-{side} audio').paused")


def force_vote(page: Page, button: str) -> None:
    """Enable a vote button behind the app's back and press it: what a script could send."""
    page.evaluate(f"() => {{ document.querySelector({button!r}).disabled = false; }}")
    page.click(button)


def body_cells(page: Page, table: str) -> list[str]:
    """The text of a Gradio table's body cells, first row first."""
    cells = f"{table} [role=gridcell]"
    page.wait_for_selector(cells, timeout=30_000)
    return [text.strip() for text in page.locator(cells).all_inner_texts()]


def disabled(page: Page, *buttons: str) -> list[bool]:
    return [page.locator(b).is_disabled() for b in buttons]


def test_a_vote_does_not_count_before_both_clips_are_heard(app, page):
    store = VoteStore(app.data_dir)
    open_tab(page, app.url, "A/B")
    page.click("#ab-render")
    assert "Play X and Y" in wait_text(page, "#ab-status", "Play X and Y", "⚠️")
    assert disabled(page, *VOTES) == [True, True, True]
    assert "no votes yet" in page.inner_text("#ab-tally")

    force_vote(page, "#ab-vote-x")
    assert "not played yet: X, Y" in wait_text(page, "#ab-status", "not played yet")
    assert len(store) == 0

    play(page, "x")
    assert "X ✓" in wait_text(page, "#ab-tally", "X ✓")
    assert disabled(page, "#ab-vote-same", "#ab-vote-y") == [True, True]
    force_vote(page, "#ab-vote-x")
    assert "not played yet: Y" in wait_text(page, "#ab-status", "not played yet: Y")
    assert len(store) == 0

    play(page, "y")
    page.wait_for_function("() => !document.querySelector('#ab-vote-y').disabled")
    assert "vote now" in page.inner_text("#ab-status")
    page.click("#ab-vote-y")
    assert "saved" in wait_text(page, "#ab-status", "saved", "⚠️")
    (vote,) = store.votes()
    assert vote.baseline.endswith("stream/24") and vote.choice == "y"

    tally = wait_text(page, "#ab-tally", "1 vote")
    assert "baseline" in tally and "candidate" in tally
    # The count is in view beside the buttons: on the same band of the page, on screen.
    box = page.locator("#ab-tally").bounding_box()
    button = page.locator("#ab-vote-y").bounding_box()
    assert box["x"] > button["x"] and abs(box["y"] - button["y"]) < button["height"]
    assert page.evaluate("() => document.querySelector('#ab-tally').getBoundingClientRect()"
                         ".bottom <= window.innerHeight")

    headers = page.locator("#ab-win-table th").all_inner_texts()
    assert [h.strip() for h in headers[:2]] == ["Baseline", "Candidate"]
    cells = body_cells(page, "#ab-win-table")
    assert cells[0].endswith("stream/24") and cells[1].endswith("stream/8 overlap=4")


def test_cancel_stops_rendering_the_pair(app, page):
    open_tab(page, app.url, "A/B")
    page.fill("#ab-text textarea", "A long passage keeps the voice busy for a while. " * 40)
    page.click("#ab-render")
    wait_text(page, "#ab-status", "Rendering the pair")
    page.click("#ab-cancel")
    assert "Cancelled" in wait_text(page, "#ab-status", "Cancelled")
    assert disabled(page, *VOTES) == [True, True, True]
    assert page.evaluate("() => { const a = document.querySelector('#ab-x audio');"
                         " return !a || !a.getAttribute('src'); }"), "the old pair is still shown"

    page.fill("#ab-text textarea", "Short again.")
    page.click("#ab-render")
    assert "Play X and Y" in wait_text(page, "#ab-status", "Play X and Y", "⚠️")


def test_the_win_table_keeps_its_headers_on_one_line_in_a_narrow_window(app, browser):
    narrow = browser.new_page()
    narrow.set_viewport_size({"width": 400, "height": 900})
    try:
        open_tab(narrow, app.url, "A/B")
        wait_text(narrow, "#ab-win-table", "Baseline")
        assert body_cells(narrow, "#ab-win-table")[0].endswith("stream/24")
        cells = narrow.evaluate(
            "() => [...document.querySelectorAll('#ab-win-table th')].map(th => {"
            " const r = th.getBoundingClientRect(); const s = getComputedStyle(th);"
            " return [th.innerText.trim(), r.height, parseFloat(s.lineHeight) || 20]; })")
        assert cells and all(h < 2.5 * line for _, h, line in cells), cells
        assert narrow.evaluate(
            "() => { const w = document.querySelector('#ab-win-table .virtual-table-viewport');"
            " return w.scrollWidth > w.clientWidth; }"), "a narrow table should scroll sideways"
    finally:
        narrow.close()


def test_votes_over_three_configs_show_a_ranking_with_intervals(app, page):
    """Runs last: it adds votes the tests above do not expect."""
    open_tab(page, app.url, "A/B")
    assert "so far" in wait_text(page, "#ab-rank-notes", "so far")
    store = VoteStore(app.data_dir)
    for x, y, choice, times in (("fp32", "bf16", "x", 3), ("bf16", "int8", "x", 4),
                                ("int8", "bf16", "same", 2)):
        for _ in range(times):
            store.record(Vote(session="seeded", text="Hi.", seed=0, config_x=x, config_y=y,
                              choice=choice, baseline=x))

    page.reload()
    open_tab(page, app.url, "A/B")
    notes = wait_text(page, "#ab-rank-notes", "configurations; intervals")
    assert "1000 resamples" in notes and "head-to-head" in notes
    headers = [h.strip() for h in page.locator("#ab-rank-table th").all_inner_texts()]
    assert headers[:5] == ["Rank", "Config", "Elo", "95% CI low", "95% CI high"]
    cells = body_cells(page, "#ab-rank-table")
    rows = [cells[i:i + len(headers)] for i in range(0, len(cells), len(headers))]
    ranked = [row[1] for row in rows]
    assert [c for c in ranked if c in ("fp32", "bf16", "int8")] == ["fp32", "bf16", "int8"]
    for row in rows:
        low, elo, high = (float(v) for v in (row[3], row[2], row[4]))
        assert low <= elo <= high
    page.wait_for_selector("#ab-rank-chart .js-plotly-plot", timeout=30_000)
    assert "Ranking across configurations" in page.inner_text("#ab-rank-chart")
