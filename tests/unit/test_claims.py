"""The verdict rules of RESULTS.md, at each rule's boundary (just inside, just outside), and the claims read
from hand-built summaries."""
import pytest

from helpers.results import claims as C

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


# --- no finding written by hand ---------------------------------------------------------------------------

PROSE_MODULES = ("helpers/results/claims.py", "helpers/results/conclusions.py", "helpers/results/documents.py", "helpers/core/feasibility.py",
                 "helpers/singular/validation/verdicts.py")
PAPER_QUOTES = {  # numbers that name something, not findings: a head's name, a citation, a claim as the paper words it
    "9.6": "head 9.6, the paper's case-study head",
    "2511.20273": "paper 1's arXiv id", "2608.06969": "paper 2's arXiv id",
    "1–2": "paper 2's claim that coverage saturates at k = 1–2",
}


def literal_findings(source: str) -> list[tuple[int, str]]:
    """Every string literal of a module's ``source`` that can reach generated text (f-string parts included;
    docstrings not) and holds a decimal or a range that is not a quote of the paper."""
    import ast
    import re

    tree = ast.parse(source)
    docstrings = {id(node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    number = re.compile(r"\d+\.\d+|\d+\s?–\s?\d+")
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
            and any(m.group() not in PAPER_QUOTES for m in number.finditer(node.value))]


@pytest.mark.parametrize("path", PROSE_MODULES)
def test_no_decimal_or_range_is_written_by_hand_into_generated_prose(path):
    """A number in RESULTS.md, the README or a notebook's closing cell comes from a summary or a rules file:
    a decimal or a range typed into a template (the old "Jaccard 0.35–0.64") fails here."""
    from pathlib import Path

    assert literal_findings((Path(__file__).resolve().parents[2] / path).read_text(encoding="utf-8")) == []


def test_the_literal_check_catches_a_hand_written_range_and_skips_docstrings_and_quotes():
    planted = ('"""A module, 0.5 in its docstring."""\n'
               'def caveat(x):\n    """Its docstring: 0.35."""\n'
               '    return f"circuits differ between seeds (Jaccard 0.35–0.64), head 9.6, {x:.2f}"\n')
    assert [text for _, text in literal_findings(planted)] == ["circuits differ between seeds (Jaccard 0.35–0.64), head 9.6, "]
    assert literal_findings('X = f"seeds overlap by {low:.2f}–{high:.2f} in head 9.6"\n') == []


def test_the_seed_spread_comes_from_notebook_07_and_pruning_from_notebook_02():
    seven = dict(seeds=[{}, {}, {}], seed_jaccards=[dict(jaccard=0.556), dict(jaccard=0.587), dict(jaccard=0.577)])
    assert C._seed_words(seven) == "circuits of 3 training seeds overlap by Jaccard 0.56–0.59 (notebook 07)"
    assert C._seed_words(None) is None and C._seed_words(dict(seeds=[], seed_jaccards=[])) is None
    assert C._pruning_words({}) is None
    falling = dict(pruning_at_end=dict(steps=100, before=0.8, after=0.72))
    assert C._pruning_words(falling) == "training still pruning at its last step (kept share 80.0 % → 72.0 % over its last 100 steps)"
    flat = dict(pruning_at_end=dict(steps=100, before=0.72, after=0.72))
    assert C._pruning_words(flat).startswith("training no longer pruning")


def one(model, worst, bias, misfold, control=None):
    summary = dict(model=model, worst_identity_error=worst, largest_bias=dict(qk=bias, ov=bias),
                   misfolded_ov_error=misfold, fraction_above_noise_floor=dict(qk=0.85))
    return dict(summary, biased_control=control) if control else summary


def test_the_identities_say_yes_only_where_a_bias_could_have_failed_them():
    control = dict(model="gpt2 shapes", worst_identity_error=4e-7, largest_bias=dict(qk=0.5), misfolded_ov_error=0.25)
    bias_free = {"a": one("smollm2", 1e-6, 0.0, 1e-7), "b": one("gemma", 5e-7, 0.0, 1e-7)}
    assert C.identities_claim(bias_free, RULES).verdict.startswith(C.DECIDED + " bias-free models")
    claim = C.identities_claim({"a": one("smollm2", 1e-6, 0.0, 1e-7, control)}, RULES)
    assert claim.verdict == C.REPRODUCED and "4.0e-07 (gpt2 shapes)" in claim.ours
    assert claim.control.startswith("bias rows dropped (a planted misfold): 0.25 (gpt2 shapes)")
    assert claim.caveat.startswith("smollm2 has no bias")
    failing = dict(control, worst_identity_error=2e-4)
    assert C.identities_claim({"a": one("smollm2", 1e-6, 0.0, 1e-7, failing)}, RULES).verdict == C.NOT_REPRODUCED
    uncaught = dict(control, misfolded_ov_error=1e-5)  # a misfold below the bound: the rule could not say no
    assert C.identities_claim({"a": one("smollm2", 1e-6, 0.0, 1e-7, uncaught)}, RULES).verdict.startswith(C.DECIDED)
    old = {"a": {k: v for k, v in one("smollm2", 1e-6, 0.0, 1e-7).items() if k != "largest_bias"}}
    assert C.identities_claim(old, RULES).verdict.startswith(C.NOT_TESTABLE + ": rerun notebook 01")


def test_notebook_01_writes_its_summary_before_any_verdict():
    """A failed identity must reach the summary (and read "not reproduced"), not stop the notebook first."""
    import json
    from pathlib import Path

    notebook = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "01_augmented_matrices.ipynb").read_text())
    code = ["".join(cell["source"]) for cell in notebook["cells"] if cell["cell_type"] == "code"]
    written = next(i for i, source in enumerate(code) if "write_summary(" in source)
    assert not any("assert " in source for source in code[:written])


def test_the_pruning_record_reads_the_kept_share_a_lookback_before_the_last_step():
    import pandas as pd

    from helpers.figures.singular import pruning_at_end

    history = pd.DataFrame(dict(step=[0, 50, 100, 150, 200], kept_fraction_at_half=[1.0, 0.9, 0.8, 0.75, 0.7]))
    assert pruning_at_end(history, 100) == dict(steps=100, before=0.8, after=0.7)
    assert pruning_at_end(history, 101) == dict(steps=150, before=0.9, after=0.7)  # the last logged step before
    assert pruning_at_end(history, 201) is None


def test_a_sparse_circuit_claim_is_decided_when_no_evaluated_circuit_is_small_enough():
    """Without the paper's-rule circuit at 10 % (ledger row two), the smallest circuit evaluated keeps 26 %:
    above 2 × 8.68 %, so "reproduced" was out of reach and "not reproduced" says nothing."""
    ledger = ioi_summary()["ledger"]
    no_small = ioi_summary(ledger=[ledger[0], dict(ledger[1], kept_fraction=0.5, kept_percent=50.0), ledger[2]],
                           curve=[dict(kept_fraction=0.4, kl=0.3)])
    claim = C.sparsity_claim("ioi", no_small, RULES)
    assert claim.verdict.startswith(C.DECIDED + " the circuits evaluated: the smallest keeps 26.0 %")
    with_curve = dict(no_small, curve=[dict(kept_fraction=0.17, kl=0.9)])  # a small circuit, far from the bound
    assert C.sparsity_claim("ioi", with_curve, RULES).verdict == C.NOT_REPRODUCED
