"""The lab's own sentence sets, shipped inside the package as text files in lab/data/sentences.

Benchmarks and quality checks read the same fixed sets, so numbers from two runs, or two
machines, describe the same work.
"""

from __future__ import annotations

from pathlib import Path

# Package data, so an installed lab (a wheel, `pip install .`) has them as well as a checkout.
SENTENCE_DIR = Path(__file__).resolve().parents[1] / "data" / "sentences"


def list_sentence_sets() -> list[str]:
    return sorted(p.stem for p in SENTENCE_DIR.glob("*.txt"))


def sentence_set(name: str) -> list[str]:
    """The non-blank lines of lab/data/sentences/<name>.txt, one input text per line."""
    path = SENTENCE_DIR / f"{name}.txt"
    if not name or "/" in name or "\\" in name or not path.is_file():
        raise ValueError(f"sentence set {name!r} not found; sets are {list_sentence_sets()}")
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip()]
