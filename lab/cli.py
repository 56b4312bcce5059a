"""Command line: `lab synth`, `lab eval`, `lab bench`, `lab app`, `lab presets`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from lab.config import ConfigError, PipelineConfig, list_presets, load_preset


def _overrides(pairs: list[str]) -> dict:
    """`key=value` pairs, values read as YAML so numbers and booleans keep their types."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        out[key.strip()] = yaml.safe_load(value)
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

    pipe = Pipeline(_config(args))
    result = pipe.synthesize(args.text)
    sf.write(args.output, result.audio, result.sample_rate)
    m = result.metrics
    rows = [(f"stage {k}", f"{v:9.1f} ms") for k, v in m.stages.items()]
    rows += [("ttfb", f"{m.ttfb_ms:9.1f} ms"), ("total", f"{m.total_ms:9.1f} ms"),
             ("audio", f"{m.audio_seconds:9.2f} s"), ("real-time factor", f"{m.rtf:9.3f}"),
             ("audio s per s", f"{m.audio_seconds_per_second:9.2f}"),
             ("peak memory", f"{m.peak_memory_mb:9.1f} MB")]
    rows += [("fallback", note) for note in result.fallbacks]
    rows += [("warning", note) for note in result.warnings]
    _print_table(rows)
    print(f"wrote {args.output}")


def _read_audio(path: str):
    import soundfile as sf

    if not Path(path).exists():
        raise ConfigError(f"audio file not found: {path}")
    audio, rate = sf.read(path, dtype="float32", always_2d=True)
    return audio.mean(axis=1), rate


def cmd_eval(args: argparse.Namespace) -> None:
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
    if reference is not None:
        baseline = evaluate(reference, rate, args.text)
        print()
        print(compare(scores, baseline).to_markdown())


def cmd_bench(args: argparse.Namespace) -> None:
    from lab.bench.report import write_report
    from lab.bench.runner import run_text_set
    from lab.pipeline import Pipeline

    path = Path(args.texts)
    if not path.exists():
        raise ConfigError(f"text file not found: {args.texts}")
    texts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    sizes = [int(s) for s in args.batch_sizes.split(",")]
    base = _config(args)
    rows = run_text_set(lambda size: Pipeline(base.replace(batch_size=size)), texts, sizes,
                        repeats=args.repeats, warmup=args.warmup)
    paths = write_report(rows, args.out, args.stem,
                         meta={"preset": str(args.preset), "texts": str(args.texts)})
    print(paths.markdown.read_text())


def cmd_app(args: argparse.Namespace) -> None:
    from lab.ui import launch

    launch(host=args.host, port=args.port)


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
    synth.add_argument("-o", "--output", default="out.wav")
    with_config(synth)
    synth.set_defaults(func=cmd_synth)

    ev = sub.add_parser("eval", help="print quality meters for a WAV file")
    ev.add_argument("audio")
    ev.add_argument("--text", required=True, help="the text the audio should say")
    ev.add_argument("--ref", help="a reference rendering to compare against")
    ev.set_defaults(func=cmd_eval)

    bench = sub.add_parser("bench", help="run a text set at batch sizes; write JSON/CSV/markdown")
    bench.add_argument("--texts", required=True, help="text file, one utterance per line")
    bench.add_argument("--batch-sizes", default="1,4,8")
    bench.add_argument("--repeats", type=int, default=1)
    bench.add_argument("--warmup", type=int, default=1)
    bench.add_argument("--out", default="runs/bench")
    bench.add_argument("--stem", default="bench")
    with_config(bench)
    bench.set_defaults(func=cmd_bench)

    app = sub.add_parser("app", help="start the Gradio app")
    app.add_argument("--host", default="127.0.0.1")
    app.add_argument("--port", type=int, default=7860)
    app.set_defaults(func=cmd_app)

    presets = sub.add_parser("presets", help="list shipped presets")
    presets.set_defaults(func=cmd_presets)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        args.func(args)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
