"""Mounts and baselines on matrices whose answers are known."""
import pytest
import torch

from helpers.tiled.tiling import (column_sampling, frobenius_coverage, gated_up_matrix, mean_abs_cosine, random_directions,
                            random_partition_svd, ridge_map, tile_bounds, tile_svd, top_eigenvectors, whole_svd)


def test_tiles_are_contiguous_and_the_last_one_takes_the_remainder():
    assert tile_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert tile_bounds(8, 8) == [(0, 8)]
    with pytest.raises(ValueError, match="positive"):
        tile_bounds(8, 0)


def test_tile_mounts_are_each_tiles_own_singular_vectors():
    g = torch.Generator().manual_seed(0)
    W = torch.randn(12, 10, generator=g, dtype=torch.float64)
    mounts = tile_svd(W, 4, 2)
    assert mounts.U.shape == (12, 6) and mounts.tile.tolist() == [0, 0, 1, 1, 2, 2]
    for t, (s, e) in enumerate(tile_bounds(10, 4)):
        U, S, _ = torch.linalg.svd(W[:, s:e], full_matrices=False)
        torch.testing.assert_close(mounts.S[2 * t: 2 * t + 2], S[:2])
        torch.testing.assert_close((mounts.U[:, 2 * t: 2 * t + 2].T @ U[:, :2]).abs(), torch.eye(2, dtype=torch.float64))


def test_whole_svd_of_a_block_diagonal_matrix_and_frobenius_coverage():
    W = torch.zeros(4, 4, dtype=torch.float64)
    W[0, 0], W[1, 1], W[2, 2], W[3, 3] = 4.0, 3.0, 2.0, 1.0
    whole = whole_svd(W, 2)
    torch.testing.assert_close(whole.U, torch.eye(4, dtype=torch.float64)[:, :2])
    assert frobenius_coverage(tile_svd(W, 2, 1), W) == pytest.approx((16 + 4) / 30)  # tile 1 keeps 4², tile 2 keeps 2²
    assert frobenius_coverage(tile_svd(W, 2, 2), W) == pytest.approx(1.0)
    R = torch.randn(7, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)  # tiles 4, 4, 2
    by_svd = sum(float((torch.linalg.svdvals(R[:, s:e])[:2] ** 2).sum()) for s, e in tile_bounds(10, 4))
    assert frobenius_coverage(tile_svd(R, 4, 2), R) == pytest.approx(by_svd / float((R ** 2).sum()))


