"""Time from a click on Synthesize to the first sound in a real browser, and where it goes.

    python scripts/first_sound.py [--runs 7] [--text "..."] [--out benchmarks/results]

Starts the app on a free port, clicks Synthesize `--runs` times in headless Chromium (the
first run is a warm-up and is not counted), and splits each click-to-first-sound into:
dispatch (click to the handler starting on the server), checks (handler to the stream
starting), first chunk (stream start to the first decoded chunk: the server's time to first
byte), transport (first chunk on the server to its bytes in the browser), and scheduling
(first byte to the first sample's scheduled start). Browser and server share a clock
because they run on one machine. Writes first_sound.json and first_sound.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

from playwright.sync_api import Page

sys.path.insert(0, str(Path(__file__).resolve().parent))
from screenshots import app_page  # noqa: E402

from lab.metrics.repeats import Spread  # noqa: E402

TEXT = "A click should be heard quickly. This sentence measures how quickly."
PARTS = ("dispatch", "checks", "first chunk", "transport", "scheduling")
STUCK_MS = 500


def one_run(page: Page, base_url: str) -> dict:
    before = page.evaluate("() => window.labPlayer.last && window.labPlayer.last.runId")
    page.click("#synth-go")
    page.wait_for_function(
        "(prev) => { const m = window.labPlayer.last; return m && m.runId !== prev && m.done; }",
        arg=before, timeout=300_000)
    m = page.evaluate("() => window.labPlayer.last")
    page.wait_for_function("() => document.querySelector('#synth-status').innerText"
                           ".includes('Done')", timeout=300_000)
    server = page.request.get(base_url + "lab/runs").json().get(m["runId"], {})
    return {**m, "server": server}


def split(run: dict) -> dict[str, float]:
    """Milliseconds per part; the parts add up to click-to-first-sound."""
    click, s = run["clickEpochMs"], run["server"]
    byte = click + run["clickToByteMs"]
    return {
        "dispatch": s["handler_start"] - click,
        "checks": s["stream_start"] - s["handler_start"],
        "first chunk": s["first_chunk"] - s["stream_start"],
        "transport": byte - s["first_chunk"],
        "scheduling": run["clickToSoundMs"] - run["clickToByteMs"],
    }


def markdown(rows: list[dict], total: Spread, parts: dict[str, Spread], command: str) -> str:
    lines = [
        "# Click to first sound in the browser (default voice, CPU)",
        "",
        f"Command: `{command}`. Machine: {platform.machine()} CPU, {len(rows)} timed runs "
        "after one warm-up, headless Chromium on the same machine. CPU times depend on the "
        "machine and its load; read the split, not the absolute figures.",
        "",
        "| part | median ms | min-max ms |",
        "|---|---:|---:|",
    ]
    for name, spread in [*parts.items(), ("click to first sound", total)]:
        lines.append(f"| {name} | {spread.median:.0f} | {spread.low:.0f}-{spread.high:.0f} |")
    lines += ["", *anomalies(rows)]
    return "\n".join(lines) + "\n"


def anomalies(rows: list[dict]) -> list[str]:
    """Runs whose bytes sat on the server: a first byte later than STUCK_MS after the first
    chunk was written, said with how many reads the browser needed for the whole take."""
    stuck = [(n, s["transport"], r["chunks"]) for n, (r, s) in
             enumerate(zip(rows, map(split, rows), strict=True), start=1)
             if s["transport"] > STUCK_MS]
    if not stuck:
        return [f"No run waited more than {STUCK_MS} ms between the server's first chunk and "
                "the browser's first byte."]
    return ["Anomalies:"] + [
        f"- run {n}: the first byte reached the browser {t:.0f} ms after the server wrote the "
        f"first chunk, and the take arrived in {c} read(s): the response was held back. "
        "Cause not established." for n, t, c in stuck]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--text", default=TEXT)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    with app_page("runs/lab-data-first-sound", args.chromium) as page:
        base = page.url
        page.fill("#synth-text textarea", args.text)
        one_run(page, base)
        runs = [one_run(page, base) for _ in range(args.runs)]
    splits = [split(r) for r in runs]
    parts = {p: Spread.of([s[p] for s in splits]) for p in PARTS}
    total = Spread.of([r["clickToSoundMs"] for r in runs])
    command = "python scripts/first_sound.py " + " ".join(sys.argv[1:])
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "first_sound.json").write_text(json.dumps(
        {"command": command, "text": args.text, "runs": runs, "splits": splits,
         "median_ms": {p: s.to_dict() for p, s in parts.items()},
         "click_to_sound_ms": total.to_dict()}, indent=2))
    md = markdown(runs, total, parts, command.strip())
    (args.out / "first_sound.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
