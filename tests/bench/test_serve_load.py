"""benchmarks/serve_load.py's baseline rows: the preset's pipeline in the benchmark's process,
timed as the load generator times a request over HTTP, on the real default voice."""

from __future__ import annotations

import statistics

import pytest
from conftest import benchmark_module

from lab.bench.in_process import open_in_process
from lab.bench.load_report import QUEUED_MS, summarize, table_rows
from lab.bench.loadtest import LoadPlan
from lab.config import load_preset
from lab.pipeline import Pipeline


@pytest.fixture(scope="module")
def serve_load():
    with benchmark_module("serve_load") as module:
        yield module


def test_in_process_arrivals_keep_their_times_so_the_middle_half_is_measured(serve_load):
    plan = LoadPlan(concurrency=(), rates=(3.0,), requests=8, duration_s=3.0, texts=("short",),
                    seed=0, warmup=0)
    pipe = Pipeline(load_preset("cpu-default"))
    try:
        records, wall_s = open_in_process(pipe, plan, 3.0, "in-process open")
    finally:
        pipe.close()
    dues = [r.due_s for r in records]
    assert len(records) == 8 and all(r.error is None for r in records)
    assert min(dues) >= 0 and max(dues) > 1.0 and len(set(dues)) == len(dues)
    row = summarize(records, "in-process open", 3.0, wall_s)
    assert row.mid_streams is not None and row.mid_streams > 0
    assert row.mid_ttfa_p95_ms is not None and row.mid_ttfa_p95_ms > 0
    # the Piper voice takes no decode steps: no step column in its table
    assert row.step_p50_ms is None and "step_p50_ms" not in table_rows([row])[0]


def test_a_run_saves_what_it_has_measured_after_each_part(serve_load, tmp_path, monkeypatch,
                                                          capfd):
    """The status quo, then each served point, reach the report file as they finish, marked
    partial until the last: a run stopped by a time limit keeps what it measured. Each
    pipeline's and the server's set-up is said on stderr as it goes, named for its part."""
    import json

    saved, write = [], serve_load.write
    monkeypatch.setattr(serve_load, "write",
                        lambda result, out, stem: (saved.append(result), write(result, out, stem)))
    serve_load.main(["--preset", "cpu-default", "--concurrency", "1", "--rates", "1",
                     "--requests", "2", "--duration", "3", "--threads", "2",
                     "--out", str(tmp_path), "--stem", "s"])
    shapes = [[row["shape"] for row in result["rows"]] for result in saved]
    assert shapes == [["in-process"], ["in-process", "closed"], ["in-process", "closed", "open"],
                      ["in-process", "closed", "open"]]
    assert all(serve_load.PARTIAL in result["anomalies"] for result in saved[:3])
    assert "- Server: not started" in "\n".join(serve_load.header(saved[0]))
    assert "- Server: not started" not in "\n".join(serve_load.header(saved[1]))
    final = json.loads((tmp_path / "s.json").read_text())
    alone, closed = final["rows"][:2]  # the server's thread is read from its /metrics
    assert 0 < alone["host_busy"] <= 1 and alone["round_ms"] > 0
    assert 0 < closed["host_busy"] <= 1 and closed["round_ms"] > 0
    assert serve_load.PARTIAL not in final["anomalies"] and final["meta"]["model"]
    assert "--out" not in final["meta"]["command"] and "--stem s" in final["meta"]["command"]
    assert "### open 1/s over time" in (tmp_path / "s.md").read_text()
    said = capfd.readouterr().err.splitlines()
    assert any(line.startswith("[status quo] loading piper-vits weights") for line in said)
    assert any(line.startswith("[server] ") and "serving http://127.0.0.1" in line
               for line in said)


