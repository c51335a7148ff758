"""The verdict rules of RESULTS.md, at each rule's boundary (just inside, just outside), and the claims read
from hand-built summaries."""
import pytest

from helpers import claims as C

RULES = C.load_rules()


def test_the_rules_file_declares_every_bound_the_rules_read():
    assert RULES["identities"]["max_relative_error"] == 1e-4
    assert RULES["sparsity"]["paper_kept_fraction"]["ioi"] == pytest.approx(1 - 0.9132)
    assert RULES["sparsity"]["paper_kl"] == 0.21 and RULES["sparsity"]["kept_factor"] == 2.0
    assert RULES["receptors"]["scale"] == 1.0 and RULES["receptors"]["path"] == "layer"
    assert RULES["tiled"]["min_pass_fraction"] == 0.9 and RULES["tiled"]["uninformative_site_share"] == 0.5


def test_identities_reproduce_below_the_bound_and_not_at_it():
    assert C.identity_verdict([1e-7, 0.9999e-4], RULES) == C.REPRODUCED
    assert C.identity_verdict([1e-7, 1e-4], RULES) == C.NOT_REPRODUCED


def point(kept, kl, random_kl=1.0):
    return dict(kept_fraction=kept, kl=kl, random_kl=random_kl)


def test_sparsity_at_twice_the_papers_fraction_and_at_the_kl_bound():
    paper = 0.0868
    limit = 2 * paper
    assert C.sparsity_verdict(point(limit, 0.21), None, paper, RULES) == C.REPRODUCED
    assert C.sparsity_verdict(point(limit + 1e-6, 0.21), None, paper, RULES) == C.NOT_REPRODUCED
    assert C.sparsity_verdict(point(0.05, 0.2101), None, paper, RULES) == C.NOT_REPRODUCED
    assert C.sparsity_verdict(None, None, paper, RULES) == C.NOT_REPRODUCED


def test_a_sparse_circuit_whose_random_control_also_reaches_the_kl_is_uninformative():
    assert C.sparsity_verdict(point(0.05, 0.1, random_kl=0.21), None, 0.0868, RULES) == C.UNINFORMATIVE
    assert C.sparsity_verdict(point(0.05, 0.1, random_kl=0.2101), None, 0.0868, RULES) == C.REPRODUCED


def test_only_the_paper_rules_circuit_meeting_the_claim_is_said_so():
    ours, papers = point(0.72, 0.08), point(0.10, 0.04)
    assert C.sparsity_verdict(ours, papers, 0.0868, RULES) == C.PAPER_RULE_ONLY
    assert C.sparsity_verdict(ours, point(0.18, 0.04), 0.0868, RULES) == C.NOT_REPRODUCED
    # ours meeting it wins over the paper's rule
    assert C.sparsity_verdict(point(0.10, 0.2), papers, 0.0868, RULES) == C.REPRODUCED


def test_subfunction_verdicts_need_a_name_mover_and_a_failing_control():
    assert C.subfunction_verdict(True, False, 0, RULES).startswith(C.NOT_TESTABLE)
    assert C.subfunction_verdict(True, False, 1, RULES) == C.REPRODUCED
    assert C.subfunction_verdict(True, True, 2, RULES) == C.UNINFORMATIVE
    assert C.subfunction_verdict(False, False, 1, RULES) == C.NOT_REPRODUCED
    assert C.subfunction_verdict(False, True, 1, RULES) == C.NOT_REPRODUCED


def test_receptors_at_half_the_pronouns_and_thirty_points_above_random():
    assert C.receptor_verdict(50.0, 20.0, RULES) == C.REPRODUCED
    assert C.receptor_verdict(49.99, 0.0, RULES) == C.NOT_REPRODUCED
    assert C.receptor_verdict(80.0, 50.01, RULES) == C.UNINFORMATIVE
    assert C.receptor_verdict(80.0, 50.0, RULES) == C.REPRODUCED


def test_every_site_layer_passes_at_nine_in_ten_under_our_judge_or_the_papers():
    assert C.tiled_verdict(0.9, None, 0.1, RULES) == C.REPRODUCED
    assert C.tiled_verdict(0.9, None, 0.9, RULES) == C.UNINFORMATIVE
    assert C.tiled_verdict(0.8999, 0.9, 0.1, RULES) == C.PAPER_RULE_ONLY
    assert C.tiled_verdict(0.8999, 0.8999, 0.1, RULES) == C.NOT_REPRODUCED
    assert C.tiled_verdict(31 / 126, 84 / 126, 6 / 126, RULES) == C.NOT_REPRODUCED


def rates(model, flagged, sites=4):
    return C.CheckRates(model=model, controls={}, uninformative_sites=tuple(f"s{i}" for i in range(flagged)),
                        sites=sites)


def test_a_sub_check_is_uninformative_from_half_of_its_sites():
    assert C.check_verdict(rates(1.0, 2), None, RULES) == C.UNINFORMATIVE
    assert C.check_verdict(rates(1.0, 1), None, RULES) == C.REPRODUCED
    assert C.check_verdict(rates(0.8999, 1), None, RULES) == C.NOT_REPRODUCED
    assert C.check_verdict(rates(0.5, 0), rates(0.95, 0), RULES) == C.PAPER_RULE_ONLY
    assert C.check_verdict(rates(0.5, 0), rates(0.95, 2), RULES) == C.NOT_REPRODUCED  # its pass is uninformative
    assert C.check_verdict(None, None, RULES).startswith(C.NOT_TESTABLE)


