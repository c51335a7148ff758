"""Whether each verdict rule could come out either way (helpers.core.feasibility): the Jaccard range against every
pair of subsets of a small set, each rule's reach at its defining boundary (just inside, just outside), and at
the real sizes of the committed runs one input where the rule can pass and one where it cannot."""
import json
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import pandas as pd
import pytest

from helpers.core.feasibility import (Reach, chance_jaccard, identities_reach, jaccard_range, specificity_reach,
                                 sparsity_reach, weights_reach)
from helpers.singular.validation import verdicts as validation
from helpers.singular.validation.adversary import load_attack_rules

ROOT = Path(__file__).resolve().parents[2]
N = 86_730  # SmolLM2-135M's augmented singular directions (notebook 02's total_directions)


def brute_force_jaccards(a: int, b: int, n: int) -> set[Fraction]:
    """Every Jaccard two subsets of sizes a and b of range(n) can have, by listing them all."""
    out = set()
    for A in combinations(range(n), a):
        for B in combinations(range(n), b):
            union = len(set(A) | set(B))
            out.add(Fraction(len(set(A) & set(B)), union) if union else Fraction(1))
    return out


@pytest.mark.parametrize("a,b,n", [(0, 0, 3), (0, 2, 4), (1, 1, 3), (2, 3, 4), (3, 3, 5), (4, 5, 6), (2, 2, 6), (5, 5, 5)])
def test_the_jaccard_range_is_that_of_every_pair_of_subsets(a, b, n):
    seen = brute_force_jaccards(a, b, n)
    assert jaccard_range(a, b, n) == (min(seen), max(seen))


def test_the_chance_jaccard_by_hand_and_by_drawing():
    # two halves of 8: E|A ∩ B| = 2, so the Jaccard at that overlap is 2 / (4 + 4 − 2) = 1/3
    assert chance_jaccard(4, 4, 8) == pytest.approx(1 / 3)
    assert chance_jaccard(8, 8, 8) == 1.0 and chance_jaccard(0, 0, 8) == 1.0
    import numpy as np

    rng = np.random.default_rng(0)
    overlaps = [len(set(rng.choice(100, 30, replace=False)) & set(rng.choice(100, 60, replace=False)))
                for _ in range(4000)]
    assert np.mean(overlaps) == pytest.approx(30 * 60 / 100, rel=0.02)  # the expectation the chance Jaccard uses


@pytest.mark.parametrize("bad", [(-1, 2, 4), (5, 2, 4), (2, 2, 0)])
def test_impossible_sizes_are_refused(bad):
    with pytest.raises(ValueError, match=f"n={bad[2]}"):
        jaccard_range(*bad)


@pytest.mark.parametrize("bad", [(2.0, 2, 4), (True, 2, 4)])
def test_sizes_that_are_not_counts_are_refused(bad):
    with pytest.raises(TypeError, match="whole number"):
        jaccard_range(*bad)


def test_a_reach_gives_a_reason_exactly_when_an_outcome_is_out_of_reach():
    assert Reach(True, True).say("yes") == "yes"
    assert Reach(True, False, "set sizes").say("yes") == "uninformative: decided by set sizes"
    with pytest.raises(ValueError, match="reason"):
        Reach(True, False)
    with pytest.raises(ValueError, match="reason"):
        Reach(True, True, "set sizes")
    with pytest.raises(ValueError, match="at least one"):
        Reach(False, False, "nothing")


# --- task-specificity --------------------------------------------------------------------------------------

def test_specificity_is_reachable_while_the_floor_is_at_the_threshold_and_not_just_above():
    # 6 and 7 of 10 share at least 3: Jaccard 3 / 10 = 0.3
    assert specificity_reach(6, {"random_tokens": 7}, 0.3, 10).informative
    decided = specificity_reach(6, {"random_tokens": 7}, 0.29, 10)
    assert (decided.yes, decided.no) == (False, True) and "random tokens" in decided.decided_by
    # every kind must be able to fall within; one kind above the threshold at all sizes decides it
    assert not specificity_reach(6, {"shuffled": 2, "random_tokens": 7}, 0.29, 10).yes


