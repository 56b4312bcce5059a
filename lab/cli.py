"""Command line: `lab synth`, `lab eval`, `lab verdict`, `lab bench`, `lab app`, `lab serve`,
`lab loadtest`, `lab presets`.

Exit codes: 0 success, 1 a quality verdict of FAIL (`lab eval --ref`, `lab verdict`), 2 bad
input or a run refused by its estimate (a clear one-line message on stderr, nothing written),
3 an inconclusive verdict (`lab verdict`: more sentences would settle it).

`synth` and `bench` print an estimate of memory and time before loading anything. A run that
would not fit is refused with the numbers unless `--force`; one that would take minutes gets a
warning, never a question, so scripts do not hang. Rates measured by each run go into the rate
book in the data directory, where the app reads them too.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from lab.bench import loadtest
from lab.config import ConfigError, PipelineConfig, list_presets, load_preset, parse_overrides
from lab.data_dir import data_dir as data_dir_of

if TYPE_CHECKING:
    from lab.serve import ServeOptions

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")


def batch_sizes(text: str) -> list[int]:
    """argparse type for `--batch-sizes 1,4,8`: a usage error, not a traceback, when malformed."""
    try:
        sizes = [int(part) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of whole numbers >= 1, e.g. 1,4,8")
    return sizes


def output_path(path: str, force: bool) -> Path:
    """Check where audio will be written before any model loads, so a typo costs nothing."""
    out = Path(path)
    if out.suffix.lower() not in AUDIO_SUFFIXES:
        raise ConfigError(f"output {path!r} must end in one of {list(AUDIO_SUFFIXES)}")
    if out.is_dir():
        raise ConfigError(f"output {path!r} is a directory; give a file name")
    if not out.parent.is_dir():
        raise ConfigError(f"output folder {str(out.parent)!r} does not exist")
    if not os.access(out.parent, os.W_OK):
        raise ConfigError(f"output folder {str(out.parent)!r} is not writable")
    if out.exists() and not force:
        raise ConfigError(f"{path} already exists; pass --force to overwrite it, or choose "
                          "another name with -o")
    return out


def _config(args: argparse.Namespace) -> PipelineConfig:
    return load_preset(args.preset, **parse_overrides(args.set))


def _print_table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")


def data_dir(args: argparse.Namespace) -> Path:
    """--data-dir, else $LAB_DATA_DIR, else runs/lab-data: the folder the app uses too."""
    return data_dir_of(args.data_dir)


class Refused(ValueError):
    """The estimate says the run would not fit on this machine."""


def _vet(estimates: list, force: bool, total_s: float | None = None) -> None:
    """Print what the estimates say before anything loads; refuse (unless `force`) or warn."""
    from lab.estimate import CONFIRM_S

    for est in estimates:
        figures, verdict = est.summary().split("\n", 1)
        print(figures)
        if est.verdict == "run":
            print(verdict)
    refused = [e for e in estimates if e.verdict == "refuse"]
    if refused and not force:
        raise Refused(f"refused: {refused[0].reason}; pass --force to run anyway")
    if refused:
        print(f"warning: running despite the estimate (--force): {refused[0].reason}",
              file=sys.stderr)
    slow = [e for e in estimates if e.verdict == "confirm"]
    if total_s is not None and total_s >= CONFIRM_S:
        print(f"warning: the whole benchmark would take about {total_s / 60:.1f} min",
              file=sys.stderr)
    elif slow and not refused:
        print(f"warning: {slow[0].reason}", file=sys.stderr)


def _estimate(cfg: PipelineConfig, chars: int, args: argparse.Namespace, **kwargs):
    """The estimate, or None with a warning when this config cannot be sized beforehand (the
    pipeline then reports any real problem itself)."""
    from lab.estimate import EstimateError, estimate

    try:
        return estimate(cfg, chars, rates_dir=data_dir(args), **kwargs)
    except EstimateError as err:
        print(f"warning: no estimate before loading: {err}", file=sys.stderr)
        return None


def _record(cfg: PipelineConfig, measured, args: argparse.Namespace, **kwargs) -> None:
    from lab.estimate import EstimateError, record_rate

    try:
        record_rate(cfg, measured, rates_dir=data_dir(args), **kwargs)
    except (EstimateError, OSError) as err:
        print(f"warning: measured rates not recorded: {err}", file=sys.stderr)


def _say(message: str) -> None:
    """A set-up stage, on stderr as it happens: stdout keeps the command's own output."""
    print(message, file=sys.stderr, flush=True)


