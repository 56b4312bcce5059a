"""How much audio each network read of a streamed `/v1/audio/speech` response carried.

A load generator needs the seconds of audio that have arrived, not the audio itself, so these
counters only count samples: raw PCM is 16-bit mono at a rate the caller states; a WAV stream
is PCM after a header that states its own rate; server-sent events carry base64 PCM in
`speech.audio.delta` events (OpenAI's SSE shape), and an `error` event ends the stream as a
failure. A sample or an event split across two reads is carried over to the next one, so no
read is credited with audio that has not fully arrived.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import json
import struct

PCM_BYTES = 2
FORMATS = ("pcm", "wav", "sse")
"""`sse` asks for PCM inside server-sent events; the others stream the bytes themselves."""


class PcmCounter:
    """Seconds of little-endian PCM in each read; a split sample waits for its other byte."""

    def __init__(self, sample_rate: int, sample_bytes: int = PCM_BYTES) -> None:
        if sample_rate <= 0:
            raise ValueError(f"sample rate {sample_rate} must be > 0")
        self.sample_rate, self.sample_bytes, self._carry = sample_rate, sample_bytes, 0

    def feed(self, data: bytes) -> float:
        total = self._carry + len(data)
        samples, self._carry = divmod(total, self.sample_bytes)
        return samples / self.sample_rate


class WavCounter:
    """A streamed WAV: RIFF chunks up to `data`, whose declared size is ignored (a server
    streaming audio it has not rendered yet cannot know it); everything after is PCM."""

    def __init__(self) -> None:
        self._head = b""
        self._pcm: PcmCounter | None = None
        self._fmt: tuple[int, int] | None = None

    def feed(self, data: bytes) -> float:
        if self._pcm is not None:
            return self._pcm.feed(data)
        self._head += data
        rest = self._parse_header()
        return 0.0 if rest is None else self._pcm.feed(rest)

    def _parse_header(self) -> bytes | None:
        """The bytes after the `data` chunk's header once it has arrived, else None."""
        head = self._head
        if len(head) >= 12 and (head[:4] != b"RIFF" or head[8:12] != b"WAVE"):
            raise ValueError("response is not a RIFF/WAVE stream")
        pos = 12
        while len(head) >= pos + 8:
            kind, size = head[pos:pos + 4], struct.unpack("<I", head[pos + 4:pos + 8])[0]
            if kind == b"data":
                if self._fmt is None:
                    raise ValueError("WAV stream has no fmt chunk before its data")
                self._pcm = PcmCounter(*self._fmt)
                return head[pos + 8:]
            if len(head) < pos + 8 + size:
                return None
            if kind == b"fmt ":
                _, channels, rate, _, _, bits = struct.unpack("<HHIIHH", head[pos + 8:pos + 24])
                self._fmt = (rate, channels * bits // 8)
            pos += 8 + size + size % 2
        return None


class SseCounter:
    """Server-sent events; each complete event with an `audio` field adds its base64 PCM."""

    def __init__(self, sample_rate: int) -> None:
        self._pcm = PcmCounter(sample_rate)
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._text = ""

    def feed(self, data: bytes) -> float:
        self._text = (self._text + self._utf8.decode(data)).replace("\r\n", "\n")
        *events, self._text = self._text.split("\n\n")
        return sum(self._pcm.feed(_event_audio(event)) for event in events)


class StreamFailed(ValueError):
    """The server reported an error inside a stream whose 200 status had already gone out."""


def _event_audio(event: str) -> bytes:
    lines = [line[5:].strip() for line in event.split("\n") if line.startswith("data:")]
    if not lines or lines == ["[DONE]"]:
        return b""
    try:
        payload = json.loads("\n".join(lines))
        audio = base64.b64decode(payload.get("audio") or "", validate=True)
    except (json.JSONDecodeError, binascii.Error, AttributeError) as err:
        raise ValueError(f"malformed speech event: {err}") from err
    if payload.get("type") == "error":
        raise StreamFailed(str(payload.get("error", payload)))
    return audio


def audio_counter(fmt: str, sample_rate: int) -> PcmCounter | WavCounter | SseCounter:
    """The counter for one response in `fmt` (one of FORMATS)."""
    if fmt == "pcm":
        return PcmCounter(sample_rate)
    if fmt == "wav":
        return WavCounter()
    if fmt == "sse":
        return SseCounter(sample_rate)
    raise ValueError(f"format {fmt!r} is not one of {FORMATS}")
