"""The seed projects' own speed units on the lab: latency for a 50-character input, and
utterances per second.

    python benchmarks/seed_units.py --quick --device cpu --out /tmp/seeds
    python benchmarks/seed_units.py --record-phonemes benchmarks/seed_units_phonemes.json
    python benchmarks/seed_units.py --device cuda --phonemes benchmarks/seed_units_phonemes.json

The projects the lab's users came from quote speed in two units: the latency of one
50-character input (800 ms on a V100, aiming under 200 ms) and the utterances rendered per
second (15/s, aiming over 50/s). This script measures both for three families, each at its
preset for the device: the default voice and the lab's autoregressive voice (real weights), and
the Orpheus-3B shape (dummy weights, which measure speed only; a CPU runs the tiny Orpheus LM
in its place). Per family:

1. latency_50: one sentence of 48-52 characters at batch 1, one-shot, from the call to the
   complete audio; then the same sentence streamed, for the time to first audio (TTFA).
2. utterances_per_s: N different such sentences handed to the pipeline in one call with
   `batch_size` set to each `--batch` value. The pipeline batches them its own way (padded
   batches for the voice, continuous batching over that many slots for the autoregressive
   families); the figure is N over the call's wall time.

Every figure is warm: each pipeline warms itself at load (compile, graph capture), and each
timed path then runs once untimed (the sentence, its stream, one full batch) before its
repeats. The sentences come from `lab.frontend.fixed_length_sentences` with a fixed seed.

Where espeak-ng is missing (the GPU image), record the sentences' phonemes where it is and
replay them (voice_bench's table): the voices then read exactly the ids espeak-ng gives. A
recording covers a GPU run's sentences, or `--n` of them. Where the voice's package is missing
too, pass `--voice DIR`, a folder written by `lab.models.piper_voice.export_voice`. A family
that cannot run gets a row saying why, and the others go on. Writes <stem>.json and <stem>.md;
`--render` rewrites the markdown from the JSON. Hand-written remarks go in the JSON's `notes`
and `anomalies` lists.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm
from voice_bench import compiled_graphs, header, record_phonemes, replay_phonemes

from lab.bench.report import PASS_PREFIX, command_line, folded, markdown_table, run_meta, write_json
from lab.config import PipelineConfig, load_preset
from lab.frontend import fixed_length_sentences
from lab.metrics.repeats import Spread, pinned_threads, timed_repeats
from lab.pipeline import Pipeline

SEED = {"latency_ms": {"gpu": "V100", "baseline": 800.0, "target": 200.0, "higher": False},
        "utterances_per_s": {"gpu": "V100", "baseline": 15.0, "target": 50.0, "higher": True}}
"""The seed projects' figures (a V100) and targets, in the lab's two columns."""
SENTENCE_SEED, LOW, HIGH = 0, 48, 52
DUMMY_TOKENS = 280
"""Orpheus tokens per dummy utterance: 40 frames of 7 codes, 3.4 s of audio, what 50 characters
take at the lab's working pace of about 15 a second (`lab.estimate.AUDIO_S_PER_CHAR`)."""
DEFAULTS = {"cpu": {"batch": "1,4", "n": 8, "repeats": 3},
            "cuda": {"batch": "1,8,32", "n": 32, "repeats": 3}}


@dataclass(frozen=True)
class Subject:
    """A family as this benchmark runs it: its preset and label on each device, and what is
    done to each of its pipelines once loaded."""

    presets: dict[str, str]
    labels: dict[str, str]
    overrides: dict[str, object] = field(default_factory=dict)
    voice_model: Callable[[Path, Path], str] | None = None
    """The `model` that makes the family read an exported voice (given it and a scratch
    folder); None for a family that reads no Piper voice."""
    after_load: Callable[[Pipeline], None] = lambda pipe: None


def fixed_length(pipe: Pipeline) -> None:
    """Forbid end-of-speech, as orpheus_streams does: random weights stop at random points,
    so each dummy utterance would be a different (and smaller) amount of work than a spoken
    sentence; now each runs to `DUMMY_TOKENS`."""
    from lab.models.orpheus_format import AudioTokenConstraint

    runner = pipe.backend.tts.engine.runner
    runner.logits_processor = AudioTokenConstraint(runner.logits_processor.layout,
                                                   allow_stop=False)