def cmd_synth(args: argparse.Namespace) -> None:
    import soundfile as sf

    from lab.pipeline import Pipeline

    out = output_path(args.output, args.force)
    cfg = _config(args)
    est = _estimate(cfg, max(1, len(args.text)), args)
    _vet([est] if est else [], args.force)
    pipe = Pipeline(cfg, on_stage=_say)
    result = pipe.synthesize(args.text)
    _record(cfg, result, args, startup=pipe.startup)
    sf.write(out, result.audio, result.sample_rate)
    m = result.metrics
    rows = [("model load (once)", f"{pipe.startup['load_ms']:9.1f} ms"),
            ("warm-up (once)", f"{pipe.startup['warmup_ms']:9.1f} ms")]
    rows += [(f"stage {k}", f"{v:9.1f} ms") for k, v in m.stages.items()]
    rows += [("ttfb", f"{m.ttfb_ms:9.1f} ms"), ("total", f"{m.total_ms:9.1f} ms"),
             ("audio", f"{m.audio_seconds:9.2f} s"), ("real-time factor", f"{m.rtf:9.3f}"),
             ("audio s per s", f"{m.audio_seconds_per_second:9.2f}"),
             ("peak memory", f"{m.peak_memory_mb:9.1f} MB")]
    if m.ms_per_step is not None:
        rows += [("tokens per s", f"{m.tokens_per_second:9.1f}"),
                 ("ms per decode step", f"{m.ms_per_step:9.2f} ms over {len(m.step_ms)} steps")]
    rows += list(pipe.memory_facts().items())
    rows += [("fallback", note) for note in result.fallbacks]
    rows += [("warning", note) for note in result.warnings]
    _print_table(rows)
    print("model load and warm-up (compile, first-call set-up) are paid once per pipeline and "
          "are not part of the request's timings")
    print(f"wrote {out}")