def test_check_rates_average_the_sites_and_keep_the_declared_flags():
    pass_rates = {"attn.q A1": dict(model=1.0, permuted=1.0, **{"random-init": 0.5}, uninformative=True),
                  "attn.k A1": dict(model=0.5, permuted=0.0, **{"random-init": 0.0}, uninformative=False),
                  "attn.q B1": dict(model=0.0, permuted=0.0, **{"random-init": 0.0}, uninformative=False)}
    got = C.check_rates(pass_rates, "A1")
    assert got == C.CheckRates(model=0.75, controls={"random-init": 0.25, "permuted": 0.5},
                               uninformative_sites=("attn.q",), sites=2)
    assert C.check_rates(pass_rates, "C1") is None


def ioi_summary(**changes):
    summary = dict(
        model="smollm2-135m", total_directions=1000,
        ledger=[dict(step="paper", kept_percent=100.0, kl=0.4, kept_fraction=1.0, random_kl=0.0),
                dict(step="hard_concrete", kept_percent=10.0, kl=0.05, kept_fraction=0.10, random_kl=1.2),
                dict(step="ours", kept_percent=72.0, kl=0.08, kept_fraction=0.72, random_kl=0.9)],
        at_paper_kl=dict(kept=720, kept_fraction=0.72, kl=0.08, random_kl=0.98, alpha=1.95e-4),
        alpha_sweep=[dict(kept_fraction=0.72, kl=0.08), dict(kept_fraction=0.51, kl=0.26),
                     dict(kept_fraction=0.26, kl=0.52)],
        paper_recipe_run=dict(steps=600, batch=16))
    return summary | changes


def test_the_ioi_claim_reads_the_sweep_point_and_the_ledger():
    claim = C.sparsity_claim("ioi", ioi_summary(), RULES)
    assert claim.ours == "72.0 % kept at held-out KL 0.08 (α 0.000195)"
    assert claim.control == "same count at random: KL 0.98"
    assert claim.paper_recipe == ("100.0 % kept (m ≥ 1e-3) at soft-mask KL 0.40 after 600 steps of 16; "
                                  "our training under its rule: 10.0 % at KL 0.05")
    assert claim.verdict == C.PAPER_RULE_ONLY  # 10 % ≤ 2 × 8.68 % at KL 0.05, under the paper's rule only
    assert "next sparser: 51.0 % at KL 0.26" in claim.caveat and claim.caveat.startswith("a 3-point α grid")


def test_a_task_without_the_papers_number_and_a_missing_run_are_not_testable():
    gender = C.sparsity_claim("gender", ioi_summary(), RULES)
    assert gender.verdict == f"{C.NOT_TESTABLE}: paper 1 gives no number for this task"
    missing = C.sparsity_claim("greater_than", None, RULES)
    assert missing.verdict.startswith(C.NOT_TESTABLE) and C.RUNS["greater_than"] in missing.verdict


def test_the_receptor_claim_reads_scale_one_on_the_full_forward():
    summary = dict(d_model=576, receptors=[{}, {}],
                   flip_rate={"layer": {"receptors": {"1.0": 98.7, "5.0": 100.0}, "random": {"1.0": 0.4, "5.0": 90.0}},
                              "direct": {"receptors": {"1.0": 100.0, "5.0": 100.0}, "random": {"1.0": 2.1, "5.0": 14.5}}})
    claim = C.receptor_claim(summary, RULES)
    assert claim.verdict == C.REPRODUCED  # at scale 5 the random directions would make it uninformative
    assert "98.7 %" in claim.ours and "at scale 1" in claim.ours and "0.4 % and 2.1 %" in claim.control
    assert "4.2 %" in claim.caveat  # 1/√576
    no_scale = dict(summary, flip_rate={p: {k: {"5.0": 1.0} for k in ("receptors", "random")} for p in ("layer", "direct")})
    assert C.receptor_claim(no_scale, RULES).verdict.startswith(C.NOT_TESTABLE)


def test_subfunction_claims_count_the_prompt_sets_meeting_the_rule():
    margin = dict(margin=1.75, margin_low=1.52, margin_high=1.99)
    summary = dict(head=[23, 0], control_head=[16, 1],
                   meets_name_mover_rule={"held-out": False, "replication": False},
                   head_margins={"held-out": margin, "replication": margin},
                   subfunction_verdicts=[dict(subfunction="salience", head=True, control=False,
                                              head_directions="QK 28", control_directions="")])
    [claim] = C.subfunction_claims(summary, RULES)
    assert claim.verdict.startswith(C.NOT_TESTABLE) and "L23.H0: supported (QK 28)" == claim.ours
    summary["meets_name_mover_rule"]["replication"] = True
    [claim] = C.subfunction_claims(summary, RULES)
    assert claim.verdict == C.REPRODUCED
    assert "held-out prompts: no (margin 1.75, 95 % CI 1.52–1.99" in claim.caveat


def test_a_verdict_outside_the_vocabulary_is_refused():
    with pytest.raises(ValueError, match="not one of"):
        C.Claim(1, "c", "", "", "", "probably fine", "", "", key="c")


def test_the_next_sparser_circuit_is_found_by_counts_not_rounded_fractions():
    summary = ioi_summary(at_paper_kl=dict(kept=10615, kept_fraction=0.12239, kl=0.189, random_kl=2.45, alpha=7.8e-4),
                          total_directions=86730,
                          alpha_sweep=[dict(kept=42400, kept_fraction=0.48887, kl=0.04),
                                       dict(kept=10615, kept_fraction=0.12239, kl=0.189)])
    claim = C.sparsity_claim("greater_than", summary, RULES)  # 10615 / 86730 = 0.1223913 > 0.12239
    assert "(no sparser circuit was trained)" in claim.caveat and "next sparser" not in claim.caveat
    summary["alpha_sweep"].append(dict(kept=5000, kept_fraction=0.05765, kl=0.3))
    assert "next sparser: 5.8 % at KL 0.30" in C.sparsity_claim("greater_than", summary, RULES).caveat
