"""Paper 2's direction sets: for every site, the sets checks A and B compare, at a matched count.

Per site: tile mounts (k per tile), the whole-matrix SVD, column sampling, random column partitions and
random directions, all with n = k × tiles directions; coverage sets at every k of B; and for ``mlp.up`` and
``attn.v`` the effective-path streams, whose mounts are built after the fit half (``helpers.tiled.statistics``).
"""
from __future__ import annotations

from helpers.tiled.sites import PAPER_WIDTHS, Site, site_matrix
from helpers.tiled.statistics import EFFECTIVE, StreamPlan
from helpers.tiled.tiling import TileSpec, random_directions, random_partition_svd, weight_sets


TRIAL = "@"
"""A trial stream of the width search is named "<site>@<width>" (``trial_kind``)."""


def trial_kind(name: str, width: int) -> str:
    return f"{name}{TRIAL}{width}"


def _coverage_sets(W, tiles: dict, ks, seed: int) -> dict:
    """Tile and random sets side by side per k (the statistics' summation order follows it)."""
    coverage = {}
    for kk in ks:
        coverage[f"tile_k{kk}"] = tiles[f"tile_k{kk}"]
        coverage[f"random_k{kk}"] = random_directions(W.shape[0], len(tiles[f"tile_k{kk}"]), seed + 100 + kk)
    return coverage


def build_plans(model, sites: list[Site], thresholds: dict, widths: dict = PAPER_WIDTHS, k: int = 2,
                seed: int = 0, effective: bool = True, trial_widths: dict | None = None) -> list[StreamPlan]:
    """Direction sets of every site at matched count n = k × tiles, and its coverage sets; effective-path
    streams for ``mlp.up`` and ``attn.v`` (their mounts are built after the fit half). ``trial_widths``
    (site → further widths) adds, per width, a trial stream of the same site with the sets checks A and B
    judge (tile, whole, columns, random; coverage), so that the width search needs no pass of its own."""
    ks = thresholds["B"]["ks"]
    best = thresholds["B"]["best_directions"]
    plans = []
    for site in sites:
        W = site_matrix(model, site)
        width = widths[site.name]
        spec = TileSpec(width, k, seed, tuple(ks))
        sets, tiles = weight_sets(W, spec)
        n = len(sets["tile"])
        sets.update(random=random_directions(W.shape[0], n, seed + 1),
                    random_partition=random_partition_svd(W, width, k, seed))
        coverage = _coverage_sets(W, tiles, ks, seed)
        plans.append(StreamPlan(site, site.name, sets, coverage, pca_count=n, best=best))
        if effective and site.name in EFFECTIVE and (site.name != "mlp.up" or model.arch.gated_mlp):
            # mlp.up's effective path weights the up map by the gate: GPT-2's MLP has no gate
            d_eff = model.d_mlp if site.name == "mlp.up" else model.n_kv_heads * model.d_head
            random_cov = {f"random_k{kk}": random_directions(d_eff, len(coverage[f"tile_k{kk}"]), seed + 100 + kk)
                          for kk in ks}
            plans.append(StreamPlan(site, EFFECTIVE[site.name], {"random": random_directions(d_eff, n, seed + 1)},
                                    random_cov, effective=spec, best=best))
        for trial_width in (trial_widths or {}).get(site.name, ()):
            trial_sets, trial_tiles = weight_sets(W, TileSpec(trial_width, k, seed, tuple(ks)))
            trial_sets["random"] = random_directions(W.shape[0], len(trial_sets["tile"]), seed + 1)
            plans.append(StreamPlan(site, trial_kind(site.name, trial_width), trial_sets,
                                    _coverage_sets(W, trial_tiles, ks, seed), best=best))
    return plans
