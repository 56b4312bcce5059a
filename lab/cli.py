"""Command line: `lab synth`, `lab eval`, `lab bench`, `lab app`, `lab presets`.

Exit codes: 0 success, 1 a quality verdict of FAIL (`lab eval --ref`), 2 bad input (a clear
one-line message on stderr, nothing written).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import yaml

from lab.config import ConfigError, PipelineConfig, list_presets, load_preset

AUDIO_SUFFIXES = (".wav", ".flac", ".ogg")


def _overrides(pairs: list[str]) -> dict:
    """`key=value` pairs, values read as YAML so numbers and booleans keep their types.

    A dotted key (`sampling.temperature=0.7`) changes one field of a nested block.
    """
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


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
    return load_preset(args.preset, **_overrides(args.set))


def _print_table(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")


def cmd_synth(args: argparse.Namespace) -> None:
    import soundfile as sf

    from lab.pipeline import Pipeline

    out = output_path(args.output, args.force)
    pipe = Pipeline(_config(args))
    result = pipe.synthesize(args.text)
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
            ("DNSMOS P.808", f"{m.p808:.2f}"), ("transcript", scores.transcript),
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


def cmd_bench(args: argparse.Namespace) -> None:
    from lab.bench.report import write_report
    from lab.bench.runner import run_text_set
    from lab.pipeline import Pipeline

    path = Path(args.texts)
    if not path.exists():
        raise ConfigError(f"text file not found: {args.texts}")
    texts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    base = _config(args)
    rows = run_text_set(lambda size: Pipeline(base.replace(batch_size=size)), texts,
                        args.batch_sizes, repeats=args.repeats, warmup=args.warmup)
    paths = write_report(rows, args.out, args.stem,
                         meta={"preset": str(args.preset), "overrides": " ".join(args.set),
                               "texts": str(args.texts)})
    print(paths.markdown.read_text())


def cmd_app(args: argparse.Namespace) -> None:
    from lab.ui import launch

    launch(host=args.host, port=args.port, data_dir=args.data_dir, warm=not args.no_warm)


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

    synth = sub.add_parser("synth", help="synthesize text to a WAV file and print timings")
    synth.add_argument("text")
    synth.add_argument("-o", "--output", default="out.wav",
                       help=f"audio file to write ({', '.join(AUDIO_SUFFIXES)})")
    synth.add_argument("--force", action="store_true", help="overwrite the output if it exists")
    with_config(synth)
    synth.set_defaults(func=cmd_synth)

    ev = sub.add_parser("eval", help="print quality meters for a WAV file")
    ev.add_argument("audio")
    ev.add_argument("--text", required=True, help="the text the audio should say")
    ev.add_argument("--ref", help="a reference rendering to compare against")
    ev.set_defaults(func=cmd_eval)

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
    with_config(bench)
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
