"""The load generator: arrival processes, the stall margin, the loopback guard, the summary,
and whole runs against real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf

from lab.bench.arrivals import closed_loop, open_loop, poisson_arrivals
from lab.bench.load_report import (
    RequestRecord,
    capacity,
    ceiling_lines,
    dry_streams,
    figure,
    found_full,
    full_rates,
    host_lines,
    lag_lines,
    over_time,
    percentile,
    remark_lines,
    slowed_lines,
    summarize,
    timeline_figure,
    ttfa_parts,
)
from lab.bench.load_shares import deal
from lab.bench.loadtest import draw_texts, main, server_timing, speech_url
from lab.bench.loopback import NotLoopback, is_loopback_host, loopback_url
from lab.bench.playback import Timeline
from lab.bench.speech_stream import PcmCounter, SseCounter, WavCounter, audio_counter

# --- arrivals ---------------------------------------------------------------------------


def test_poisson_gaps_are_exponential_with_the_asked_mean():
    offsets = poisson_arrivals(rate=4.0, count=20_000, horizon_s=float("inf"), seed=7)
    gaps = np.diff([0.0, *offsets])
    assert len(offsets) == 20_000
    # standard error of the mean is 0.25 / sqrt(20000) = 0.0018: 3% is over 4 of them
    assert statistics.fmean(gaps) == pytest.approx(0.25, rel=0.03)
    # exponential: the spread equals the mean, and about 1/e of gaps exceed the mean
    assert statistics.pstdev(gaps) == pytest.approx(0.25, rel=0.05)
    assert np.mean(gaps > 0.25) == pytest.approx(np.exp(-1), abs=0.02)


def test_poisson_schedule_is_seeded_and_bounded():
    same = poisson_arrivals(2.0, 50, 100.0, seed=3)
    assert same == poisson_arrivals(2.0, 50, 100.0, seed=3)
    assert same != poisson_arrivals(2.0, 50, 100.0, seed=4)
    assert len(poisson_arrivals(2.0, 10, 100.0, seed=3)) == 10
    short = poisson_arrivals(2.0, 10_000, 5.0, seed=3)
    assert short and max(short) < 5.0 and len(short) < 40
    with pytest.raises(ValueError, match="must be > 0"):
        poisson_arrivals(0.0, 10, 1.0, seed=0)


def test_open_loop_sends_on_schedule_without_waiting_for_answers():
    starts, in_flight, peak = [], [0], [0]

    async def send(due: float) -> None:
        starts.append(time.perf_counter() - due)
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(0.5)  # a slow answer
        in_flight[0] -= 1

    began = time.perf_counter()
    asyncio.run(open_loop([0.0, 0.05, 0.1, 0.15, 0.2], send))
    took = time.perf_counter() - began
    assert len(starts) == 5 and max(starts) < 0.05  # each left when it was due
    assert peak[0] == 5  # none waited for an earlier answer
    assert took < 1.0  # back to back it would take 2.5 s


def test_closed_loop_keeps_n_in_flight_and_stops_at_its_bounds():
    in_flight, peak, sent = [0], [0], []

    async def send(due: float) -> None:
        sent.append(due)
        in_flight[0] += 1
        peak[0] = max(peak[0], in_flight[0])
        await asyncio.sleep(0.02)
        in_flight[0] -= 1

    asyncio.run(closed_loop(3, send, count=10, duration_s=60.0))
    assert len(sent) == 10 and peak[0] == 3
    sent.clear()
    began = time.perf_counter()
    asyncio.run(closed_loop(2, send, count=10_000, duration_s=0.2))
    assert time.perf_counter() - began < 0.5
    assert 4 <= len(sent) <= 30


# --- the real-time margin ---------------------------------------------------------------


def timeline(*chunks: tuple[float, float]) -> Timeline:
    line = Timeline()
    for at, seconds in chunks:
        line.add(at, seconds, size=int(seconds * 44100))
    return line


def test_margin_of_a_stream_that_keeps_ahead():
    # 0.5 s of audio every 0.4 s: just before each chunk the player still holds 0.1 s or more
    line = timeline(*((10 + 0.4 * i, 0.5) for i in range(6)))
    assert line.margin_s() == pytest.approx(0.1)
    assert line.ttfa_s(due=9.75) == pytest.approx(0.25)
    assert line.audio_s == pytest.approx(3.0)


def test_a_late_chunk_is_a_stall_however_long_it_is():
    # one second of audio, then silence until 1.5 s: half a second of stall
    line = timeline((0.0, 1.0), (1.5, 5.0), (1.6, 0.1))
    assert line.margin_s() == pytest.approx(-0.5)


def test_the_tightest_moment_says_when_a_stream_ran_dry():
    # a stall on the second piece (0.2 s held, 0.5 s wait), then the player keeps up
    line = timeline((0.0, 0.2), (0.5, 1.0), (1.2, 0.5), (1.6, 0.5))
    assert line.margin_s() == pytest.approx(-0.3) and line.tightest_s() == pytest.approx(0.5)
    # a late stall after a long first piece
    line = timeline((0.0, 1.0), (0.5, 0.2), (1.9, 1.0))
    assert line.margin_s() == pytest.approx(-0.7) and line.tightest_s() == pytest.approx(1.9)
    assert timeline((2.0, 1.5)).tightest_s() is None and Timeline().tightest_s() is None


def test_reads_without_audio_do_not_start_playback():
    line = timeline((0.0, 0.0), (0.3, 0.2), (0.4, 0.2))
    assert line.ttfa_s(due=0.0) == pytest.approx(0.3)
    assert line.margin_s() == pytest.approx(0.1)
    assert line.reads == 3
    assert timeline((2.0, 1.5)).margin_s() == 1.5  # all at once never runs dry
    assert Timeline().margin_s() is None and Timeline().ttfa_s(0.0) is None


# --- what each read carried -------------------------------------------------------------


def feed_in_pieces(counter, data: bytes, seed: int = 0) -> float:
    cuts = sorted(np.random.default_rng(seed).integers(0, len(data), 25).tolist())
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return sum(counter.feed(piece) for piece in pieces)


def test_pcm_counts_whole_samples_only():
    counter = PcmCounter(1000)
    assert counter.feed(b"\x01") == 0.0  # half a sample
    assert counter.feed(b"\x02\x03") == pytest.approx(0.001)
    assert counter.feed(b"\x04" + b"\x00" * 10) == pytest.approx(0.006)


def test_wav_stream_reads_its_rate_from_the_header():
    out = io.BytesIO()
    sf.write(out, np.zeros(16000, np.float32), 16000, format="WAV", subtype="PCM_16")
    assert feed_in_pieces(WavCounter(), out.getvalue()) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="RIFF"):
        WavCounter().feed(b"ID3\x04" + b"\x00" * 20)


def test_sse_counts_audio_deltas_across_split_events():
    pcm = np.zeros(2205, "<i2").tobytes()
    events = [{"type": "speech.audio.delta", "audio": base64.b64encode(pcm).decode()}] * 4
    events.append({"type": "speech.audio.done"})
    body = "".join(f"data: {json.dumps(e)}\r\n\r\n" for e in events).encode()
    assert feed_in_pieces(SseCounter(22050), body) == pytest.approx(0.4)
    with pytest.raises(ValueError, match="malformed"):
        SseCounter(22050).feed(b"data: {not json\n\n")
    with pytest.raises(ValueError, match="not one of"):
        audio_counter("mp3", 22050)


# --- only this machine ------------------------------------------------------------------


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://127.42.0.9:1/v1/audio/speech",
                                 "http://[::1]:8000", "http://localhost:8000",
                                 "https://LOCALHOST:443", "http://[::ffff:127.0.0.1]:80"])
def test_loopback_urls_pass(url):
    assert loopback_url(url).host


@pytest.mark.parametrize("url", ["http://10.0.0.1:8000", "http://example.com",
                                 "http://0.0.0.0:8000", "http://127.1:8000",
                                 "http://2130706433/", "http://localhost.example.com",
                                 "http://[::2]:80", "ftp://127.0.0.1", "127.0.0.1:8000"])
def test_other_urls_are_refused(url):
    with pytest.raises(NotLoopback):
        loopback_url(url)


def test_a_remote_url_is_refused_before_any_request(capsys):
    assert not is_loopback_host("192.0.2.1")
    began = time.perf_counter()
    assert main(["http://192.0.2.1:8000", "--requests", "1"]) == 2
    assert time.perf_counter() - began < 5  # no connection was tried (it would hang)
    assert "not a loopback address" in capsys.readouterr().err


def test_speech_url_adds_the_endpoint_to_a_base_url():
    assert speech_url("http://127.0.0.1:9") == "http://127.0.0.1:9/v1/audio/speech"
    assert speech_url("http://127.0.0.1:9/") == "http://127.0.0.1:9/v1/audio/speech"
    assert speech_url("http://127.0.0.1:9/custom") == "http://127.0.0.1:9/custom"


# --- the summary ------------------------------------------------------------------------


def test_percentiles_interpolate_between_ranks():
    values = list(range(1, 101))
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 95) == pytest.approx(95.05)
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


def record(ttfa: float | None, margin: float | None, error: str | None = None,
           latency: float = 2.0, audio: float = 1.0) -> RequestRecord:
    return RequestRecord(shape="closed", load=2, chars=40, due_s=0.0, lag_s=0.001,
                         ttfa_s=ttfa, latency_s=latency, audio_s=audio, bytes=44100,
                         reads=3, margin_s=margin, error=error)


def test_summary_counts_failures_against_real_time_and_leaves_them_out_of_latency():
    records = [record(0.1, 0.2), record(0.2, 0.05), record(0.3, -0.1), record(0.4, 0.3),
               record(None, None, "http_429"), record(None, None, "timeout"),
               record(0.05, 0.1, "connection_lost")]
    row = summarize(records, "closed", 2, wall_s=4.0)
    assert (row.requests, row.ok) == (7, 4)
    assert row.ttfa_p50_ms == pytest.approx(250.0)
    assert row.ttfa_p95_ms == pytest.approx(385.0)
    assert row.realtime_fraction == pytest.approx(3 / 7, abs=1e-3)
    assert row.min_margin_s == pytest.approx(-0.1)
    assert row.errors == {"http_429": 1, "timeout": 1, "connection_lost": 1}
    assert row.requests_per_s == 1.0 and row.audio_s_per_s == 1.0
    assert row.mid_streams is None and row.mid_ttfa_p95_ms is None  # all due at once


def test_the_middle_half_holds_the_built_up_concurrency_past_ramp_and_drain():
    """100 arrivals 0.1 s apart, 1 s each: 10 in flight once built up, fewer on average over
    the whole point; the middle half's TTFA leaves out the slow start and end."""
    records = [replace(record(0.5 if 25 <= i <= 74 else 2.0, 0.1, latency=1.0), due_s=i / 10)
               for i in range(100)]
    row = summarize(records, "open", 10, wall_s=10.9)
    assert row.mean_streams == pytest.approx(100 / 10.9, abs=0.01)
    assert row.mid_streams == pytest.approx(10.0, abs=0.01)
    assert row.mid_ttfa_p95_ms == pytest.approx(500.0)
    assert row.ttfa_p95_ms == pytest.approx(2000.0)


