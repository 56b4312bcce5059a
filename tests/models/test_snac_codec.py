"""SNAC codec: frame layout, loading errors, and windowed streaming that matches one-shot decode."""

import itertools
import math

import pytest
import torch

from lab.models.orpheus_sizing import TINY_SNAC
from lab.models.snac_codec import (
    ORPHEUS_WINDOW,
    SnacCodec,
    build_snac,
    levels_from_frames,
    load_snac,
    strip_noise,
)
from lab.stream.codec_stream import CodecError, StreamingDecoder, StreamWindow
from tests.models.conftest import Clock, check_compiled_capture

SMALL = {**TINY_SNAC, "decoder_dim": 32, "codebook_size": 16}


@pytest.fixture(scope="module")
def codec() -> SnacCodec:
    return SnacCodec(build_snac(SMALL, seed=3), noise=False)


def codes(n_streams: int, n_frames: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 16, (n_streams, n_frames, 7), generator=gen)


def snr_db(ref: torch.Tensor, test: torch.Tensor) -> float:
    return 10 * math.log10(ref.pow(2).sum() / (ref - test).pow(2).sum().clamp_min(1e-30))


def test_a_frame_is_the_code_tree_flattened_depth_first():
    frame = torch.tensor([[[0, 10, 20, 21, 11, 22, 23], [1, 12, 24, 25, 13, 26, 27]]])
    l0, l1, l2 = levels_from_frames(frame)
    assert l0.tolist() == [[0, 1]]
    assert l1.tolist() == [[10, 11, 12, 13]]
    assert l2.tolist() == [[20, 21, 22, 23, 24, 25, 26, 27]]
    with pytest.raises(CodecError):
        levels_from_frames(torch.zeros(1, 2, 6, dtype=torch.long))


def test_dummy_weights_are_seeded_and_folding_weight_norm_changes_nothing():
    a, b = build_snac(SMALL, seed=1), build_snac(SMALL, seed=1)
    assert all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
    frames = codes(1, 3)
    folded = SnacCodec(a, noise=False).decode(frames)
    assert strip_noise(b) == 4  # one noise injection per decoder block
    with torch.inference_mode():
        unfolded = b.decode(levels_from_frames(frames))[:, 0]
    assert torch.allclose(folded, unfolded, atol=1e-5)


def test_decode_shape_and_bad_codes(codec):
    audio = codec.decode(codes(2, 3))
    assert audio.shape == (2, 3 * codec.frame_samples) and codec.frame_samples == 2048
    with pytest.raises(CodecError, match="codes must lie"):
        codec.decode(torch.full((1, 2, 7), 16))


def test_missing_weights_give_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(CodecError, match="no config.json"):
        load_snac(str(tmp_path))
    with pytest.raises(CodecError, match="neither"):
        load_snac("not a model")
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    with pytest.raises(CodecError, match="local directory"):
        load_snac("hubertsiuzdak/snac_24khz")


def stream(codec, window, frames: torch.Tensor, lengths: list[int]):
    """Feed each stream one frame per step (streams end at their own length); collect chunks."""
    decoder = StreamingDecoder(codec, window)
    out = {i: [] for i in range(len(lengths))}
    first = {}
    for i in out:
        decoder.open(str(i))
    for step in range(max(lengths)):
        for i, n in enumerate(lengths):
            if step < n:
                decoder.push(str(i), frames[i, step : step + 1])
            if step == n - 1:
                decoder.close(str(i))
        for chunk in decoder.decode_due():
            out[int(chunk.stream_id)].append(chunk)
            first.setdefault(int(chunk.stream_id), step + 1)
    assert not decoder.busy
    return out, first, decoder


@pytest.mark.parametrize(
    "window,min_snr", [(StreamWindow(hop=2, left=3, right=3), 100.0), (ORPHEUS_WINDOW, 30.0)]
)
def test_streamed_chunks_join_to_the_one_shot_decode(codec, window, min_snr):
    lengths = [10, 7, 2]
    frames = codes(3, 10, seed=4)
    out, first, decoder = stream(codec, window, frames, lengths)
    for i, n in enumerate(lengths):
        chunks = out[i]
        assert [c.index for c in chunks] == list(range(len(chunks)))
        assert chunks[-1].final and not any(c.final for c in chunks[:-1])
        joined = torch.cat([c.audio for c in chunks])
        ref = codec.decode(frames[i : i + 1, :n])[0]
        assert joined.shape == ref.shape
        assert snr_db(ref, joined) >= min_snr
    assert first[0] == window.hop + window.right  # first audio waits for right context only
    assert decoder.decoded_windows > decoder.decode_calls  # streams share decode calls


