"""TokenTTS: units in, streamed audio out, for many utterances in one engine at once.

A family that speaks by emitting codec tokens (Orpheus with SNAC; the lab's own voice with its
latent codec) describes its tokens with a `TokenFormat`: how a unit of text becomes a prompt,
how generated tokens become codec frames, and which token ends the audio. The loop below is the
same for every such family, so each knob (cache mode, batching, decode window) acts alike on all.

Every `step()` advances every active utterance by one token, so whoever calls it serves all of
them. Each utterance therefore keeps its own audio until its owner takes it (`pending`), its
own meter (time per stage, tokens), and the times that define its latency; nothing about one
utterance is stored on the shared engine or on this object. A stream or a batch can then be
consumed by any caller, in any interleaving, and none loses or receives another's audio.
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from lab.engine.engine import LLMEngine
from lab.engine.request import SamplingParams
from lab.metrics.timers import STEP_STAGE, RequestMeter, shared_stage
from lab.stream.codec_stream import AudioChunk, Codec, StreamingDecoder, StreamWindow
from lab.turns import Shared


def limit_note(tokens: int) -> str:
    """What an utterance stopped at its limit of `tokens` leaves in the notes: once per limit
    however many utterances reach it, since the notes travel with every request's result and
    a server that kept one per utterance carried thousands of copies into each."""
    return (f"an utterance reached its limit of {tokens} tokens before its end token and was "
            "stopped there")


ROUND_WINDOW = 16
"""Steps the engine's round time is averaged over (`TokenTTS.round_s`): long enough that one
step carrying a prompt does not shut the admission gate, short enough to follow a burst."""


class FormatError(ValueError):
    """An engine or codec that does not fit the family's token format."""


class Assembler(Protocol):
    def feed(self, tokens: Sequence[int]) -> list[list[int]]:
        """The codec frames completed by these tokens."""


class TokenFormat(Protocol):
    """How one family's units, tokens and codec frames relate."""

    end: int             # the token that ends an utterance's audio
    codebook_size: int   # what its codec must decode
    vocab_needed: int    # the smallest LM vocabulary that holds its tokens

    def prompt(self, unit, voice: str | None) -> list[int]:
        """Prompt ids for one unit (a sentence's text or phonemes); bad input raises."""

    def assembler(self) -> Assembler:
        """A fresh per-utterance collector of frames from tokens."""


@dataclass
class Utterance:
    """One submitted text: its audio so far, what it cost, and the times that define latency."""

    request_id: str
    unit: object
    voice: str | None
    submitted: float
    assembler: Assembler
    meter: RequestMeter | None = None
    chunks: list[AudioChunk] = field(default_factory=list)
    pending: deque[AudioChunk] = field(default_factory=deque)
    first_audio: float | None = None
    done: float | None = None

    def has_news(self) -> bool:
        """Audio its owner has not taken yet, or its end."""
        return bool(self.pending) or self.done is not None

    @property
    def ttfa_ms(self) -> float | None:
        return None if self.first_audio is None else (self.first_audio - self.submitted) * 1e3

    def audio(self) -> np.ndarray:
        parts = [c.audio.numpy() for c in sorted(self.chunks, key=lambda c: c.index)]
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)


