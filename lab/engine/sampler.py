"""Turn a batch of logits into one token per row, each row under its own sampling settings.

Every filter is a row-wise tensor operation, so one call serves a batch of requests with mixed
temperatures, top-k, top-p and penalties. Randomness enters as one uniform number per row, drawn
from that request's own generator, and picks a token by inverting the row's cumulative
distribution: a row's token depends only on its own logits, settings and random stream, which
is what keeps a seeded request reproducible whoever shares its batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lab.engine.request import Request
from lab.engine.transfer import to_device

TOPK_CAP = 1024
"""Rows with 0 < top_k <= TOPK_CAP select candidates with one top-k of this fixed size instead of
a full-vocabulary sort. The size is fixed (not the batch maximum) so a row's candidate order never
depends on its neighbours' settings."""


@dataclass
class Candidates:
    """A shortlist of token ids per row, ascending, that sampling is restricted to.

    A family that may only emit a known subset (Orpheus: the 4096 codes of the next frame
    position, plus end-of-speech) hands this over instead of masking the full vocabulary, so
    every sampling pass runs over K entries instead of V. `allowed` switches entries off per row.
    """

    ids: torch.Tensor                   # [B, K] int64, ascending per row
    allowed: torch.Tensor | None = None  # [B, K] bool
    rows: list[int] | None = None
    """With `rows`, `ids` and `allowed` are a table [R, K] on the device and row i's shortlist
    is its row `rows[i]`: a family with a few fixed shortlists (Orpheus: one per position in a
    frame) names them, and a captured sampling step looks them up itself, where gathering them
    first would cost the serving thread a copy and two launches every step."""

    def gathered(self) -> Candidates:
        """The shortlist with a row of ids per batch row (itself when it has them already)."""
        if self.rows is None:
            return self
        return self.take(to_device(self.rows, torch.long, self.ids.device))

    def take(self, index: torch.Tensor) -> Candidates:
        """The shortlists of a table's rows `index` (a device tensor), one per batch row."""
        return Candidates(self.ids[index], None if self.allowed is None else self.allowed[index])


@dataclass
class SamplingBatch:
    """Row-wise sampling settings on the logits' device; row i belongs to `requests[i]`."""

    temperature: torch.Tensor   # [B] float32, 0 = greedy
    top_p: torch.Tensor         # [B] float32
    top_k: torch.Tensor         # [B] int64, 0 = off
    penalty: torch.Tensor       # [B] float32, 1 = off
    uniforms: torch.Tensor      # [B] float64 in [0, 1)
    cheap_topk: list[bool]      # per row: 0 < top_k <= TOPK_CAP (decided on the host, no sync)

    @classmethod
    def from_rows(cls, rows: torch.Tensor, cheap_topk: list[bool]) -> SamplingBatch:
        """Settings from rows [B, 5] float64: temperature, top-p, top-k, repetition penalty
        (`Request.settings`) and the row's uniform, so a batch reaches the device in one
        copy."""
        return cls(temperature=rows[:, 0].float(), top_p=rows[:, 1].float(),
                   top_k=rows[:, 2].long(), penalty=rows[:, 3].float(), uniforms=rows[:, 4],
                   cheap_topk=cheap_topk)


def fixed_topk(request: Request) -> bool:
    """Whether the request's candidates come from the fixed-size top-k (`TOPK_CAP`)."""
    return 0 < request.sampling.top_k <= TOPK_CAP


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor | None,
                             penalty: torch.Tensor) -> torch.Tensor:
    """Make already-seen tokens less likely: positive logits are divided by the penalty,
    negative ones multiplied (the CTRL rule, as Hugging Face applies it)."""
    if seen is None:
        return logits
    p = penalty[:, None]
    penalised = torch.where(logits > 0, logits / p, logits * p)
    return torch.where(seen, penalised, logits)


def _candidates(scaled: torch.Tensor, cheap: list[bool]) -> tuple[torch.Tensor, torch.Tensor]:
    """Candidate logits in descending order with their token ids, per row; rows whose top-k
    fits under TOPK_CAP take one fixed-size top-k, the rest a full stable sort."""
    cap = min(TOPK_CAP, scaled.shape[-1])
    if all(cheap):
        return _canonical(*torch.topk(scaled, cap, dim=-1))
    small = torch.tensor(cheap, device=scaled.device)
    values = torch.full_like(scaled, float("-inf"))
    ids = torch.zeros(scaled.shape, dtype=torch.long, device=scaled.device)
    values[~small], ids[~small] = torch.sort(scaled[~small], dim=-1, descending=True, stable=True)
    if any(cheap):
        values[small, :cap], ids[small, :cap] = _canonical(*torch.topk(scaled[small], cap, dim=-1))
    return values, ids


def _canonical(values: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Order candidates by value, ties by token id, so tie order never depends on which top-k
    kernel the batch size selected."""
    ids, by_id = ids.sort(dim=-1)
    values, by_value = values.gather(-1, by_id).sort(dim=-1, descending=True, stable=True)
    return values, ids.gather(-1, by_value)


def sample(logits: torch.Tensor, batch: SamplingBatch, seen: torch.Tensor | None = None,
           shortlist: Candidates | None = None, first_id: int = 0) -> torch.Tensor:
    """One token id per row of `logits` [B, V].

    `seen` marks tokens to penalise, [B, V] or, with a `shortlist` (a row of ids per row of
    `logits`: `Candidates.gathered`), [B, K] over its ids.
    `first_id` is the token of logits column 0, for a head narrowed to a span of the
    vocabulary (`LM.narrow_head`); only a shortlist's ids can be mapped to such columns.
    """
    if shortlist is not None:
        logits = logits.gather(-1, shortlist.ids - first_id if first_id else shortlist.ids)
        if shortlist.allowed is not None:
            logits = logits.masked_fill(~shortlist.allowed, float("-inf"))
    logits = apply_repetition_penalty(logits.float(), seen, batch.penalty)
    greedy = logits.argmax(dim=-1)
    temperature = batch.temperature.clamp_min(1e-5)[:, None]
    values, ids = _candidates(logits / temperature, batch.cheap_topk)
    rank = torch.arange(values.shape[-1], device=values.device)
    k = torch.where(batch.top_k > 0, batch.top_k, values.shape[-1])
    values = values.masked_fill(rank >= k[:, None], float("-inf"))
    probs = torch.softmax(values, dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    probs = probs.masked_fill(mass_before >= batch.top_p[:, None], 0.0)
    cdf = probs.double().cumsum(dim=-1)
    target = (batch.uniforms * cdf[:, -1])[:, None]
    pick = torch.searchsorted(cdf, target).clamp_max(values.shape[-1] - 1)
    sampled = ids.gather(-1, pick).squeeze(-1)
    tokens = torch.where(batch.temperature > 0, sampled, greedy)
    if shortlist is not None:
        tokens = shortlist.ids.gather(-1, tokens[:, None]).squeeze(-1)
    return tokens
