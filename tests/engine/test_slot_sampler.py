"""Sampling through fixed, padded buffers (what a CUDA graph replays) gives eager's tokens.

On a machine without CUDA the static path runs uncaptured, which checks the padding, the
scratch slot and the slot updates; with CUDA the same tests also replay real graphs.
"""

import numpy as np
import pytest
import torch

from lab.engine.request import UNIFORM_BLOCK, Request, SamplingParams
from lab.engine.sampler import Candidates
from lab.engine.slot_sampler import UNIFORM, SlotRows, SlotSampler

DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
N_SLOTS, VOCAB, WIDTH = 8, 300, 40
BUCKETS = (1, 2, 4, 8)


def _samplers(device: str, first_id: int = 0) -> tuple[SlotSampler, SlotSampler]:
    """An eager and a static sampler, each over its own zeroed slot state."""
    made = []
    for static in (False, True):
        seen = torch.zeros(N_SLOTS + 1, VOCAB, dtype=torch.bool, device=device)
        last = torch.zeros(N_SLOTS + 1, dtype=torch.long, device=device)
        made.append(SlotSampler(seen, last, BUCKETS, static=static, first_id=first_id))
    return made[0], made[1]


def _requests(slots: list[int], penalty: float, top_k: int = 40) -> list[Request]:
    """Seeded requests in the given slots (a fresh copy each call, so both samplers draw the
    same uniforms)."""
    made = []
    for i, slot in enumerate(slots):
        sampling = SamplingParams(temperature=0.9 if i % 3 else 0.0, top_k=top_k,
                                  top_p=0.9, repetition_penalty=penalty, seed=100 + slot)
        request = Request([1, 2], sampling)
        request.slot = slot
        made.append(request)
    return made


