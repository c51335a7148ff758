"""Each rule that sets a reported number, tested at its defining boundary: one case just inside, one just
outside, with every other clause of the rule comfortably met, so that a bound moved by a one-line bug (a
doubled tolerance, ≥ for >, the arguments of a divergence swapped) fails here."""
import math
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from helpers.singular.masking.circuits import point_at_kl
from helpers.singular.heads.case_study import subfunction_evidence
from helpers.singular.masking.masks import FixedMasks
from helpers.singular.heads.receptors import find_receptors, receptor_statistics
from helpers.singular.masking.references import kl_to_full
from helpers.tiled.thresholds import load_thresholds
from helpers.tiled.verdicts import rule_a, rule_b1, rule_c1
from helpers.results.workshop_checks import CRITERIA, attack_rows, circuit_rows

T = load_thresholds()
EPS = 1e-6


# --- the divergence every circuit is trained and judged by ------------------------------------------------

def test_kl_is_of_the_masked_model_from_the_full_one_by_hand():
    """KL(p_full ‖ p_masked) = Σ p_full log(p_full / p_masked), on two asymmetric distributions, by hand:
    p = (0.9, 0.1), q = (0.5, 0.5): 0.9 ln 1.8 + 0.1 ln 0.2 = 0.368064 nats; the other direction is 0.510826."""
    p, q = torch.tensor([[0.9, 0.1]], dtype=torch.float64), torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    forward = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    backward = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    assert forward == pytest.approx(0.368064, abs=1e-6) and backward == pytest.approx(0.510826, abs=1e-6)
    logits_q = torch.log(q) + 3.0  # logits: any shift gives the same distribution
    assert float(kl_to_full(torch.log(p), logits_q)[0]) == pytest.approx(forward, rel=1e-12)
    assert float(kl_to_full(torch.log(q), torch.log(p))[0]) == pytest.approx(backward, rel=1e-12)
    assert float(kl_to_full(torch.log(p), torch.log(p) - 7.0)[0]) == pytest.approx(0.0, abs=1e-15)


# --- paper 1: the reported circuit -------------------------------------------------------------------------

def test_the_reported_circuit_is_within_kl_0_21_inclusive_and_never_keeps_everything():
    curve = pd.DataFrame({"kept": [10, 20, 30, 40], "kl": [0.21 + EPS, 0.21, 0.1, 0.0],
                          "kept_fraction": [0.1, 0.2, 0.3, 1.0]})
    assert point_at_kl(curve, 0.21)["kept"] == 20  # exactly 0.21 counts; 0.21 + 1e-6 does not
    assert point_at_kl(curve.assign(kl=[0.5, 0.5, 0.5, 0.0]), 0.21) is None  # only the full model reaches it


def test_circuits_of_equal_size_are_reported_by_the_lower_kl():
    curve = pd.DataFrame({"kept": [20, 20, 30], "kl": [0.2, 0.1, 0.05], "kept_fraction": [0.2, 0.2, 0.3]})
    assert point_at_kl(curve, 0.21)["kl"] == 0.1
    assert point_at_kl(curve.iloc[::-1], 0.21)["kl"] == 0.1


def test_kept_is_a_mask_above_one_half_and_the_papers_active_rule_is_at_least_1e_3():
    values = torch.tensor([[0.5, 0.5 + EPS, 1e-3, 1e-3 - EPS]])
    masks = SimpleNamespace(eval_values=lambda: {"0_ov": values})
    assert FixedMasks.binarised(masks).blocks["0_ov"].tolist() == [[0.0, 1.0, 0.0, 0.0]]
    assert FixedMasks.at_least(masks, 1e-3).blocks["0_ov"].tolist() == [[1.0, 1.0, 1.0, 0.0]]


# --- paper 1: the head case study's subfunction criteria -----------------------------------------------------

def roles(rows):
    return pd.DataFrame(rows, columns=["BOS", "IO", "S1", "S2", "end", "other"])


def test_subfunction_criteria_at_their_boundaries():
    # entity separation: |IO − (S1 + S2)| > half the direction's total |term| (strict)
    ov = roles([[0, 3.0, 0.5, 0.5, 0, 0],  # |3 − 1| = 2 = 0.5 × 4: on the bound, not supported
                [0, 3.0 + EPS, 0.5, 0.5, 0, 0],  # just over
                [9.0, 0, 0, 0, 0, 8.9]])  # BOS dominant by 0.1
    qk = roles([[0, 1.0, 1.0, 0.5, 0, 0],  # IO = S1: not above both S keys
                [0, 1.0 + EPS, 1.0, 0.5, 0, 0]])
    matters = pd.DataFrame(dict(kind=["ov"] * 3 + ["qk"] * 2, direction=[0, 1, 2, 0, 1], beyond_controls=True))
    found = {e["subfunction"]: e["directions"] for e in subfunction_evidence(ov, qk, matters)}
    assert found["entity separation (IO vs S)"] == ["OV 1"]
    assert found["salience (attends IO over S)"] == ["QK 1"]
    assert found["sequence initialisation (BOS)"] == ["OV 2"]
    # a direction that does not matter earns nothing
    none = subfunction_evidence(ov, qk, matters.assign(beyond_controls=False))
    assert not any(e["supported"] for e in none)


# --- paper 2: checks A, B1, C1 --------------------------------------------------------------------------------