def test_server_timing_reads_durations_by_name_and_skips_the_rest():
    header = 'queue;dur=1.5, first-audio;desc="slot to chunk";dur=90, cache;desc=hit, bad;dur=x'
    assert server_timing(header) == {"queue": 1.5, "first-audio": 90.0}
    assert server_timing("") == {}


def test_ttfa_parts_split_each_point_and_put_the_rest_outside_the_server():
    timed = [replace(record(ttfa, 0.1), server_ms={"queue": queue, "first-audio": 100.0,
                                                    "engine": 80.0})
             for ttfa, queue in [(0.15, 10.0), (0.2, 20.0), (2.5, 2000.0)]]
    untimed = [replace(record(0.3, 0.1), shape="open", load=4)]
    failed = [replace(record(None, None, "timeout"), server_ms={"queue": 5.0})]
    rows = ttfa_parts(timed + untimed + failed)
    assert len(rows) == 1 and rows[0]["requests"] == 3
    row = rows[0]
    assert row["queue ms"] == "20 / 1802 / 2000"
    assert row["outside ms"] == "80 / 368 / 400"  # 150-110, 200-120, 2500-2100
    assert row["engine ms"] == "80 / 80 / 80" and row["ttfa ms"].endswith("/ 2500")
    assert ttfa_parts(untimed) == []


