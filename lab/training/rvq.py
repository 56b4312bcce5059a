"""Residual k-means: the codec's codebooks, learned from the teacher's latent groups.

Each level runs Lloyd's k-means on what the levels before it left over. Rows start as randomly
chosen vectors, and a row that no vector picks is moved onto a vector that its row fits worst,
so no entry of the vocabulary the language model must learn is wasted.
"""

from __future__ import annotations

import torch
from tqdm import tqdm

from lab.models.latent_codec import nearest


def kmeans(vectors: torch.Tensor, size: int, iters: int,
           generator: torch.Generator) -> torch.Tensor:
    """`size` centroids for vectors [N, D] after `iters` Lloyd steps."""
    n = vectors.shape[0]
    if n < size:
        raise ValueError(f"{n} vectors cannot seed {size} codebook rows")
    pick = torch.randperm(n, generator=generator)[:size].to(vectors.device)
    book = vectors[pick].clone()
    for _ in range(iters):
        index, dist = nearest(vectors, book)
        sums = torch.zeros_like(book).index_add_(0, index, vectors)
        counts = torch.bincount(index, minlength=size).to(vectors.dtype)
        used = counts > 0
        book[used] = sums[used] / counts[used, None]
        dead = int((~used).sum())
        if dead:
            book[~used] = vectors[dist.topk(dead).indices]
    return book


def train_rvq(vectors: torch.Tensor, levels: int, size: int, iters: int = 20,
              seed: int = 0) -> torch.Tensor:
    """Codebooks [levels, size, D] for vectors [N, D] (on their device, in float32)."""
    generator = torch.Generator().manual_seed(seed)
    residual = vectors.float().clone()
    books = []
    for _ in tqdm(range(levels), desc="codebook levels", unit="level"):
        book = kmeans(residual, size, iters, generator)
        residual -= book[nearest(residual, book)[0]]
        books.append(book)
    return torch.stack(books)
