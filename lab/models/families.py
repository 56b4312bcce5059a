"""What each model family can do, so the UI and the pipeline can say when a knob does not apply."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    autoregressive: bool
    knobs: frozenset[str]

    def unsupported(self, changed: set[str]) -> list[str]:
        """Knobs a user changed that this family ignores, with the reason."""
        reason = ("it is not autoregressive: there is no KV cache, token sampling or "
                  "request scheduling")
        return [f"{knob} does not apply to {self.name}: {reason}"
                for knob in sorted(changed - self.knobs) if knob in AR_ONLY]


COMMON = frozenset({"model", "device", "dtype", "quant", "batch_size", "stream", "decode_interval",
                    "overlap", "crossfade_ms", "compile", "seed", "max_chars"})
AR_ONLY = frozenset({"kv_cache", "continuous_batching", "cuda_graphs", "sampling", "voice",
                     "weights"})

FAMILIES = {
    "piper-vits": Family(
        "piper-vits", "Piper VITS voice (non-autoregressive) with a HiFi-GAN vocoder",
        autoregressive=False,
        knobs=COMMON | {"noise_scale", "length_scale", "noise_w"}),
    "orpheus": Family(
        "orpheus", "Orpheus: a Llama language model emitting SNAC codec tokens",
        autoregressive=True, knobs=COMMON | AR_ONLY),
}


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; choose one of {sorted(FAMILIES)}")
    return FAMILIES[name]
