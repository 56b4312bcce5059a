"""Orpheus adapter: prompt format, audio-token layout, constraint, and text -> streamed audio."""

import importlib.util
import json
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from lab.config import PipelineConfig, SamplingConfig
from lab.engine.engine import EngineConfig, LLMEngine
from lab.engine.llm import LM, LMConfig
from lab.engine.request import Request, SamplingParams
from lab.models.orpheus_backend import TINY_SNAC, build_tts
from lab.models.orpheus_format import (
    ORPHEUS,
    VOICES,
    AudioTokenConstraint,
    ByteTokenizer,
    FrameAssembler,
    OrpheusError,
    OrpheusFormat,
    OrpheusLayout,
    dummy_tokenizer,
    format_prompt,
    frames_from_tokens,
    load_tokenizer,
)
from lab.models.snac_codec import SnacCodec, build_snac
from lab.models.token_backend import decode_mode, engine_config, sampling_params
from lab.models.token_tts import ROUND_WINDOW, TokenTTS, limit_note
from lab.stream.codec_stream import StreamWindow
from tests.models.conftest import Clock

LAYOUT = OrpheusLayout.compact(16)
ROOT = Path(__file__).resolve().parents[2]


def tiny_tts(**engine_kw) -> TokenTTS:
    cfg = LMConfig(
        vocab_size=LAYOUT.vocab_needed,
        dim=32,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        intermediate_size=64,
        max_seq_len=256,
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        lm = LM(cfg).eval().requires_grad_(False)
    engine = LLMEngine(lm, EngineConfig(**{"n_slots": 3, "max_len": 160, **engine_kw}),
                       logits_processor=AudioTokenConstraint(LAYOUT))
    codec = SnacCodec(
        build_snac({**TINY_SNAC, "decoder_dim": 32, "codebook_size": 16}), noise=False
    )
    return TokenTTS(
        engine,
        codec,
        OrpheusFormat(ByteTokenizer(LAYOUT.bos), LAYOUT),
        window=StreamWindow(hop=1, left=1, right=2),
        sampling=SamplingParams(max_tokens=7 * 6, seed=0),
    )


def test_prompt_wraps_voice_and_text_in_the_orpheus_special_tokens():
    ids = format_prompt(ByteTokenizer(ORPHEUS.bos), "Hi", "tara")
    assert ids[:2] == [128259, 128000]
    assert bytes(ids[2:-4]).decode() == "tara: Hi"
    assert ids[-4:] == [128009, 128260, 128261, 128257]
    assert format_prompt(ByteTokenizer(ORPHEUS.bos), "Hi", None)[2:-4] == list(b"Hi")
    assert set(VOICES) == {"tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe"}
    with pytest.raises(OrpheusError, match="unknown Orpheus voice"):
        format_prompt(ByteTokenizer(ORPHEUS.bos), "Hi", "bob")
    with pytest.raises(OrpheusError, match="empty"):
        format_prompt(ByteTokenizer(ORPHEUS.bos), "  ", "tara")


def test_audio_tokens_carry_a_code_at_each_of_seven_positions():
    assert ORPHEUS.audio_token(0, 0) == 128266  # <custom_token_10>
    assert ORPHEUS.audio_token(3, 5) == 128266 + 3 * 4096 + 5
    assert ORPHEUS.vocab_needed == 128266 + 7 * 4096
    frame = [11, 22, 33, 44, 55, 66, 77]
    tokens = [ORPHEUS.audio_token(i, c) for i, c in enumerate(frame)]
    noisy = [128257, *tokens[:3], 999, *tokens[3:], *tokens[:2], 128258]
    assembler = FrameAssembler(ORPHEUS)
    assert assembler.feed(noisy) == [frame]
    assert assembler.skipped == 2 and assembler.partial == [11, 22]  # start-of-speech and 999
    assert frames_from_tokens(tokens[:6]).shape == (0, 7)
    assert ORPHEUS.code_of(ORPHEUS.audio_token(1, 7), 0) is None


def test_the_constraint_allows_only_the_next_positions_codes_and_stop_at_frame_ends():
    constraint = AudioTokenConstraint(LAYOUT)
    requests = [Request([1]), Request([1]), Request([1])]
    requests[1].n_launched, requests[2].n_launched = 1, 7 * 5 + 2
    named = constraint(torch.zeros(3, LAYOUT.vocab_needed), requests)
    assert named.rows == [0, 1, 2] and named.ids.shape[0] == 7  # rows of a table, one a position
    shortlist = named.gathered()
    allowed = [
        set(ids[ok].tolist()) for ids, ok in zip(shortlist.ids, shortlist.allowed, strict=True)
    ]
    start = LAYOUT.audio_offset
    assert allowed[0] == set(range(start, start + 16)) | {LAYOUT.end_of_speech}
    assert allowed[1] == set(range(start + 16, start + 32))
    assert allowed[2] == set(range(start + 32, start + 48))
    assert torch.equal(shortlist.ids, shortlist.ids.sort(dim=-1).values)  # ascending ids
    no_stop = AudioTokenConstraint(LAYOUT, allow_stop=False)(torch.zeros(1, 400), requests[:1])
    assert not no_stop.gathered().allowed[0, 0]


def test_sampling_through_the_shortlist_only_yields_allowed_tokens():
    tts = tiny_tts()
    eng = tts.engine
    rid = eng.add_request(
        [LAYOUT.bos, 5, 6],
        SamplingParams(
            temperature=1.5, top_k=0, max_tokens=30, seed=2, stop_token_ids=(LAYOUT.end_of_speech,)
        ),
    )
    for _ in eng.iterate():
        pass
    tokens = eng.release(rid).output_ids
    for i, token in enumerate(tokens):
        ok = LAYOUT.code_of(token, i) is not None or (
            token == LAYOUT.end_of_speech and i % 7 == 0 and i == len(tokens) - 1
        )
        assert ok, (i, token)


def test_dummy_weights_of_the_real_shape_get_prompts_of_subword_length():
    """Prompt length is prefill work: the stand-in gives one text id per four characters, as
    BPE does on English, where bytes would give four times as many."""
    text = "A sentence of about forty-four characters, yes."
    tokenizer = load_tokenizer("dummy")
    ids = tokenizer.encode(text)
    assert tokenizer.is_placeholder and len(ids) == 1 + -(-len(text) // 4)
    assert ids[0] == ORPHEUS.bos and all(0 <= i < ORPHEUS.bos for i in ids[1:])
    compact = dummy_tokenizer(OrpheusLayout.compact(16))
    assert compact.encode("Hi", add_special_tokens=False) == list(b"Hi")


def test_tokenizer_loading_fails_clearly_offline(tmp_path):
    assert load_tokenizer("dummy").is_placeholder
    with pytest.raises(OrpheusError, match="local directory"):
        load_tokenizer(str(tmp_path / "missing"))


def test_streamed_audio_arrives_before_the_end_and_equals_batch_and_solo_synthesis():
    tts = tiny_tts()
    sampling = SamplingParams(max_tokens=7 * 6, seed=3)
    chunks = []
    for chunk in tts.stream("hello there", "leo", sampling):
        chunks.append((chunk, tts.engine.has_unfinished()))
    assert chunks[0][1], "the first chunk should come while tokens are still being generated"
    assert [c.index for c, _ in chunks] == list(range(len(chunks))) and chunks[-1][0].final
    streamed = np.concatenate([c.audio.numpy() for c, _ in chunks])
    texts = ["good morning", "hello there", "a third line of text"]
    together = tts.synthesize(texts, "leo", sampling)
    assert np.allclose(together[1], streamed, atol=1e-5)  # same tokens; codec batch rounding
    assert streamed.size % tts.codec.frame_samples == 0 and streamed.size > 0
    assert not np.array_equal(together[0][:2048], together[2][:2048])


def waiting(tts: TokenTTS) -> list[str]:
    return [r.request_id for r in tts.engine.scheduler.waiting]


def playing(tts: TokenTTS, rid: str) -> None:
    """Step until the utterance has sent its second chunk: past its start, its listener's
    audio in hand counts (`StreamingDecoder.min_buffered_s`)."""
    while len(tts.utterances[rid].chunks) < 2:
        tts.step()


@pytest.mark.parametrize("admit_lead_s", [0.0, 0.05])
def test_a_new_stream_waits_while_a_listener_runs_dry_only_with_the_knob(admit_lead_s):
    """The first stream's listener plays its audio out and waits: with the knob, a new request
    waits too, until the first stream's new audio fills its listener's buffer again, while
    it is still in flight. Without, the new request goes in at once."""
    tts = tiny_tts()
    tts.admit_lead_s, tts.decoder.clock = admit_lead_s, Clock()
    first = tts.submit("a first sentence", "leo")
    playing(tts, first)
    tts.decoder.clock.now = 10.0  # the listener played everything long ago
    late = tts.submit("a second one", "leo")
    tts.step()
    assert waiting(tts) == ([late] if admit_lead_s else [])
    held = 0
    while late in waiting(tts):  # the clock stands: audio piles up
        tts.step()
        held += 1
    assert tts.utterances[first].done is None  # let in beside it, not after it
    assert tts.decoder.min_buffered_s() >= admit_lead_s
    # shut on the step after it came and on every step of the loop but the one that let it in
    assert tts.held_steps == (held if admit_lead_s else 0)


@pytest.mark.parametrize("admit_round_s", [0.0, 0.010])
def test_a_new_stream_waits_while_the_engines_rounds_are_slow_only_with_the_knob(
        admit_round_s, monkeypatch):
    """Every round takes 20 ms on the pipeline's clock, past the 10 ms ceiling: with the knob a
    new request waits while the first stream is in flight, and goes in once nothing else is;
    without, it goes in at once."""
    tts = tiny_tts()
    tts.admit_round_s, tts.decoder.clock = admit_round_s, Clock()
    engine_step = tts.engine.step

    def slow_step():
        tts.decoder.clock.now += 0.020
        return engine_step()

    monkeypatch.setattr(tts.engine, "step", slow_step)
    first = tts.submit("a first sentence", "leo")
    for _ in range(ROUND_WINDOW):
        tts.step()
    assert tts.round_s == pytest.approx(0.020 * (1 - (1 - 1 / ROUND_WINDOW) ** ROUND_WINDOW))
    late = tts.submit("a second one", "leo")
    tts.step()
    assert waiting(tts) == ([late] if admit_round_s else [])
    while late in waiting(tts):  # the rounds stay slow: held until nothing else runs
        beside = [r.request_id for r in tts.engine.scheduler.running]
        tts.step()
    assert (tts.held_steps > 0) == bool(admit_round_s)
    if admit_round_s:
        assert beside == [] and tts.utterances[first].done is not None
    else:
        assert tts.utterances[first].done is None  # let in beside it
    tts.run()
    assert tts.utterances[late].done is not None
    assert tts.round_s == 0.0  # nothing left to pace


def test_held_streams_still_speak_once_the_others_are_done():
    """Holding never starves a request: with nothing else in flight it is admitted. Five
    texts on three slots: held, the last two start only after the first three end (more
    steps: without, the fourth takes the slot the short first one leaves), and every text gets
    the audio it gets without holding."""
    texts = ["one", "two two", "three three three", "four", "five five"]
    sampling = [SamplingParams(max_tokens=7 * n, seed=9) for n in (4, 9, 9, 2, 2)]
    runs = {}
    for admit_lead_s in (0.0, 10.0):  # 10 s: every playing stream counts as behind
        tts = tiny_tts()
        tts.admit_lead_s, tts.decoder.clock = admit_lead_s, Clock()
        runs[admit_lead_s] = (tts.synthesize(texts, "tara", sampling), tts.n_steps)
    (free, free_steps), (held, held_steps) = runs[0.0], runs[10.0]
    assert held_steps > free_steps
    for a, b in zip(free, held, strict=True):
        assert a.size > 0 and a.shape == b.shape and np.allclose(a, b, atol=1e-5)


def test_utterances_stopped_at_their_limit_leave_one_note_not_one_each():
    """Every result carries the notes, so a server that kept one per utterance handed each
    request thousands of copies, pickled across an engine process's pipe."""
    tts = tiny_tts()
    tts.engine.runner.logits_processor.allow_stop = False  # every utterance runs to its limit
    for n in (2, 3, 2):
        audio = tts.synthesize(["one"] * 3, "tara", SamplingParams(max_tokens=7 * n, seed=1))
        assert all(a.size == n * tts.codec.frame_samples for a in audio)
    assert tts.notes == [limit_note(14), limit_note(21)]


def test_continuous_and_static_batching_make_the_same_audio():
    texts = ["one", "two two", "three three three", "four"]
    sampling = SamplingParams(max_tokens=7 * 4, seed=9)
    cont = tiny_tts(policy="continuous").synthesize(texts, "tara", sampling)
    stat = tiny_tts(policy="static").synthesize(texts, "tara", sampling)
    for a, b in zip(cont, stat, strict=True):
        assert a.shape == b.shape and np.allclose(a, b, atol=1e-5)


def test_from_config_builds_a_dummy_pipeline_that_speaks():
    cfg = PipelineConfig(
        family="orpheus",
        weights="dummy",
        model="tiny-llama",
        device="cpu",
        decode_interval=1,
        overlap=2,
        sampling=SamplingConfig(max_tokens=21),
    )
    tts, _ = build_tts(cfg, torch.device("cpu"), n_slots=2)
    assert tts.sample_rate == 24000 and tts.codec.is_dummy
    assert tts.format.layout == OrpheusLayout.compact(7)  # tiny-llama's 320 ids hold 7 codes a slot
    (audio,) = tts.synthesize(["test"])  # may stop early: dummy weights pick end-of-speech too
    assert audio.dtype == np.float32 and audio.size % 2048 == 0 and audio.size <= 3 * 2048
    with pytest.raises(OrpheusError):
        tts.submit("test", voice="nobody")


def test_engine_config_follows_the_pipeline_config():
    cfg = PipelineConfig(family="orpheus", batch_size=8, continuous_batching=False,
                         cuda_graphs=True, kv_cache="dynamic")
    ec = engine_config(cfg, max_len=512)
    assert (ec.n_slots, ec.max_len, ec.policy, ec.decode_mode, ec.kv_cache) == (
        8, 512, "static", "cuda-graph", "dynamic")
    assert engine_config(PipelineConfig(family="orpheus"), n_slots=3).n_slots == 3


def test_sampling_params_follow_the_config_and_share_its_defaults():
    assert sampling_params(SamplingConfig()) == SamplingParams()
    params = sampling_params(SamplingConfig(temperature=0.0, top_k=7, max_tokens=21), seed=4)
    assert (params.temperature, params.top_k, params.max_tokens, params.seed) == (0.0, 7, 21, 4)


@pytest.mark.parametrize("kv_cache", ["dynamic", "none"])
def test_the_kv_cache_mode_makes_the_same_audio_as_the_static_cache(kv_cache):
    texts = ["one", "two two", "three three three", "four"]
    sampling = SamplingParams(temperature=0.0, max_tokens=7 * 4)
    static = tiny_tts().synthesize(texts, "tara", sampling)
    other = tiny_tts(kv_cache=kv_cache).synthesize(texts, "tara", sampling)
    for a, b in zip(static, other, strict=True):
        assert a.shape == b.shape and a.size > 0 and np.allclose(a, b, atol=1e-5)


def test_graphs_asked_with_a_growing_cache_run_eager_and_say_so():
    cfg = PipelineConfig(family="orpheus", weights="dummy", model="tiny-llama", device="cpu",
                         cuda_graphs=True, kv_cache="dynamic",
                         sampling=SamplingConfig(max_tokens=14, temperature=0.0))
    tts, _ = build_tts(cfg, torch.device("cpu"), n_slots=2)
    assert tts.engine.fallbacks == [
        "CUDA graphs need the static KV cache; kv_cache=dynamic ran eager"]
    assert tts.engine.runner.decoder is None
    tts.synthesize(["test"])


def load_streams_benchmark():
    spec = importlib.util.spec_from_file_location(
        "orpheus_streams", ROOT / "benchmarks" / "orpheus_streams.py"
    )
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    return bench


def test_benchmark_smoke_runs_and_writes_json_and_markdown(tmp_path):
    bench = load_streams_benchmark()
    result = bench.main(["--smoke", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "orpheus_streams_smoke.json").read_text())
    assert saved["streams"][0]["streams"] == 1 and len(saved["streams"]) == 2
    assert all(r["aggregate_tok_s"] > 0 and r["ttfa_ms_p95"] > 0 for r in result["streams"])
    open_loop = saved["open_loop"]
    assert [r["rate"] for r in open_loop["rows"]] == [5, 20]
    for r in open_loop["rows"]:
        drawn = bench.poisson_arrivals(r["rate"], 10**5, open_loop["duration_s"], 0)
        assert r["requests"] == len(drawn) == r["finished"]
        assert 0 < r["active_mean"] <= r["active_peak"] <= r["requests"]
        assert r["ttfa_ms_max"] >= r["submit_wait_ms_max"] >= 0
        assert r["stream_tok_s_min"] <= r["stream_tok_s_p50"]
    md = (tmp_path / "orpheus_streams_smoke.md").read_text()
    assert md.startswith(
        "# Orpheus concurrent streams\n\n`python benchmarks/orpheus_streams.py --smoke"
    )
    assert md.index("## Open loop: Poisson arrivals") < md.index("## Simultaneous start")


def test_benchmark_builds_what_the_server_builds_for_a_preset(tmp_path):
    bench = load_streams_benchmark()
    result = bench.main(["--smoke", "--preset", "orpheus-tiny-cpu", "--set", "overlap=1",
                         "--set", "max_decode_interval=4", "--set", "first_chunk_wait=1",
                         "--streams", "", "--snac-table", "off", "--out", str(tmp_path)])
    assert result["window"] == "1,1,1,4,0,1" and result["preset"] == "orpheus-tiny-cpu"
    assert result["snac"] == []
    own = result["windows"][-1]  # the run's own window, checked against a one-shot decode
    assert own["window"] == "1,1,1 wait=1" and own["first_audio_after_tokens"] == 7
    assert own["first_chunk_snr_db"] < result["windows"][0]["first_chunk_snr_db"]
    assert result["lm"] == "tiny-llama" and result["decode_mode"] == "eager"
    rows = result["open_loop"]["rows"]
    assert all(r["finished"] == r["requests"] for r in rows)  # no early end-of-speech
    md = (tmp_path / "orpheus_streams_smoke.md").read_text()
    assert ("builds preset `orpheus-tiny-cpu` with `overlap=1` `max_decode_interval=4` "
            "`first_chunk_wait=1`") in md
    assert "## SNAC window decode" not in md and "## Streaming window vs one-shot" in md
    with pytest.raises(SystemExit):
        bench.main(["--smoke", "--preset", "cpu-default", "--out", str(tmp_path)])


def test_the_streams_target_needs_every_part_at_one_rate():
    """128 streams in flight on average, none below real time and TTFA p95 <= 250 ms, all at
    the same arrival rate."""
    bench = load_streams_benchmark()
    held = {"rate": 50.0, "active_mean": 130.0, "below_realtime_share": 0.0, "ttfa_ms_p95": 220.0}
    rows = [held, {**held, "rate": 54.0, "ttfa_ms_p95": 251.0},
            {**held, "rate": 40.0, "active_mean": 115.0},
            {**held, "rate": 60.0, "below_realtime_share": 0.01}]
    assert bench.targets([], rows)["open_loop"] == "met at 50 arrivals/s"
    assert bench.targets([], rows[1:])["open_loop"] == "missed"
    assert bench.targets([], [])["open_loop"] == "not run"


def test_benchmark_measures_a_cloned_voice_with_and_without_its_prefix_cached(tmp_path):
    bench = load_streams_benchmark()
    result = bench.main(["--smoke", "--prefix-cache", "both", "--reference-tokens", "32",
                         "--out", str(tmp_path)])
    rows = result["open_loop"]["rows"]
    assert [(r["rate"], r["prefix_cache"]) for r in rows] == [
        (5, False), (5, True), (20, False), (20, True)]
    off, on = rows[:2]
    assert off["cached_tokens_per_request"] == 0
    assert on["cached_tokens_per_request"] > 32  # the reference and the voice's name
    assert (on["prefill_tokens_per_request"] + on["cached_tokens_per_request"]
            == off["prefill_tokens_per_request"])
    md = (tmp_path / "orpheus_streams_smoke.md").read_text()
    assert "| 5 | off |" in md and "| 5 | on |" in md


@pytest.mark.parametrize("flag, key, values, cells", [
    ("--grow-lead-ms", "grow_lead_ms", (250, 0),
     ("| 5 | off | 250 | 0 | 0 | 0 |", "| 20 | off | 0 | 0 | 0 | 0 |")),
    ("--rush-lead-ms", "rush_lead_ms", (0, 120),
     ("| 5 | off | 250 | 0 | 0 | 0 |", "| 20 | off | 250 | 120 | 0 | 0 |")),
    ("--admit-lead-ms", "admit_lead_ms", (0, 150),
     ("| 5 | off | 250 | 0 | 0 | 0 |", "| 20 | off | 250 | 0 | 150 | 0 |")),
    ("--admit-round-ms", "admit_round_ms", (0, 8),
     ("| 5 | off | 250 | 0 | 0 | 0 |", "| 20 | off | 250 | 0 | 0 | 8 |")),
])
def test_benchmark_compares_a_streaming_knob_on_one_build(tmp_path, flag, key, values, cells):
    """Each rate runs at every value of the knob in turn on the same engine and codec (the
    growth threshold and rush lead the decoder holds, the admission holds of the pipeline's
    streams); each row records the value in force while it ran, and every request still
    finishes."""
    bench = load_streams_benchmark()
    result = bench.main(["--smoke", "--streams", "", flag, ",".join(map(str, values)),
                         "--out", str(tmp_path)])
    rows = result["open_loop"]["rows"]
    assert [(r["rate"], r[key]) for r in rows] == [(rate, v) for rate in (5, 20) for v in values]
    assert all(r["finished"] == r["requests"] for r in rows)
    md = (tmp_path / "orpheus_streams_smoke.md").read_text()
    assert all(cell in md for cell in cells)


def slowed(tts: TokenTTS, monkeypatch, seconds: float) -> TokenTTS:
    """Every step takes `seconds` longer, as on a busy server."""
    step = tts.step

    def slow_step():
        time.sleep(seconds)
        return step()

    monkeypatch.setattr(tts, "step", slow_step)
    return tts


def test_open_loop_counts_time_to_first_audio_from_arrival(monkeypatch):
    bench = load_streams_benchmark()
    tts = slowed(tiny_tts(), monkeypatch, 0.05)
    run = bench.serve_open_loop(tts, [0.0, 0.01], tokens=14, stop_s=30.0)
    utts, requests = bench.settle(tts, run)
    late = list(run.due)[1]
    assert run.submitted[late] - run.due[late] > 0.03  # due mid-step, submitted after it
    from_arrival = sorted((u.first_audio - run.due[i]) * 1e3 for i, u in utts.items())
    row = bench.open_loop_row(run, utts, requests, 0.01, tts.sample_rate)
    assert (row["ttfa_ms_p50"], row["ttfa_ms_max"]) == (from_arrival[0], from_arrival[1])
    assert (utts[late].first_audio - run.due[late]) * 1e3 > utts[late].ttfa_ms + 30
    assert row["finished"] == 2 and not tts.utterances and not tts.engine.requests


def test_open_loop_cut_off_by_its_timeout_counts_and_clears_the_unfinished(monkeypatch):
    bench = load_streams_benchmark()
    tts = slowed(tiny_tts(), monkeypatch, 0.05)
    run = bench.serve_open_loop(tts, [0.0, 0.0], tokens=14, stop_s=0.12)
    utts, requests = bench.settle(tts, run)
    row = bench.open_loop_row(run, utts, requests, 0.01, tts.sample_rate)
    assert (row["requests"], row["finished"]) == (2, 0)
    assert not tts.has_unfinished() and not tts.utterances and not tts.engine.requests


def test_open_loop_load_and_wall_split():
    bench = load_streams_benchmark()
    assert bench.occupancy([(0, 2), (1, 3), (5, 6)], 0, 4) == (1.0, 2)
    assert bench.occupancy([(0, 1), (1, 2)], 0, 2) == (1.0, 1)  # one ends as one starts
    split = bench.wall_split([(10.0, True), (20.0, False), (5.0, False)], 0.015, 0.05)
    assert split["prefill_steps"] == 2  # the step after a prefill waits for it on a GPU
    assert split["prefill_share"] == pytest.approx(0.6)
    assert split["decode_share"] == pytest.approx(0.1)
    assert split["idle_share"] == pytest.approx(0.3)


def test_decode_mode_follows_the_pipeline_config():
    assert decode_mode("none", False) == "eager"
    assert decode_mode("none", True) == "cuda-graph"
    assert decode_mode("reduce-overhead", True) == "reduce-overhead"
    assert decode_mode("max-autotune", False) == "max-autotune"
    assert decode_mode("default", True) == "default"
