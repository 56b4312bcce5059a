"""Inverse monotonic rational-quadratic spline (Durkan et al., 2019) with linear tails.

The stochastic duration predictor's coupling flows warp noise through this spline; inference
only needs the inverse direction, so that is all that lives here.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

MIN_BIN = 1e-3
MIN_DERIVATIVE = 1e-3


def _knots(unnormalized: torch.Tensor, bound: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax bin sizes -> knot positions on [-bound, bound] and the bin sizes between them."""
    n_bins = unnormalized.shape[-1]
    sizes = MIN_BIN + (1 - MIN_BIN * n_bins) * torch.softmax(unnormalized, dim=-1)
    knots = F.pad(torch.cumsum(sizes, dim=-1), (1, 0)) * 2 * bound - bound
    knots = torch.cat(
        [
            torch.full_like(knots[..., :1], -bound),
            knots[..., 1:-1],
            torch.full_like(knots[..., :1], bound),
        ],
        dim=-1,
    )
    return knots, knots[..., 1:] - knots[..., :-1]


def _pick(values: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return values.gather(-1, index)[..., 0]


def inverse_spline(
    y: torch.Tensor,
    widths: torch.Tensor,
    heights: torch.Tensor,
    derivatives: torch.Tensor,
    bound: float,
) -> torch.Tensor:
    """Map y back through the spline; values outside [-bound, bound] pass through unchanged."""
    inside = (y >= -bound) & (y <= bound)
    edge = math.log(math.exp(1 - MIN_DERIVATIVE) - 1)
    derivatives = F.pad(derivatives, (1, 1), value=edge)
    x_knots, bin_w = _knots(widths, bound)
    y_knots, bin_h = _knots(heights, bound)
    slopes = MIN_DERIVATIVE + F.softplus(derivatives)
    search = y_knots.clone()
    search[..., -1] += 1e-6
    yc = y.clamp(-bound, bound)
    index = (torch.sum(yc[..., None] >= search, dim=-1, keepdim=True) - 1).clamp(
        0, widths.shape[-1] - 1
    )
    x0, w = _pick(x_knots, index), _pick(bin_w, index)
    y0, h = _pick(y_knots, index), _pick(bin_h, index)
    d0, d1 = _pick(slopes, index), _pick(slopes[..., 1:], index)
    delta = h / w
    dy = yc - y0
    a = dy * (d0 + d1 - 2 * delta) + h * (delta - d0)
    b = h * d0 - dy * (d0 + d1 - 2 * delta)
    c = -delta * dy
    root = (2 * c) / (-b - torch.sqrt(b.pow(2) - 4 * a * c))
    return torch.where(inside, root * w + x0, y)
