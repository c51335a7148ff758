"""Paper 2's direction sets: for every site, the sets checks A and B compare, at a matched count.

Per site: tile mounts (k per tile), the whole-matrix SVD, column sampling, random column partitions and
random directions, all with n = k × tiles directions; coverage sets at every k of B; and for ``mlp.up`` and
``attn.v`` the effective-path streams, whose mounts are built after the fit half (``helpers.tiled.statistics``).
"""
from __future__ import annotations

from helpers.tiled.sites import PAPER_WIDTHS, Site, site_matrix
from helpers.tiled.statistics import EFFECTIVE, StreamPlan
from helpers.tiled.tiling import TileSpec, random_directions, random_partition_svd, weight_sets


def build_plans(model, sites: list[Site], thresholds: dict, widths: dict = PAPER_WIDTHS, k: int = 2,
                seed: int = 0, effective: bool = True) -> list[StreamPlan]:
    """Direction sets of every site at matched count n = k × tiles, and its coverage sets; effective-path
    streams for ``mlp.up`` and ``attn.v`` (their mounts are built after the fit half)."""
    ks = thresholds["B"]["ks"]
    plans = []
    for site in sites:
        W = site_matrix(model, site)
        width = widths[site.name]
        spec = TileSpec(width, k, seed, tuple(ks))
        sets, tiles = weight_sets(W, spec)
        n = len(sets["tile"])
        sets.update(random=random_directions(W.shape[0], n, seed + 1),
                    random_partition=random_partition_svd(W, width, k, seed))
        coverage = {}  # tile and random sets side by side per k (the statistics' summation order follows it)
        for kk in ks:
            coverage[f"tile_k{kk}"] = tiles[f"tile_k{kk}"]
            coverage[f"random_k{kk}"] = random_directions(W.shape[0], len(tiles[f"tile_k{kk}"]), seed + 100 + kk)
        plans.append(StreamPlan(site, site.name, sets, coverage, pca_count=n, best=thresholds["B"]["best_directions"]))
        if effective and site.name in EFFECTIVE and (site.name != "mlp.up" or model.arch.gated_mlp):
            # mlp.up's effective path weights the up map by the gate: GPT-2's MLP has no gate
            d_eff = model.d_mlp if site.name == "mlp.up" else model.n_kv_heads * model.d_head
            random_cov = {f"random_k{kk}": random_directions(d_eff, len(coverage[f"tile_k{kk}"]), seed + 100 + kk)
                          for kk in ks}
            plans.append(StreamPlan(site, EFFECTIVE[site.name], {"random": random_directions(d_eff, n, seed + 1)},
                                    random_cov, effective=spec,
                                    best=thresholds["B"]["best_directions"]))
    return plans