def test_capacity_is_the_highest_load_that_kept_every_stream_in_real_time():
    def row(shape, load, realtime, ok=10, mid=None):
        return {"shape": shape, "load": load, "requests": 10, "ok": ok, "ttfa_p95_ms": 100.0 + load,
                "realtime_fraction": realtime, "mean_streams": load / 2, "mid_streams": mid}

    rows = [row("open", 8, 1.0, mid=9.5), row("open", 4, 1.0), row("open", 16, 0.9, ok=9),
            row("open", 32, 0.5), row("closed", 1, 1.0), row("closed", 2, 1.0, ok=9)]
    assert capacity(rows) == [
        "open: every stream in real time up to 8/s (9.5 streams in flight, TTFA p95 108 ms); "
        "not at 16/s: 90.0% in real time, 1 of 10 without audio",
        "closed: every stream in real time up to 1 in flight (0.5 streams in flight, TTFA p95 "
        "101 ms); not at 2 in flight: 100.0% in real time, 1 of 10 without audio"]
    assert capacity([row("open", 4, 0.99)]) == [
        "open: no point kept every stream in real time; not at 4/s: 99.0% in real time"]
    assert capacity([row("open", 4, 1.0)]) == [
        "open: every stream in real time up to 4/s (2.0 streams in flight, TTFA p95 104 ms)"]