def test_a_second_server_holds_its_pipeline_in_a_process_of_its_own(serve_load, tmp_path):
    """`--servers one-process,engine-process`: the same points against each server in turn,
    the second's rows named for it, every request answered."""
    import json

    serve_load.main(["--preset", "cpu-default", "--concurrency", "1", "--rates", "1",
                     "--requests", "2", "--duration", "3", "--threads", "2",
                     "--servers", "one-process,engine-process",
                     "--out", str(tmp_path), "--stem", "s"])
    final = json.loads((tmp_path / "s.json").read_text())
    assert [r["shape"] for r in final["rows"]] == ["in-process", "closed", "open",
                                                   "engine process closed",
                                                   "engine process open"]
    assert all(r["ok"] == r["requests"] > 0 for r in final["rows"][1:])
    assert all(0 < r["host_busy"] <= 1 for r in final["rows"])
    assert final["meta"]["servers"] == ["one-process", "engine-process"]
    # Each served request brings the server's split of its time to first audio; across the
    # pipe, the pipeline's own share is less than what the server waited from the slot.
    served = [r for r in final["requests"] if r["shape"] != "in-process"]
    assert all(0 < r["server_ms"]["engine"] < r["server_ms"]["first-audio"] for r in served)
    assert all(r["server_ms"] is None for r in final["requests"] if r["shape"] == "in-process")
    split = (tmp_path / "s.md").read_text().split("## Where the time to first audio went")[1]
    split = split.split("## Over time")[0]
    assert "| closed |" in split and "| engine process open |" in split
    assert "| in-process |" not in split
    assert "`lab serve --engine-process`" in "\n".join(serve_load.header(final))


def test_one_server_per_slot_count_takes_the_same_arrivals(serve_load, tmp_path):
    """`--slots 1,2`: a server of each size in turn under the same Poisson arrivals, its rows
    named for its slots. One slot and a queue of 2 cannot carry 8 arrivals a second of the
    default voice on a CPU (about 0.2-0.4 s a sentence), so that server is full and the
    report says what it finished."""
    import json

    serve_load.main(["--preset", "cpu-default", "--concurrency", "", "--rates", "8",
                     "--requests", "48", "--duration", "6", "--threads", "2", "--queue", "2",
                     "--slots", "1,2", "--out", str(tmp_path), "--stem", "s"])
    final = json.loads((tmp_path / "s.json").read_text())
    alone, one, two = final["rows"]
    assert [r["shape"] for r in (alone, one, two)] == ["in-process", "1 slot open",
                                                       "2 slots open"]
    assert one["requests"] == two["requests"] > 0 and one["ok"] > 0 and two["ok"] > 0
    assert one["full"] is not None and one["full"][3] < one["full"][2]  # finished < arrived
    assert final["meta"]["slots"] == [1, 2] and final["server"]["slots"] == 2
    assert "- Servers: one per slot count (1, 2), in turn" in "\n".join(serve_load.header(final))
    report = (tmp_path / "s.md").read_text()
    assert "Full, the server finished" in report and "1 slot open at 8/s, for" in report
    for bad in ("0", "1,1", "two", "2,,3"):
        with pytest.raises(SystemExit):
            serve_load.parse_args(["--slots", bad])


def test_one_server_per_round_ceiling_and_the_engines_wait_shows_it_full(serve_load, tmp_path):
    """`--admit-round-ms 0,0.001` on the tiny Orpheus engine: a server without a ceiling, then
    one whose every round is over its ceiling, so its engine lets a stream in only when idle.
    The second server's requests wait inside its engine, which their `admission` part shows,
    and the report reads that server as full."""
    import json

    serve_load.main(["--preset", "orpheus-tiny-cpu", "--concurrency", "", "--rates", "4",
                     "--requests", "40", "--duration", "9", "--threads", "2",
                     "--admit-round-ms", "0,0.001", "--out", str(tmp_path), "--stem", "r"])
    final = json.loads((tmp_path / "r.json").read_text())
    alone, free, paced = final["rows"]
    assert [r["shape"] for r in (alone, free, paced)] == ["in-process", "no ceiling open",
                                                         "0.001 ms ceiling open"]
    assert free["requests"] == paced["requests"] > 0 and paced["ok"] > 0
    waits = {shape: [r["server_ms"]["admission"] for r in final["requests"]
                     if r["shape"] == shape and r["error"] is None]
             for shape in ("no ceiling open", "0.001 ms ceiling open")}
    assert max(waits["0.001 ms ceiling open"]) >= QUEUED_MS > statistics.median(
        waits["no ceiling open"])
    assert paced["full"] is not None and paced["ttfa_p50_ms"] > free["ttfa_p50_ms"]
    assert final["meta"]["admit_round_ms"] == [0, 0.001]
    header = "\n".join(serve_load.header(final))
    assert "- Servers: one per round ceiling in ms (0, 0.001), in turn" in header
    assert "Full, the server finished" in (tmp_path / "r.md").read_text()
    for bad in ("-1", "7,7", "seven"):
        with pytest.raises(SystemExit):
            serve_load.parse_args(["--admit-round-ms", bad])