def test_specificity_cannot_say_no_when_no_overlap_can_exceed_the_threshold():
    # 2 and 2 of 10 overlap by a Jaccard of at most 1
    assert specificity_reach(2, {"shuffled": 2}, 0.99, 10).no
    out = specificity_reach(2, {"shuffled": 1}, 0.5, 10)  # at most 1 / 2
    assert (out.yes, out.no) == (True, False)


def test_specificity_at_the_real_sizes_of_the_ioi_run():
    """IOI's circuit keeps 62,650 directions and its seeds overlap by 0.80 (threshold 0.40): a random-token circuit of
    81,232 cannot fall within it, one of the shuffled circuit's 58,289 can."""
    assert not specificity_reach(62_650, {"random_tokens": 81_232}, 0.5 * 0.80334, N).informative
    assert specificity_reach(62_650, {"shuffled": 58_289}, 0.5 * 0.80334, N).informative


# --- the weight controls -----------------------------------------------------------------------------------

def test_weights_can_matter_while_one_and_a_half_times_the_task_fits_in_the_model():
    assert weights_reach(4, 6, 1.5).informative  # a control can need 6 = 1.5 × 4
    assert not weights_reach(5, 7, 1.5).yes  # 7.5 > 7
    assert weights_reach(57_820, N, 1.5).informative  # 1.5 × 57,820 = 86,730: exactly every direction
    out = weights_reach(57_821, N, 1.5)
    assert (out.yes, out.no) == (False, True) and "1.5 times" in out.decided_by
    assert not weights_reach(0, N, 1.5).no


def rows(**controls):
    return pd.DataFrame([dict(control=name, kl=kl, at_bound_kept=kept) for name, (kl, kept) in controls.items()])


def test_a_control_whose_own_circuit_is_not_within_the_bound_failed_training():
    counts, failed = validation.control_counts(rows(a=(0.21, 500), b=(0.2101, None), c=(0.1, None)), 0.21, 1000)
    assert counts == {"a": 500, "c": 1000} and failed == ["b"]
    assert validation.weights_matter(100, {"a": 150}, 1.5) and not validation.weights_matter(100, {"a": 149}, 1.5)
    with pytest.raises(ValueError, match="training failed"):
        validation.weights_matter(100, {"a": None}, 1.5)


# --- paper 1's sparse circuit and the identities -------------------------------------------------------------

def test_the_sparse_circuit_is_reachable_while_some_evaluated_circuit_is_small_enough():
    assert sparsity_reach([0.9, 2 * 0.0868], 2 * 0.0868).informative  # exactly at the limit
    out = sparsity_reach([0.9, 0.1737], 2 * 0.0868)
    assert (out.yes, out.no) == (False, True) and "17.36 %" in out.decided_by
    with pytest.raises(ValueError):
        sparsity_reach([], 0.1)


def test_the_identities_say_no_only_where_a_bias_exists_and_its_misfold_is_caught():
    assert identities_reach({"smollm2": 0.0, "gpt2 shapes": 0.4}, {"smollm2": 1e-7, "gpt2 shapes": 0.25}, 1e-4).informative
    bias_free = identities_reach({"smollm2": 0.0, "gemma": 0.0}, {"smollm2": 1e-7, "gemma": 1e-7}, 1e-4)
    assert not bias_free.no and "bias-free models: gemma and smollm2" in bias_free.decided_by
    # at the bound a misfold is caught (the rule passes strictly below it); just below, it is not
    assert identities_reach({"m": 0.4}, {"m": 1e-4}, 1e-4).no
    assert not identities_reach({"m": 0.4}, {"m": 0.99e-4}, 1e-4).no


# --- the committed notebook-07 runs, judged again -------------------------------------------------------------

def committed(task):
    manifest = json.loads((ROOT / "figures" / "manifest.json").read_text(encoding="utf-8"))
    runs = {run["name"]: run["summary"] for run in manifest["runs"]}
    return runs[f"07_circuit_validation-{task}-smollm2-135m"], runs[f"02_masking-{task}-smollm2-135m"]["total_directions"]