def test_dry_streams_say_how_short_and_when_per_point():
    dry = [replace(record(0.1, -margin), tightest_s=when)
           for margin, when in [(0.002, 0.05), (0.03, 1.2), (0.01, None)]]
    kept = [record(0.1, 0.2), replace(record(None, None, "timeout"), margin_s=-1.0)]
    other = [replace(record(0.1, 0.3), load=8)]
    (row,) = dry_streams(dry + kept + other)
    assert (row["requests"], row["dry"]) == (5, 3)
    assert row["short ms"] == "10 / 30" and row["when s"] == "0.05 / 0.62 / 1.20"
    assert dry_streams(kept + other) == []


def test_over_time_finds_the_burst_behind_a_tail():
    """Two arrivals a second for 6 s, except a burst of ten in [3, 4) whose requests wait
    longer: the slices show the burst's rate, its build-up of streams and its TTFA."""
    dues = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, *(3 + i / 10 for i in range(10)), 4.0, 4.5, 5.0, 5.5]
    records = [replace(record(0.9 if 3 <= due < 4 else 0.2, 0.1 if due < 4 else -0.1,
                              latency=1.0), due_s=due) for due in dues]
    windows = over_time(records, 1.0)
    assert [w.start_s for w in windows] == [0, 1, 2, 3, 4, 5]
    assert [w.arrivals_per_s for w in windows] == [2, 2, 2, 10, 2, 2]
    assert windows[3].ttfa_p95_ms == pytest.approx(900.0)
    assert windows[2].ttfa_p50_ms == pytest.approx(200.0)
    assert windows[3].streams == pytest.approx(6.0)  # 5.5 s of the burst, 0.5 from 2.5 s
    assert windows[1].streams == pytest.approx(2.0, abs=0.01)  # two of 1 s each, every second
    assert [w.realtime_fraction for w in windows] == [1, 1, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="width_s must be positive"):
        over_time(records, 0)


def test_the_lag_warning_names_the_points_where_the_generator_fell_behind():
    def point(load, lag_s):
        records = [replace(record(0.1, 0.2), shape="open", load=load, lag_s=lag_s)] * 3
        return [summarize(records, "open", load, wall_s=1.0)]

    assert lag_lines(point(8, 0.004) + point(16, 0.010)) == []
    lines = lag_lines(point(8, 0.004) + point(16, 0.030) + point(32, 0.900))
    assert "fell behind at 16/s (30 ms), 32/s (900 ms)" in lines[-1]
    assert "8/s" not in lines[-1] and "--processes N" in lines[-1]


def test_the_host_remark_names_the_points_whose_serving_thread_set_the_pace():
    def point(load, busy, round_ms=None):
        records = [replace(record(0.1, 0.2), shape="open", load=load)] * 3
        return [replace(summarize(records, "open", load, wall_s=1.0), host_busy=busy,
                        round_ms=round_ms)]

    assert host_lines(point(8, None) + point(16, 0.84, 5.0)) == []
    lines = host_lines(point(8, 0.5, 4.0) + point(16, 0.85) + point(32, 0.93, 8.42))
    assert "at 16/s (85%), 32/s (93%, 8.4 ms rounds)" in lines[-1]
    assert "8/s" not in lines[-1] and "faster GPU" in lines[-1]


def full_point(queue_ms: float = 100.0, refused: tuple[float, float] = (4.0, 5.0)):
    """100 arrivals 0.1 s apart, 1 s each; those due from 2 to 8 s wait `queue_ms` for a slot
    and those due within `refused` are turned away (429)."""
    def one(i: int) -> RequestRecord:
        due = i / 10
        queued = 2.0 <= due <= 8.0
        error = "http_429" if refused[0] <= due < refused[1] else None
        return replace(record(0.1, 0.2, error), shape="open", load=10.0, due_s=due,
                       latency_s=1.0, server_ms={"queue": queue_ms if queued else 0.0})
    return [one(i) for i in range(100)]


def test_full_rates_read_what_a_full_server_finished_while_it_was_full():
    start, span, arrived, served = full_rates(full_point())
    # full from the first arrival that found it so (2.0 s, a slot wait) to the last (8.0 s);
    # 60 arrived in those 6 s, 50 of them finished there (those due 1-7 s but the 10 refused)
    assert (start, span) == (2.0, 6.0)
    assert arrived == pytest.approx(10.0) and served == pytest.approx(50 / 6, abs=0.01)


