"""The baseline's scores on disk: a hit returns the same scores without rendering or scoring,
and the key follows every input the baseline depends on."""

from __future__ import annotations

import time

import numpy as np
import pytest

from lab.config import PipelineConfig, to_dict
from lab.quality.score_cache import ScoreCache, Scored, cache_key
from lab.quality.verdicts import renderer, scored_baseline


def test_key_changes_with_text_config_and_seed():
    texts, cfg = ["One sentence.", "Another one."], PipelineConfig(device="cpu")
    key = cache_key(texts, to_dict(cfg), cfg.seed)
    assert key == cache_key(list(texts), to_dict(PipelineConfig(device="cpu")), 0)
    changed = [
        cache_key(texts[::-1], to_dict(cfg), 0),
        cache_key([*texts, "A third."], to_dict(cfg), 0),
        cache_key(["One sentence!", texts[1]], to_dict(cfg), 0),
        cache_key(texts, to_dict(cfg.replace(dtype="bf16")), 0),
        cache_key(texts, to_dict(cfg.replace(noise_scale=0.5)), 0),
        cache_key(texts, to_dict(cfg), 1),
    ]
    assert key not in changed and len(set(changed)) == len(changed)


def test_a_hit_returns_identical_scores_without_rendering_and_faster(voice_pipeline,
                                                                     tmp_path):
    cache = ScoreCache(tmp_path / "cache")
    texts = ["The kettle clicked off.", "Please leave the folder."]
    cfg = to_dict(voice_pipeline.config)
    calls = []

    def render():
        calls.append(1)
        return renderer(voice_pipeline)

    started = time.perf_counter()
    first, hit = scored_baseline(texts, cfg, 0, render, cache=cache, workers=1)
    cold = time.perf_counter() - started
    assert not hit and calls == [1]
    started = time.perf_counter()
    again, hit = scored_baseline(texts, cfg, 0, render, cache=cache, workers=1)
    warm = time.perf_counter() - started
    assert hit and calls == [1], "a hit must not load or render the baseline"
    assert again.scores == first.scores and again.texts == texts
    assert all(np.array_equal(a, b) for a, b in zip(again.audio, first.audio, strict=True))
    assert warm < cold / 10, f"cache hit took {warm:.3f} s against {cold:.3f} s to score"
    _, hit = scored_baseline(texts, cfg, 1, render, cache=cache, workers=1)
    assert not hit and calls == [1, 1], "another seed is another baseline"


def test_an_unreadable_entry_is_a_miss(tmp_path):
    cache = ScoreCache(tmp_path)
    cache.path("abc").write_bytes(b"not a zip file")
    assert cache.load("abc") is None and cache.load("missing") is None
    with pytest.raises(ValueError, match="one rendering and one score per text"):
        cache.save("abc", Scored(["a"], [], 22050, []))
