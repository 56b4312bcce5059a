"""The default voice beside its CPU peers: Piper's own runtime on the same file, and a small voice.

    python benchmarks/voice_peers.py --out benchmarks/results
    python benchmarks/voice_peers.py --limit 3 --rounds 1 --out /tmp/peers   # a smoke run

Rows, each rendering the same sentences (the lab's sets) text in, audio out, one at a time:
- `onnxruntime`: Piper's runtime, onnxruntime on the voice's own ONNX file, fed the ids of the
  voice's own frontend and the voice's length and noise scales: the baseline;
- `lab fp32`, `lab bf16`: the lab's PyTorch port of the same weights through `Pipeline`
  (one-shot, batch 1, no compile unless `--compile` says so);
- `lab fp32 compiled`: `lab fp32` with the compile knob at `default` whatever `--compile` says,
  so one run shows what compiling gives beside the eager row;
- `lab int8-static bf16`: the vocoder's and the flow's convolutions in int8 (calibrated and
  compiled as the pipeline does when the process starts, timed apart as `load_s`), the float
  work between them in bf16;
- `hibari`: the Kokoro-distilled ONNX voice of the `hibari-tts` package (its bundled voice and
  its own G2P, so its ids are its own), a voice users pick instead of Piper's.

Every row runs in its own child process on `--threads` threads: onnxruntime's idle threads spin
and would slow PyTorch in the same process. Each round starts every row's child in turn, so a
slow moment of a shared machine falls on all rows alike; a child warms up on two sentences,
then times `--repeats` passes. RTF is wall time over audio seconds per sentence, the median
over sentences and passes with its min-max; each child's first pass and its later ones are also
reported apart (cold shapes and warmed ones). The first round's children also score their audio
(DNSMOS OVRL and WER, `lab.quality`). A row that cannot run says why and the others go on.
Writes voice_peers.json and .md; `--render` rewrites the markdown from the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from voice_bench import header

from lab.bench.report import command_line, folded, markdown_table, run_meta, write_json
from lab.frontend import sentence_set
from lab.models.piper_voice import VoiceSettings, read_settings, resolve_voice_file

Render = Callable[[str], tuple[np.ndarray, int]]
Row = Callable[[int, str], tuple[Render, list[str]]]
"""(threads, compile knob) -> the row's render function and what its runtime notes about itself."""
BASELINE = "onnxruntime"
COLUMNS = ["row", "rtf", "rtf_vs_onnxruntime", "rtf_of_totals", "first_pass_rtf",
           "later_pass_rtf", "later_vs_onnxruntime", "dnsmos_ovrl", "wer", "audio_s", "passes",
           "load_s", "error"]
RATIOS = {"rtf": "rtf_vs_onnxruntime", "later_pass_rtf": "later_vs_onnxruntime"}


class RowUnavailable(RuntimeError):
    """The row cannot run here (a package or its weights are missing); the message says why."""


def piper_voice_file() -> tuple[Path, VoiceSettings]:
    path = resolve_voice_file("default")
    return path, read_settings(path)[0]


