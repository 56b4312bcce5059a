"""Would a listener have heard a gap? The real-time margin of one streamed response.

A player starts when the first audio arrives and then plays one second of audio per second
of wall clock. Just before each later chunk lands it holds the audio received so far (the
chunks before this one) minus what it has played; if that is negative, it ran dry and the
listener heard silence: a stall. The margin is the smallest such balance over the stream.
Counting the landing chunk too would hide a stall: a one-second chunk followed by the next
one 1.5 s later leaves half a second of silence, whatever that second chunk holds.

Time to first audio is measured from when the request was due, not from when the client
sent it, so a load generator that falls behind its schedule cannot flatter the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Timeline:
    """What one response delivered: bytes and reads, and when each piece of audio arrived
    (`time.perf_counter()` seconds) with how long it plays.

    Reads that carried no audio (a WAV header, an SSE keep-alive) count as reads but not as
    audio: the first audio byte, not the first byte, starts playback.
    """

    times: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    bytes: int = 0
    reads: int = 0

    def add(self, at: float, seconds: float, size: int = 0) -> None:
        self.bytes += size
        self.reads += 1
        if seconds > 0:
            self.times.append(at)
            self.seconds.append(seconds)

    @property
    def audio_s(self) -> float:
        return sum(self.seconds)

    def ttfa_s(self, due: float) -> float | None:
        """Seconds from when the request was due to its first audio; None without audio."""
        return self.times[0] - due if self.times else None

    def margin_s(self) -> float | None:
        """The smallest buffer the player held over the stream (negative: it stalled).

        A stream whose audio all came in one piece never runs dry; its margin is that
        piece's length. None without audio.
        """
        tightest = self._tightest()
        return None if tightest is None else tightest[0]

    def tightest_s(self) -> float | None:
        """Seconds after the first audio when that smallest buffer was held: a stream that ran
        dry waiting for its second piece had too little in its first, one that ran dry later
        waited on a slow stretch of the server. None for audio in one piece, or none."""
        tightest = self._tightest()
        return None if tightest is None else tightest[1]

    def _tightest(self) -> tuple[float, float | None] | None:
        """(margin, seconds after the first audio at which it was held), or None."""
        if not self.times:
            return None
        first, held = self.times[0], self.seconds[0]
        margin, at = math.inf, None
        for arrived, seconds in zip(self.times[1:], self.seconds[1:], strict=True):
            if held - (arrived - first) < margin:
                margin, at = held - (arrived - first), arrived - first
            held += seconds
        return (held, None) if at is None else (margin, at)