@pytest.mark.parametrize("residual,effective", [(True, False), (False, False), (False, True)])
def test_b1_peak_floor_early_window_and_last_point_each_just_inside_and_just_outside(residual, effective):
    b = T["B"]
    floor = b["peak_effective"] if effective else b["peak_residual"] if residual else b["peak_other"]
    peak = 0.5

    def b1(lifts):
        return rule_b1(lifts, residual, effective, T)

    assert b1([peak] * 5)
    assert b1([floor + EPS] * 5) and not b1([floor - EPS] * 5)  # the peak's floor
    # the first two points within early_within of the peak
    assert b1([peak - b["early_within"] + EPS, peak, peak, peak, peak])
    assert not b1([peak - b["early_within"] - EPS, peak, peak, peak, peak])
    assert not b1([peak, peak - b["early_within"] - EPS, peak, peak, peak])
    # the last point within last_within of the peak; halfway to twice the tolerance fails too
    assert b1([peak, peak, peak, peak, peak - b["last_within"] + EPS])
    assert not b1([peak, peak, peak, peak, peak - b["last_within"] - EPS])
    assert not b1([peak, peak, peak, peak, peak - 1.5 * b["last_within"]])


@pytest.mark.parametrize("residual", [True, False])
def test_a1_a2_a4_each_just_inside_and_just_outside(residual):
    a = T["A"]
    margin, ratio = ((a["a4_margin_residual"], a["a4_ratio_residual"]) if residual
                     else (a["a4_margin_other"], a["a4_ratio_other"]))

    def rule(tile, whole=0.0, columns=0.0, effective=False):
        return rule_a(tile, whole, columns, residual, effective, T)

    assert rule(a["a1_margin"] + EPS)["A1"] and not rule(a["a1_margin"])["A1"]  # strict
    assert rule(a["a1_margin_effective"] + EPS, effective=True)["A1"] and not rule(a["a1_margin_effective"], effective=True)["A1"]
    assert rule(0.1, columns=0.1 + a["a2_tolerance"] - EPS)["A2"] and not rule(0.1, columns=0.1 + a["a2_tolerance"] + EPS)["A2"]
    # A4 by the margin (whole far below the ratio's reach) and by the ratio (whole far beyond the margin's)
    assert rule(0.001, whole=0.001 + margin - EPS)["A4"] and not rule(0.001, whole=0.001 + margin + EPS)["A4"]
    assert rule(ratio * 1.0 + EPS, whole=1.0)["A4"] and not rule(ratio * 1.0 - EPS, whole=1.0)["A4"]


def test_c1_at_its_thresholds_and_its_first_judged_layer():
    c = T["C"]
    assert rule_c1(c["rho"], 0.0, c["min_layer"], T) and not rule_c1(c["rho"] - EPS, 0.0, c["min_layer"], T)
    assert rule_c1(0.0, c["jaccard"], 9, T) and not rule_c1(0.0, c["jaccard"] - EPS, 9, T)
    assert rule_c1(1.0, 1.0, c["min_layer"] - 1, T) is None


# --- the workshop's declared criteria ------------------------------------------------------------------------

def test_the_workshop_circuit_ratio_at_its_bound():
    ratio = CRITERIA["circuit_ratio"]
    summary = dict(alpha_sweep=[dict(alpha=1.0, kl=0.1, random_kl=ratio * 0.1 + EPS, kept_fraction=0.5),
                                dict(alpha=2.0, kl=0.1, random_kl=ratio * 0.1 - EPS, kept_fraction=0.5 + EPS)])
    rows = circuit_rows("run", summary)
    assert [r["passed"] for r in rows] == [True, False, False]  # the heaviest α keeps just over half


def test_the_workshop_attack_gain_at_its_bound_and_only_for_the_circuits_themselves():
    gain = CRITERIA["attack_gain"]
    table = [dict(label="a", circuit="circuit", under_rule_kl=0.1, adversarial_kl=gain * 0.1),
             dict(label="b", circuit="circuit", under_rule_kl=0.1, adversarial_kl=gain * 0.1 - EPS),
             dict(label="a", circuit="random", under_rule_kl=2.0, adversarial_kl=2.0)]
    rows = attack_rows("run", dict(attack_table=table))
    assert [r["passed"] for r in rows] == [True, False]  # exactly the declared gain counts; the random control is not judged

# --- paper 1: logit receptors ------------------------------------------------------------------------------------

def test_a_receptor_needs_separation_at_least_the_minimum_and_a_strictly_positive_score():
    """Two directions of one head on four prompts: direction 0 separates the classes and writes toward the
    right answer; direction 1 separates them just as well but its footprint is 0 (score exactly 0)."""
    is_a = torch.tensor([True, True, False, False])
    coefficients = torch.tensor([[1.0, 1.0], [3.0, 3.0], [-1.0, -1.0], [1.0, 1.0]]).reshape(4, 1, 1, 2)
    footprint = torch.tensor([1.0, 0.0]).reshape(1, 1, 2)
    d = float(receptor_statistics(coefficients, footprint, is_a)["separation"][0, 0, 0])
    assert d == pytest.approx(2 / math.sqrt(2))  # class means 2 and 0, each variance 2
    at = find_receptors(coefficients, footprint, is_a, min_separation=d)
    assert at["direction"].tolist() == [0]  # d' equal to the minimum counts; a score of 0 does not
    assert find_receptors(coefficients, footprint, is_a, min_separation=math.nextafter(d, 2.0)).empty
