"""Typed configuration for a synthesis pipeline, and YAML presets validated against it.

Every knob a user can turn in the CLI, the app or a notebook is a field here, so that a
preset file, a UI form and a benchmark sweep all describe a run the same way.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path

import yaml

from lab.engine.kv_dtype import KV_DTYPES as _KV_DTYPE_TABLE
from lab.engine.kv_modes import KV_MODES
from lab.errors import ConfigError
from lab.models.registry import FAMILIES
from lab.quant import COMPILE_MODES as _COMPILE_TABLE
from lab.quant import DTYPES as _DTYPE_TABLE
from lab.quant import QUANTS

DEVICES = ("auto", "cpu", "cuda")
DTYPES = tuple(_DTYPE_TABLE)
CODEC_DTYPES = ("auto", *DTYPES)
KV_CACHES = tuple(KV_MODES)
KV_DTYPES = tuple(_KV_DTYPE_TABLE)
COMPILE_MODES = tuple(_COMPILE_TABLE)
WEIGHTS = ("real", "dummy")

CHOICES: dict[str, tuple[str, ...]] = {
    "family": tuple(FAMILIES),
    "device": DEVICES,
    "dtype": DTYPES,
    "codec_dtype": CODEC_DTYPES,
    "quant": QUANTS,
    "kv_cache": KV_CACHES,
    "kv_dtype": KV_DTYPES,
    "compile": COMPILE_MODES,
    "weights": WEIGHTS,
}


# Inclusive bounds of the numeric knobs. Validation enforces them and the app's sliders are
# built from them, so every value a preset may hold is a value the app can show.
LIMITS: dict[str, tuple[float, float]] = {
    "batch_size": (1, 512),
    "decode_interval": (1, 512),
    "max_decode_interval": (0, 512),
    "grow_lead_ms": (0, 5000),
    "rush_lead_ms": (0, 5000),
    "first_chunk_frames": (0, 640),
    "first_chunk_wait": (0, 640),
    "overlap": (0, 128),
    "crossfade_ms": (0.0, 50.0),
    "max_chars": (1, 100_000),
    "mixed_prefill": (0, 512),
    "admit_lead_ms": (0, 5000),
    "admit_round_ms": (0, 1000),
    "seed": (0, 2**31 - 1),
}
SAMPLING_LIMITS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_p": (0.01, 1.0),
    "top_k": (0, 1000),
    "repetition_penalty": (0.5, 2.0),
    "max_tokens": (1, 100_000),
}


@dataclass(frozen=True)
class SamplingConfig:
    """Per-request sampling for autoregressive families."""

    temperature: float = 0.6
    top_p: float = 0.95
    top_k: int = 50
    repetition_penalty: float = 1.1
    max_tokens: int = 1200

    def __post_init__(self) -> None:
        check_limits(self, SAMPLING_LIMITS, "sampling.")


@dataclass(frozen=True)
class PipelineConfig:
    """One run of the lab: which model, where, in what precision, and how audio is streamed.

    `decode_interval`, `overlap` and `crossfade_ms` shape streaming: the vocoder or codec is
    decoded every `decode_interval` frames over a fixed window with `overlap` frames of context
    on each side, and neighbouring chunks are blended over `crossfade_ms`. A codec stream's
    chunks grow up to `max_decode_interval` frames while its listener has audio in hand
    (`lab.stream.codec_stream.StreamWindow`), so the codec re-decodes less context per frame;
    0 keeps every chunk at `decode_interval`. "Audio in hand" is more than `grow_lead_ms`:
    lower, chunks grow sooner and the codec takes less of the GPU under load; higher, a
    listener holds more against a slow step. Its first chunk emits `first_chunk_frames`
    (0: `decode_interval`, at most `decode_interval + overlap`) at the moment the first
    `decode_interval` frames would go out, with less right context for its end: the same time
    to first audio, more audio in hand against an early slow step. `first_chunk_wait` (0:
    `decode_interval + overlap`, at least `decode_interval`) is how many frames the first
    chunk waits for: fewer bring the first audio forward, with less right context for the first
    chunk's end, and `first_chunk_frames` then lies within it. `rush_lead_ms` > 0: a stream
    past its first chunk whose listener holds no more audio than that emits its next chunk with
    one frame of right context fewer (`overlap - 1`) rather than run dry waiting for the last
    one, a frame's worth of LM steps sooner; only streams about to run dry pay for it. Off (0)
    in the presets.

    `kv_dtype`, `mixed_prefill` and `prefix_cache` shape how an autoregressive engine serves
    many streams (see `lab.engine.engine.EngineConfig` and `lab.engine.prefix`): K/V stored
    in fp8, prompt chunks of up to `mixed_prefill` tokens carried inside decode steps, and the
    tokens every prompt to a voice shares prefilled once at load and copied.
    `admit_lead_ms` > 0 lets new streams into the engine one a step, and none while a stream
    past its first chunk holds less audio than that: under a burst of arrivals, new streams
    wait for their first audio instead of every stream running dry (0: whoever fits a free
    slot). The presets leave it off (`docs/serving.md` says why). `admit_round_ms` > 0 gates
    admission by the engine's own pace instead: new streams go in one a step, and none while
    its recent rounds (a step with the codec work it made due, averaged over the last
    `ROUND_WINDOW`) took longer than that, so the streams a GPU takes in are the ones its speed
    keeps in real time, whatever the slot count (a stream at Orpheus' 82 tokens a second needs a
    round every 12.2 ms; a ceiling below that leaves room for bursts). Off in the presets.
    `codec_side_stream` decodes codec windows on a second CUDA stream, so the next decode step
    runs while they decode instead of after them. `codec_dtype` is the codec's own precision
    ("auto": the family's choice), apart from the LM's `dtype`: under many streams the codec
    takes as much of the GPU as the LM's steps, and its convolutions gain from half precision
    where the LM's does not decide it.
    """

    family: str = "piper-vits"
    model: str = "default"
    weights: str = "real"
    device: str = "auto"
    dtype: str = "fp32"
    codec_dtype: str = "auto"
    quant: str = "none"
    batch_size: int = 1
    stream: bool = True
    decode_interval: int = 24
    max_decode_interval: int = 0
    grow_lead_ms: float = 250.0
    rush_lead_ms: float = 0.0
    first_chunk_frames: int = 0
    first_chunk_wait: int = 0
    overlap: int = 12
    crossfade_ms: float = 4.0
    compile: str = "none"
    cuda_graphs: bool = False
    kv_cache: str = "static"
    kv_dtype: str = "auto"
    mixed_prefill: int = 0
    admit_lead_ms: float = 0.0
    admit_round_ms: float = 0.0
    prefix_cache: bool = False
    codec_side_stream: bool = False
    continuous_batching: bool = True
    seed: int = 0
    noise_scale: float | None = None
    length_scale: float | None = None
    noise_w: float | None = None
    max_chars: int = 5000
    voice: str = "tara"
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        for name, choices in CHOICES.items():
            value = getattr(self, name)
            if value not in choices:
                raise ConfigError(f"{name}={value!r} is not valid{did_you_mean(value, choices)}; "
                                  f"choose one of {list(choices)}")
        check_limits(self, LIMITS)
        if 0 < self.max_decode_interval < self.decode_interval:
            raise ConfigError(f"max_decode_interval={self.max_decode_interval} is below "
                              f"decode_interval={self.decode_interval}; set 0 for chunks of "
                              f"decode_interval frames only, or a value >= decode_interval")
        self._check_first_chunk()
        if self.rush_lead_ms > 0 and self.overlap == 0:
            raise ConfigError("rush_lead_ms > 0 emits a chunk with one frame of right context "
                              "fewer, so it needs overlap >= 1; set rush_lead_ms: 0 for no rush")
        if self.crossfade_ms > 0 and self.overlap == 0:
            raise ConfigError("crossfade_ms > 0 blends chunks over their shared context, so it "
                              "needs overlap >= 1; set crossfade_ms: 0 for no overlap")

    def _check_first_chunk(self) -> None:
        """The first chunk waits for at most a full window's right context and emits no more
        frames than it waited for."""
        widest = self.decode_interval + self.overlap
        if self.first_chunk_wait and not self.decode_interval <= self.first_chunk_wait <= widest:
            raise ConfigError(f"first_chunk_wait={self.first_chunk_wait} must lie in "
                              f"[decode_interval, decode_interval + overlap] = "
                              f"[{self.decode_interval}, {widest}], or be 0 for "
                              f"decode_interval + overlap")
        ready, bound = ((self.first_chunk_wait, "first_chunk_wait") if self.first_chunk_wait
                        else (widest, "decode_interval + overlap"))
        if self.first_chunk_frames and not self.decode_interval <= self.first_chunk_frames <= ready:
            raise ConfigError(f"first_chunk_frames={self.first_chunk_frames} must lie in "
                              f"[decode_interval, {bound}] = [{self.decode_interval}, {ready}], "
                              f"or be 0 for decode_interval")

    def replace(self, **changes: object) -> PipelineConfig:
        """A copy with some fields changed, validated like a preset.

        A nested mapping changes only the keys it names (`sampling={"top_k": 5}` keeps the
        other sampling values); dotted names such as `"sampling.top_k"` work too.
        """
        return from_dict(merge_overrides(to_dict(self), changes))


def check_limits(cfg: object, limits: dict[str, tuple[float, float]], prefix: str = "") -> None:
    """Raise ConfigError naming the first field of `cfg` outside its inclusive bounds."""
    for name, (low, high) in limits.items():
        value = getattr(cfg, name)
        if not low <= value <= high:
            raise ConfigError(f"{prefix}{name}={value} is out of range; it must be between "
                              f"{low:g} and {high:g}")


def did_you_mean(given: object, options: typing.Iterable[str]) -> str:
    """" (did you mean 'x'?)" for the closest options to a mistyped name, or "" when none is.

    A name that contains or is contained in an option ("quantization" and "quant", "int8" and
    "int8-weight") counts as close even when spelling similarity alone would not.
    """
    text = str(given).lower()
    options = list(options)
    close = [o for o in options if text and (text in o.lower() or o.lower() in text)]
    close = close or difflib.get_close_matches(text, options, n=2, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(o) for o in close[:3]) + "?)"


def merge_overrides(data: dict, overrides: dict) -> dict:
    """`data` with `overrides` applied: dotted keys address nested fields, mappings merge.

    So `{"sampling.temperature": 0.7}` and `{"sampling": {"temperature": 0.7}}` both change one
    sampling value and keep the rest of the preset's sampling block.
    """
    merged = dict(data)
    for key, value in overrides.items():
        head, dot, rest = str(key).partition(".")
        if dot:
            value = {rest: value}
        current = merged.get(head)
        if isinstance(value, dict) and isinstance(current, dict):
            value = merge_overrides(current, value)
        merged[head] = value
    return merged


def _coerce(name: str, hint: object, value: object) -> object:
    """Check one YAML value against its field type, naming the field when it does not fit."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(hint):
            return None
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    if dataclasses.is_dataclass(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{name} must be a mapping of {_names(hint)}")
        return _build(hint, value, prefix=f"{name}.")
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{name}={value!r} must be true or false")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name}={value!r} must be an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{name}={value!r} must be a number")
        return float(value)
    if hint is str and not isinstance(value, str):
        raise ConfigError(f"{name}={value!r} must be a string")
    return value


def _names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]


