"""Screenshot the lab's own voice in the Synthesize tab: its preset, its engine knobs, and a
sentence it spoke with the quality check run on it.

    python scripts/screenshot_voice.py [--out docs/screenshots/ar_voice.png]
                                       [--chromium /usr/bin/chromium]

Starts the app as `screenshots.py` does, picks the `ar-voice-cpu` preset (the trained weights
shipped in lab/data/voice), opens the knobs (the engine's section opens by itself for an
autoregressive family), synthesizes a sentence that is not in the training data and runs the
quality check on the take.
"""

from __future__ import annotations

from screenshot_kv_cache import pick
from screenshots import ROOT, app_page, screenshot_args, settle, wait_text

PRESET = "ar-voice-cpu"
SENTENCE = "Seven quiet lanterns drifted over the harbour."


def main() -> None:
    args = screenshot_args(__doc__.splitlines()[0], ROOT / "docs" / "screenshots" / "ar_voice.png")
    with app_page("runs/lab-data-voice-screenshot", args.chromium) as page:
        pick(page, "synth-preset", PRESET)
        wait_text(page, "#synth-preset-status", "Loaded preset")
        page.get_by_text("Knobs: precision, compile").first.click()
        page.wait_for_selector("#synth-kv-cache", state="visible")
        page.fill("#synth-text textarea", SENTENCE)
        page.check("#synth-slow input")  # a busy machine's estimate must not refuse the take
        page.click("#synth-go")
        wait_text(page, "#synth-status", "Done")
        page.click("#synth-quality-go")
        wait_text(page, "#synth-quality-report", "Quality")
        settle(page, "#synth-chart")
        page.screenshot(path=str(args.out), full_page=True)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
