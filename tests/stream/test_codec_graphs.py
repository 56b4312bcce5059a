"""Which batch buckets and windows a codec's CUDA graphs capture through its compiled decode.

The captures themselves need a CUDA device (`tests/models/test_latent_codec.py`); what is
checked here is the rule that keeps a compiled decode to one compile: no bucket of 1, and
one-frame windows captured with the compiled part run eagerly.
"""

from __future__ import annotations

import torch

from lab.quant.compile import EagerOnFailure
from lab.stream.codec_graphs import BATCHES, graph_buckets, uncompiled_for


def _double(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_a_compiled_decode_has_no_bucket_of_one_unless_one_is_all_there_is():
    assert graph_buckets(BATCHES, 8, compiled=False) == (1, 2, 4, 8)
    assert graph_buckets(BATCHES, 8, compiled=True) == (2, 4, 8)
    assert graph_buckets(BATCHES, 3, compiled=True) == (2, 3)
    assert graph_buckets(BATCHES, 1, compiled=True) == (1,)


def test_one_frame_windows_run_the_compiled_part_eagerly_and_only_while_captured():
    notes: list[str] = []
    part = EagerOnFailure(_double, "default", "test", notes, dynamic=True)
    assert part.compiles and part.fn is not _double  # compiled lazily: nothing runs yet
    compiled_fn = part.fn
    with uncompiled_for(part, frames=1):
        assert part.fn is _double
        assert torch.equal(part(torch.ones(1, 1)), torch.full((1, 1), 2.0))
    assert part.fn is compiled_fn
    with uncompiled_for(part, frames=2):
        assert part.fn is compiled_fn
    with uncompiled_for(None, frames=1):  # nothing compiled: nothing to switch
        pass
    assert not notes


def test_the_eager_switch_is_undone_when_the_capture_fails():
    part = EagerOnFailure(_double, "default", "test", [], dynamic=True)
    compiled_fn = part.fn
    try:
        with part.eagerly():
            raise RuntimeError("capture failed")
    except RuntimeError:
        pass
    assert part.fn is compiled_fn


def test_an_uncompiled_part_says_so():
    assert not EagerOnFailure(_double, "none", "test", [], dynamic=True).compiles
