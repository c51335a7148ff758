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


def test_widths_in_the_papers_units_are_the_literal_ones_on_gemma_2_2b_and_scale_elsewhere():
    from types import SimpleNamespace

    from helpers.tiled.sites import PAPER_WIDTHS, SEARCH_WIDTHS
    from helpers.tiled.widths import search_widths, tile_widths

    gemma_2_2b = SimpleNamespace(d_model=2304, d_mlp=9216, d_head=256)
    assert tile_widths(gemma_2_2b, "paper_units") == PAPER_WIDTHS == tile_widths(gemma_2_2b, "paper")
    assert search_widths(gemma_2_2b, "paper_units") == SEARCH_WIDTHS
    smollm2 = SimpleNamespace(d_model=576, d_mlp=1536, d_head=64)  # by hand: the paper's fraction of each input
    assert tile_widths(smollm2, "paper_units") == {"attn.o": 128, "attn.q": 32, "attn.k": 64, "attn.v": 64,
                                                   "mlp.gate": 128, "mlp.up": 128, "mlp.down": 85}
    assert search_widths(smollm2, "paper_units")["mlp.up"] == (128, 64, 32, 16)
    assert tile_widths(smollm2, "paper") == PAPER_WIDTHS  # literal: attn.o's 512 is eight of its heads
    with pytest.raises(ValueError, match="widths='heads'"):
        tile_widths(smollm2, "heads")


SEARCH = {"attn.q": (16, 8, 4), "attn.k": (16,), "attn.v": (16, 8), "attn.o": (32,), "mlp.gate": (16,),
          "mlp.up": (16, 8), "mlp.down": (24,)}  # tiny-gemma3: d_model 32, d_mlp 48, 4 heads of 16


def tiny_search(thresholds, tmp_path, monkeypatch):
    from helpers.core.models import gpt2_tokenizer
    from helpers.tiled.corpus import sample_tokens
    from helpers.tiled.sweep import sweep

    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    sample = sample_tokens(gpt2_tokenizer(), n_tokens=120, max_tokens=16, tokenizer_name="gpt2")
    model = cached_model("tiny-gemma3", "raw")
    first = {name: widths[0] for name, widths in SEARCH.items()}
    result = sweep(model, sample, thresholds, layers=[1], n_texts=2, progress=False, widths=first, search=SEARCH)
    return model, sample, result


def test_width_search_tries_each_fallback_width_in_order_while_a_site_fails(tmp_path, monkeypatch):
    """Thresholds no site can meet: every site with fallbacks is tried at each of them, and the trial kept is
    the last with the most checks passed, measured as a sweep at that width would measure it."""
    from helpers.tiled.sweep import sweep

    impossible = {**T, "A": {**T["A"], "a1_margin": 2.0}, "C": {**T["C"], "bootstrap": 2, "dose_alphas": [2.0]}}
    model, sample, result = tiny_search(impossible, tmp_path, monkeypatch)
    search = result.search.set_index("site")
    assert not search["pass"].any()
    for site, widths in SEARCH.items():
        assert search.loc[site, "trials"] == len(widths), site
        assert search.loc[site, "width"] in widths
    by_hand = sweep(model, sample, impossible, layers=[1], sites=["attn.q"], progress=False, released=False,
                    widths={"attn.q": 4}, effective=False).verdicts(PAPER_JUDGE).iloc[0]
    first = result.verdicts(PAPER_JUDGE).set_index("site").loc["attn.q"]
    count = lambda r: sum(bool(r[c]) for c in ("A2", "A4", "B1"))  # noqa: E731 — A1 fails everywhere
    if count(by_hand) >= count(first):  # the last trial kept unless an earlier one passed more checks
        assert search.loc["attn.q", "width"] == 4 and bool(search.loc["attn.q", "B1"]) == bool(by_hand["B1"])


def test_width_search_stops_where_the_first_width_passes(tmp_path, monkeypatch):
    easy = {**T, "A": dict(a1_margin=-1.0, a1_margin_effective=-1.0, a2_tolerance=9.0, a4_margin_residual=9.0,
                           a4_ratio_residual=0.0, a4_margin_other=9.0, a4_ratio_other=0.0),
            "B": {**T["B"], "peak_residual": -1.0, "peak_other": -1.0, "peak_effective": -1.0,
                  "early_within": 9.0, "last_within": 9.0},
            "C": {**T["C"], "bootstrap": 2, "dose_alphas": [2.0]}}
    _, _, result = tiny_search(easy, tmp_path, monkeypatch)
    assert result.search["pass"].all() and (result.search["trials"] == 1).all()
    assert dict(zip(result.search["site"], result.search["width"])) == {s: w[0] for s, w in SEARCH.items()}


def test_trials_needed_counts_passes_by_trial_and_failures():
    from helpers.tiled.sweep import trials_needed

    result = sweep_of([0.3, 0.3, 0.3], [FLAT] * 3, [0.3] * 3)
    result.search = pd.DataFrame(dict(layer=[6, 7, 8], site="attn.q", trials=[1, 3, 3], **{"pass": [True, True, False]}))
    table = trials_needed({"model": result}).set_index("outcome")
    assert table["model"].to_dict() == {"passed at trial 1": 1, "passed at trial 3": 1, "failed after every trial": 1}
    assert result.pass_counts(searched=True) == {"attn.q": dict(passed=2, total=3)}
    assert result.pass_counts() == {"attn.o": dict(passed=3, total=3)}  # the verdicts, not the search table
    with pytest.raises(ValueError, match="no width search"):
        sweep_of([0.3], [FLAT], [0.3]).pass_counts(searched=True)
    with pytest.raises(ValueError, match="no width search"):
        trials_needed({"model": sweep_of([0.3], [FLAT], [0.3])})