def figure(name: str, values: list[float]) -> dict:
    """A timed figure as report rows carry it: median, min, max and every pass."""
    spread = Spread.of(values)
    return {name: spread.median, f"{name}_min": spread.low, f"{name}_max": spread.high,
            f"{PASS_PREFIX}{name}": list(spread.values)}


def stream_times(pipe: Pipeline, text: str) -> tuple[float, float]:
    """(ms to the first audio, ms to the last) of one streamed rendering, from the call."""
    start, first = time.perf_counter(), None
    for chunk in pipe.stream(text):
        if first is None and len(chunk.audio):
            first = time.perf_counter()
    end = time.perf_counter()
    return ((first or end) - start) * 1e3, (end - start) * 1e3


def latency_row(pipe: Pipeline, text: str, repeats: int) -> dict:
    """Batch 1: one-shot from the call to the complete audio, then streamed, each warmed by
    one untimed call."""
    graphs = compiled_graphs()
    oneshot, results = timed_repeats(lambda: pipe.synthesize_batch([text])[0], repeats)
    streamed = [stream_times(pipe, text) for _ in range(repeats + 1)][1:]
    return {"chars": len(text), **figure("latency_ms", list(oneshot.values)),
            **figure("ttfa_ms", [first for first, _ in streamed]),
            **figure("streamed_ms", [last for _, last in streamed]),
            "audio_s": statistics.median(r.metrics.audio_seconds for r in results),
            "recompiles": compiled_graphs() - graphs}


def throughput_row(pipe: Pipeline, texts: list[str], batch: int, repeats: int) -> dict:
    """All of `texts` in one call, the pipeline batching `batch` at a time; one untimed full
    batch first."""
    pipe.synthesize_batch(texts[:batch])
    graphs = compiled_graphs()
    wall, results = timed_repeats(lambda: pipe.synthesize_batch(texts), repeats, warmup=0)
    audio_s = statistics.median(sum(r.metrics.audio_seconds for r in res) for res in results)
    return {"batch": batch, "n": len(texts),
            **figure("utterances_per_s", [len(texts) / (ms / 1e3) for ms in wall.values]),
            "audio_s": audio_s, "audio_s_per_s": audio_s / (wall.median / 1e3),
            "recompiles": compiled_graphs() - graphs}


def ar_voice_folder(voice: Path, scratch: Path) -> str:
    """The shipped ar-voice weights with `voice` as their teacher: the family reads its teacher
    from `<weights>/voice`, so a scratch folder links the shipped files beside it."""
    from lab.models.voice_weights import WEIGHTS_DIR

    scratch.mkdir(parents=True)
    for path in WEIGHTS_DIR.glob("*.safetensors"):
        (scratch / path.name).symlink_to(path)
    (scratch / "voice").symlink_to(voice.resolve())
    return str(scratch)


SUBJECTS = {
    "piper-vits": Subject({"cpu": "cpu-default", "cuda": "gpu-bf16-compiled"},
                          dict.fromkeys(("cpu", "cuda"), "default voice (piper-vits)"),
                          voice_model=lambda voice, _scratch: str(voice)),
    "ar-voice": Subject({"cpu": "ar-voice-cpu", "cuda": "ar-voice-gpu"},
                        dict.fromkeys(("cpu", "cuda"), "the lab's voice (ar-voice)"),
                        voice_model=ar_voice_folder),
    "orpheus": Subject({"cpu": "orpheus-tiny-cpu", "cuda": "orpheus-3b-dummy-gpu"},
                       {"cpu": "Orpheus shape, tiny LM (not 3B)", "cuda": "Orpheus-3B shape"},
                       {"sampling.max_tokens": DUMMY_TOKENS}, after_load=fixed_length),
}


def config_of(subject: Subject, device: str, voice: Path | None,
              scratch: Path) -> tuple[PipelineConfig, str]:
    """The family's preset for the device with this benchmark's overrides, and the weights it
    loads in words (a scratch folder's name would say nothing)."""
    cfg = load_preset(subject.presets[device]).replace(device=device, **subject.overrides)
    if voice is None or subject.voice_model is None:
        return cfg, cfg.model
    return (cfg.replace(model=subject.voice_model(voice, scratch)),
            f"{cfg.model}, with the voice from {voice}")


