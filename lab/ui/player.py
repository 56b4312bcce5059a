"""Streaming playback the browser starts on the first chunk, with no ffmpeg anywhere.

Gradio's streaming audio re-encodes every chunk to AAC in an ffmpeg process and plays it
through HLS segments, so sound starts a second or more after the server's first byte, and
without a system ffmpeg it does not stream at all. The lab instead sends raw 16-bit PCM over
one HTTP response per run, and a small Web Audio player (`player.js`) schedules each chunk
gaplessly the moment it arrives. The browser opens that response when the button is clicked,
before the request reaches the server, so no round trip sits between the first decoded chunk
and the speaker.

A run is named by an id the browser makes. The handler that synthesizes writes chunks to the
run's `Channel`; the route below reads them. Whichever side arrives first creates the channel.
A reader that goes away (the tab closed, the fetch aborted by Cancel) sets the channel's
`cancelled` event, which the handler passes to the pipeline, so the worker stops that request.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, HTTPException
from fastapi.responses import StreamingResponse

ROUTE = "/lab/stream/{run_id}"
SCRIPT = Path(__file__).with_name("player.js")
# How long a reader waits for a run to start (a first load can take this long) and how long
# a run that is over is kept for a reader that has not come yet.
OPEN_WAIT_S = 600.0
KEEP_FINISHED_S = 60.0
OPEN_POLL_S = 0.01
_END = object()


@dataclass
class Channel:
    """One run's audio, written by the synthesizing thread and read by the HTTP route.

    A chunk wakes the reader on the server's event loop directly, with no thread in between:
    a thread hop per chunk cost tenths of a second on a busy CPU, between the first chunk
    and the browser. `ended` is set once the pipeline has let go of the request (finished,
    failed or cancelled), which is what Cancel waits for before it reports the worker free.
    """

    sample_rate: int | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    ended: threading.Event = field(default_factory=threading.Event)
    created_at: float = field(default_factory=time.monotonic)
    streamed_s: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)
    """Wall-clock times (Unix ms) of the run's milestones on the server, so the time from
    a click to the first sound can be split into where it went."""
    _items: list = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _wake: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None
    _finished: bool = False

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, time.time() * 1e3)

    def start(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self.mark("stream_start")
        self.started.set()

    def put(self, pcm: bytes) -> None:
        self.mark("first_chunk")
        self.streamed_s += len(pcm) / 2 / (self.sample_rate or 1)
        self._push(pcm)

    def released(self) -> None:
        """The pipeline has let go of the request (finished, failed or cancelled)."""
        self.mark("released")
        self.ended.set()

    def cancel(self) -> None:
        """Ask the pipeline to stop this run at its next chunk (Cancel, a reader gone)."""
        self.mark("cancelled")
        self.cancelled.set()

    def finish(self) -> None:
        """No more audio: the reader ends its response once it has sent what is queued.
        Safe to call more than once; a run that never started ends here too."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
        self.started.set()
        self._push(_END)

    def _push(self, item: object) -> None:
        with self._lock:
            self._items.append(item)
            wake = self._wake
        if wake is not None:
            loop, event = wake
            loop.call_soon_threadsafe(event.set)

    async def items(self) -> AsyncIterator[object]:
        """Everything written, in order, as it is written; ends after `finish()`."""
        event = asyncio.Event()
        with self._lock:
            self._wake = (asyncio.get_running_loop(), event)
        while True:
            event.clear()
            with self._lock:
                got, self._items = self._items, []
            for item in got:
                if item is _END:
                    return
                yield item
            if not got:
                await event.wait()

    @property
    def state(self) -> str:
        if self.cancelled.is_set():
            return "cancelled" if self.ended.is_set() else "stopping"
        if self.ended.is_set():
            return "done"
        return "streaming" if self.started.is_set() else "waiting"


class StreamHub:
    """Channels by run id, shared by the synthesize handler and the HTTP route."""

    def __init__(self) -> None:
        self._channels: dict[str, Channel] = {}
        self._lock = threading.Lock()

    def channel(self, run_id: str) -> Channel:
        """The run's channel, created by whichever side asks first."""
        if not run_id or len(run_id) > 64 or not run_id.replace("-", "").isalnum():
            raise ValueError(f"bad run id {run_id!r}")
        with self._lock:
            self._forget_stale()
            return self._channels.setdefault(run_id, Channel())

    def cancel(self, run_id: str) -> Channel | None:
        """Stop the run's synthesis (the Cancel button); None when no such run is known."""
        with self._lock:
            chan = self._channels.get(run_id)
        if chan is not None:
            chan.cancel()
        return chan

    def drop(self, run_id: str) -> None:
        with self._lock:
            self._channels.pop(run_id, None)

    def runs(self) -> dict[str, dict]:
        """Every known run's state and streamed seconds, for `GET /lab/runs`."""
        with self._lock:
            items = list(self._channels.items())
        return {rid: {"state": c.state, "streamed_s": round(c.streamed_s, 3), **c.marks}
                for rid, c in items}

    def _forget_stale(self) -> None:
        """Runs over for a while that nobody came to read (an API client without the
        player, a tab closed mid-run)."""
        now = time.monotonic()
        stale = [rid for rid, c in self._channels.items()
                 if (c.ended.is_set() or c.cancelled.is_set())
                 and now - c.created_at > KEEP_FINISHED_S]
        for rid in stale:
            del self._channels[rid]


async def _pcm(chan: Channel) -> AsyncIterator[bytes]:
    """Chunks as they are written; a reader that leaves early cancels the run. The run stays
    in the hub either way (its handler must still find it cancelled, and `/lab/runs` shows
    it) until it is stale."""
    done = False
    try:
        async for item in chan.items():
            yield item
        done = True
    finally:
        if not done:
            chan.cancel()


async def _opened(chan: Channel) -> bool:
    """Wait for the run to start; a reader that leaves while it loads cancels it."""
    deadline = time.monotonic() + OPEN_WAIT_S
    try:
        while not chan.started.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(OPEN_POLL_S)
    except asyncio.CancelledError:
        chan.cancel()
        raise
    return chan.started.is_set()


def mount(app: FastAPI, hub: StreamHub) -> None:
    """Add the PCM route, and the runs it knows, to the app that also serves the Gradio UI."""

    @app.get(ROUTE)
    async def stream(run_id: str) -> StreamingResponse:
        try:
            chan = hub.channel(run_id)
        except ValueError as err:
            raise HTTPException(status_code=400, detail=str(err)) from err
        if not await _opened(chan):
            hub.drop(run_id)
            raise HTTPException(status_code=404, detail=f"run {run_id} never started")
        headers = {"X-Sample-Rate": str(chan.sample_rate or 0), "Cache-Control": "no-store"}
        return StreamingResponse(_pcm(chan), media_type="audio/L16",
                                 headers=headers)

    @app.get("/lab/runs")
    async def runs() -> dict[str, dict]:
        return hub.runs()


def head() -> str:
    """The player's script, for the page head."""
    return f"<script>\n{SCRIPT.read_text()}\n</script>"
