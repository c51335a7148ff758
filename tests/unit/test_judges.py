"""The released code's judge (paper 2), rule by rule on constructed curves and values, its lens against
the checkpoint by hand, and the factor table's counts."""
import pandas as pd
import pytest
import torch

from helpers.core.logits import lens
from helpers.tiled.judges import (FACTORS, OUR_JUDGE, PAPER_JUDGE, judge_factor_table, judge_name, judge_of,
                                  released_lens, verdicts)
from helpers.tiled.steer import spearman
from helpers.tiled.sweep import Sweep
from helpers.tiled.thresholds import load_thresholds
from helpers.tiled.verdicts import rule_a, rule_b1
from tests.conftest import cached_model

T = load_thresholds()


@pytest.mark.parametrize("lifts,residual,ours,paper", [
    # non-residual: the released window is the best of k = 1, 2, 4; ours needs k = 1 and 2 both near the peak
    ([0.05, 0.10, 0.30, 0.28, 0.27], False, False, True),  # peaks at k = 4, inside the released window
    ([0.05, 0.10, 0.20, 0.30, 0.27], False, False, False),  # peaks at k = 8: outside both
    # residual: the released window is k = 1, 2 only
    ([0.05, 0.30, 0.31, 0.31, 0.31], True, False, True),  # k = 1 far below, k = 2 near the peak
    ([0.05, 0.10, 0.40, 0.40, 0.40], True, False, False),  # peaks at k = 4: outside the residual window
    ([0.30, 0.31, 0.31, 0.32, 0.33], True, True, True),  # flat: both pass
])
def test_b1_early_window_ours_against_the_released(lifts, residual, ours, paper):
    assert rule_b1(lifts, residual, False, T, window="ours") is ours
    assert rule_b1(lifts, residual, False, T, window="paper") is paper


def test_b1_window_of_effective_streams_is_three_points_and_unknown_windows_are_refused():
    lifts = [0.01, 0.02, 0.10, 0.09, 0.09]  # peak 0.10 ≥ 0.08 (effective floor) at k = 4
    assert rule_b1(lifts, False, True, T, window="paper") and not rule_b1(lifts, False, True, T, window="ours")
    with pytest.raises(ValueError, match="window="):
        rule_b1(lifts, False, False, T, window="released")


def sweep_of(tile_lifts, coverage, rho, released=None, residual=True, layers=None):
    """A one-site sweep (attn.o, or attn.q when not ``residual``) with the given lifts per layer."""
    n = len(tile_lifts)
    layers = layers or list(range(6, 6 + n))
    site = "attn.o" if residual else "attn.q"
    a = pd.DataFrame(dict(layer=layers, site=site, residual=residual, effective=False, lift_tile=tile_lifts,
                          lift_whole=[0.0] * n, lift_columns=[0.0] * n))
    b = pd.DataFrame(dict(layer=layers, site=site, **{f"lift_k{k}": [c[i] for c in coverage]
                                                       for i, k in enumerate(T["B"]["ks"])}))
    c = pd.DataFrame(dict(layer=layers, site=site, rho_tile=rho, jaccard_tile=[0.0] * n)) if residual else pd.DataFrame()
    return Sweep(a, b, c, pd.DataFrame(), dict(thresholds=T), released)


FLAT = [0.5] * 5


def test_rounding_to_four_decimals_with_a_strict_a1():
    result = sweep_of([0.00504, 0.00506, 0.005], [FLAT] * 3, [0.3] * 3)
    assert verdicts(result, OUR_JUDGE)["A1"].tolist() == [True, True, False]  # 0.005 is not > 0.005
    assert verdicts(result, {"rounding"})["A1"].tolist() == [False, True, False]  # 0.00504 → 0.005
    assert rule_a(0.005, 0.0, 0.0, True, False, T)["A1"] is False


def test_rounding_moves_b1_at_its_boundary():
    curve = [0.25004 - 0.08, 0.25004, 0.25004, 0.25004, 0.25004]  # k = 1 at 0.17004, peak 0.25004
    curve_below = [0.249996] * 5  # 0.249996 < 0.25, rounds to 0.25
    result = sweep_of([0.3, 0.3], [curve, curve_below], [0.3, 0.3])
    assert verdicts(result, OUR_JUDGE)["B1"].tolist() == [True, False]
    assert verdicts(result, {"rounding"})["B1"].tolist() == [True, True]


