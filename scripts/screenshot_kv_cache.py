"""Screenshot the Synthesize tab's results with each KV cache mode, stacked in one PNG.

    python scripts/screenshot_kv_cache.py [--out docs/img/kv_cache_modes.png]
                                          [--chromium /usr/bin/chromium]

Starts the app as `screenshots.py` does, picks the `orpheus-tiny-cpu` preset, sets the
temperature to 0 (greedy, so the three takes are the same audio) and synthesizes one sentence
with `kv_cache` none, dynamic and static. Each run's result area (the engine table with ms per
decode step, tokens/s and the KV cache, and the per-step chart) is captured; without a cache
the per-step curve climbs over the utterance, with one it stays flat.
"""

from __future__ import annotations

import io
import os

from PIL import Image
from playwright.sync_api import Page
from screenshots import ROOT, app_page, screenshot_args, settle, wait_text

PRESET = "orpheus-tiny-cpu"
SENTENCE = "Hello world."
# What the engine table's KV cache column starts with for each mode: seeing it proves the
# table on screen belongs to this run, not the one before.
MODES = {"none": "none: no KV cache", "dynamic": "dynamic, grows", "static": "static, "}
WIDTH = 1100


def pick(page: Page, elem_id: str, option: str) -> None:
    page.click(f"#{elem_id} input")
    page.get_by_role("option", name=option, exact=True).click()


def set_number(page: Page, elem_id: str, value: str) -> None:
    box = f"#{elem_id} input[type=number]"
    page.fill(box, value)
    page.press(box, "Enter")


def prepare(page: Page) -> None:
    """Preset, greedy sampling, the sentence, and the engine knobs in view."""
    pick(page, "synth-preset", PRESET)
    wait_text(page, "#synth-preset-status", "Loaded preset")
    page.get_by_text("Autoregressive engine").first.click()
    set_number(page, "synth-temperature", "0")
    page.fill("#synth-text textarea", SENTENCE)


def capture(page: Page, mode: str) -> Image.Image:
    pick(page, "synth-kv-cache", mode)
    page.click("#synth-go")
    wait_text(page, "#synth-engine", MODES[mode])
    wait_text(page, "#synth-status", "Done")
    settle(page, "#synth-steps")
    shot = page.locator("#synth-results").screenshot()
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    return image.resize((WIDTH, round(image.height * WIDTH / image.width)), Image.LANCZOS)


def stack(images: list[Image.Image]) -> Image.Image:
    """One image above the other, with a thin gap, reduced to a palette to stay small."""
    gap = 12
    out = Image.new("RGB", (WIDTH, sum(i.height for i in images) + gap * (len(images) - 1)),
                    "white")
    top = 0
    for image in images:
        out.paste(image, (0, top))
        top += image.height + gap
    return out.quantize(colors=128, method=Image.Quantize.MEDIANCUT)


def main() -> None:
    args = screenshot_args(__doc__.splitlines()[0], ROOT / "docs" / "img" / "kv_cache_modes.png")
    # One torch thread: on a small shared CPU a second thread mostly waits for the first, and
    # those waits, not the cache, would shape the per-step curve.
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    with app_page("runs/lab-data-kv-screenshot", args.chromium) as page:
        prepare(page)
        stack([capture(page, mode) for mode in MODES]).save(args.out, optimize=True)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