def test_the_committed_runs_judged_again_say_which_verdicts_their_sizes_decided():
    rules = load_attack_rules()
    for task in ("ioi", "gender", "greater_than"):
        summary, total = committed(task)
        verdicts = validation.judged_from_summary(summary, rules, total)
        if summary.get("transfer") is None:  # a run from before the random tokens corrupted only the task's positions
            assert verdicts["task_specific_reach"]["yes"] is False  # its random-token circuits keep 93-95 %
            assert "uninformative: decided by set sizes" in validation.verdict_line(summary, verdicts)
        else:  # since then the random-token circuit keeps about as much as the task's, and every rule can say either
            for key in ("task_specific", "task_specific_matched", "task_specific_transfer"):
                assert verdicts[key + "_reach"] == dict(yes=True, no=True, decided_by=""), (task, key)
            assert "uninformative" not in validation.verdict_line(summary, verdicts).split("the trained weights")[0]
    summary, total = committed("ioi")
    ioi = validation.judged_from_summary(summary, rules, total)
    assert ioi["controls_training_failed"] == ["permuted"] and ioi["weights_matter"] is False
    summary, total = committed("greater_than")
    assert validation.judged_from_summary(summary, rules, total)["weights_matter"] is True


# --- the largest KL a model can express (why attacked KLs recur near 365 on smollm2) -----------------------

def _kl(log_p, logits):
    return (log_p.exp() * (log_p - logits.log_softmax(-1))).sum(-1)


def test_no_output_on_the_norms_sphere_exceeds_the_kl_ceiling_and_its_witness_comes_within_log_v():
    import math

    import torch

    generator = torch.Generator().manual_seed(0)
    V, d, radius = 9, 5, math.sqrt(5)
    A, b = torch.randn(V, d, generator=generator, dtype=torch.float64), torch.randn(V, generator=generator, dtype=torch.float64)
    log_p = torch.randn(3, V, generator=generator, dtype=torch.float64).mul(2).log_softmax(-1)
    ceiling = validation.kl_ceiling(log_p, A, b, radius)
    y = torch.randn(3, 4000, d, generator=generator, dtype=torch.float64)
    y = radius * y / y.norm(dim=-1, keepdim=True)  # every direction, at the norm's radius
    reached = _kl(log_p[:, None], y @ A.T + b).max(1).values
    assert bool((reached <= ceiling).all())
    # the witness: y along the token farthest from the answer distribution's mean row
    mean_a = log_p.exp() @ A
    scores = radius * (A[None] - mean_a[:, None]).norm(dim=-1) + b[None] - (log_p.exp() @ b)[:, None]
    u = scores.argmax(1)
    witness = radius * (A[u] - mean_a) / (A[u] - mean_a).norm(dim=-1, keepdim=True)
    at_witness = _kl(log_p, (witness[:, None] * A[None]).sum(-1) + b)
    assert bool((at_witness >= ceiling - math.log(V) - 1e-9).all()) and bool((at_witness <= ceiling).all())
    capped = validation.kl_ceiling(log_p, A, b, radius, softcap=0.5)
    assert bool((_kl(log_p[:, None], 0.5 * torch.tanh((y @ A.T + b) / 0.5)).max(1).values <= capped).all())


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
def test_no_residual_however_large_takes_a_real_models_kl_past_its_ceiling(name):
    """The residual before the final norm replaced by huge random vectors: the norm brings each back to the
    sphere, so the KL from the model's own output stays within ``model_kl_ceiling``."""
    import torch

    from tests.conftest import cached_model

    model = cached_model(name, "fold_norm")
    tokens = model.to_tokens("When Mary and John went to the store, John gave a drink to")
    with torch.no_grad():
        log_p = model.bridge(tokens)[0, -1:].double().log_softmax(-1)
        ceiling = validation.model_kl_ceiling(model, log_p)
        generator = torch.Generator().manual_seed(1)
        worst = 0.0
        for _ in range(20):
            noise = 1e3 * torch.randn(tokens.shape[1], model.d_model, generator=generator)
            hooked = model.bridge.run_with_hooks(tokens, fwd_hooks=[("ln_final.hook_in", lambda x, hook: noise[None].to(x))])
            worst = max(worst, float(_kl(log_p, hooked[0, -1:].double())))
    assert 0 < worst <= float(ceiling)


# --- task-specificity at matched size, corrected for chance -------------------------------------------------