def measure_family(subject: Subject, cfg: PipelineConfig, texts: list[str],
                   batches: list[int], repeats: int, bar: tqdm) -> tuple[dict, list[dict]]:
    """The latency row (on a batch-1 pipeline) and one throughput row per batch size; one
    pipeline per batch size, since the batch size sets an autoregressive family's slots."""
    latency, rows = {}, []
    for size in sorted({1, *batches}):
        pipe = Pipeline(cfg.replace(batch_size=size), on_stage=bar.set_postfix_str)
        startup = {k: round(v) for k, v in pipe.startup.items()}
        try:
            subject.after_load(pipe)
            if size == 1:
                bar.set_postfix_str("latency, batch 1")
                latency = {**latency_row(pipe, texts[0], repeats), **startup,
                           "fallbacks": pipe.fallbacks}
                bar.update()
            if size in batches:
                bar.set_postfix_str(f"{len(texts) - 1} utterances, batch {size}")
                rows.append({**throughput_row(pipe, texts[1:], size, repeats), **startup})
                bar.update()
        finally:
            pipe.close()
    return latency, rows


def measure(args: argparse.Namespace, texts: list[str]) -> tuple[list[dict], list[dict]]:
    """Every family's rows; a family that fails says why in its latency row."""
    latency, throughput = [], []
    steps = len(args.families) * (1 + len(args.batch))
    with tempfile.TemporaryDirectory() as scratch, tqdm(total=steps, desc="seed units") as bar:
        for name in args.families:
            bar.set_description(name)
            subject = SUBJECTS[name]
            cfg, model = config_of(subject, args.device, args.voice, Path(scratch) / name)
            ident = {"family": name, "label": subject.labels[args.device],
                     "preset": subject.presets[args.device], "model": model,
                     "weights": cfg.weights}
            try:
                row, rows = measure_family(subject, cfg, texts, args.batch, args.repeats, bar)
            except Exception as err:  # a family that cannot run says why; the rest go on
                latency.append({**ident, "error": f"{type(err).__name__}: {err}"})
                continue
            latency.append({**ident, **row})
            throughput += [{**ident, **r} for r in rows]
    return latency, throughput


def anomalies_of(latency: list[dict], throughput: list[dict]) -> list[str]:
    """What the rows themselves say is off: a family that did not run, a compile during the
    timed passes (so a figure was not warm), an utterance with no audio."""
    notes = [f"{r['label']} did not run: {r['error']}" for r in latency if "error" in r]
    for r in [*latency, *throughput]:
        where = f"{r['label']}, " + (f"batch {r['batch']}" if "batch" in r else "latency")
        if r.get("recompiles"):
            notes.append(f"{where}: torch.compile built {r['recompiles']} graph(s) during the "
                         "timed passes, so those passes were not all warm")
        if r.get("audio_s") == 0:
            notes.append(f"{where}: no audio came out (random weights can end at once)")
    return notes


def weights_line(latency: list[dict]) -> str:
    """Which weights each family ran, in words, with the warning dummy weights need."""
    said = "; ".join(f"{r['label']}: {r['weights']} weights (`model: {r['model']}`)"
                     for r in latency)
    if any(r["weights"] == "dummy" for r in latency):
        said += ". Dummy weights measure speed only, never quality"
    return said


def seed_cells(value: float | None, seed: dict, unit: str, gpu: bool) -> dict:
    """The seed's baseline and target beside a figure, and where the figure stands against
    them (or why it cannot stand beside them). `seed` holds baseline, target, higher."""
    baseline, target, sign = seed["baseline"], seed["target"], 1 if seed["higher"] else -1
    if value is None:
        where = "did not run (see anomalies)"
    elif not gpu:
        where = "not comparable (CPU)"
    elif sign * value > sign * target:
        where = "meets target"
    else:
        where = "beats baseline" if sign * value > sign * baseline else "behind baseline"
        where += ", misses target"
    return {f"seed baseline ({seed['gpu']})": f"{baseline:g}{unit}",
            "seed target": f"{'>' if sign > 0 else '<'} {target:g}{unit}", "vs seed": where}


