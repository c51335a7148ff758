"""Cost of notebook 05's direction sets for one layer at Gemma-2-2B's seven site shapes (random weights): the
sets ``coverage_sweep`` builds before its corpus pass, now (``coverage_sets``: one tiled SVD and one random
partition SVD per width, at the largest k) against building each set on its own (one tiled SVD beside the
whole-matrix and column-sampling baselines per width, one partition SVD per k and width), which is how the
sweep built them before. Both give the same sets bit for bit (tests/unit/test_tiling.py).

    python benchmarks/coverage_sets.py [--sites attn.q,mlp.down]

Prints seconds per site for each and their ratio. The yardstick for times on a CPU is the plain forward pass
of benchmarks/tiled_svd.py on the same machine.
"""
import argparse
import time

import torch

from helpers.core.models import MODELS
from helpers.tiled.sites import PAPER_WIDTHS, SITES
from helpers.tiled.sweep import coverage_sets
from helpers.tiled.tiling import TileSpec, random_directions, random_partition_svd, weight_sets

WIDTHS, KS, K_WIDTH, SEED = (64, 128, 256, 512, 1024), (1, 2, 4, 8, 16), 2, 0


def site_shapes(config: dict) -> dict[str, tuple[int, int]]:
    """W [d_out, d_in] of each site, from a published config."""
    d, q, kv, mlp = (config["hidden_size"], config["num_attention_heads"] * config["head_dim"],
                     config["num_key_value_heads"] * config["head_dim"], config["intermediate_size"])
    return {"attn.q": (q, d), "attn.k": (kv, d), "attn.v": (kv, d), "attn.o": (d, q),
            "mlp.gate": (mlp, d), "mlp.up": (mlp, d), "mlp.down": (d, mlp)}


def each_on_its_own(W: torch.Tensor, paper_width: int) -> int:
    """The sets one by one, as the sweep built them before ``coverage_sets``; returns how many."""
    entries = [(paper_width, k) for k in KS]
    entries += [(w, K_WIDTH) for w in sorted({w for w in WIDTHS if w < W.shape[1]} | {W.shape[1]})]
    tiles, built = {}, 0
    for width, k in entries:
        if width not in tiles:
            tiles[width] = weight_sets(W, TileSpec(width, K_WIDTH, SEED, tuple(sorted({*KS, K_WIDTH}))))[1]
        tile = tiles[width][f"tile_k{k}"]
        random_partition_svd(W, width, k, SEED)
        random_directions(W.shape[0], len(tile), SEED + 7)
        built += 3
    return built


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sites", default=",".join(SITES), help="comma-separated sites (default: all seven)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    shapes = site_shapes(MODELS["gemma-2-2b"].published_config)
    totals = [0.0, 0.0]
    for site in args.sites.split(","):
        W = torch.randn(*shapes[site], generator=torch.Generator().manual_seed(1)) / shapes[site][1] ** 0.5
        start = time.perf_counter()
        each_on_its_own(W, PAPER_WIDTHS[site])
        before = time.perf_counter() - start
        start = time.perf_counter()
        coverage_sets(W, PAPER_WIDTHS[site], WIDTHS, KS, K_WIDTH, SEED)
        now = time.perf_counter() - start
        totals[0] += before
        totals[1] += now
        print(f"{site:9s} W {tuple(W.shape)}: each set on its own {before:6.1f} s, coverage_sets {now:6.1f} s "
              f"({before / now:.1f}x)", flush=True)
    print(f"one layer, {args.sites.count(',') + 1} sites: {totals[0]:.1f} s → {totals[1]:.1f} s "
          f"({totals[0] / totals[1]:.1f}x)")


if __name__ == "__main__":
    main()