def test_the_chance_corrected_overlap_by_hand():
    from helpers.core.feasibility import corrected_overlap, corrected_range

    assert corrected_overlap(25, 50, 50, 100) == 0.0  # the expected overlap of two halves
    assert corrected_overlap(50, 50, 50, 100) == 1.0 and corrected_overlap(0, 50, 50, 100) == -1.0
    assert corrected_overlap(30, 50, 50, 100) == pytest.approx(0.2)
    assert corrected_range(72, 72, 100) == (pytest.approx((44 - 51.84) / (72 - 51.84)), 1.0)
    with pytest.raises(ValueError, match="share between 44 and 72"):
        corrected_overlap(43, 72, 72, 100)
    with pytest.raises(ValueError, match="differs from chance"):
        corrected_overlap(100, 100, 100, 100)


def test_the_matched_rule_is_reachable_at_every_size_the_runs_have_and_decided_at_the_extremes():
    from helpers.core.feasibility import corrected_range, matched_specificity_reach

    for kept in (62_650, 38_335, 42_435):  # the three tasks' circuits: both outcomes reachable at matched size
        assert matched_specificity_reach(kept, N, 0.5 * 0.3).informative
    low, _ = corrected_range(90, 90, 100)  # two sets of 90 in 100 share at least 80: (80 − 81) / (90 − 81)
    assert low == pytest.approx(-1 / 9)
    assert matched_specificity_reach(90, 100, low).informative  # at the floor: within
    out = matched_specificity_reach(90, 100, low - 1e-9)
    assert (out.yes, out.no) == (False, True) and "beyond chance" in out.decided_by
    assert not matched_specificity_reach(90, 100, 1.0).no


def test_the_matched_rule_at_its_boundary_and_its_declared_ratio():
    matched = [dict(pair="seeds", corrected=0.6), dict(pair="seeds", corrected=0.5), dict(pair="nonsense", corrected=0.25),
               dict(pair="nonsense", corrected=0.1)]
    assert validation.specific_at_matched_size(matched, 0.5)  # 0.25 = 0.5 × 0.5: within
    matched[2]["corrected"] = 0.2501
    assert not validation.specific_at_matched_size(matched, 0.5)
    with pytest.raises(ValueError, match="a pair of seeds and a nonsense"):
        validation.specific_at_matched_size(matched[2:], 0.5)
    assert validation.matched_rule() == {"ratio": 0.5}


def test_matched_overlaps_cut_every_circuit_to_k_and_count_by_hand():
    import torch

    from helpers.singular.masking.masks import DirectionMasks
    from tests.conftest import cached_model

    model = cached_model("tiny-llama", "fold_norm")

    def masks_ranking(order_seed):
        masks = DirectionMasks(model, parametrisation="hard_concrete")
        generator = torch.Generator().manual_seed(order_seed)
        with torch.no_grad():
            for logit in masks.logits.values():
                logit.copy_(torch.randn(logit.shape, generator=generator))
        return masks

    seeds = {0: masks_ranking(0), 1: masks_ranking(1)}
    nonsense = {"shuffled": masks_ranking(0), "random_tokens": masks_ranking(2)}  # shuffled: the same ranking as seed 0
    k = 100
    rows = validation.matched_overlaps(seeds, nonsense, k)
    assert [(r["pair"], r["a"], r["b"]) for r in rows] == [("seeds", "seed 0", "seed 1"), ("nonsense", "seed 0", "shuffled"),
                                                           ("nonsense", "seed 0", "random_tokens")]
    n = seeds[0].count()

    def top(masks):  # oracle: the k largest logits, by a plain sort of the flat logits
        flat = torch.cat([masks.logits[name].detach().reshape(-1) for name in masks.logits])
        return set(torch.sort(flat, descending=True, stable=True).indices[:k].tolist())

    for row, (a, b) in zip(rows, [(seeds[0], seeds[1]), (seeds[0], nonsense["shuffled"]), (seeds[0], nonsense["random_tokens"])]):
        both = len(top(a) & top(b))
        assert row["both"] == both and row["k"] == k and row["n"] == n
        assert row["corrected"] == pytest.approx((both - k * k / n) / (k - k * k / n))
    assert rows[1]["corrected"] == 1.0
    assert validation.matched_overlaps(seeds, nonsense, n) == [] and validation.matched_overlaps(seeds, nonsense, 0) == []