def baseline_line(seed: dict) -> str:
    lat, ups = seed["latency_ms"], seed["utterances_per_s"]
    return (f"the seed projects' own figures, not re-measured here: {lat['baseline']:g} ms for "
            f"a 50-character input and {ups['baseline']:g} utterances/s on a {lat['gpu']}; "
            f"their targets are < {lat['target']:g} ms and > {ups['target']:g}/s")


def _ident(row: dict) -> dict:
    weights = "dummy: speed only" if row["weights"] == "dummy" else row["weights"]
    return {"family": row["label"], "weights": weights, "preset": row["preset"]}


def latency_cells(result: dict) -> list[dict]:
    seed, gpu = result["seed"]["latency_ms"], result["device"] == "cuda"
    return [{**_ident(r), "latency_ms": (cells := folded(r)).get("latency_ms"),
             **seed_cells(r.get("latency_ms"), seed, " ms", gpu),
             "ttfa_ms": cells.get("ttfa_ms"), "streamed_ms": cells.get("streamed_ms"),
             "audio_s": r.get("audio_s"), "chars": r.get("chars")} for r in result["latency"]]


def throughput_cells(result: dict) -> list[dict]:
    seed, gpu = result["seed"]["utterances_per_s"], result["device"] == "cuda"
    return [{**_ident(r), "batch": r["batch"], "n": r["n"],
             "utterances_per_s": folded(r)["utterances_per_s"],
             **seed_cells(r["utterances_per_s"], seed, "/s", gpu),
             "audio_s_per_s": r["audio_s_per_s"]} for r in result["throughput"]]


def comparability(result: dict) -> str:
    """Whether this run's absolute figures may stand beside the seed's GPU numbers."""
    if result["device"] != "cuda":
        return ("**CPU run: these figures are not comparable to the seed's GPU numbers.** "
                "Absolute times count only from a GPU; the seed columns show what a GPU run "
                "is judged against.")
    return (f"The seed's figures come from a {result['seed']['latency_ms']['gpu']}; this run's "
            f"GPU is "
            f"{result['meta'].get('device')}. A gap to them mixes the hardware with the "
            "software: it says where the lab stands on this GPU, not what the lab alone gained.")


def markdown(result: dict) -> str:
    s = result["sentences"]
    parts = [f"# The seed projects' units: latency for 50 characters and utterances per second "
             f"({result['meta'].get('device', '')})", *header(result), "",
             f"Sentences: made-up, {s['chars']} characters each "
             f"(`lab.frontend.fixed_length_sentences`, seed {s['seed']}): \"{s['latency']}\" "
             f"for latency, {len(s['throughput'])} others for utterances per second.", "",
             "All figures are warmed: each pipeline compiled, captured and warmed itself at "
             "load, and each timed path ran once untimed (the sentence, its stream, one full "
             "batch) before its repeats. Load and warm-up times are in the JSON, outside every "
             "figure.", "", comparability(result), "",
             "## Latency for a 50-character input, batch 1", "",
             "`latency_ms`: one-shot, from the call to the complete audio; `ttfa_ms` and "
             "`streamed_ms`: the same sentence streamed, to its first and its last audio; "
             "median (min-max) over the repeats. `audio_s`: the audio the sentence gave.", "",
             markdown_table(latency_cells(result)),
             "## Utterances per second", "",
             "`utterances_per_s`: n different sentences in one call over its wall time, the "
             "pipeline holding `batch` of them at a time (padded batches for the voice, "
             "continuous batching over `batch` slots for the autoregressive families); median "
             "(min-max) over the repeats. `audio_s_per_s`: audio seconds per wall second, "
             "median pass.", "",
             markdown_table(throughput_cells(result))]
    if result["settings"].get("dummy_tokens"):
        parts += [f"The Orpheus rows run random weights with end-of-speech forbidden, so "
                  f"every utterance is {result['settings']['dummy_tokens']} tokens (40 frames, "
                  "3.4 s of audio), what 50 characters take at the lab's working pace of about "
                  "15 a second (the default voice speaks faster). Left free, random weights "
                  "stop at random points, and each utterance would be a different, smaller "
                  "amount of work.", ""]
    if result.get("notes"):
        parts += ["Notes: " + "\n\n".join(result["notes"]), ""]
    return "\n".join(parts)


