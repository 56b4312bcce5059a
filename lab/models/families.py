"""What each model family can do, so the UI and the pipeline can say when a knob does not apply.

A family's `quantization` sentence is the one statement of what the quant knob acts on for it:
the app shows it beside the Quantization dropdown and under the knob panel, and the README
quotes it, so a user learns before a run (not from a fallback note after it) whether int8,
int4 or fp8 will touch anything.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    autoregressive: bool
    knobs: frozenset[str]
    quantization: str

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
        knobs=COMMON | {"noise_scale", "length_scale", "noise_w"},
        quantization=(
            "int8-weight, int8-dynamic, int4-weight and fp8 act on linear layers only; this "
            "voice is convolutions, so every mode falls back to unquantized weights in the "
            "chosen precision today (the run's fallback notes say so)")),
    "orpheus": Family(
        "orpheus", "Orpheus: a Llama language model emitting SNAC codec tokens",
        autoregressive=True, knobs=COMMON | AR_ONLY,
        quantization=(
            "quantization acts on the language model's linear layers (the SNAC codec stays "
            "in the chosen precision); int8-weight and int8-dynamic run on CPU or GPU, "
            "int4-weight and fp8 need a CUDA GPU and bf16 (fp8 also compute capability "
            "8.9+) and otherwise fall back to int8")),
}


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise ValueError(f"unknown model family {name!r}; choose one of {sorted(FAMILIES)}")
    return FAMILIES[name]
