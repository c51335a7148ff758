"""Mounts and their baselines (docs/methods.md §2.1, §2.2): sets of unit write directions of one site.

A mount is (v = trigger on a column tile, u = unit write direction, σ) from the SVD of a column tile
B_t = W[:, tile] of W [d_out, d_in]. Baselines at matched count n: whole-matrix SVD, column sampling ∝
column norm, random unit directions, PCA of the site's writes (data-aware, from ``site_statistics``),
random column partitions of the same widths (tests whether contiguity matters). Effective-path matrices
for ``mlp.up`` and ``attn.v`` are built here from statistics fitted on half of the tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.core.linalg import canonical_signs


@dataclass
class Mounts:
    """``U`` [d_out, n] unit write directions; ``S`` [n] singular values (NaN where not an SVD);
    ``tile`` [n] index of the tile (−1 where none)."""

    U: torch.Tensor
    S: torch.Tensor
    tile: torch.Tensor

    def __len__(self) -> int:
        return self.U.shape[1]

    def to(self, device) -> "Mounts":
        """The same mounts on ``device`` (they are built on the CPU: docs/methods.md §0)."""
        return Mounts(self.U.to(device), self.S.to(device), self.tile.to(device))

    def per_tile(self, k: int) -> "Mounts":
        """The first ``k`` mounts of every tile (tile SVDs are computed once at the largest k)."""
        rank = torch.zeros_like(self.tile)
        for t in self.tile.unique():
            where = (self.tile == t).nonzero().flatten()
            rank[where] = torch.arange(len(where), device=self.tile.device)
        keep = rank < k
        return Mounts(self.U[:, keep], self.S[keep], self.tile[keep])


def tile_bounds(d_in: int, width: int) -> list[tuple[int, int]]:
    """Contiguous column tiles of ``width`` (the last one shorter when ``width`` does not divide ``d_in``)."""
    if width <= 0:
        raise ValueError(f"tile width must be positive, got {width}")
    return [(start, min(start + width, d_in)) for start in range(0, d_in, width)]


def tile_svd(W: torch.Tensor, width: int, k: int, columns: torch.Tensor | None = None) -> Mounts:
    """Top-``k`` left singular vectors of every column tile (ordered by tile, then by σ). ``columns``
    reorders the columns first (a random partition when it is a random permutation)."""
    W = W.double() if columns is None else W.double()[:, columns]
    us, ss, tiles = [], [], []
    for index, (start, end) in enumerate(tile_bounds(W.shape[1], width)):
        U, S, _ = torch.linalg.svd(W[:, start:end], full_matrices=False)
        keep = min(k, len(S))
        us.append(canonical_signs(U[:, :keep]))
        ss.append(S[:keep])
        tiles.append(torch.full((keep,), index, device=W.device))
    return Mounts(torch.cat(us, 1), torch.cat(ss), torch.cat(tiles))


def random_partition_svd(W: torch.Tensor, width: int, k: int, seed: int) -> Mounts:
    """Tile SVD over a random partition of the columns into groups of the same widths."""
    order = torch.randperm(W.shape[1], generator=torch.Generator().manual_seed(seed), device="cpu").to(W.device)
    return tile_svd(W, width, k, columns=order)


def whole_svd(W: torch.Tensor, n: int) -> Mounts:
    """Top-``n`` left singular vectors of the whole matrix, through the Gram matrix of its smaller side
    (float64; exact up to rounding for the leading directions, and O(d_small² d_big) for Gemma-2-2B's
    9216-wide MLP maps instead of a full SVD)."""
    W = W.double()
    n = min(n, *W.shape)
    if W.shape[0] <= W.shape[1]:
        values, vectors = torch.linalg.eigh(W @ W.T)
        order = values.argsort(descending=True, stable=True)[:n]
        U = vectors[:, order]
    else:
        values, vectors = torch.linalg.eigh(W.T @ W)
        order = values.argsort(descending=True, stable=True)[:n]
        U = W @ vectors[:, order]
        U = U / U.norm(dim=0, keepdim=True)
    S = values[order].clamp_min(0).sqrt()
    return Mounts(canonical_signs(U), S, torch.full((n,), -1, device=W.device))


def column_sampling(W: torch.Tensor, n: int, seed: int) -> Mounts:
    """``n`` distinct columns drawn with probability ∝ their norm, normalised."""
    norms = W.double().norm(dim=0)
    n = min(n, int((norms > 0).sum()))
    picked = torch.multinomial(norms, n, replacement=False, generator=torch.Generator().manual_seed(seed))
    columns = W.double()[:, picked]
    return Mounts(columns / columns.norm(dim=0, keepdim=True), torch.full((n,), float("nan"), device=W.device),
                  torch.full((n,), -1, device=W.device))


def random_directions(d_out: int, n: int, seed: int) -> Mounts:
    """``n`` random unit directions (seeded, on the CPU)."""
    g = torch.randn(d_out, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64, device="cpu")
    return Mounts(g / g.norm(dim=0, keepdim=True), torch.full((n,), float("nan"), device="cpu"),
                  torch.full((n,), -1, device="cpu"))


def top_eigenvectors(M: torch.Tensor, n: int) -> Mounts:
    """PCA baseline: the top-``n`` eigenvectors of a symmetric PSD matrix (e.g. the writes' normalised
    second moment), with their eigenvalues as S."""
    values, vectors = torch.linalg.eigh(M.double())
    order = values.argsort(descending=True, stable=True)[:n]
    return Mounts(canonical_signs(vectors[:, order]), values[order], torch.full((len(order),), -1, device=M.device))


def frobenius_coverage(tiles: Mounts, W: torch.Tensor) -> float:
    """Fraction of ‖W‖²_F kept by the rank-k approximations of W's column tiles whose top singular values
    ``tiles`` holds (from ``tile_svd``, k per tile): Σ σ² / ‖W‖²_F. No SVD of its own."""
    return float((tiles.S.double() ** 2).sum()) / float((W.double() ** 2).sum())


def mean_abs_cosine(U: torch.Tensor) -> float:
    """Mean |cos| over distinct pairs of columns (redundancy of a mount set)."""
    n = U.shape[1]
    if n < 2:
        return float("nan")
    G = (U.T @ U).abs()
    return float((G.sum() - G.diagonal().sum()) / (n * (n - 1)))


def gated_up_matrix(W_up: torch.Tensor, mean_gate_activation: torch.Tensor) -> torch.Tensor:
    """Effective ``mlp.up``: diag(ḡ) W_up with ḡ = max(0, mean act(gate)) per hidden unit."""
    return mean_gate_activation.clamp_min(0).double()[:, None] * W_up.double()


def ridge_map(XtX: torch.Tensor, XtY: torch.Tensor, ridge: float = 1e-3) -> torch.Tensor:
    """Effective ``attn.v``: the ridge regression Y ≈ X R from the sums XᵀX [d_in, d_in], XᵀY [d_in, d_out]
    (λ scaled by the mean diagonal of XᵀX); returns Rᵀ [d_out, d_in], a matrix with the site's shape."""
    XtX = XtX.double()
    lam = ridge * float(XtX.diagonal().mean())
    R = torch.linalg.solve(XtX + lam * torch.eye(len(XtX), dtype=XtX.dtype, device=XtX.device), XtY.double())
    return R.T


@dataclass(frozen=True)
class TileSpec:
    """How one matrix's weight-based direction sets are built: tiles of ``width`` columns, ``k`` modes per
    tile for the sets of check A, the tile mounts at every k of ``coverage_ks`` for check B, and the seed of
    column sampling."""

    width: int
    k: int
    seed: int
    coverage_ks: tuple[int, ...] = ()


def weight_sets(W: torch.Tensor, spec: TileSpec) -> tuple[dict[str, Mounts], dict[str, Mounts]]:
    """The one builder of tile mounts and their weight baselines at a matched count n = k × tiles:
    ({"tile", "whole", "columns"}, {"tile_k<k>" for k in coverage_ks}). One tiled SVD serves every k."""
    tiles = tile_svd(W, spec.width, max((spec.k, *spec.coverage_ks)))
    tile = tiles.per_tile(spec.k)
    sets = dict(tile=tile, whole=whole_svd(W, len(tile)), columns=column_sampling(W, len(tile), spec.seed))
    return sets, {f"tile_k{k}": tiles.per_tile(k) for k in spec.coverage_ks}