def write(result: dict, out: Path, stem: str) -> str:
    write_json(result, out, stem)
    text = markdown(result)
    (out / f"{stem}.md").write_text(text)
    return text


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=tuple(DEFAULTS))
    p.add_argument("--families", default=",".join(SUBJECTS),
                   help=f"comma-separated, of {list(SUBJECTS)}")
    p.add_argument("--repeats", type=int, help="timed passes per figure (default 3; quick 1)")
    p.add_argument("--batch", help="batch sizes for utterances/s (default 1,4 on a CPU, "
                                   "1,8,32 on a GPU)")
    p.add_argument("--n", type=int, help="utterances per throughput figure (default 8 on a "
                                         "CPU, 32 on a GPU or when recording; quick: the "
                                         "largest batch)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 repeat, small n")
    p.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    p.add_argument("--phonemes", type=Path, help="replay phonemes recorded with espeak-ng")
    p.add_argument("--record-phonemes", type=Path,
                   help="write the sentences' phonemes (espeak-ng) to this file and exit")
    p.add_argument("--voice", type=Path, help="the Piper voice as an exported folder, for a "
                                              "machine without the voice's package")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    p.add_argument("--stem", help="output file stem (default seed_units_<device>)")
    p.add_argument("--render", action="store_true",
                   help="rewrite <stem>.md from <stem>.json; measure nothing")
    args = p.parse_args(argv)
    settle(args, p)
    return args


def settle(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """The defaults that depend on the device, on --quick, or on recording (a recording
    serves a GPU run, so it covers a GPU run's sentences)."""
    defaults = DEFAULTS[args.device]
    args.families = args.families.split(",")
    unknown = sorted(set(args.families) - set(SUBJECTS))
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {list(SUBJECTS)}")
    args.batch = [int(b) for b in (args.batch or defaults["batch"]).split(",")]
    args.repeats = args.repeats or (1 if args.quick else defaults["repeats"])
    recorded = DEFAULTS["cuda"]["n"] if args.record_phonemes else defaults["n"]
    args.n = args.n or (max(args.batch) if args.quick else recorded)
    if args.n < max(args.batch):
        parser.error(f"--n {args.n} is below the largest batch {max(args.batch)}, whose "
                     "batches would never be full")
    args.stem = args.stem or f"seed_units_{args.device}"


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.render:
        result = json.loads((args.out / f"{args.stem}.json").read_text())
        print(write(result, args.out, args.stem))
        return
    texts = fixed_length_sentences(args.n + 1, SENTENCE_SEED, LOW, HIGH)
    if args.record_phonemes:
        record_phonemes(texts, str(args.voice or "default"), args.record_phonemes)
        return
    if args.phonemes:
        replay_phonemes(args.phonemes)
    with pinned_threads(args.threads) as threads:
        latency, throughput = measure(args, texts)
    phonemes = (f"replayed from {args.phonemes} (recorded with espeak-ng)" if args.phonemes
                else "espeak-ng")
    meta = run_meta(command=f"python {command_line(sys.argv)}", threads=threads,
                    repeats=args.repeats, phonemes=f"{phonemes}; the Orpheus rows read words")
    orpheus = "orpheus" in args.families
    result = {"meta": meta, "device": args.device, "seed": SEED,
              "weights": weights_line(latency), "baseline": baseline_line(SEED),
              "sentences": {"seed": SENTENCE_SEED, "chars": f"{LOW}-{HIGH}",
                            "latency": texts[0], "throughput": texts[1:]},
              "settings": {"batches": args.batch, "n": args.n, "repeats": args.repeats,
                           "dummy_tokens": DUMMY_TOKENS if orpheus else None,
                           "voice": str(args.voice) if args.voice else None},
              "anomalies": anomalies_of(latency, throughput), "notes": [],
              "latency": latency, "throughput": throughput}
    print(write(result, args.out, args.stem))
    print(f"wrote {args.out / args.stem}.json and .md")


if __name__ == "__main__":
    main()