def _shortlist(n: int, generator: torch.Generator, device: str) -> Candidates:
    ids = torch.stack([torch.randperm(VOCAB, generator=generator)[:WIDTH].sort().values
                       for _ in range(n)])
    allowed = torch.rand(n, WIDTH, generator=generator) > 0.2
    return Candidates(ids.to(device), allowed.to(device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shortlisted", [False, True])
def test_padded_sampling_gives_eager_tokens_and_slot_state(device, shortlisted):
    eager, static = _samplers(device)
    generator = torch.Generator().manual_seed(0)
    batches = [[0, 1, 2], [5], [0, 1, 2, 3, 4, 6, 7], [3, 6], [0, 1, 2, 3, 4, 5, 6, 7], [2]]
    for step, slots in enumerate(batches * 3):
        logits = (4 * torch.randn(len(slots), VOCAB, generator=generator)).to(device)
        shortlist = _shortlist(len(slots), generator, device) if shortlisted else None
        penalty = 1.0 if step % 2 else 1.3
        want = eager(_requests(slots, penalty), logits, shortlist).tolist()
        assert static(_requests(slots, penalty), logits, shortlist).tolist() == want
    for name in ("seen", "last_token"):
        assert torch.equal(getattr(static, name)[:N_SLOTS], getattr(eager, name)[:N_SLOTS])
    if device == "cuda":
        assert len(static.captured) == len(BUCKETS) and not static.fallbacks


@pytest.mark.parametrize("device", DEVICES)
def test_a_shortlist_named_by_table_rows_gives_the_tokens_of_its_rows_gathered(device):
    """Rows of a table of shortlists (named on the host, looked up inside the step) sample
    what the same shortlists sample handed over row by row, eagerly or padded, and the step
    reads the table where it lies."""
    eager, static = _samplers(device)
    eager_named, _ = _samplers(device)  # each keeps its own slots' seen tokens
    generator = torch.Generator().manual_seed(4)
    table = _shortlist(5, generator, device)
    for slots in ([0, 1, 2], [5], [3, 4, 6, 7, 0], [1, 2]):
        logits = (4 * torch.randn(len(slots), VOCAB, generator=generator)).to(device)
        named = Candidates(table.ids, table.allowed, rows=[(3 * s + 1) % 5 for s in slots])
        want = eager(_requests(slots, 1.3), logits, named.gathered()).tolist()
        assert eager_named(_requests(slots, 1.3), logits, named).tolist() == want
        assert static(_requests(slots, 1.3), logits, named).tolist() == want
        gathered = named.gathered()
        assert all(t in ids[ok].tolist() for t, ids, ok in zip(want, gathered.ids,
                                                                 gathered.allowed, strict=True))
    (buffers,) = static._buffers.values()
    assert buffers.table.ids is table.ids and buffers.ids is None


@pytest.mark.parametrize("device", DEVICES)
def test_a_narrowed_head_pads_with_token_ids_its_logits_cover(device):
    """Logits of a head narrowed to tokens [100, VOCAB): padding rows of a bucket must gather
    inside that span too, or the captured step indexes out of bounds."""
    first = 100
    eager, static = _samplers(device, first_id=first)
    generator = torch.Generator().manual_seed(1)
    for slots in ([0, 1, 2], [5], [3, 4, 6, 7, 0]):
        logits = torch.randn(len(slots), VOCAB - first, generator=generator).to(device)
        ids = torch.stack([first + torch.randperm(VOCAB - first, generator=generator)[:WIDTH]
                           for _ in slots]).sort(dim=-1).values.to(device)
        shortlist = Candidates(ids, None)
        want = eager(_requests(slots, 1.3), logits, shortlist).tolist()
        assert static(_requests(slots, 1.3), logits, shortlist).tolist() == want
        assert all(first <= t < VOCAB for t in want)


@pytest.mark.parametrize("device", DEVICES)
def test_padding_rows_write_only_the_scratch_slot(device):
    _, static = _samplers(device)
    static.last_token[:N_SLOTS] = 7
    tokens = static(_requests([4], 1.3), torch.randn(1, VOCAB, device=device))
    untouched = [s for s in range(N_SLOTS) if s != 4]
    assert static.last_token[untouched].tolist() == [7] * len(untouched)
    assert not static.seen[untouched].any()
    assert static.seen[4].sum() == 1 and static.seen[4, tokens[0]]
    assert static.last_token[4] == tokens[0]


@pytest.mark.parametrize("device", DEVICES)
def test_a_row_without_the_fixed_size_top_k_samples_eagerly_with_the_same_tokens(device):
    eager, static = _samplers(device)
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(1)).to(device)
    want = eager(_requests([0, 1, 2], 1.1, top_k=0), logits).tolist()
    assert static(_requests([0, 1, 2], 1.1, top_k=0), logits).tolist() == want
    assert static.captured == []


@pytest.mark.parametrize("device", DEVICES)
def test_every_bucket_is_captured_ahead_for_the_shapes_seen(device):
    """After one batch of 3, capturing ahead covers every bucket for that logits shape (on a
    GPU: graphs, so a later batch of 8 replays one instead of capturing mid-request), and the
    tokens stay eager's. The first batch samples in inference mode and the capture runs
    outside it, as in a backend's warm-up."""
    eager, static = _samplers(device)
    logits = torch.randn(3, VOCAB, generator=torch.Generator().manual_seed(2)).to(device)
    with torch.inference_mode():  # as the runner samples, so the buffers are made in it
        static(_requests([0, 1, 2], 1.1), logits)
    eager(_requests([0, 1, 2], 1.1), logits)
    static.capture_every_bucket()  # as a warm-up calls it: outside inference mode
    key = (VOCAB, 0, logits.dtype, 0)
    assert static.captured == ([(b, *key) for b in BUCKETS] if device == "cuda" else [])
    logits = torch.randn(8, VOCAB, generator=torch.Generator().manual_seed(3)).to(device)
    want = eager(_requests(list(range(8)), 1.1), logits).tolist()
    with torch.inference_mode():
        assert static(_requests(list(range(8)), 1.1), logits).tolist() == want
    assert not static.fallbacks


def test_each_row_draws_its_own_requests_stream_in_order_across_blocks():
    """A step's uniforms are each request's next draws, a block after another, whoever shares
    the step: the k-th token a request samples takes the k-th draw of its own stream."""
    rows = SlotRows(N_SLOTS, (N_SLOTS, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0))
    kept = _requests([0, 3, 5], 1.0)
    twins = _requests([0, 3, 5], 1.0)
    want = {r.slot: np.concatenate([r.uniform_block() for _ in range(3)]) for r in twins}
    drawn = {slot: [] for slot in want}
    for step in range(2 * UNIFORM_BLOCK + 5):
        batch = kept if step % 3 else kept[1:] + _requests([7], 1.0)  # others come and go
        out = rows.rows(batch, None, 8)
        for r, row in zip(batch, out, strict=False):
            assert row[0] == r.slot and tuple(row[1:UNIFORM]) == r.settings
            drawn.setdefault(r.slot, []).append(row[UNIFORM])
        assert (out[len(batch):, 0] == N_SLOTS).all()  # padding points at the scratch slot
    for slot, draws in drawn.items():
        if slot in want:
            assert np.array_equal(draws, want[slot][:len(draws)])
    rows.free(3)
    assert rows.owners[3] is None and rows.owners[0] is kept[0]  # a finished request is let go
    newcomer = _requests([3], 1.0)
    assert rows.rows(newcomer, None, 1)[0, UNIFORM] == _requests([3], 1.0)[0].uniform_block()[0]


@pytest.mark.parametrize("device", DEVICES)
def test_requests_keep_their_streams_between_padded_and_eager_steps(device):
    """Requests living through more draws than a block, padded on most steps and eager on those
    a neighbour without the fixed-size top-k joins, sample what an all-eager run samples."""
    eager, static = _samplers(device)
    alone, together = _requests([0, 3, 5], 1.3), _requests([0, 3, 5], 1.3)
    generator = torch.Generator().manual_seed(2)
    for step in range(UNIFORM_BLOCK + 12):
        odd = step % 5 == 0  # a row whose top-k is off makes the whole step eager
        logits = (4 * torch.randn(3 + odd, VOCAB, generator=generator)).to(device)
        extra = (lambda: _requests([7], 1.3, top_k=0)) if odd else list
        want = eager(alone + extra(), logits).tolist()
        assert static(together + extra(), logits).tolist() == want