def test_full_rates_need_a_full_stretch_of_some_seconds():
    assert full_rates(full_point(queue_ms=10.0, refused=(0.0, 0.0))) is None  # never full
    short = full_point(queue_ms=10.0, refused=(3.0, 7.0))  # refused only, over 3.9 s
    assert full_rates(short) is None
    refused = full_point(queue_ms=10.0, refused=(2.0, 8.0))  # a server without Server-Timing
    assert full_rates(refused)[:2] == (2.0, 5.9)


def test_a_wait_inside_the_engine_counts_as_a_full_server():
    """A server with more slots than its engine lets in fills inside the engine: its slot wait
    stays near zero while the `admission` part grows, and that is read as full too."""
    inside = [replace(r, server_ms={"queue": 0.0, "admission": r.server_ms["queue"]})
              for r in full_point()]
    assert full_rates(inside) == full_rates(full_point())
    one = record(0.1, 0.2)
    assert not found_full(replace(one, server_ms={"queue": 30.0, "admission": 10.0}))
    assert found_full(replace(one, server_ms={"queue": 30.0, "admission": 20.0}))


def test_the_ceiling_remark_names_the_points_whose_backlog_grew():
    full = summarize(full_point(), "open", 10.0, wall_s=11.0)
    kept_up = summarize(full_point(refused=(0.0, 0.0)), "open", 12.0, wall_s=11.0)
    assert kept_up.full is not None and kept_up.full[3] >= kept_up.full[2]
    lines = ceiling_lines([kept_up, full])
    assert "at 10/s, for 6.0 s from 2.0 s it finished 8.3 a second while 10.0 arrived" in lines[-1]
    assert "12/s" not in lines[-1]
    assert ceiling_lines([kept_up]) == []


def test_the_ceiling_remark_names_each_servers_point_and_a_close_backlog_in_two_decimals():
    """Rows of two servers (a sweep over slot counts) are named; a backlog that grew by less
    than a tenth of a request a second still reads as one."""
    one = replace(summarize(full_point(), "1 slot open", 8.0, wall_s=11.0),
                  full=(1.9, 14.4, 1.72, 1.66))
    two = summarize(full_point(), "2 slots open", 8.0, wall_s=11.0)
    (remark,) = ceiling_lines([one, two])[1:]
    assert "1 slot open at 8/s, for 14.4 s from 1.9 s it finished 1.66 a second while 1.72 " \
           "arrived" in remark
    assert "; 2 slots open at 8/s, for 6.0 s" in remark and "8.3 a second while 10.0" in remark
    assert ceiling_lines([one])[1].count("open") == 0  # one server: no names



def dry_point(load: float, dry: int, when_s: float | None, rounds_ms: float | None = None):
    """40 streams of an open point, `dry` of them running dry `when_s` after their first audio
    (None: a file from before that was kept)."""
    def one(i: int) -> RequestRecord:
        margin = -0.2 if i < dry else 0.3
        return replace(record(0.1, margin), shape="open", load=load, due_s=i / 10,
                       tightest_s=when_s)
    return replace(summarize([one(i) for i in range(40)], "open", load, wall_s=5.0),
                   round_ms=rounds_ms)


def test_the_slowed_remark_names_points_whose_streams_ran_dry_well_after_their_first_audio():
    """Streams that ran dry a while into their audio were slowed by the server's later rounds,
    which more slots or no ceiling cause; those that ran dry on their first piece were not, and
    one stream of forty is an unlucky stretch, not a server taking in too many."""
    late = dry_point(64.0, 12, when_s=5.2, rounds_ms=9.03)
    assert late.slowed == 12
    assert dry_point(56.0, 12, when_s=0.3).slowed == 0
    assert dry_point(56.0, 12, when_s=None).slowed is None
    assert slowed_lines([dry_point(48.0, 1, 5.2), dry_point(56.0, 12, 0.3),
                         dry_point(60.0, 12, None)]) == []
    (remark,) = slowed_lines([dry_point(56.0, 1, 5.2), late])[1:]
    assert "at 64/s 12 of 40 (9.0 ms rounds)" in remark and "56/s" not in remark
    assert "--slots N" in remark and "admit_round_ms" in remark
    assert remark_lines([dry_point(56.0, 1, 5.2), late])[-1] == remark

# --- a point spread over processes ------------------------------------------------------


