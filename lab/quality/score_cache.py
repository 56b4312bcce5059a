"""The baseline's renderings and scores, kept on disk per (text set, config, seed).

A sweep judges many candidates against one baseline, and the app's quality check judges every
take against the same fp32 reference: rendering and scoring that baseline again each time is
half of all metering. The baseline is a pure function of the sentences, its config (seed
included) and the meters, so its audio and scores are stored under a hash of exactly those;
changing any of them changes the key, and a stale entry is simply never asked for again.

Entries live under the lab's data folder (`runs/lab-data/score-cache` unless
$LAB_DATA_DIR moves it), one `.npz` per key: the audio as float32 plus the scores as JSON.
Writes go to a temporary file that is renamed into place, so a killed run leaves no half entry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from lab.data_dir import data_dir
from lab.quality.fidelity import Fidelity
from lab.quality.mos import mos_fields
from lab.quality.report import QualityScores

CACHE_VERSION = 1
"""Bump when a meter's procedure changes; every old entry then misses."""


@dataclass(frozen=True)
class Scored:
    """Renderings of a sentence set with their scores, in sentence order."""

    texts: list[str]
    audio: list[np.ndarray]
    sample_rate: int
    scores: list[QualityScores]


def cache_key(texts: Sequence[str], config: Mapping, seed: int) -> str:
    """A hash of everything the baseline depends on: the sentences in order, the config as a
    plain mapping, the seed, the meters' fields and the cache version."""
    payload = {"version": CACHE_VERSION, "texts": list(texts), "config": dict(config),
               "seed": int(seed), "mos": mos_fields(),
               "fidelity": [f.name for f in fields(Fidelity)]}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class ScoreCache:
    """Scored baselines on disk, one file per key."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else data_dir() / "score-cache"

    def path(self, key: str) -> Path:
        return self.root / f"{key}.npz"

    def load(self, key: str) -> Scored | None:
        """The entry for `key`, or None when there is none (or it cannot be read)."""
        path = self.path(key)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                audio = [data[f"audio_{i}"] for i in range(len(meta["texts"]))]
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError):
            return None
        scores = [QualityScores.from_dict(s) for s in meta["scores"]]
        return Scored(meta["texts"], audio, meta["sample_rate"], scores)

    def save(self, key: str, scored: Scored) -> Path:
        if not len(scored.texts) == len(scored.audio) == len(scored.scores):
            raise ValueError("a scored baseline needs one rendering and one score per text")
        self.root.mkdir(parents=True, exist_ok=True)
        meta = {"texts": list(scored.texts), "sample_rate": int(scored.sample_rate),
                "scores": [s.to_dict() for s in scored.scores]}
        arrays = {f"audio_{i}": np.asarray(a, dtype=np.float32)
                  for i, a in enumerate(scored.audio)}
        handle, tmp = tempfile.mkstemp(dir=self.root, suffix=".npz.tmp")
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez(out, meta=json.dumps(meta), **arrays)
            os.replace(tmp, self.path(key))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return self.path(key)
