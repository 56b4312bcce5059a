"""Check the Orpheus family end to end through the Pipeline API on a GPU (dummy 3B weights).

    python scripts/gpu_orpheus_smoke.py

Prints the timings a user of the app would see: TTFB, tokens/s, per-stage time and fallbacks.
"""

from __future__ import annotations

from lab.config import SamplingConfig, load_preset
from lab.pipeline import Pipeline

TEXTS = ["The first stream starts here.", "A second voice joins the batch.",
         "Third request, a little longer than the others.", "Four."] * 2


def main() -> None:
    cfg = load_preset("orpheus-3b-dummy-gpu", batch_size=8,
                      sampling=SamplingConfig(max_tokens=280))
    pipe = Pipeline(cfg)
    pipe.synthesize_batch(TEXTS)
    for result in pipe.synthesize_batch(TEXTS)[:2]:
        m = result.metrics
        print(f"batch of {len(TEXTS)}: ttfb {m.ttfb_ms:.0f} ms, total {m.total_ms:.0f} ms, "
              f"{m.tokens_per_second:.0f} tokens/s, audio {m.audio_seconds:.2f} s")
    streamed = pipe.synthesize(TEXTS[0])
    m = streamed.metrics
    print(f"streamed alone: ttfb {m.ttfb_ms:.0f} ms, total {m.total_ms:.0f} ms, "
          f"{m.tokens_per_second:.0f} tokens/s")
    print("stages:", {k: round(v, 1) for k, v in m.stages.items()})
    print("fallbacks:", pipe.fallbacks)


if __name__ == "__main__":
    main()