def _build(cls: type, data: dict, prefix: str = "") -> object:
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise ConfigError(
            f"unknown key {prefix + unknown[0]!r}{did_you_mean(unknown[0], hints)}; "
            f"valid keys are {_names(cls)}"
        )
    kwargs = {k: _coerce(prefix + k, hints[k], v) for k, v in data.items()}
    return cls(**kwargs)


def from_dict(data: dict) -> PipelineConfig:
    """Build a config from plain data, rejecting unknown keys and wrongly typed values."""
    if not isinstance(data, dict):
        raise ConfigError("a preset must be a mapping of config keys to values")
    return _build(PipelineConfig, data)


def to_dict(cfg: PipelineConfig) -> dict:
    return dataclasses.asdict(cfg)


# Presets ship inside the package, so a wheel or a non-editable install finds them too.
PRESET_DIR = Path(__file__).resolve().parent / "presets"


def preset_path(name: str | Path) -> Path:
    """A preset by file path or by bare name in the shipped `lab/presets/` folder."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") and path.exists():
        return path
    candidate = PRESET_DIR / f"{name}.yaml"
    if candidate.exists():
        return candidate
    raise ConfigError(f"preset {str(name)!r} not found; shipped presets are {list_presets()}")


def list_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


def parse_overrides(pairs: list[str]) -> dict:
    """`key=value` pairs, values read as YAML so numbers and booleans keep their types.

    A dotted key (`sampling.temperature=0.7`) changes one field of a nested block.
    """
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def load_preset(name: str | Path, **overrides: object) -> PipelineConfig:
    """Read a YAML preset, apply overrides, and validate the result."""
    path = preset_path(name)
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"preset {path.name} is not valid YAML: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"preset {path.name} must be a mapping of config keys to values")
    return from_dict(merge_overrides(data, overrides))