def _read_audio(path: str):
    import soundfile as sf

    if not Path(path).is_file():
        raise ConfigError(f"audio file not found: {path}")
    try:
        audio, rate = sf.read(path, dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as err:
        raise ConfigError(f"cannot read {path} as audio ({err}); give a WAV, FLAC or OGG "
                          "file") from err
    return audio.mean(axis=1), rate


def cmd_eval(args: argparse.Namespace) -> int:
    """Meters for one file; with --ref, the verdict too, and exit code 1 when it fails."""
    from lab.quality import compare, evaluate

    audio, rate = _read_audio(args.audio)
    reference = None
    if args.ref:
        ref_audio, ref_rate = _read_audio(args.ref)
        if ref_rate != rate:
            raise ConfigError(f"reference is {ref_rate} Hz but the audio is {rate} Hz")
        reference = ref_audio
    scores = evaluate(audio, rate, args.text, reference=reference)
    m = scores.mos
    rows = [("DNSMOS SIG/BAK/OVRL", f"{m.sig:.2f} / {m.bak:.2f} / {m.ovrl:.2f}"),
            ("DNSMOS P.808", f"{m.p808:.2f}"), ("Distill-MOS", f"{m.distill:.2f}"),
            ("transcript", scores.transcript),
            ("WER", f"{scores.wer:.3f}"), ("CER", f"{scores.cer:.3f}")]
    if scores.fidelity is not None:
        f = scores.fidelity
        rows += [("MCD (dB)", f"{f.mcd_db:.2f}"), ("PESQ wb", f"{f.pesq_wb:.2f}"),
                 ("STOI", f"{f.stoi:.3f}")]
    _print_table(rows)
    if reference is None:
        return 0
    baseline = evaluate(reference, rate, args.text)
    report = compare(scores, baseline)
    print()
    print(report.to_markdown())
    return 0 if report.passed else 1


VERDICT_EXIT = {"pass": 0, "fail": 1, "inconclusive": 3}


def cmd_verdict(args: argparse.Namespace) -> int:
    """The config against its fp32 reference on the lab's sentence sets: a paired verdict with
    intervals per check (the reference's scores cached in the data directory)."""
    import json

    from lab.config import to_dict
    from lab.frontend import made_up_sentences, sentence_set
    from lab.pipeline import Pipeline
    from lab.quality.score_cache import ScoreCache
    from lab.quality.verdicts import (
        judge,
        judgeable,
        lossy_changes,
        paired_waveforms,
        reference_config,
        renderer,
    )

    cfg = _config(args)
    ref = reference_config(cfg)
    if args.made_up < 0:
        raise ConfigError(f"--made-up {args.made_up}: the number of made-up sentences must be "
                          ">= 0")
    texts = [t for name in args.sets.split(",") for t in sentence_set(name.strip())]
    texts = ([t for t in texts if judgeable(t)][:args.limit]
             + [t for t in made_up_sentences(args.made_up) if judgeable(t)])
    if not texts:
        raise ConfigError(f"the sets {args.sets!r} hold no sentence the recogniser can judge")
    if args.json and not Path(args.json).parent.is_dir():
        raise ConfigError(f"folder of --json {args.json!r} does not exist")
    pipe = Pipeline(cfg, on_stage=_say)
    verdict = judge(renderer(pipe), texts, baseline=lambda: renderer(Pipeline(ref, _say)),
                    baseline_config=to_dict(ref), seed=ref.seed,
                    paired_waveforms=paired_waveforms(pipe),
                    cache=ScoreCache(data_dir(args) / "score-cache"), workers=args.workers,
                    **{k: v for k in ("mos_tolerance", "wer_points", "cer_points")
                       if (v := getattr(args, k)) is not None})
    report = verdict.report
    changed = [f"{k}={v}" for k, v in lossy_changes(cfg, ref).items()]
    print(f"{', '.join(changed) or 'the reference config itself'} against fp32 "
          f"(reference {'cached' if verdict.cache_hit else 'rendered and scored'}; "
          + ", ".join(f"{k} {v} s" for k, v in verdict.seconds.items()) + ")\n")
    print(report.to_markdown())
    if args.json:
        Path(args.json).write_text(json.dumps({"config": to_dict(cfg), "seconds": verdict.seconds,
                                               **report.to_dict()}, indent=2) + "\n")
    return VERDICT_EXIT[report.outcome]


def _bench_estimates(base: PipelineConfig, texts: list[str], args: argparse.Namespace):
    """One estimate per batch size (texts of the longest length, a full group at once) and
    the whole run's time: per size, load and warm-up once, then warm-up and timed groups."""
    estimates, total = [], 0.0
    for size in args.batch_sizes:
        est = _estimate(base.replace(batch_size=size), max(len(t) for t in texts), args,
                        texts=min(size, len(texts)))
        if est is None:
            return [], None
        groups = -(-len(texts) // size)
        total += est.load_s + (args.warmup + args.repeats * groups) * est.synth_s
        estimates.append(est)
    return estimates, total


def cmd_bench(args: argparse.Namespace) -> None:
    from lab.bench.report import write_report
    from lab.bench.runner import run_text_set
    from lab.estimate import Measured
    from lab.metrics.repeats import pinned_threads
    from lab.pipeline import Pipeline

    path = Path(args.texts)
    if not path.exists():
        raise ConfigError(f"text file not found: {args.texts}")
    texts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    base = _config(args)
    if args.threads is not None and args.threads < 1:
        raise ConfigError(f"--threads {args.threads} must be >= 1")
    with pinned_threads(args.threads) as threads:
        if texts:
            estimates, total_s = _bench_estimates(base, texts, args)
            _vet(estimates, args.force, total_s)
        rows = run_text_set(lambda size: Pipeline(base.replace(batch_size=size)), texts,
                            args.batch_sizes, repeats=args.repeats, warmup=args.warmup,
                            threads=threads)
        chars = sum(len(t) for t in texts)
        for row in rows:
            load, warm = (None if ms is None else ms / 1000 for ms in (row.load_ms, row.warmup_ms))
            _record(base.replace(batch_size=row.batch_size),
                    Measured(chars, row.wall_s, row.audio_s, load, warm), args)
    paths = write_report(rows, args.out, args.stem,
                         meta={"preset": str(args.preset), "overrides": " ".join(args.set),
                               "texts": str(args.texts), "threads": threads})
    print(paths.markdown.read_text())


def cmd_app(args: argparse.Namespace) -> None:
    from lab.ui import launch

    launch(host=args.host, port=args.port, data_dir=args.data_dir, warm=not args.no_warm)


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def cmd_serve(args: argparse.Namespace) -> None:
    """Load the preset, then serve it until Ctrl-C or SIGTERM, which drain requests in flight.

    Options and the listening port are checked before the model loads, so a typo or a port in
    use costs nothing.
    """
    from lab.serve import LabServer, ServeOptions
    from lab.serve.engine_process import EngineProcess
    from lab.serve.server import listen, load_served

    cfg = _config(args)
    keep_alive = {} if args.keep_alive is None else {"keep_alive_s": args.keep_alive}
    options = ServeOptions(slots=args.slots, queue=args.queue, deadline_s=args.deadline,
                           model_name=Path(str(args.preset)).stem, **keep_alive)
    if args.replicas is not None:
        if args.keep_alive is not None:
            raise ValueError("--keep-alive sets this process's server; with --replicas, Ray "
                             "Serve's proxy holds the connections and keeps its own setting")
        if args.switch_interval is not None:
            raise ValueError("--switch-interval sets this process's server; with --replicas, "
                             "each replica's process keeps the server's default")
        if args.engine_process is not None:
            raise ValueError("--engine-process splits one server in two processes; with "
                             "--replicas, each replica serves its own pipeline")
        _serve_replicas(cfg, options, args)
        return
    listener = listen(args.host, args.port)
    _warn_if_exposed(args.host)
    if _engine_process(args.engine_process, cfg):
        pipe = EngineProcess(cfg, options, args.switch_interval)
        options = pipe.options
    else:
        pipe, options = load_served(cfg, options, args.switch_interval)
    server = LabServer(pipe, options, listener=listener)
    admission = server.app.state.served.admission
    print(f"serving {server.url}/v1/audio/speech ({admission.slots} slots, queue "
          f"{admission.queue}, deadline {options.deadline_s:g} s); Ctrl-C drains and stops",
          flush=True)
    try:
        server.run()
    finally:
        pipe.close()
    print("stopped: the requests in flight have finished")


def _engine_process(asked: bool | None, cfg: PipelineConfig) -> bool:
    """`--engine-process` as asked, else on where the preset runs on CUDA: there the engine's
    thread is busy most of the wall with host work of its own, and sharing Python's lock with
    the HTTP thread cost more streams than the pipe does (docs/serving.md); on a CPU the two
    tie, and one process is simpler."""
    from lab.device import resolve_device

    return asked if asked is not None else resolve_device(cfg.device).type == "cuda"


def _warn_if_exposed(host: str) -> None:
    if host not in LOOPBACK:
        print(f"warning: listening on {host}: the server has no authentication; anyone "
              "who reaches the port can use it", file=sys.stderr)


def _serve_replicas(cfg: PipelineConfig, options: ServeOptions,
                    args: argparse.Namespace) -> None:
    """`lab serve --replicas N`: the same API from N processes behind Ray Serve's proxy, on a
    local Ray cluster that lives as long as this command (see lab/serve/replicas.py)."""
    from lab.serve.replicas import LabReplicas

    replicas = LabReplicas(cfg, options, args.replicas, args.host, args.port)
    _warn_if_exposed(args.host)
    place = replicas.placement
    each = "one GPU" if place.gpus else f"{place.threads} CPU thread(s)"
    print(f"starting a local Ray cluster: {place.replicas} replica(s) of {args.preset}, "
          f"{each} each; every replica loads and warms up its own pipeline", flush=True)
    replicas.start()
    print(f"serving {replicas.url}/v1/audio/speech ({place.replicas} replicas behind Ray "
          f"Serve, each with its own slots and a queue of {options.queue}, deadline "
          f"{options.deadline_s:g} s); Ctrl-C drains and stops", flush=True)
    replicas.run()
    print("stopped: the requests in flight have finished and the Ray cluster is shut down")


def cmd_presets(_: argparse.Namespace) -> None:
    for name in list_presets():
        print(name)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lab", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def with_config(p: argparse.ArgumentParser) -> None:
        p.add_argument("--preset", default="cpu-default", help="preset name or YAML file")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override one config key, e.g. --set dtype=bf16")

    def with_data_dir(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", default=None,
                       help="where the rate book of measured speeds is kept "
                            "(default: $LAB_DATA_DIR or runs/lab-data, as the app)")

    synth = sub.add_parser("synth", help="synthesize text to a WAV file and print timings")
    synth.add_argument("text")
    synth.add_argument("-o", "--output", default="out.wav",
                       help=f"audio file to write ({', '.join(AUDIO_SUFFIXES)})")
    synth.add_argument("--force", action="store_true",
                       help="overwrite the output if it exists, and run even when the "
                            "estimate refuses")
    with_config(synth)
    with_data_dir(synth)
    synth.set_defaults(func=cmd_synth)

    ev = sub.add_parser("eval", help="print quality meters for a WAV file")
    ev.add_argument("audio")
    ev.add_argument("--text", required=True, help="the text the audio should say")
    ev.add_argument("--ref", help="a reference rendering to compare against")
    ev.set_defaults(func=cmd_eval)

    verdict = sub.add_parser("verdict", help="judge a config against its fp32 reference on "
                                             "sentence sets: pass, fail or inconclusive")
    verdict.add_argument("--sets", default="short", help="the lab's sentence sets, comma-separated")
    verdict.add_argument("--limit", type=int, default=None,
                         help="only the first N sentences of the sets")
    verdict.add_argument("--made-up", type=int, default=0, metavar="N",
                         help="also N made-up sentences (40-60 characters) from the lab's "
                              "generator (seeded): texts no gate was tuned on, as many as a "
                              "WER or CER check needs to be settled")
    verdict.add_argument("--workers", type=int, default=None,
                         help="scoring processes (default: $LAB_SCORE_WORKERS or one per two "
                              "cores)")
    verdict.add_argument("--mos-tolerance", type=float, default=None,
                         help="how far each MOS proxy may drop, as a share of the reference's "
                              "(default 0.05)")
    verdict.add_argument("--wer-points", type=float, default=None,
                         help="how much WER may grow, as a fraction (default 0.02: two points)")
    verdict.add_argument("--cer-points", type=float, default=None,
                         help="how much CER may grow, as a fraction (default 0.02)")
    verdict.add_argument("--json", default=None, help="also write the report as JSON here")
    with_config(verdict)
    with_data_dir(verdict)
    verdict.set_defaults(func=cmd_verdict)

    bench = sub.add_parser("bench", help="run a text set at batch sizes; write JSON/CSV/markdown")
    bench.add_argument("--texts", required=True, help="text file, one utterance per line")
    bench.add_argument("--batch-sizes", type=batch_sizes, default=[1, 4, 8],
                       help="comma-separated, e.g. 1,4,8; a streaming preset streams at batch "
                            "1 and runs larger batches one-shot (say --set stream=false to "
                            "batch every row)")
    bench.add_argument("--repeats", type=int, default=1)
    bench.add_argument("--warmup", type=int, default=1)
    bench.add_argument("--out", default="runs/bench")
    bench.add_argument("--stem", default="bench")
    bench.add_argument("--threads", type=int, default=None,
                       help="intra-op threads to pin for every row (default: PyTorch's "
                            "current count); recorded in each row")
    bench.add_argument("--force", action="store_true",
                       help="run even when the estimate refuses")
    with_config(bench)
    with_data_dir(bench)
    bench.set_defaults(func=cmd_bench)

    app = sub.add_parser("app", help="start the Gradio app")
    app.add_argument("--host", default="127.0.0.1")
    app.add_argument("--port", type=int, default=7860)
    app.add_argument("--data-dir", default=None,
                     help="where votes, reports and traces are kept "
                          "(default: $LAB_DATA_DIR or runs/lab-data)")
    app.add_argument("--no-warm", action="store_true",
                     help="skip loading the default pipeline before the server starts")
    app.set_defaults(func=cmd_app)

    serve = sub.add_parser("serve", help="serve OpenAI's /v1/audio/speech, streaming, for a "
                                         "preset (see docs/serving.md)")
    with_config(serve)
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default: loopback only)")
    serve.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    serve.add_argument("--slots", type=int, default=None,
                       help="streams served at once (default: the memory plan's, printed at "
                            "start; see docs/serving.md)")
    serve.add_argument("--queue", type=int, default=16,
                       help="requests that may wait for a slot; beyond them 429")
    serve.add_argument("--deadline", type=float, default=300.0,
                       help="seconds a request may take from arrival to its last byte")
    serve.add_argument("--keep-alive", type=float, default=None,
                       help="seconds an idle connection stays open (default: 75); keep it "
                            "above your clients' pool expiry (httpx and openai: 5 s)")
    serve.add_argument("--switch-interval", type=float, default=None, metavar="MS",
                       help="how long one thread may hold Python's lock while another waits "
                            "for it (default: well under Python's 5 ms, printed at start), so "
                            "the engine's thread never waits long behind the HTTP thread's")
    serve.add_argument("--engine-process", action=argparse.BooleanOptionalAction,
                       default=None,
                       help="run the pipeline in a process of its own, so the HTTP work does "
                            "not share Python's lock with the engine's thread (default: on "
                            "where the preset runs on CUDA; see docs/serving.md)")
    serve.add_argument("--replicas", type=int, default=None,
                       help="serve from N processes behind Ray Serve's proxy on a local Ray "
                            "cluster: one GPU each where the preset runs on CUDA, else a share "
                            "of the CPU cores each (default: one process, no Ray)")
    serve.set_defaults(func=cmd_serve)

    load = sub.add_parser("loadtest", help="load a speech server on this machine (loopback "
                                           "only): TTFA, latency, stalls; JSON + HTML report")
    loadtest.add_arguments(load)
    load.set_defaults(func=loadtest.run)

    presets = sub.add_parser("presets", help="list shipped presets")
    presets.set_defaults(func=cmd_presets)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
