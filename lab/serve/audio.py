"""Audio on the wire: 16-bit PCM bytes, a WAV header for a stream of unknown length, FLAC, SSE.

WAV and raw PCM go out chunk by chunk as the pipeline decodes them. A streamed WAV header
cannot know the length, so it says "unknown" (0xFFFFFFFF), as OpenAI's own streamed WAV
does; libsndfile, ffmpeg and browsers read such a file to its end. FLAC is sent whole once
synthesis ends: its header carries the sample count and checksum, which are known only then,
and libsndfile cannot read a FLAC stream whose header leaves them blank.
"""

from __future__ import annotations

import base64
import io
import json
import struct
from dataclasses import dataclass, field

import numpy as np
import soundfile as sf

UNKNOWN_LENGTH = 0xFFFFFFFF
STREAMED = {"wav": "audio/wav", "pcm": "audio/pcm"}
WHOLE = {"flac": "audio/flac"} if "FLAC" in sf.available_formats() else {}
FORMATS = {**STREAMED, **WHOLE}


def pcm16(audio: np.ndarray) -> bytes:
    """Float samples in [-1, 1] as signed 16-bit little-endian, clipped, as WAV and pcm carry."""
    clipped = np.clip(audio, -1.0, 1.0)
    return np.round(clipped * 32767).astype("<i2").tobytes()


def wav_header(sample_rate: int) -> bytes:
    """A mono 16-bit WAV header whose RIFF and data sizes say 'unknown length'."""
    fmt = struct.pack("<HHIIHH", 1, 1, sample_rate, sample_rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", UNKNOWN_LENGTH) + b"WAVE"
            + b"fmt " + struct.pack("<I", len(fmt)) + fmt
            + b"data" + struct.pack("<I", UNKNOWN_LENGTH))


@dataclass
class Encoder:
    """Turns one request's float chunks into the bytes of its response format."""

    format: str
    sample_rate: int
    _held: list[np.ndarray] = field(default_factory=list)

    @property
    def media_type(self) -> str:
        return FORMATS[self.format]

    def start(self) -> bytes:
        return wav_header(self.sample_rate) if self.format == "wav" else b""

    def push(self, audio: np.ndarray) -> bytes:
        if self.format in STREAMED:
            return pcm16(audio)
        self._held.append(audio)
        return b""

    def finish(self) -> bytes:
        if self.format in STREAMED:
            return b""
        out = io.BytesIO()
        audio = np.concatenate(self._held) if self._held else np.zeros(0, np.float32)
        samples = np.frombuffer(pcm16(audio), "<i2")  # the same rounding as wav and pcm
        sf.write(out, samples, self.sample_rate, format=self.format.upper(), subtype="PCM_16")
        return out.getvalue()


def sse_event(payload: dict) -> bytes:
    """One server-sent event carrying a JSON payload."""
    return f"data: {json.dumps(payload)}\n\n".encode()


def sse_audio(data: bytes) -> bytes:
    """OpenAI's `speech.audio.delta` event: a piece of the response format, base64-encoded."""
    return sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
