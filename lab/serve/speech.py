"""One speech request, from its slot to its last byte.

The pipeline's worker thread owns the model; a request reaches it through `Pipeline.astream`,
so concurrent requests share the worker's continuous batch and keep their own state. The
worker hands each chunk straight to the event loop (no thread waits per request, nor switches
per chunk) and it is sent as it comes, so the first bytes leave while the rest is still being
synthesized.

The first chunk is awaited before the response starts: a request that fails before any audio
(out of memory, its deadline, bad text the phonemizer refuses) still gets a proper status and
JSON error. After that the status has been sent, so a failure ends an SSE stream with an error
event, and cuts a raw audio stream off without its final chunk, which every HTTP client
reports as an incomplete response rather than a short file.

However a request ends (done, failed, client gone, deadline), its stream is closed, which
cancels the job on the worker, and its slot is released.

The response's `Server-Timing` header splits the time to first audio as the server saw it:
`queue`, waiting for a slot; `first-audio`, from the slot to the first chunk in this process;
`engine`, the pipeline's share of that, from the request reaching it to its first chunk (in an
engine process, the rest is the pipe between the two); and for a family with an engine of its
own, `admission`, the part of `engine` the request waited for that engine to let it in (a free
engine slot and an open admission gate). What a client measured beyond the first two was spent
before the server read the request, or on the way back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import torch
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from lab.frontend.errors import TextError
from lab.pipeline import AudioChunk, Pipeline, Synthesis
from lab.serve.admission import Admission, Deadline, Slot
from lab.serve.audio import Encoder, sse_audio, sse_event
from lab.serve.errors import SERVER, UNAVAILABLE, ApiError, EngineGone, invalid, retry_later
from lab.serve.metrics import ServerMetrics
from lab.serve.offer import Offer
from lab.serve.schema import SpeechRequest
from lab.worker import CancelEvent, Cancelled

log = logging.getLogger("lab.serve")

CLIENT_GONE = 499  # nginx's status for a request whose client closed the connection


@dataclass
class Served:
    """Everything a request needs from its server."""

    pipeline: Pipeline
    offer: Offer
    admission: Admission
    metrics: ServerMetrics
    deadline_s: float


class SpeechRun:
    """The pipeline's stream for one request, read on the event loop.

    The deadline sets the stream's cancel event, so the worker stops the job at its next piece
    even while a read of the stream is waiting on it.
    """

    def __init__(self, served: Served, text: str, deadline: Deadline) -> None:
        self.cancel = CancelEvent()
        self.deadline = deadline
        self.expired = False
        self._served = served
        self._stream = served.pipeline.astream(text, self.cancel)
        self._timer = asyncio.get_running_loop().call_later(max(deadline.remaining, 0),
                                                            self._expire)

    def _expire(self) -> None:
        self.expired = True
        self.cancel.set()

    async def next(self) -> AudioChunk | Synthesis:
        """The next chunk, or the whole Synthesis once the stream has ended."""
        try:
            return await anext(self._stream)
        except Exception as err:
            raise self.failure(err) from err

    def failure(self, err: Exception) -> ApiError:
        """What a failure of the stream means for the client."""
        admission = self._served.admission
        if isinstance(err, Cancelled) and self.expired:
            return admission.expired(self.deadline, "before the audio was done")
        return describe_failure(err, admission.retry_after_s)

    async def close(self) -> None:
        """Stop the job on the worker (if it still runs); no read of the stream is running
        when this is called."""
        self._timer.cancel()
        self.cancel.set()
        await self._stream.aclose()


def describe_failure(err: Exception, retry_after_s: int) -> ApiError:
    """A synthesis failure as the client sees it: out of memory is 503 (retry later; the
    server serves on), so is a pipeline process that has exited, text the frontend refuses
    is 400, anything else 500."""
    if isinstance(err, torch.cuda.OutOfMemoryError):
        reason = str(err).splitlines()[0] if str(err) else "no details"
        return retry_later(503, f"the GPU ran out of memory during this request ({reason}); "
                                "the server keeps serving the others; retry later or with "
                                "shorter input", retry_after_s, UNAVAILABLE, "out_of_memory")
    if isinstance(err, EngineGone):
        return retry_later(503, str(err), retry_after_s, UNAVAILABLE, "engine_gone")
    if isinstance(err, TextError):
        return invalid("input", f"input: {err}")
    return ApiError(500, f"synthesis failed: {type(err).__name__}: {err}", kind=SERVER,
                    code="synthesis_failed")


async def respond(served: Served, body: SpeechRequest, request: Request) -> Response:
    """Vet the request, take a slot, wait for the first audio, then stream the rest."""
    deadline = Deadline(served.deadline_s)
    served.offer.vet(body)
    slot = await served.admission.enter(deadline)
    admitted = time.monotonic()
    run = None
    try:
        if await request.is_disconnected():
            served.metrics.count(CLIENT_GONE)
            slot.release()
            return Response(status_code=CLIENT_GONE)
        run = SpeechRun(served, body.input, deadline)
        first = await run.next()
    except BaseException:
        if run is not None:
            await run.close()
        slot.release()
        raise
    now = time.monotonic()
    served.metrics.ttfa.observe(now - deadline.start)
    timing = {"queue": (admitted - deadline.start) * 1e3, "first-audio": (now - admitted) * 1e3}
    if isinstance(first, AudioChunk):
        timing["engine"] = first.elapsed_ms
        if first.admission_ms is not None:
            timing["admission"] = first.admission_ms
            served.metrics.admission_wait.observe(first.admission_ms / 1e3)
    return SpeechResponse(served, run, slot, first, body, timing)


def server_timing(parts: dict[str, float]) -> str:
    """A `Server-Timing` header value (the W3C format browsers and load tools read): the
    request's time to first audio split into its waits, so a client that measured a slow first
    chunk can tell the server's queue from the engine from the road in between."""
    return ", ".join(f"{name};dur={ms:.1f}" for name, ms in parts.items())


