"""How should the lab's voice sample? Quality against temperature on unseen sentences.

    python benchmarks/voice_sampling.py --sentences 40 --temperatures 0.2 0.4 0.7 1.0
    python benchmarks/voice_sampling.py --sets short medium long --temperatures 0.4 \
        --stem voice_sampling_sets

Renders generated held-out sentences (never trained on, and not the lab's sentence sets, so
the choice is not tuned to the sets every other table reports on) with the `ar-voice` family at
each temperature, same seeds, and the teacher (the embedded Piper voice) once; meters every take
with DNSMOS OVRL and pocketsphinx WER. The teacher's own WER is the recogniser's floor on these
texts: the voice's gap to the teacher is what its training left, the floor is the meter's.
`--sets` scores the lab's own sentence sets instead, once a temperature is chosen: the verdict on
the sentences every other table reports. `--plain-sum` adds, per temperature, the same tokens
decoded by the plain sum of codebook rows instead of the voice's learned codec decoder
(`lab.models.latent_decoder`): what that decoder is worth on the voice's own speech.
Writes <stem>.json and <stem>.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import torch
from tqdm import tqdm

from lab.bench.report import markdown_table, run_meta
from lab.config import load_preset
from lab.frontend import sentence_set
from lab.models.voice_weights import CODEBOOK_FILE, LM_FILE, WEIGHTS_DIR
from lab.pipeline import Pipeline
from lab.quality.report import evaluate
from lab.training.textgen import make_split

HELD_OUT_OFFSET = 100
"""The sentences start this far into the generated held-out list, past those the endings
benchmark and the knob tables draw from."""


def choose_texts(sets: list[str], n_generated: int) -> list[str]:
    if sets:
        return [t for name in sets for t in sentence_set(name)]
    return make_split(0, HELD_OUT_OFFSET + n_generated, 0).held_out[-n_generated:]


def scored(pipe: Pipeline, texts: list[str], label: str) -> dict:
    takes = pipe.synthesize_batch(texts)
    scores = [evaluate(t.audio, t.sample_rate, text)
              for t, text in tqdm(zip(takes, texts, strict=True), total=len(texts), desc=label)]
    return {"config": label, "dnsmos_ovrl": round(statistics.fmean(s.mos.ovrl for s in scores), 3),
            "wer": round(statistics.fmean(s.wer for s in scores), 3),
            "audio_s": round(sum(len(t.audio) / t.sample_rate for t in takes), 1)}


def without_decoder(folder: Path) -> Path:
    """The shipped LM and codebooks without the learned decoder, in `folder`."""
    for name in (LM_FILE, CODEBOOK_FILE):
        shutil.copy(WEIGHTS_DIR / name, folder / name)
    return folder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sentences", type=int, default=40)
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.2, 0.4, 0.7, 1.0])
    ap.add_argument("--sets", nargs="*", default=[], help="the lab's sets instead of generated")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--plain-sum", action="store_true",
                    help="also decode the same tokens by the plain sum of codebook rows")
    ap.add_argument("--stem", default="voice_sampling")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    args = ap.parse_args()
    torch.set_num_threads(2)
    texts = choose_texts(args.sets, args.sentences)
    rows = []
    teacher = Pipeline(load_preset("cpu-default"))
    try:
        rows.append(scored(teacher, texts, "teacher"))
    finally:
        teacher.close()
    plain = without_decoder(Path(tempfile.mkdtemp())) if args.plain_sum else None
    for temperature, model in [(t, m) for t in args.temperatures for m in ("default", plain)
                               if m]:
        voice = Pipeline(load_preset("ar-voice-cpu", batch_size=args.batch_size, model=str(model),
                                     **{"sampling.temperature": temperature}))
        label = f"temperature {temperature}" + (", plain sum" if model != "default" else "")
        try:
            rows.append(scored(voice, texts, label))
        finally:
            voice.close()
    choice = f"--sets {' '.join(args.sets)}" if args.sets else f"--sentences {args.sentences}"
    choice += " --plain-sum" if args.plain_sum else ""
    floor = rows[0]["wer"]
    for row in rows:
        row["wer_above_teacher"] = round(row["wer"] - floor, 3)
    print(markdown_table(rows, list(rows[0])))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.stem}.json").write_text(json.dumps(
        {"meta": run_meta(), "texts": texts, "rows": rows}, indent=1))
    which = (f"the lab's {', '.join(args.sets)} sentence sets" if args.sets else
             "generated held-out sentences (never trained on, not the lab's sentence sets)")
    (args.out / f"{args.stem}.md").write_text(
        "# The lab's voice: sampling temperature against quality\n\n"
        f"{len(texts)} sentences: {which}; real weights, same seeds in every row, batch of "
        f"{args.batch_size}; top-p and top-k as the `ar-voice-cpu` preset. Command: `python "
        f"benchmarks/voice_sampling.py {choice} --temperatures "
        f"{' '.join(map(str, args.temperatures))} --stem {args.stem}`.\n\n"
        + markdown_table(rows, list(rows[0])))


if __name__ == "__main__":
    main()