def test_static_batching_takes_the_same_arrivals_with_the_static_policy(serve_load, monkeypatch):
    """The status quo before continuous batching: the preset rebuilt with static batching,
    under the same Poisson arrivals, its rows and requests marked as such."""
    built = []
    monkeypatch.setattr(serve_load, "Pipeline",
                        lambda cfg, **kw: built.append(cfg) or Pipeline(cfg, **kw))
    plan = LoadPlan(concurrency=(), rates=(), requests=6, duration_s=2.0, texts=("short",),
                    seed=0, warmup=0)
    cfg = load_preset("orpheus-tiny-cpu", sampling={"max_tokens": 70})
    rows, records = serve_load.static_batching(cfg, plan, (3.0,))
    assert [c.continuous_batching for c in built] == [False] and cfg.continuous_batching
    (row,) = rows
    assert (row.shape, row.load) == (serve_load.STATIC_SHAPE, 3.0) and row.ok == len(records)
    assert records and all(r.error is None and r.audio_s > 0 for r in records)
    # each request's median decode step, and theirs, where the engine's steps are known
    assert all(r.step_ms > 0 for r in records) and row.step_p50_ms > 0
    table = table_rows([row])[0]
    assert list(table)[-5:] == ["step_p50_ms", "host_busy", "round_ms", "codec_lag_ms", "errors"]
    assert table["step_p50_ms"] > 0
    # the static pipeline's serving thread: on host work for part of the point (a CPU's
    # tokens need no wait), in rounds of a step; its codec windows, decoded in the rounds
    # that launch them (no side stream on a CPU), each took a while to come back
    assert 0 < row.host_busy <= 1 and 0 < row.round_ms < 1000 * row.wall_s
    assert 0 < row.codec_lag_ms < 1000 * row.wall_s
    assert serve_load.static_batching(cfg, plan, ()) == ([], [])


def test_the_status_quo_builds_only_the_slots_it_fills(serve_load, monkeypatch):
    """One request at a time is built with one slot, the static rows with `--static-slots`
    (the preset's batch size by default), the in-process arrivals with the preset's; the report
    says so; `--static-slots` without static rows, or below one, is refused."""
    built = []

    class Built(Exception):
        pass

    def record(cfg, **_):
        built.append(cfg.batch_size)
        raise Built

    monkeypatch.setattr(serve_load, "Pipeline", record)
    cfg = load_preset("orpheus-tiny-cpu", batch_size=4)
    plan = LoadPlan(concurrency=(), rates=(), requests=1, duration_s=1.0, texts=("short",),
                    seed=0, warmup=0)
    for build in (lambda: serve_load.status_quo(cfg, plan, ()),
                  lambda: serve_load.status_quo(cfg, plan, (3.0,)),
                  lambda: serve_load.static_batching(cfg, plan, (3.0,), 2),
                  lambda: serve_load.static_batching(cfg, plan, (3.0,))):
        with pytest.raises(Built):
            build()
    assert built == [1, 4, 2, 4]
    words = serve_load.baseline(serve_load.parse_args(["--static-rates", "8",
                                                       "--static-slots", "64"]), cfg)
    assert "(built with one slot)" in words and "at most 64 a batch" in words
    words = serve_load.baseline(serve_load.parse_args(["--in-process-rates", "8"]), cfg)
    assert "one slot" not in words and "the same Poisson arrivals" in words
    with pytest.raises(SystemExit, match="--static-slots: give --static-rates too"):
        serve_load.check_sweeps(cfg, serve_load.parse_args(["--static-slots", "8"]))
    for bad in ("0", "-2", "eight"):
        with pytest.raises(SystemExit):
            serve_load.parse_args(["--static-slots", bad])


def test_sweeps_over_a_knob_the_family_ignores_are_refused(serve_load):
    voice = load_preset("cpu-default")
    with pytest.raises(SystemExit, match="--static-rates: piper-vits has no continuous"):
        serve_load.check_sweeps(voice, serve_load.parse_args(["--static-rates", "1"]))
    with pytest.raises(SystemExit, match="--admit-round-ms: piper-vits has no round ceiling"):
        serve_load.check_sweeps(voice, serve_load.parse_args(["--admit-round-ms", "0,7"]))
    serve_load.check_sweeps(voice, serve_load.parse_args([]))
    serve_load.check_sweeps(load_preset("orpheus-tiny-cpu"),
                            serve_load.parse_args(["--static-rates", "1", "--admit-round-ms", "7"]))