def released_measurements(layers, top_w, top_gain, ours_w):
    return pd.DataFrame(dict(layer=layers, site="attn.o", mounts=8, rho_top_w=top_w, jaccard_top_w=0.0,
                             rho_top_gain=top_gain, jaccard_top_gain=0.0, rho_ours_w=ours_w, jaccard_ours_w=0.0))


def test_c_factors_read_their_own_measurements():
    layers = [6, 7, 8, 9]
    released = released_measurements(layers, top_w=[0.3, 0.0, 0.0, 0.0], top_gain=[0.0, 0.3, 0.0, 0.0],
                                      ours_w=[0.0, 0.0, 0.3, 0.0])
    result = sweep_of([0.3] * 4, [FLAT] * 4, [0.0, 0.0, 0.0, 0.3], released, layers=layers)
    assert verdicts(result, OUR_JUDGE)["C1"].tolist() == [False, False, False, True]
    assert verdicts(result, {"lens"})["C1"].tolist() == [False, False, True, False]
    assert verdicts(result, {"c_mounts"})["C1"].tolist() == [False, True, False, False]
    assert verdicts(result, {"lens", "c_mounts"})["C1"].tolist() == [True, False, False, False]
    assert verdicts(result, PAPER_JUDGE)["pass"].tolist() == [True, False, False, False]


def test_c_below_layer_six_is_not_judged_under_either_judge():
    released = released_measurements([4, 5], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])
    result = sweep_of([0.3, 0.3], [FLAT] * 2, [0.0, 0.0], released, layers=[4, 5])
    for judge in (OUR_JUDGE, PAPER_JUDGE):
        v = verdicts(result, judge)
        assert v["C1"].tolist() == [None, None] and v["pass"].all()


def test_a_judge_that_needs_released_measurements_says_so_and_unknown_rules_are_refused():
    result = sweep_of([0.3], [FLAT], [0.3])
    with pytest.raises(ValueError, match="released=True"):
        verdicts(result, {"lens"})
    assert verdicts(result, {"rounding", "b1_window"})["pass"].all()  # A and B need no steering
    with pytest.raises(ValueError, match=r"\['width_search'\]"):
        judge_of({"width_search"})
    assert judge_name(OUR_JUDGE) == "ours" and judge_name(PAPER_JUDGE).startswith("paper")
    assert judge_name({"lens"}) == "lens"


def test_factor_table_counts_passes_per_label_and_verdicts_changed():
    layers = [6, 7]
    window_only = [0.05, 0.30, 0.31, 0.31, 0.31]  # residual: passes only the released B1 window
    released = released_measurements(layers, [0.3, 0.3], [0.3, 0.3], [0.3, 0.3])
    model = sweep_of([0.3, 0.3], [FLAT, window_only], [0.3, 0.3], released, layers=layers)
    control = sweep_of([0.0, 0.3], [FLAT, FLAT], [0.3, 0.0], released, layers=layers)
    table = judge_factor_table({"model": model, "permuted": control}).set_index("judge")
    assert list(table.index) == ["ours", *FACTORS, "paper (all four rules)"]
    assert table.loc["ours", "model"] == 1 and table.loc["b1_window", "model"] == 2
    assert table.loc["b1_window", "model_changed"] == 1 and table.loc["rounding", "model_changed"] == 0
    assert table.loc["ours", "permuted"] == 0 and table.loc["lens", "permuted"] == 1  # layer 7's C passes with w
    assert (table["model_of"] == 2).all()


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-llama"])
def test_released_lens_is_w_from_the_checkpoint_by_hand(name):
    model = cached_model(name, "raw")
    u = torch.randn(3, model.d_model, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w = model.body.norm.weight.detach().double()  # what the checkpoint stores (Gemma multiplies by 1 + w)
    rms = u.pow(2).mean(-1, keepdim=True).sqrt()
    by_hand = (u / rms * w) @ model.hf_model.lm_head.weight.detach().double().T
    torch.testing.assert_close(released_lens(model, u), by_hand, rtol=1e-4, atol=1e-4)
    same_ranks = [spearman(a, b) for a, b in zip(released_lens(model, u), lens(model, u))]
    if model.arch.gain_one_plus:  # Gemma: w and 1 + w differ, so do the lenses
        assert min(same_ranks) < 0.999
    else:
        assert min(same_ranks) == pytest.approx(1.0)


def test_released_lens_needs_the_raw_checkpoint():
    with pytest.raises(ValueError, match="processing='raw'"):
        released_lens(cached_model("tiny-llama", "fold_norm"), torch.zeros(1, 4))