class TokenTTS:
    """Runs units through the serving engine and the streaming codec.

    Each `step()` runs one engine step (every active utterance gains a token), turns finished
    frames into codec input, and decodes all windows that became due in one batched call.
    The engine should carry the family's constraint as its logits processor; without one,
    invalid tokens are skipped, not spoken.

    `admit_lead_s` > 0 trades a new stream's wait for the real time of those already playing:
    new streams go in one a step, and none while any stream past its first chunk holds less
    audio than that (but one when nothing else is in flight), so a burst of arrivals queues
    instead of slowing every stream below real time. 0 admits whoever fits a free slot.
    `admit_round_s` > 0 holds new streams the same way while the engine's recent rounds
    (`round_s`) took longer than that: a ceiling on streams set by the GPU's pace, not by how
    many slots memory allowed. Rounds are timed on the decoder's clock.
    """

    def __init__(self, engine: LLMEngine, codec: Codec, fmt: TokenFormat, *,
                 window: StreamWindow | None = None, side_stream: bool = False,
                 sampling: SamplingParams | None = None, admit_lead_s: float = 0.0,
                 admit_round_s: float = 0.0) -> None:
        if engine.vocab_size < fmt.vocab_needed:
            raise FormatError(f"the LM's vocabulary ({engine.vocab_size}) is too small for the "
                              f"token format ({fmt.vocab_needed} ids needed)")
        if codec.codebook_size != fmt.codebook_size:
            raise FormatError(f"codec codebook ({codec.codebook_size}) differs from the "
                              f"format's ({fmt.codebook_size})")
        self.engine, self.codec, self.format = engine, codec, fmt
        self.decoder = StreamingDecoder(codec, window or StreamWindow(), side_stream)
        self.sampling = sampling or SamplingParams()
        self.admit_lead_s, self.admit_round_s = admit_lead_s, admit_round_s
        self.round_s = 0.0  # the recent round: a step, averaged over the last ROUND_WINDOW
        self.held_steps = 0  # steps the admission gate was shut (`_gate`)
        self.utterances: dict[str, Utterance] = {}
        self.notes: list[str] = []  # stop rules that fired, for the run's fallback notes
        self.n_steps = 0

    @property
    def sample_rate(self) -> int:
        return self.codec.sample_rate

    def submit(self, unit, voice: str | None = None, sampling: SamplingParams | None = None,
               meter: RequestMeter | None = None) -> str:
        """Queue one utterance; returns its id. Bad input raises the format's error."""
        prompt = self.format.prompt(unit, voice)
        params = sampling or self.sampling
        stops = tuple(sorted({*params.stop_token_ids, self.format.end}))
        params = dataclasses.replace(params, stop_token_ids=stops)
        rid = self.engine.add_request(prompt, params)
        self.utterances[rid] = Utterance(rid, unit, voice, time.perf_counter(),
                                         self.format.assembler(), meter)
        self.decoder.open(rid)
        return rid

    def abort(self, request_id: str) -> None:
        """Stop an utterance now, free its slot and forget it; its owner gave up on it."""
        if self.engine.abort(request_id):
            self.decoder.close(request_id)
        self.utterances.pop(request_id, None)

    def has_unfinished(self) -> bool:
        return self.engine.has_unfinished() or self.decoder.busy

    def _timers(self) -> list:
        return [u.meter.timer for u in self.utterances.values()
                if u.meter is not None and u.done is None]

    def step(self) -> list[AudioChunk]:
        """One engine step plus the codec work it made due; returns the audio ready now.

        Each active utterance's meter is charged the whole step (it waited for all of it) and
        credited its own new tokens.
        """
        self.n_steps += 1
        began = self.decoder.clock()
        timers = self._timers()
        chunks = self.decoder.collect()
        self.engine.gate_admission(self._gate())
        with shared_stage(timers, STEP_STAGE):
            outs = self.engine.step()
        for out in outs:
            self._take_tokens(out)
        with shared_stage(timers, "codec"):
            self.decoder.launch()
            if not self.engine.has_unfinished():
                chunks += self.decoder.collect(wait=True)
        self._time_round(began)
        return self._record(chunks)

    def _time_round(self, began: float) -> None:
        """Fold this step into `round_s`; an engine left with nothing to do has no pace, so
        the first arrivals after a quiet spell do not meet the last burst's rounds."""
        if not self.engine.has_unfinished():
            self.round_s = 0.0
            return
        self.round_s += (self.decoder.clock() - began - self.round_s) / ROUND_WINDOW

    def step_news(self) -> set[str]:
        """`step()` for streams that take turns (`lab.turns`): the ids of the utterances it
        gave audio or their end, the only ones whose `has_news` it can have turned true."""
        return {chunk.stream_id for chunk in self.step()}

    def _gate(self) -> bool | None:
        """Open while the streams keep up by every gate that is on; None (no gate) when both
        knobs are off."""
        if self.admit_lead_s <= 0 and self.admit_round_s <= 0:
            return None
        if self._keeping_up():
            return True
        self.held_steps += 1
        return False

    def _keeping_up(self) -> bool:
        """The engine's recent rounds took at most `admit_round_s`, and every stream past its
        first chunk holds `admit_lead_s` of audio (`StreamingDecoder.min_buffered_s`)."""
        if 0 < self.admit_round_s < self.round_s:
            return False
        held = self.decoder.min_buffered_s() if self.admit_lead_s > 0 else None
        return held is None or held >= self.admit_lead_s

    def _take_tokens(self, out) -> None:
        utt = self.utterances.get(out.request_id)
        if utt is None:
            return
        if utt.meter is not None:
            utt.meter.tokens += len(out.token_ids)
        frames = utt.assembler.feed(out.token_ids)
        if frames:
            self.decoder.push(out.request_id, frames)
        if out.finished:
            self.decoder.close(out.request_id)
            if out.finish_reason == "length":
                self._note(limit_note(out.n_generated))

    def _note(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _record(self, chunks: list[AudioChunk]) -> list[AudioChunk]:
        now = time.perf_counter()
        for chunk in chunks:
            utt = self.utterances.get(chunk.stream_id)
            if utt is None:  # aborted while its last window was decoding
                continue
            utt.chunks.append(chunk)
            utt.pending.append(chunk)
            if utt.first_audio is None and len(chunk.audio):
                utt.first_audio = now
                self._meter_admission(utt)
            if chunk.final:
                utt.done = now
        return chunks

    def _meter_admission(self, utt: Utterance) -> None:
        """Charge the request its first utterance's wait for an engine slot, so a server can
        tell a wait inside the engine from one for its own slots."""
        request = self.engine.requests.get(utt.request_id)
        waited = None if request is None else request.admission_wait_s
        if utt.meter is not None and utt.meter.admission_ms is None and waited is not None:
            utt.meter.admission_ms = waited * 1e3

    def run(self) -> None:
        while self.has_unfinished():
            self.step()

    def _finish(self, request_id: str) -> Utterance:
        self.engine.release(request_id)
        return self.utterances.pop(request_id)

    def synthesize(self, texts: Sequence, voice: str | None = None,
                   sampling: SamplingParams | Sequence[SamplingParams] | None = None,
                   meter: RequestMeter | None = None) -> list[np.ndarray]:
        """Whole waveforms, one per text, generated concurrently (one sampling, or one each).

        Steps until these texts are done; other utterances in the engine advance meanwhile
        and keep their audio for their own owners.
        """
        params = sampling if isinstance(sampling, (list, tuple)) else [sampling] * len(texts)
        ids = [self.submit(t, voice, p, meter) for t, p in zip(texts, params, strict=True)]
        try:
            while any(self.utterances[i].done is None for i in ids):
                self.step()
        except BaseException:
            for i in ids:
                self.abort(i)
            raise
        return [self._finish(i).audio() for i in ids]

    def stream(self, text, voice: str | None = None,
               sampling: SamplingParams | None = None,
               meter: RequestMeter | None = None,
               share: bool = False) -> Iterator[AudioChunk | Shared]:
        """One utterance's chunks in order, each as soon as it is decoded.

        Alone, it steps the engine until its next chunk. With `share`, for a caller that
        takes turns over many streams (the pipeline's worker), it never steps itself: while it
        has nothing to hand out it yields a `Shared` whose work is one step, which the caller
        runs once a round for every stream waiting on it (`lab.turns`), starting newly arrived
        streams between steps instead of after one stream's whole wait for audio.

        Closing the iterator before the end aborts the utterance and frees its slot.
        """
        rid = self.submit(text, voice, sampling, meter)
        utt = self.utterances[rid]
        turn = Shared(self.step_news, utt.has_news, rid) if share else None
        try:
            while utt.pending or utt.done is None:
                if not utt.pending:
                    if turn is None:
                        self.step()
                    else:
                        yield turn
                while utt.pending:
                    yield utt.pending.popleft()
        except BaseException:
            self.abort(rid)
            raise
        self._finish(rid)