def test_a_long_stream_pushed_as_lists_and_tensors_joins_to_the_one_shot_decode(codec):
    """A stream longer than the decoder's first buffer of frames (it doubles as they come), fed
    as the frame assembler's lists and as tensors, a frame or a burst at a time, decodes to
    the audio of one decode of all its frames."""
    window, n = StreamWindow(hop=2, left=3, right=3), 150
    frames, bursts = codes(1, n, seed=5), itertools.cycle([1, 3, 1, 7, 2])
    decoder = StreamingDecoder(codec, window)
    decoder.open("s")
    chunks, pushed = [], 0
    while pushed < n:
        part = frames[0, pushed:pushed + min(next(bursts), n - pushed)]
        decoder.push("s", part.tolist() if pushed % 2 else part)
        pushed += len(part)
        if pushed == n:
            decoder.close("s")
        chunks += decoder.decode_due()
    while decoder.busy:  # a stream emits one chunk a launch: drain what the bursts left
        chunks += decoder.decode_due()
    joined, ref = torch.cat([c.audio for c in chunks]), codec.decode(frames)[0]
    assert chunks[-1].final and joined.shape == ref.shape
    assert snr_db(ref, joined) >= 100.0


def test_every_chunk_costs_one_fixed_window_once_warm(codec):
    window = StreamWindow(hop=1, left=2, right=1)
    out, _, decoder = stream(codec, window, codes(1, 12), [12])
    sizes = [len(c.audio) // codec.frame_samples for c in out[0][:-1]]
    assert sizes == [1] * len(sizes)
    assert decoder.decode_calls == len(out[0])


class Mark:
    """The two things the decoder asks of a CUDA event it timed a decode with, on a machine
    without CUDA: whether the device has passed it, and the ms from a begin mark to an end."""

    def __init__(self, ms: float = 0.0, done: bool = True) -> None:
        self.ms, self.done = ms, done

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        """Passed by the time it is asked: the tests mark it done first."""

    def elapsed_time(self, end: "Mark") -> float:
        return end.ms


def test_finished_decodes_give_their_time_and_their_events_back_as_chunks_are_collected(codec):
    """A server never asks for the codec's total, so each collect folds the decodes that have
    finished into it: the decoder holds the events of the decodes in flight, not of every
    decode since it started."""
    decoder = StreamingDecoder(codec)
    spans = [(Mark(), Mark(ms, done)) for ms, done in [(1.5, True), (2.0, True), (4.0, False),
                                                       (8.0, True)]]
    decoder._spans = list(spans)
    decoder.collect()
    assert decoder._spans == spans[2:]  # the third still runs; the fourth finishes after it
    assert decoder.host_decode_ms == 3.5
    spans[2][1].done = True
    decoder.collect()
    assert decoder._spans == [] and decoder.host_decode_ms == 15.5


def test_each_window_adds_its_time_from_launch_to_hand_out_once_collected(codec):
    """A decode still running on the side stream adds nothing; once its audio is handed out,
    each of its windows adds the seconds since its launch, the lag no round shows."""
    clock = Clock()
    decoder = StreamingDecoder(codec, StreamWindow(hop=2, left=0, right=0), clock=clock)
    for sid, frames in zip("ab", codes(2, 4), strict=True):
        decoder.open(sid)
        decoder.push(sid, frames)
    decoder.launch()
    (launched,) = decoder._pending
    launched.done = Mark(done=False)  # as a CUDA event of a decode still running
    clock.now = 0.25
    assert decoder.collect() == [] and decoder.collected_windows == 0
    launched.done.done = True
    clock.now = 0.5
    assert len(decoder.collect()) == 2
    assert decoder.collected_windows == 2 and decoder.collect_lag_s == pytest.approx(1.0)


def test_stream_errors_and_empty_streams(codec):
    decoder = StreamingDecoder(codec)
    decoder.open("a")
    with pytest.raises(CodecError, match="already open"):
        decoder.open("a")
    with pytest.raises(CodecError, match="not open"):
        decoder.push("b", codes(1, 1)[0])
    with pytest.raises(CodecError, match="push takes"):
        decoder.push("a", torch.zeros(2, 5, dtype=torch.long))
    decoder.close("a")
    (chunk,) = decoder.decode_due()
    assert chunk.final and chunk.audio.numel() == 0
    with pytest.raises(CodecError):
        StreamWindow(hop=0)


def growing_stream(codec, window, frames: torch.Tensor, clock: Clock, step_s: float):
    """One stream fed a frame per step while `clock` advances `step_s` per step; its chunks."""
    decoder = StreamingDecoder(codec, window, clock=clock)
    decoder.open("s")
    chunks = []
    for step in range(frames.shape[1]):
        decoder.push("s", frames[0, step : step + 1])
        chunks += decoder.decode_due()
        clock.now += step_s
    decoder.close("s")
    chunks += decoder.decode_due()
    assert not decoder.busy
    return chunks, decoder


def test_chunks_grow_while_the_listener_has_audio_in_hand_and_join_exactly(codec):
    """Frames far faster than playback: after a first chunk of `hop` frames, chunks grow to
    `max_hop`, the codec decodes fewer windows, and the joined audio is still the one-shot
    decode (each frame keeps its context either side)."""
    frames = codes(1, 40, seed=7)
    ref = codec.decode(frames)[0]
    fixed, fixed_decoder = growing_stream(codec, StreamWindow(hop=1, left=3, right=3), frames,
                                          Clock(), 0.0)
    window = StreamWindow(hop=1, left=3, right=3, max_hop=8)
    assert window.hops == (1, 2, 4, 8) and window.frames == 14
    grown, decoder = growing_stream(codec, window, frames, Clock(), 0.0)
    sizes = [len(c.audio) // codec.frame_samples for c in grown]
    assert sizes[0] == 1 and max(sizes) == 8 and set(sizes[:-1]) <= set(window.hops)
    assert decoder.decoded_windows < fixed_decoder.decoded_windows / 3
    for chunks in (fixed, grown):
        joined = torch.cat([c.audio for c in chunks])
        assert joined.shape == ref.shape and snr_db(ref, joined) >= 100.0


def test_chunks_stay_small_when_frames_come_at_playback_speed(codec):
    """A stream generated just at real time never holds more audio than the guard, so it keeps
    emitting `hop` frames: growing would leave its listener waiting."""
    window = StreamWindow(hop=1, left=2, right=2, max_hop=8)
    frame_s = codec.frame_samples / codec.sample_rate
    chunks, _ = growing_stream(codec, window, codes(1, 30, seed=8), Clock(), frame_s)
    sizes = [len(c.audio) // codec.frame_samples for c in chunks[:-1]]
    assert sizes == [1] * len(sizes)


def test_a_smaller_guard_grows_chunks_sooner_and_decodes_fewer_windows(codec):
    """Frames a little faster than playback: a listener's lead builds up slowly, so with the
    default guard the stream keeps emitting single frames longer; with a guard of one frame's
    audio its chunks grow sooner, the codec decodes fewer windows, and both join exactly."""
    frames, frame_s = codes(1, 40, seed=12), codec.frame_samples / codec.sample_rate
    out = {}
    for guard in (0.25, frame_s):
        window = StreamWindow(hop=1, left=3, right=3, max_hop=8, guard_s=guard)
        chunks, decoder = growing_stream(codec, window, frames, Clock(), frame_s / 1.5)
        out[guard] = (chunks, decoder.decoded_windows,
                      [len(c.audio) // codec.frame_samples for c in chunks])
    (wide, wide_windows, wide_sizes), (tight, tight_windows, tight_sizes) = out.values()
    first_grown = [next(i for i, n in enumerate(sizes) if n > 1)
                   for sizes in (wide_sizes, tight_sizes)]
    assert first_grown[1] < first_grown[0] and tight_windows < wide_windows
    ref = codec.decode(frames)[0]
    for chunks in (wide, tight):
        assert snr_db(ref, torch.cat([c.audio for c in chunks])) >= 100.0
    with pytest.raises(CodecError, match="guard_s=-0.1 is negative"):
        StreamWindow(guard_s=-0.1)


def test_a_max_hop_below_hop_is_refused():
    with pytest.raises(CodecError, match="max_hop=2 is below hop=4"):
        StreamWindow(hop=4, max_hop=2)
    assert StreamWindow(hop=3, max_hop=10).hops == (3, 6, 10)
    assert StreamWindow(hop=3).hops == (3,) and StreamWindow(hop=3).frames == 6


def test_a_waiting_stream_emits_when_its_lead_runs_out_without_a_new_frame(codec):
    """Frames stop coming (a slow step): once playback has eaten into the lead, the frames the
    stream held back go out, in the largest chunk size they fill."""
    clock = Clock()
    decoder = StreamingDecoder(codec, StreamWindow(hop=1, left=2, right=2, max_hop=8),
                               clock=clock)
    decoder.open("s")
    frames, sizes = codes(1, 12, seed=9), []
    for step in range(12):
        decoder.push("s", frames[0, step : step + 1])
        sizes += [len(c.audio) // codec.frame_samples for c in decoder.decode_due()]
    assert sizes == [1, 1, 1]  # three frames in hand: ahead by 0.256 s, more than the guard
    assert decoder.decode_due() == []  # it waits for a chunk of 8
    clock.now = 3 * decoder.frame_s - decoder.window.guard_s + 1e-9  # its lead is down to the guard
    (chunk,) = decoder.decode_due()
    assert len(chunk.audio) // codec.frame_samples == 4  # 7 ready: the largest size they fill


def test_a_stream_about_to_run_dry_rushes_its_next_frame_with_a_frame_less_of_right_context(
        codec):
    """The Orpheus GPU preset's window: after a 3-frame first chunk, the next frame waits for
    2 frames of right context. With a rush lead it goes with the 1 it has once its listener
    is down to that lead, even if no frame comes meanwhile, and decodes as the window one
    frame shorter on the right; the chunk after it, no longer short of audio, waits again.
    Without one it waits for the frame."""
    frames, clock, n = codes(1, 6, seed=21), Clock(), codec.frame_samples
    decoders = {rush: StreamingDecoder(codec, StreamWindow(hop=1, left=1, right=2, first=3,
                                                           rush_s=rush), clock=clock)
                for rush in (0.0, 0.1)}
    for decoder in decoders.values():
        decoder.open("s")
        decoder.push("s", frames[0, :5])
        assert [c.index for c in decoder.decode_due()] == [0]
        assert decoder.decode_due() == []  # 3 frames in hand: 0.256 s, more than 0.1
    clock.now = 3 * decoders[0.0].frame_s - 0.1 + 1e-9
    assert decoders[0.0].decode_due() == []
    (rushed,) = decoders[0.1].decode_due()
    assert torch.equal(rushed.audio, codec.decode(frames[:, 2:5])[0, n:2 * n])
    for decoder in decoders.values():
        decoder.push("s", frames[0, 5:6])
    (waited,) = decoders[0.0].decode_due()
    assert torch.equal(waited.audio, codec.decode(frames[:, 2:6])[0, n:2 * n])
    assert decoders[0.1].decode_due() == []  # frame 4 waits for its 2 frames: 0.19 s in hand


def dry_seconds(codec, rush_s: float, arrivals: list[float], round_s: float = 0.005) -> float:
    """How long a listener waits for audio after its first chunk, with the Orpheus GPU
    preset's window, frames arriving at `arrivals` (seconds) and the decoder asked for due
    chunks every `round_s`, as a serving loop does."""
    clock = Clock()
    decoder = StreamingDecoder(codec, StreamWindow(hop=1, left=1, right=2, first=3,
                                                   rush_s=rush_s), clock=clock)
    decoder.open("s")
    frames, pushed, plays_until, dry = codes(1, len(arrivals), seed=40), 0, None, 0.0
    while pushed < len(arrivals) or decoder.busy:
        clock.now += round_s
        while pushed < len(arrivals) and arrivals[pushed] <= clock.now:
            decoder.push("s", frames[0, pushed:pushed + 1])
            pushed += 1
        if pushed == len(arrivals) and not decoder.streams["s"].closed:
            decoder.close("s")
        for chunk in decoder.decode_due():
            plays_until = clock.now if plays_until is None else plays_until
            dry += max(0.0, clock.now - plays_until)
            plays_until = max(plays_until, clock.now) + len(chunk.audio) / codec.sample_rate
    return dry


def test_a_rush_lead_keeps_a_listener_playing_through_a_slow_stretch(codec):
    """Three frames at once, then five frames 0.1 s apart (slower than the 85 ms each plays),
    then faster again: waiting for each frame's full right context leaves the listener without
    audio for tens of ms just before the second chunk; with a rush lead it never runs dry."""
    arrivals = [0.01, 0.02, 0.03] + [0.03 + 0.1 * k for k in range(1, 6)] + [
        0.53 + 0.05 * k for k in range(1, 9)]
    assert dry_seconds(codec, 0.0, arrivals) > 0.03
    assert dry_seconds(codec, 0.06, arrivals) == 0.0


def test_a_rush_lead_needs_right_context_to_give_up():
    with pytest.raises(CodecError, match="rush_s=-0.1 needs"):
        StreamWindow(rush_s=-0.1)
    with pytest.raises(CodecError, match="right=0"):
        StreamWindow(right=0, rush_s=0.1)


def test_min_buffered_is_the_least_audio_a_playing_open_stream_holds(codec):
    """Streams not yet playing, streams on their first chunk and streams whose frames are all
    in count for nothing: only the streams past their start that still wait for decode steps
    tell whether the engine keeps up. A listener that ran dry waits for the next chunk and
    plays on from there."""
    clock = Clock()
    decoder = StreamingDecoder(codec, StreamWindow(hop=1, left=0, right=0), clock=clock)
    frame = decoder.frame_s
    assert decoder.min_buffered_s() is None
    for sid in ("a", "b", "c", "d"):
        decoder.open(sid)
    decoder.push("a", codes(1, 4, seed=1)[0])
    decoder.push("b", codes(1, 2, seed=2)[0])
    decoder.push("d", codes(1, 1, seed=4)[0])
    for _ in range(4):  # one chunk per stream a call: a sends 4 frames, b 2, d 1, c nothing
        decoder.decode_due()
    clock.now = frame / 2
    assert decoder.min_buffered_s() == pytest.approx(1.5 * frame)  # b: 2 frames, half played
    decoder.close("b")
    assert decoder.min_buffered_s() == pytest.approx(3.5 * frame)  # a; d holds 0.5 on its first
    clock.now = 10 * frame
    assert decoder.min_buffered_s() == 0.0  # a ran dry 6 frames ago and waits
    decoder.push("a", codes(1, 2, seed=3)[0])
    for _ in range(2):
        decoder.decode_due()
    clock.now = 10.5 * frame
    assert decoder.min_buffered_s() == pytest.approx(1.5 * frame)  # no debt from the stall


def test_a_new_streams_startup_dip_does_not_count_as_falling_behind(codec):
    """SNAC's window in the Orpheus GPU preset: a 3-frame first chunk as soon as 3 frames
    exist, then a second only once 3 more give its frame 2 of right context. Frames arriving
    a little faster than they play leave the listener nearly dry just before the second
    chunk, on every new stream: not counted; once it plays on, its audio in hand is."""
    clock = Clock()
    decoder = StreamingDecoder(codec, StreamWindow(hop=1, left=1, right=2, first=3),
                               clock=clock)
    frame = decoder.frame_s
    decoder.open("new")
    stream = decoder.streams["new"]
    for n in range(6):
        clock.now = 0.95 * frame * n  # 5% faster than real time, from the first frame
        if n == 5:  # 2.85 frames played of the first chunk's 3, before the second
            assert stream.play_until(clock.now, frame) == pytest.approx(0.15 * frame)
            assert decoder.min_buffered_s() is None
        decoder.push("new", codes(1, 1, seed=n)[0])
        decoder.decode_due()
        if n == 2:
            assert stream.emitted == 3  # the first chunk: 3 frames at once
    assert stream.chunks == 2
    assert decoder.min_buffered_s() == pytest.approx(4 * frame - 2.85 * frame)


@pytest.mark.parametrize("first", [3, 4])
def test_a_bigger_first_chunk_leaves_at_the_same_moment_and_the_rest_stay_exact(codec, first):
    """`first` frames go out when `hop + right` frames exist, as one frame would: the same
    first-audio moment, more audio in hand. The first chunk's end had less right context, so
    it alone differs from the one-shot decode; every later chunk is exact."""
    window = StreamWindow(hop=1, left=3, right=3, first=first)
    frames = codes(1, 12, seed=10)
    out, first_step, _ = stream(codec, window, frames, [12])
    chunks, n = out[0], codec.frame_samples
    assert first_step[0] == 4  # hop + right frames, whatever the first chunk emits
    assert len(chunks[0].audio) == first * n
    assert [len(c.audio) // n for c in chunks[1:-1]] == [1] * (len(chunks) - 2)
    ref = codec.decode(frames)[0]
    joined = torch.cat([c.audio for c in chunks])
    assert joined.shape == ref.shape
    assert snr_db(ref[first * n + 2 * n:], joined[first * n + 2 * n:]) >= 100.0
    # with a right context of 4 - first frames, the first chunk's end is decoded less exactly
    assert snr_db(ref[:first * n], joined[:first * n]) < 100.0
    assert snr_db(ref[:first * n], joined[:first * n]) > 20.0


@pytest.mark.parametrize("wait,first", [(1, 0), (2, 0), (2, 2)])
def test_a_first_chunk_that_waits_for_fewer_frames_leaves_sooner(codec, wait, first):
    """The first chunk goes out once `wait` frames exist instead of `hop + right`: first audio
    comes `hop + right - wait` frames sooner. Its end had less right context, so it alone differs
    from the one-shot decode; from the chunk after it every window is whole and exact."""
    window = StreamWindow(hop=1, left=3, right=3, first=first, wait=wait)
    frames = codes(1, 12, seed=11)
    out, first_step, _ = stream(codec, window, frames, [12])
    chunks, n, emitted = out[0], codec.frame_samples, first or 1
    assert first_step[0] == wait
    assert len(chunks[0].audio) == emitted * n
    assert [len(c.audio) // n for c in chunks[1:-1]] == [1] * (len(chunks) - 2)
    ref = codec.decode(frames)[0]
    joined = torch.cat([c.audio for c in chunks])
    assert joined.shape == ref.shape
    assert snr_db(ref[(emitted + 3) * n:], joined[(emitted + 3) * n:]) >= 100.0
    assert 20.0 < snr_db(ref[:emitted * n], joined[:emitted * n]) < 100.0


def test_a_first_chunk_wait_outside_the_window_is_refused():
    with pytest.raises(CodecError, match=r"wait=4 must lie in \[hop, hop \+ right\] = \[1, 3\]"):
        StreamWindow(hop=1, right=2, wait=4)
    with pytest.raises(CodecError, match=r"first=3 must lie in \[hop, wait\] = \[1, 2\]"):
        StreamWindow(hop=1, right=2, first=3, wait=2)
    assert StreamWindow(hop=1, right=2, wait=2).ready == 2
    assert StreamWindow(hop=1, right=2).ready == 3


def test_a_first_chunk_outside_the_window_is_refused():
    with pytest.raises(CodecError, match=r"first=4 must lie in \[hop, hop \+ right\] = \[1, 3\]"):
        StreamWindow(hop=1, right=2, first=4)
    assert StreamWindow(hop=2, right=2, first=2).first == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_a_compiled_snac_captures_from_batch_two_with_one_frame_windows_uncompiled():
    """As a server captures it: the compiled decode specialises a size of 1, so its graphs
    start at a bucket of 2 and one-frame windows run it eagerly, with nothing falling back; a
    batch of 1 pads to 2, and every replay gives what the uncaptured codec gives."""
    eager = SnacCodec(build_snac(SMALL, seed=3), noise=False, device="cuda")
    graphed = SnacCodec(build_snac(SMALL, seed=3), noise=False, device="cuda",
                        compile_mode="default", cuda_graphs=True, max_batch=4)
    check_compiled_capture(graphed, eager, codes)


class Observed:
    """The real codec, noting the window length of every decode it is asked for."""

    def __init__(self, codec: SnacCodec) -> None:
        self.codec, self.lengths = codec, set()

    def __getattr__(self, name: str):
        return getattr(self.codec, name)

    def decode(self, frames: torch.Tensor) -> torch.Tensor:
        self.lengths.add(frames.shape[1])
        return self.codec.decode(frames)


def window_lengths_asked(codec, window: StreamWindow, sizes: list[int], seed: int) -> set[int]:
    """The window lengths a decoder asks its codec for while streams of `sizes` frames
    arrive at random moments, their frames at random paces (some slower than playback, so
    chunks grow, wait and rush), each closed after its last frame."""
    gen = torch.Generator().manual_seed(seed)
    observed, clock = Observed(codec), Clock()
    decoder = StreamingDecoder(observed, window, clock=clock)
    starts = (torch.rand(len(sizes), generator=gen) * 0.5).tolist()
    paces = (0.02 + 0.1 * torch.rand(len(sizes), generator=gen)).tolist()
    pushed = [0] * len(sizes)
    while any(p < n for p, n in zip(pushed, sizes, strict=True)) or decoder.busy:
        clock.now += 0.01
        for i, n in enumerate(sizes):
            due = min(n, int(max(0.0, clock.now - starts[i]) / paces[i]))
            if pushed[i] == 0 and due:
                decoder.open(f"s{i}")
            if due > pushed[i]:
                decoder.push(f"s{i}", codes(1, due - pushed[i], seed=seed + i)[0])
                pushed[i] = due
                if due == n:
                    decoder.close(f"s{i}")
        decoder.decode_due()
    return observed.lengths


@pytest.mark.parametrize("window", [
    StreamWindow(hop=1, left=1, right=2, max_hop=8, first=3, rush_s=0.06),
    StreamWindow(hop=1, left=2, right=2, max_hop=8, guard_s=0.1),
    StreamWindow(hop=2, left=3, right=1, max_hop=4, wait=2),
    StreamWindow(),
], ids=["orpheus-gpu-rushed", "grown", "waited", "reference"])
def test_the_window_names_every_length_a_long_stream_decodes(codec, window):
    """A server prepares these lengths at every batch size and the rest at one: if a stream
    of at least the longest window's frames asked for another, a full batch of them would
    decode in pieces. The streams here arrive at random, at paces either side of real time."""
    sizes = [window.frames + k for k in (0, 3, 9, 17, 30, 41)]
    asked = set().union(*(window_lengths_asked(codec, window, sizes, seed) for seed in (1, 2)))
    assert asked <= window.lengths
    assert window.frames in asked and len(asked) >= len(window.lengths) - 2


def test_a_short_stream_ends_on_a_window_of_its_own_length(codec):
    window = StreamWindow(hop=1, left=1, right=2, max_hop=8, first=3)
    asked = window_lengths_asked(codec, window, [2, 6], seed=3)
    assert {2, 6} <= asked and not {2, 6} <= window.lengths


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
def test_a_rare_window_length_is_captured_once_and_replayed_in_pieces():
    """Lengths outside the common ones (only short streams end on them) are captured at the
    smallest bucket alone; a batch of one replays that graph in pieces, capturing nothing new,
    and gives what the uncaptured codec gives."""
    eager = SnacCodec(build_snac(SMALL, seed=3), noise=False, device="cuda")
    graphed = SnacCodec(build_snac(SMALL, seed=3), noise=False, device="cuda",
                        cuda_graphs=True, max_batch=8)
    graphed.capture(3, common={3})
    captured = [(1, 1), (1, 2), (1, 3), (2, 3), (4, 3), (8, 3)]
    assert graphed.graphs.captured == captured and not graphed.graphs.failure
    for b, f in ((5, 2), (8, 1), (1, 2), (6, 3)):
        frames = codes(b, f, 30 + b)
        torch.testing.assert_close(graphed.decode(frames), eager.decode(frames),
                                   atol=1e-3, rtol=1e-3)
    assert graphed.graphs.captured == captured