def onnxruntime_row(threads: int, compile_mode: str) -> tuple[Render, list[str]]:
    """onnxruntime on the voice's ONNX file, fed what the lab's pipeline feeds its port: the
    voice frontend's ids, the voice's own scales (the pipeline's defaults) and its gap between
    sentences."""
    import onnxruntime as ort

    from lab.frontend import prepare
    from lab.pipeline import SENTENCE_GAP_S

    path, s = piper_voice_file()
    scales = np.array([s.noise_scale, s.length_scale, s.noise_w], dtype=np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    gap = np.zeros(round(SENTENCE_GAP_S * s.sample_rate), dtype=np.float32)

    def sentence(ids: list[int]) -> np.ndarray:
        feed = {"input": np.array([ids], dtype=np.int64),
                "input_lengths": np.array([len(ids)], dtype=np.int64), "scales": scales}
        return session.run(None, feed)[0].reshape(-1)

    def render(text: str) -> tuple[np.ndarray, int]:
        pieces = [sentence(ids) for ids in prepare(text, s.phoneme_id_map, s.espeak_voice).ids]
        joined = [part for i, p in enumerate(pieces) for part in ([gap, p] if i else [p])]
        return np.concatenate(joined), s.sample_rate

    return render, []


def lab_row(dtype: str, own_compile: str | None = None, quant: str = "none") -> Row:
    """The lab in `dtype` with `quant`, compiled as `--compile` says, or as `own_compile` when
    given."""

    def build(threads: int, compile_mode: str) -> tuple[Render, list[str]]:
        """The lab as a request runs it; its notes are the pipeline's fallbacks (on a CPU
        without native bf16, that bf16 is emulated)."""
        import torch

        from lab.config import PipelineConfig
        from lab.pipeline import Pipeline

        torch.set_num_threads(threads)
        pipe = Pipeline(PipelineConfig(device="cpu", dtype=dtype, quant=quant,
                                       compile=own_compile or compile_mode,
                                       stream=False, batch_size=1))

        def render(text: str) -> tuple[np.ndarray, int]:
            result = pipe.synthesize(text)
            return result.audio, result.sample_rate

        return render, pipe.fallbacks

    return build


def hibari_row(threads: int, compile_mode: str) -> tuple[Render, list[str]]:
    """hibari's bundled voice; any other voice would be a download, so none is tried."""
    try:
        from hibari import Hibari
        from hibari.voices import DEFAULT, voice_path
    except ImportError as err:
        raise RowUnavailable(f"hibari-tts is not installed ({err}); "
                             "pip install 'tts-lab[bench]'") from err
    try:
        model = voice_path(DEFAULT, download_missing=False)
    except FileNotFoundError as err:
        raise RowUnavailable(f"hibari's voice {DEFAULT!r} is not bundled here ({err})") from err
    tts = Hibari(voice=DEFAULT, model=model, threads=threads)
    return (lambda text: (tts(text, seed=0), tts.sample_rate)), []


ROWS: dict[str, Row] = {
    BASELINE: onnxruntime_row, "lab fp32": lab_row("fp32"),
    "lab fp32 compiled": lab_row("fp32", own_compile="default"), "lab bf16": lab_row("bf16"),
    "lab int8-static bf16": lab_row("bf16", quant="int8-static"), "hibari": hibari_row}


def timed_passes(render: Render, texts: list[str], repeats: int) -> tuple[list, list]:
    """Per pass, per text: wall seconds and audio seconds; and the last pass's audio."""
    for text in texts[:2]:
        render(text)
    passes, takes = [], []
    for _ in range(repeats):
        one, takes = [], []
        for text in texts:
            start = time.perf_counter()
            audio, rate = render(text)
            one.append((time.perf_counter() - start, len(audio) / rate))
            takes.append((audio, rate))
        passes.append(one)
    return passes, takes


def scores(texts: list[str], takes: list) -> dict:
    from lab.quality import evaluate, mean_scores

    mean = mean_scores([evaluate(a, rate, t) for t, (a, rate) in zip(texts, takes, strict=True)])
    return {"dnsmos_ovrl": mean.mos.ovrl, "wer": mean.wer}


def child(args: argparse.Namespace) -> None:
    """One row in this process; writes its figures (or why it could not run) to --result."""
    texts = texts_of(args)
    out: dict = {"row": args.child}
    try:
        start = time.perf_counter()
        render, out["notes"] = ROWS[args.child](args.threads, args.compile)
        out["load_s"] = time.perf_counter() - start
        out["passes"], takes = timed_passes(render, texts, args.repeats)
        if args.score:
            out.update(scores(texts, takes))
    except RowUnavailable as err:
        out["error"] = str(err)
    Path(args.result).write_text(json.dumps(out))


def run_child(name: str, args: argparse.Namespace, score: bool) -> dict:
    """Run one row's child; a crash becomes the row's recorded error, not the run's end."""
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "row.json"
        cmd = [sys.executable, __file__, "--child", name, "--result", str(result),
               "--threads", str(args.threads), "--repeats", str(args.repeats),
               "--compile", args.compile, "--sets", *args.sets,
               *(["--limit", str(args.limit)] if args.limit else []),
               *(["--score"] if score else [])]
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if done.returncode != 0 or not result.exists():
            tail = done.stderr.strip().splitlines()[-3:]
            return {"row": name, "error": f"child exited {done.returncode}: {' / '.join(tail)}"}
        return json.loads(result.read_text())


def summary(name: str, runs: list[dict]) -> dict:
    """One table row from a row's children: RTF over sentences x passes, scores, errors."""
    failed = [r["error"] for r in runs if "error" in r]
    passes = [p for r in runs for p in r.get("passes", [])]
    if not passes:
        return {"row": name, "error": failed[0] if failed else "no passes"}
    rtfs = [wall / audio for p in passes for wall, audio in p if audio > 0]
    totals = [pass_rtf(p) for p in passes]
    scored = next((r for r in runs if "wer" in r), {})
    row = {"row": name, "rtf": statistics.median(rtfs), "rtf_min": min(rtfs),
           "rtf_max": max(rtfs), "rtf_of_totals": statistics.median(totals),
           "dnsmos_ovrl": scored.get("dnsmos_ovrl"), "wer": scored.get("wer"),
           "audio_s": sum(a for _, a in passes[0]), "passes": len(passes),
           "load_s": statistics.median(r["load_s"] for r in runs if "load_s" in r),
           "pass_rtf": totals, "notes": sorted({n for r in runs for n in r.get("notes", [])}),
           **pass_split([r["passes"] for r in runs if r.get("passes")])}
    if failed:
        row["error"] = f"{len(failed)} of {len(runs)} children failed: {failed[0]}"
    return row


def pass_rtf(one_pass: list) -> float:
    return sum(w for w, _ in one_pass) / sum(a for _, a in one_pass)


def pass_split(children: list[list]) -> dict:
    """RTF of each child's first timed pass and of its later ones (medians over children).

    A child's first pass meets most sentence lengths for the first time in its process. The
    lab rows' oneDNN convolutions build a kernel per new input shape (padded to 32 frame
    lengths, so a long-lived process pays each once), onnxruntime's do not: the split shows
    the cold and the warmed cost apart."""
    first = [pass_rtf(passes[0]) for passes in children]
    later = [pass_rtf(p) for passes in children for p in passes[1:]]
    return {"first_pass_rtf": statistics.median(first),
            "later_pass_rtf": statistics.median(later) if later else None}


def with_ratio(rows: list[dict]) -> list[dict]:
    """Each row's median RTFs over the baseline's: below 1 is faster than onnxruntime."""
    base = next((r for r in rows if r["row"] == BASELINE), {})
    return [{**r, **{ratio: r[key] / base[key] for key, ratio in RATIOS.items()
                     if r.get(key) is not None and base.get(key)}} for r in rows]


def texts_of(args: argparse.Namespace) -> list[str]:
    texts = [t for name in args.sets for t in sentence_set(name)]
    return texts[: args.limit] if args.limit else texts


def measure(args: argparse.Namespace) -> dict:
    runs: dict[str, list[dict]] = {name: [] for name in args.rows}
    for round_ in range(args.rounds):
        for name in args.rows:
            runs[name].append(run_child(name, args, score=round_ == 0))
            print(json.dumps({k: v for k, v in runs[name][-1].items() if k != "passes"}),
                  flush=True)
    rows = with_ratio([summary(name, r) for name, r in runs.items()])
    path, _ = piper_voice_file()
    return {
        "meta": run_meta(command="python " + command_line(sys.argv), threads=args.threads,
                         repeats=f"{args.rounds} rounds x {args.repeats} passes",
                         sets=args.sets, sentences=len(texts_of(args)),
                         phonemes="espeak-ng, through the voice's frontend"),
        "weights": f"real: the Piper voice `{path.name}` (its ONNX file for onnxruntime, "
                   "the same weights in PyTorch for the lab); hibari's bundled voice",
        "baseline": "onnxruntime on the same ONNX file, same ids and scales, own process",
        "compile": args.compile,
        "anomalies": [f"{r['row']}: {r['error']}" for r in rows if "error" in r],
        "rows": rows}


def write(result: dict, out: Path, stem: str) -> None:
    write_json(result, out, stem)
    rows = [folded(r) for r in result["rows"]]
    cols = [c for c in COLUMNS if any(r.get(c) is not None for r in rows)]
    parts = [f"# The default voice beside its CPU peers ({result['meta'].get('device', '')})",
             *header(result), "",
             "`rtf` is wall time over audio seconds per sentence, text in and audio out, the "
             "median (min-max) over sentences and passes; `rtf_vs_onnxruntime` divides it by "
             "the onnxruntime row's (below 1: faster than Piper's runtime); `rtf_of_totals` "
             "is the median pass's total wall time over its audio; `first_pass_rtf` is that "
             "for each child's first timed pass (sentence lengths new to the process), "
             "`later_pass_rtf` for the passes after it, and `later_vs_onnxruntime` divides "
             "the latter by onnxruntime's. Sound: DNSMOS OVRL and "
             "WER (pocketsphinx) averaged over the first round's sentences.", "",
             markdown_table(rows, cols)]
    notes = [f"- {r['row']}: {n}" for r in result["rows"] for n in r.get("notes", [])]
    if notes:
        parts += ["What each runtime noted about itself:", "", *notes]
    parts += [f"\n{note}" for note in result.get("notes", [])]  # hand-written, kept by --render
    (out / f"{stem}.md").write_text("\n".join(parts) + "\n")
    print("\n".join(parts))


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=list(ROWS))
    ap.add_argument("--sets", nargs="+", default=["short", "medium", "long"])
    ap.add_argument("--limit", type=int, help="only the first N sentences (a smoke run)")
    ap.add_argument("--rounds", type=int, default=3, help="children per row, interleaved")
    ap.add_argument("--repeats", type=int, default=2, help="timed passes per child")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--compile", default="none", help="the lab rows' compile knob")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--stem", default="voice_peers")
    ap.add_argument("--render", action="store_true", help="rewrite the .md from the .json")
    ap.add_argument("--child", choices=list(ROWS), help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--score", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        child(args)
    elif args.render:
        write(json.loads((args.out / f"{args.stem}.json").read_text()), args.out, args.stem)
    else:
        write(measure(args), args.out, args.stem)


if __name__ == "__main__":
    main()