def test_dealt_open_loop_shares_keep_every_arrival_and_its_sentence():
    offsets = poisson_arrivals(20, 11, 60, seed=3)
    texts = [f"sentence {i}" for i in range(11)]
    shares = deal("open", 20, texts, offsets, 3)
    assert [len(s.offsets) for s in shares] == [4, 4, 3]
    pairs = sorted(pair for s in shares for pair in zip(s.offsets, s.texts, strict=True))
    assert pairs == list(zip(offsets, texts, strict=True))
    assert all(s.users == 0 for s in shares)
    assert len(deal("open", 20, texts[:2], offsets[:2], 8)) == 2  # no share without arrivals


def test_dealt_closed_loop_shares_split_users_and_sentences():
    texts = [f"sentence {i}" for i in range(10)]
    shares = deal("closed", 5, texts, [], 2)
    assert [s.users for s in shares] == [3, 2]
    assert sorted(t for s in shares for t in s.texts) == sorted(texts)
    assert [s.users for s in deal("closed", 2, texts, [], 4)] == [1, 1]  # no idle process
    with pytest.raises(ValueError, match="processes=0 must be >= 1"):
        deal("closed", 2, texts, [], 0)


# --- whole runs against real servers on 127.0.0.1 ---------------------------------------


class LoopbackServer:
    """A real uvicorn server for any app on a free 127.0.0.1 port, in a thread of this
    process: for the failures the lab's own server does not stage on demand."""

    def __init__(self, app) -> None:
        import uvicorn

        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
        self.thread = threading.Thread(target=self.server.run,
                                       kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> LoopbackServer:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.socket.close()


@pytest.fixture(scope="module")
def voice():
    """The default voice, streaming, as `lab serve` loads it."""
    from lab import Pipeline, load_preset

    pipe = Pipeline(load_preset("cpu-default"))
    yield pipe
    pipe.close()


@contextmanager
def lab_server(pipe, options=None):
    """The lab's own server (`lab serve`) over `pipe`, on a free 127.0.0.1 port."""
    from lab.serve import LabServer

    server = LabServer(pipe, options, log_level="warning").start()
    try:
        yield server
    finally:
        server.stop(timeout=30)


@pytest.fixture(scope="module")
def voice_server(voice):
    with lab_server(voice) as server:
        yield server


def run_loadtest(url: str, tmp_path, *args: str) -> tuple[int, dict]:
    code = main([url, "--texts", "short", "--out", str(tmp_path), "--stem", "run", *args])
    report = tmp_path / "run.json"
    return code, json.loads(report.read_text()) if report.exists() else {}


def test_closed_and_open_loop_against_the_voice(voice_server, tmp_path, capsys):
    code, report = run_loadtest(voice_server.url, tmp_path, "--concurrency", "1,2",
                                "--rates", "1.5", "--requests", "4")
    assert code == 0
    rows = report["rows"]
    assert [(r["shape"], r["load"]) for r in rows] == [("closed", 1), ("closed", 2),
                                                        ("open", 1.5)]
    assert report["meta"]["model"] == "piper-vits"  # read from /v1/models
    assert all(r["ok"] == r["requests"] and not r["errors"] for r in rows)
    assert sum(r["requests"] for r in rows) == len(report["requests"]) >= 9
    for req in report["requests"]:
        assert 0 < req["ttfa_s"] < req["latency_s"]
        assert req["bytes"] == round(req["audio_s"] * 22050) * 2
        assert 1.0 < req["audio_s"] < 10.0 and req["margin_s"] is not None
        assert req["lag_s"] < 0.5
        assert list(req["server_ms"]) == ["queue", "first-audio", "engine"]
        if req["reads"] > 1:  # pcm: every read carries audio, so the tightest moment is later
            assert 0 < req["tightest_s"] < req["latency_s"]
    assert all(0 <= r["realtime_fraction"] <= 1 and r["ttfa_p50_ms"] > 0 for r in rows)
    # the server's serving thread over each point, read off its /metrics
    assert all(0 < r["host_busy"] <= 1 and r["round_ms"] > 0 for r in rows)
    html = (tmp_path / "run.html").read_text()
    assert "plotly" in html and "TTFA" in html and "<script" in html
    assert "Open-loop points over time" in html and html.count("plotly.js v") == 1
    out = capsys.readouterr().out
    assert "| shape | load |" in out and "ttfa_p95_ms" in out
    assert "Server-Timing" in out and "| outside ms |" in out
    verdicts = [f"- {line}" for line in capacity(rows)]  # whether two streams kept real
    assert [v.split(":")[0] for v in verdicts] == ["- closed", "- open"]  # time: the machine's
    assert all(v in out for v in verdicts), (verdicts, out)
    md = (tmp_path / "run.md").read_text()
    assert md.startswith(f"# Load test of {voice_server.url}/v1/audio/speech")
    assert (f"Load: `lab loadtest {voice_server.url}/v1/audio/speech --concurrency 1,2 --rates "
            "1.5 --requests 4 --duration 60 --timeout 60 --warmup 1 --texts short --seed 0 "
            "--processes 1 --format pcm --sample-rate 22050 --model piper-vits --voice default "
            "--stem run`"
            ) in md
    assert "| closed | 2 |" in md and "| outside ms |" in md and "### open 1.5/s over time" in md
    assert "| host_busy | round_ms |" in md
    assert all(v in md for v in verdicts), (verdicts, md)
    _a_note_added_to_the_json_survives_a_render(tmp_path, report)


def test_a_point_sent_from_two_processes_is_the_same_load(voice_server, tmp_path):
    """Spread over processes, the server gets the one-process schedule and sentences, and
    every request is measured from the shared start."""
    code, report = run_loadtest(voice_server.url, tmp_path, "--rates", "2", "--requests", "5",
                                "--concurrency", "3", "--processes", "2", "--warmup", "0")
    assert code == 0
    assert "--processes 2" in report["meta"]["command"]
    opened = [r for r in report["requests"] if r["shape"] == "open"]
    closed = [r for r in report["requests"] if r["shape"] == "closed"]
    schedule = poisson_arrivals(2, 5, 60, seed=0)
    assert [r["due_s"] for r in opened] == pytest.approx(schedule, abs=1e-3)
    texts = draw_texts(("short",), 5, 0)
    assert [r["chars"] for r in opened] == [len(t) for t in texts]
    assert sorted(r["chars"] for r in closed) == sorted(len(t) for t in texts)
    for req in opened + closed:
        assert req["error"] is None and 0 < req["ttfa_s"] < req["latency_s"]
        assert req["lag_s"] < 0.5 and req["audio_s"] > 1.0
    assert [r["requests"] for r in report["rows"]] == [5, 5]


def test_a_bad_process_count_is_refused_before_any_request(tmp_path, capsys):
    code, report = run_loadtest("http://127.0.0.1:9", tmp_path, "--processes", "0")
    assert code == 2 and report == {}
    assert "--processes 0 must lie in [1, 64]" in capsys.readouterr().err


def _a_note_added_to_the_json_survives_a_render(tmp_path, report):
    """`--render` rebuilds the markdown from the JSON alone: no URL, nothing sent."""
    report["notes"] = ["A remark written after the run."]
    (tmp_path / "run.json").write_text(json.dumps(report))
    (tmp_path / "run.md").unlink()
    assert main(["--render", "--out", str(tmp_path), "--stem", "run"]) == 0
    md = (tmp_path / "run.md").read_text()
    assert "A remark written after the run." in md and "| open | 1.50 |" in md


def test_render_without_a_report_and_a_run_without_a_url_say_what_is_missing(tmp_path, capsys):
    assert main(["--render", "--out", str(tmp_path), "--stem", "none"]) == 2
    assert "no report" in capsys.readouterr().err
    assert main(["--rates", "1", "--out", str(tmp_path)]) == 2
    assert "give the server's URL" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_wav_and_sse_carry_the_same_audio_as_pcm(voice_server, tmp_path):
    seconds = {}
    for fmt in ("pcm", "wav", "sse"):
        code, report = run_loadtest(voice_server.url, tmp_path / fmt, "--concurrency", "1",
                                    "--requests", "2", "--warmup", "0", "--format", fmt)
        assert code == 0 and report["rows"][0]["ok"] == 2
        seconds[fmt] = [r["audio_s"] for r in report["requests"]]
    assert seconds["pcm"] == seconds["wav"] == seconds["sse"]


def trouble_app():
    """Endpoints that fail the ways a loaded server fails."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI()

    @app.post("/busy")
    def busy() -> JSONResponse:
        return JSONResponse({"error": {"message": "full"}}, 429, headers={"Retry-After": "1"})

    @app.post("/slow")
    async def slow() -> StreamingResponse:
        async def body():
            yield b"\x00\x00" * 2205
            await asyncio.sleep(30)
            yield b"\x00\x00"

        return StreamingResponse(body(), media_type="audio/pcm")

    @app.post("/sse_error")
    async def sse_error() -> StreamingResponse:
        async def body():
            audio = base64.b64encode(b"\x00\x00" * 2205).decode()
            yield f'data: {{"type": "speech.audio.delta", "audio": "{audio}"}}\n\n'
            yield 'data: {"type": "error", "error": {"message": "out of memory"}}\n\n'

        return StreamingResponse(body(), media_type="text/event-stream")

    @app.post("/drop")
    async def drop() -> StreamingResponse:
        async def body():
            yield b"\x00\x00" * 2205
            raise RuntimeError("the server fell over mid-stream")

        return StreamingResponse(body(), media_type="audio/pcm")

    return app


@pytest.mark.parametrize(("path", "kind"), [("busy", "http_429"), ("slow", "timeout"),
                                            ("drop", "connection_lost"),
                                            ("sse_error", "stream_error")])
def test_errors_are_counted_by_kind(path, kind, tmp_path):
    fmt = "sse" if path == "sse_error" else "pcm"
    with LoopbackServer(trouble_app()) as server:
        code, report = run_loadtest(f"{server.url}/{path}", tmp_path, "--model", "m",
                                    "--warmup", "0", "--concurrency", "2", "--requests", "4",
                                    "--timeout", "0.5", "--format", fmt)
    assert code == 1  # nothing got through
    assert report["rows"][0]["errors"] == {kind: 4}
    assert report["rows"][0]["host_busy"] is None  # no lab /metrics to read it from
    assert report["rows"][0]["realtime_fraction"] == 0
    if kind != "http_429":  # the audio that came before the failure is still counted
        assert all(r["audio_s"] == pytest.approx(0.1) for r in report["requests"])


def test_an_overloaded_lab_server_answers_429_and_the_rest_are_measured(voice, tmp_path):
    from lab.serve import ServeOptions

    with lab_server(voice, ServeOptions(slots=1, queue=0)) as server:
        code, report = run_loadtest(server.url, tmp_path, "--warmup", "0", "--concurrency",
                                    "3", "--requests", "6")
    row = report["rows"][0]
    assert code == 0 and row["requests"] == 6
    assert row["ok"] >= 1 and row["errors"].get("http_429", 0) >= 1
    assert row["ok"] + row["errors"]["http_429"] == 6


def test_a_server_that_is_not_there(tmp_path, capsys):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    probe.close()
    code, report = run_loadtest(url, tmp_path, "--model", "m", "--warmup", "2")
    assert code == 1 and report == {}
    assert "got audio (connect, connect)" in capsys.readouterr().err
    code, _ = run_loadtest(url, tmp_path)
    assert code == 1 and "name it with --model" in capsys.readouterr().err


def test_the_figure_plots_ttfa_real_time_and_errors_per_shape():
    closed = [summarize([record(0.1 * c, 0.1), record(0.2 * c, -0.1, "timeout" if c > 2 else None)],
                        "closed", c, wall_s=2.0) for c in (1, 2, 4)]
    opened = [summarize([record(0.3, 0.2)], "open", 0.5, wall_s=2.0)]
    fig = figure([*closed, *opened], "a test")
    names = [trace.name for trace in fig.data]
    assert names == ["closed TTFA p50", "closed TTFA p95", "closed real time",
                     "closed errors: timeout", "open TTFA p50", "open TTFA p95",
                     "open real time", "open errors: none"]
    assert list(fig.data[0].x) == [1, 2, 4]
    assert list(fig.data[3].y) == [0, 0, 1]
    assert list(fig.data[2].y) == [0.5, 0.5, 0.5]


def test_the_timeline_figure_plots_each_open_point_over_arrival_time():
    records = [replace(record(0.1 + i / 100, 0.1), shape="open", load=load, due_s=i / load)
               for load in (2.0, 4.0) for i in range(12)]
    fig = timeline_figure([*records, record(0.2, 0.1)], 1.0)  # the closed one is left out
    names = [trace.name for trace in fig.data]
    assert names == [f"{load}/s {what}" for load in ("2", "4")
                     for what in ("arrivals", "streams", "TTFA p50", "TTFA p95")]
    assert list(fig.data[0].x) == [0.5, 1.5, 2.5, 3.5, 4.5, 5.5]
    assert list(fig.data[0].y) == [2] * 6 and list(fig.data[4].y) == [4, 4, 4]
    assert timeline_figure([record(0.2, 0.1)], 1.0) is None


def test_open_loop_over_http_sends_on_schedule_while_nothing_answers(tmp_path):
    with LoopbackServer(trouble_app()) as server:
        began = time.perf_counter()
        code, report = run_loadtest(f"{server.url}/slow", tmp_path, "--model", "m",
                                    "--warmup", "0", "--rates", "10", "--requests", "6",
                                    "--timeout", "1.5")
        took = time.perf_counter() - began
    requests = report["requests"]
    assert code == 1 and len(requests) == 6
    assert all(r["error"] == "timeout" and r["lag_s"] < 0.1 for r in requests)
    # six slow answers one after another would take 9 s; sent on schedule they overlap
    assert max(r["due_s"] for r in requests) < 1.5 and took < 6