def test_random_partition_is_a_tiling_of_permuted_columns():
    W = torch.randn(6, 8, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    part = random_partition_svd(W, 4, 4, seed=3)
    # rank-4 per tile of 4 columns: the two tiles together keep all of W's energy
    assert float((part.S ** 2).sum()) == pytest.approx(float((W ** 2).sum()))
    assert not torch.allclose(part.U, tile_svd(W, 4, 4).U)


def test_baselines_are_unit_vectors_with_the_requested_count():
    W = torch.randn(5, 9, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    W[:, 0] *= 100  # the heavy column is almost always sampled
    cols = column_sampling(W, 3, seed=0)
    rnd = random_directions(5, 3, seed=0)
    for m in (cols, rnd, whole_svd(W, 3)):
        assert m.U.shape == (5, 3)
        torch.testing.assert_close(m.U.norm(dim=0), torch.ones(3, dtype=torch.float64))
    assert float((cols.U.T @ (W[:, 0] / W[:, 0].norm())).abs().max()) == pytest.approx(1.0)
    assert mean_abs_cosine(torch.eye(3, dtype=torch.float64)) == 0.0


def test_pca_baseline_finds_the_dominant_axes():
    M = torch.diag(torch.tensor([0.1, 3.0, 0.5, 2.0], dtype=torch.float64))
    pca = top_eigenvectors(M, 2)
    torch.testing.assert_close(pca.S, torch.tensor([3.0, 2.0], dtype=torch.float64))
    assert pca.U[:, 0].abs().argmax() == 1 and pca.U[:, 1].abs().argmax() == 3


def test_effective_path_matrices():
    W_up = torch.ones(3, 2, dtype=torch.float64)
    gated = gated_up_matrix(W_up, torch.tensor([2.0, -1.0, 0.5]))
    torch.testing.assert_close(gated, torch.tensor([[2.0, 2.0], [0.0, 0.0], [0.5, 0.5]], dtype=torch.float64))
    g = torch.Generator().manual_seed(0)
    X = torch.randn(500, 4, generator=g, dtype=torch.float64)
    R = torch.randn(4, 3, generator=g, dtype=torch.float64)
    Rt = ridge_map(X.T @ X, X.T @ (X @ R), ridge=1e-9)
    torch.testing.assert_close(Rt, R.T, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(30, 12), (12, 30)])
def test_whole_svd_through_the_gram_matrix_matches_torch_svd(shape):
    W = torch.randn(*shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    U, S, _ = torch.linalg.svd(W, full_matrices=False)
    whole = whole_svd(W, 5)
    torch.testing.assert_close(whole.S, S[:5])
    torch.testing.assert_close((whole.U.T @ U[:, :5]).abs(), torch.eye(5, dtype=torch.float64), atol=1e-8, rtol=0)


def test_weight_sets_build_every_set_from_one_tiled_svd_at_a_matched_count():
    from helpers.tiled.tiling import TileSpec, column_sampling, tile_svd, weight_sets, whole_svd

    W = torch.randn(12, 40, generator=torch.Generator().manual_seed(0))
    sets, coverage = weight_sets(W, TileSpec(width=16, k=2, seed=3, coverage_ks=(1, 4)))
    tiles = tile_svd(W, 16, 2)  # 3 tiles (16, 16, 8 columns)
    assert len(sets["tile"]) == 6 and torch.equal(sets["tile"].U, tiles.U)
    assert torch.equal(sets["whole"].U, whole_svd(W, 6).U)  # the same count n = k × tiles
    assert torch.equal(sets["columns"].U, column_sampling(W, 6, 3).U)
    assert sorted(coverage) == ["tile_k1", "tile_k4"]
    assert torch.equal(coverage["tile_k4"].U, tile_svd(W, 16, 4).U) and len(coverage["tile_k1"]) == 3


def test_coverage_sets_equal_one_tiled_svd_per_k_and_width_bit_for_bit():
    """Oracle: each set built on its own (a tiled SVD at that k, a random partition SVD at that k), as the sweep
    built them before it computed one SVD per width at the largest k."""
    from helpers.tiled.sweep import coverage_sets
    from helpers.tiled.tiling import frobenius_coverage, random_directions, random_partition_svd, tile_svd

    W = torch.randn(24, 40, generator=torch.Generator().manual_seed(5))
    coverage, entries = coverage_sets(W, paper_width=8, widths=[4, 16, 64], ks=(1, 3), k_width=2, seed=9)
    expected = [("k", 1, 8, 1), ("k", 3, 8, 3), ("width", 4, 4, 2), ("width", 16, 16, 2), ("width", 40, 40, 2)]
    assert [(e["variable"], e["value"], e["width"], e["k"]) for e in entries] == expected  # 64 > d_in: the whole
    assert list(coverage)[:3] == ["tile_k1", "partition_k1", "random_k1"]  # the statistics sum in this order
    for variable, value, width, k in expected:
        key = f"{variable}{value}"
        alone = tile_svd(W, width, k)
        assert torch.equal(coverage[f"tile_{key}"].U, alone.U) and torch.equal(coverage[f"tile_{key}"].S, alone.S)
        partition = random_partition_svd(W, width, k, 9)
        assert torch.equal(coverage[f"partition_{key}"].U, partition.U)
        assert torch.equal(coverage[f"partition_{key}"].tile, partition.tile)
        assert torch.equal(coverage[f"random_{key}"].U, random_directions(24, len(alone), 9 + 7).U)
    assert entries[0]["directions"] == 5 and entries[1]["directions"] == 15  # 5 tiles of 8 columns, k of each
    assert entries[0]["frobenius"] == frobenius_coverage(tile_svd(W, 8, 1), W)