class SpeechResponse(StreamingResponse):
    """The streamed audio; whatever ends it, `__call__` closes the run and frees the slot,
    even when the client left before the body generator ever started."""

    def __init__(self, served: Served, run: SpeechRun, slot: Slot,
                 first: AudioChunk | Synthesis, body: SpeechRequest,
                 timing: dict[str, float]) -> None:
        self.served, self.run, self.slot = served, run, slot
        self.sse = body.stream_format == "sse"
        self.outcome = CLIENT_GONE
        encoder = Encoder(body.response_format, served.pipeline.sample_rate)
        super().__init__(self._frames(encoder, first),
                         media_type="text/event-stream" if self.sse else encoder.media_type,
                         headers={"Cache-Control": "no-cache",
                                  "X-Sample-Rate": str(encoder.sample_rate),
                                  "Server-Timing": server_timing(timing)})

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.run.close()
            self.slot.release()
            self.served.metrics.count(self.outcome)
            self.served.metrics.note_fallbacks(self.served.pipeline.fallbacks)

    def _frame(self, data: bytes) -> bytes:
        return sse_audio(data) if self.sse else data

    async def _frames(self, encoder: Encoder, item: AudioChunk | Synthesis
                      ) -> AsyncIterator[bytes]:
        """The header and first chunk go out together, then each chunk as it is decoded."""
        try:
            pending = encoder.start()
            while isinstance(item, AudioChunk):
                pending += encoder.push(item.audio)
                if pending:
                    yield self._frame(pending)
                pending = b""
                item = await self.run.next()
            pending += encoder.finish()
            if pending:
                yield self._frame(pending)
            if self.sse:
                yield sse_event(_done_event(item))
        except ApiError as err:
            self.outcome = err.status
            log.error("speech stream cut short after its headers: %s", err.message)
            if not self.sse:
                raise
            yield sse_event({"type": "error", **err.body()})
            return
        except Exception:
            self.outcome = 500
            raise
        self.outcome = 200
        self.served.metrics.finished(item, time.monotonic() - self.run.deadline.start)


def _done_event(synthesis: Synthesis) -> dict:
    """OpenAI's `speech.audio.done`. Input tokens are not counted by the lab (0); output
    tokens are the codec tokens an autoregressive family generated (0 for the others)."""
    m = synthesis.metrics
    tokens = round(m.tokens_per_second * m.total_ms / 1000) if m.tokens_per_second else 0
    return {"type": "speech.audio.done", "audio_seconds": m.audio_seconds,
            "usage": {"input_tokens": 0, "output_tokens": tokens, "total_tokens": tokens}}
