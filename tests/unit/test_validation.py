"""Notebook 07's pieces (helpers.singular.validation.verdicts): which circuits are attacked, the controls, the verdicts."""
import pandas as pd
import pytest
import torch

from helpers.singular.validation.adversary import load_attack_rules
from helpers.singular.masking.masks import FixedMasks, MaskedModel
from helpers.singular.tasks import ioi_task
from helpers.singular.masking.training import MaskingRun
from helpers.singular.validation.verdicts import (attack_targets, findings, judged, judged_from_summary, nonsense_controls,
                                                  scored_masks,
                                         seed_overlaps, smallest_count_within, specificity, verdict_line,
                                         weight_controls, weights_matter, with_attack_overrides)
from helpers.tiled.sites import control_model
from tests.conftest import cached_model


def masking_summary(sweep):
    return dict(task="ioi", masking_run=dict(alpha=1e-4), alpha_sweep=[
        dict(alpha=a, kept=k, kl=kl, kept_fraction=k / 1000) for a, k, kl in sweep])


def test_the_targets_are_the_default_alpha_and_the_sparsest_circuit_just_inside_the_bound():
    summary = masking_summary([(1e-4, 700, 0.05), (2e-4, 400, 0.21), (4e-4, 200, 0.2101)])
    targets = attack_targets(summary, 0.21)
    assert [t["alpha"] for t in targets] == [1e-4, 2e-4]  # KL 0.21 is within; 0.2101 is not
    assert [t["label"] for t in targets] == ["ioi-ours-alpha0.0001", "ioi-ours-alpha0.0002"]
    assert targets[1]["role"] == "sparsest within KL 0.21"


def test_equal_counts_within_the_bound_go_to_the_lower_kl_then_the_smaller_alpha():
    assert attack_targets(masking_summary([(1e-4, 700, 0.05), (2e-4, 300, 0.2), (4e-4, 300, 0.1)]), 0.21)[1]["alpha"] == 4e-4
    assert attack_targets(masking_summary([(1e-4, 700, 0.05), (4e-4, 300, 0.1), (2e-4, 300, 0.1)]), 0.21)[1]["alpha"] == 2e-4


def test_one_target_when_the_default_is_the_sparsest_or_nothing_is_within_the_bound():
    same = attack_targets(masking_summary([(1e-4, 700, 0.08), (2e-4, 400, 0.26)]), 0.21)
    assert [t["alpha"] for t in same] == [1e-4] and "also the sparsest" in same[0]["role"]
    none = attack_targets(masking_summary([(1e-4, 700, 0.3), (2e-4, 1000, 0.0)]), 0.21)  # keeping all is no circuit
    assert [t["alpha"] for t in none] == [1e-4] and "no trained circuit" in none[0]["role"]


def test_task_specificity_takes_the_largest_nonsense_overlap_at_the_boundary():
    seeds = [0.4, 0.6]
    assert specificity({"shuffled": 0.2, "random_tokens": 0.1}, seeds, 0.5)  # 0.2 = 0.5 × 0.4: within
    assert not specificity({"shuffled": 0.1, "random_tokens": 0.2001}, seeds, 0.5)  # one kind just above
    with pytest.raises(ValueError, match="nonsense"):
        specificity({}, seeds, 0.5)
    with pytest.raises(ValueError, match="seeds"):
        specificity({"shuffled": 0.1}, [], 0.5)


def test_the_weights_matter_only_when_every_control_needs_the_declared_multiple():
    assert weights_matter(200, {"random-init": 300, "permuted": 900}, 1.5)  # 300 = 1.5 × 200
    assert not weights_matter(200, {"random-init": 299, "permuted": 900}, 1.5)
    assert weights_matter(3, {"random-init": 1}, 0.3)  # exact at the boundary: 0.3 × 3 is 0.9000000000000001 in floats
    with pytest.raises(ValueError, match="no kept fraction"):
        weights_matter(None, {"random-init": 300}, 1.5)
    assert load_attack_rules()["weight_controls"]["min_ratio"] == 1.5


def test_a_mistyped_weight_rule_or_attack_override_is_refused(tmp_path):
    from helpers.singular.validation.adversary import ATTACK_RULES

    path = tmp_path / "rules.toml"
    path.write_text(ATTACK_RULES.read_text().replace("min_ratio = 1.5", "min_ratio = 1.5\nmin_ration = 2"))
    with pytest.raises(ValueError, match=r"\[weight_controls\].*unknown \['min_ration'\]"):
        load_attack_rules(path)
    rules = load_attack_rules()
    with pytest.raises(ValueError, match="checkpoint"):
        with_attack_overrides(rules, {"checkpoint": [1]})
    shorter = with_attack_overrides(rules, {"checkpoints": [5, 10], "stochastic_draws": 2})
    assert shorter["attack"].checkpoints == (5, 10) and shorter["stochastic_draws"] == 2
    assert shorter["attack"].batch == rules["attack"].batch and rules["attack"].checkpoints == (20, 40, 80, 160)


def test_seed_overlaps_are_jaccards_of_kept_sets_by_hand():
    a = FixedMasks({"0_qk": torch.tensor([[1.0, 1.0, 0.0, 0.0]])})
    b = FixedMasks({"0_qk": torch.tensor([[1.0, 0.0, 1.0, 0.0]])})
    c = FixedMasks({"0_qk": torch.tensor([[1.0, 1.0, 0.0, 0.0]])})
    assert seed_overlaps({2: c, 0: a, 1: b}) == [dict(a=0, b=1, jaccard=1 / 3), dict(a=0, b=2, jaccard=1.0),
                                                  dict(a=1, b=2, jaccard=1 / 3)]


def test_a_weight_control_changes_the_weights_and_every_cache_key_that_names_them():
    real = cached_model("tiny-llama", "fold_norm")
    for control in ("random-init", "permuted"):
        model = control_model("tiny-llama", control, "fold_norm")
        assert control in model.weights_source and model.record() != real.record()
        assert model.weights_sha256 != real.weights_sha256
        changed = [name for name, p in model.hf_model.named_parameters()
                   if not torch.equal(p, dict(real.hf_model.named_parameters())[name])]
        assert changed
    with pytest.raises(ValueError, match="random-init"):
        control_model("tiny-llama", "shuffled")


def test_the_binarised_masks_of_a_circuit_file_are_its_kept_set(tmp_path):
    from helpers.singular.masking.circuit_files import load_circuit, make_circuit, save_circuit
    from helpers.singular.masking.masks import DirectionMasks

    model = cached_model("tiny-llama", "fold_norm")
    task = ioi_task(model, 8, seed=1)
    train, held_out = task.split(0.5, seed=0)
    masks = DirectionMasks(model, parametrisation="hard_concrete")
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for logit in masks.logits.values():
            logit.copy_(torch.randn(logit.shape, generator=generator))
    run = MaskingRun(n_prompts=16)
    path = save_circuit(make_circuit(model, masks, FixedMasks.binarised(masks), "logit > 0", run.rule(), run, "ioi",
                                     train, held_out, "ioi-x"), tmp_path / "c.safetensors")
    circuit = load_circuit(path, model)
    row, binarised = scored_masks(MaskedModel(model), circuit.masks(model), held_out, run.rule(), 0.21, 1, 0.25)
    assert all(torch.equal(binarised.blocks[n], circuit.fixed().blocks[n]) for n in binarised.blocks)
    assert row["kept"] == circuit.n_kept()


def seven_summary(survives=(True, False), nonsense=(0.1, 0.15), seeds=(0.4, 0.5, 0.6), task=200, controls=(350, None),
                  matched=None, nested=None, transfer=None):
    rules = load_attack_rules()
    attack = pd.DataFrame([dict(label=f"ioi-{i}", role=f"role {i}", circuit=which, kept=10, kept_fraction=0.1,
                                under_rule_kl=0.1, stochastic_mean_kl=0.1, stochastic_max_kl=0.2,
                                adversarial_kl=0.1 if (ok and which == "circuit") else 0.9,
                                survives=ok and which == "circuit")
                           for i, ok in enumerate(survives) for which in ("circuit", "random")])
    seed_table = pd.DataFrame([dict(seed=0, kept=300, kept_fraction=0.3, kl=0.1, at_bound_kept=task,
                                    at_bound_kept_fraction=task / 1000, at_bound_kl=0.2)])
    jaccards = [dict(a=0, b=i + 1, jaccard=j) for i, j in enumerate(seeds)]
    nonsense_table = pd.DataFrame([dict(kind=k, jaccard_with_task=j, kept=500, at_bound_kept_fraction=0.5, at_bound_kl=0.2)
                                   for k, j in zip(("shuffled", "random_tokens"), nonsense)])
    # a control without a count is one whose own trained circuit missed the bound (KL 0.5): its training failed
    weights = pd.DataFrame([dict(control=c, kl=0.5 if k is None else 0.1, at_bound_kept=k,
                                 at_bound_kept_fraction=None if k is None else k / 1000,
                                 at_bound_kl=None if k is None else 0.1) for c, k in zip(("random-init", "permuted"), controls)])
    verdicts = judged(attack, seed_table, jaccards, nonsense_table, weights, rules, 1000, matched, nested, transfer)
    return dict(task="ioi", total_directions=1000, verdicts=verdicts, matched_overlaps=matched or [], transfer=transfer,
                nested_attack=nested or [], attack_table=attack.to_dict("records"), seeds=seed_table.to_dict("records"),
                seed_jaccards=jaccards, nonsense=nonsense_table.to_dict("records"),
                weight_controls=weights.astype(object).where(weights.notna(), None).to_dict("records"))


def test_the_verdicts_follow_the_declared_rules_and_read_in_one_line():
    summary = seven_summary()
    v = summary["verdicts"]
    assert v["survives"] == {"ioi-0": True, "ioi-1": False} and v["attack_steps"] == 160
    assert v["task_specific"] is True and v["nonsense_jaccard"] == 0.15 and v["lowest_seed_jaccard"] == 0.4
    assert v["weights_matter"] is True  # 350 ≥ 1.5 × 200; the permuted model's training failed and is no evidence
    assert v["controls_training_failed"] == ["permuted"]
    line = verdict_line(summary)
    assert line.startswith("survives an adversary of 160 steps (bound KL 0.21): role 0 (10.0 % kept): yes")
    assert "role 1 (10.0 % kept): no, largest KL 0.90" in line and "task-specific: yes" in line
    assert seven_summary(nonsense=(0.1, 0.25))["verdicts"]["task_specific"] is False
    assert seven_summary(controls=(299, None))["verdicts"]["weights_matter"] is False
    text = findings(summary)
    assert text.startswith("## What we found") and "**Do the trained weights matter to the kept fraction?** yes (" in text
    assert "training failed for permuted" in text
    assert seven_summary(controls=(None, None))["verdicts"]["weights_matter"] is None  # nothing left to judge by


def test_the_count_within_the_bound_is_found_by_bisection_and_a_kl_at_the_bound_is_within():
    asked = []

    def kl_of(n):  # a KL that falls as directions are added, exactly at the bound from n = 37 on
        asked.append(n)
        return 0.21 if n >= 37 else 0.5 + (37 - n) / 100

    assert smallest_count_within(kl_of, 100, 0.21, resolution=0.01) == 37
    assert 100 not in asked  # the full model is within by definition, never evaluated
    for first in range(1, 100):  # at a resolution of one direction, exact wherever the KL drops below the bound
        assert smallest_count_within(lambda n: 0.1 if n >= first else 0.3, 100, 0.21, resolution=0.01) == first
    coarse = smallest_count_within(kl_of, 1000, 0.21, resolution=0.1)
    assert 37 <= coarse < 37 + 100 and kl_of(coarse) <= 0.21
    assert smallest_count_within(lambda n: 0.0, 100, 0.21) == 0  # nothing needed at all
    assert smallest_count_within(lambda n: 0.0 if n == 100 else 1.0, 100, 0.21) == 100  # only the full model


def test_the_attack_alone_leaves_every_control_table_empty_but_readable_and_every_other_verdict_untested():
    """The workshop size: one seed, no nonsense, no weight control; the tables keep their columns (the
    notebook displays them), and the verdicts they would give are "not tested", never a vacuous yes."""
    nonsense, nonsense_masks = nonsense_controls(None, None, None, None, [], None, 0.21)
    assert nonsense_masks == {}
    weights = weight_controls("tiny-llama", "fold_norm", None, None, None, [], 0.21)
    assert nonsense.empty and {"kind", "jaccard_with_task", "at_bound_kept_fraction", "at_bound_kl"} <= set(nonsense.columns)
    assert weights.empty and {"control", "at_bound_kept", "at_bound_kept_fraction", "at_bound_kl"} <= set(weights.columns)
    summary = seven_summary()
    attack = pd.DataFrame(summary["attack_table"])
    seed_table = pd.DataFrame(summary["seeds"])
    verdicts = judged(attack, seed_table, summary["seed_jaccards"], nonsense, weights, load_attack_rules(), 1000)
    assert verdicts["task_specific"] is None and verdicts["weights_matter"] is None
    assert verdicts["survives"] == summary["verdicts"]["survives"]
    alone = dict(summary, verdicts=verdicts, seed_jaccards=[], nonsense=[], weight_controls=[])
    assert "task-specific: not tested" in verdict_line(alone)
    assert "matter to the kept fraction?** not tested." in findings(alone)


def test_the_matched_rule_compares_the_lowest_seed_pair_with_the_highest_nonsense_overlap():
    from helpers.singular.validation.verdicts import matched_extremes, matched_threshold, specific_at_matched_size

    rows = [dict(pair="seeds", corrected=0.7), dict(pair="seeds", corrected=0.5), dict(pair="seeds", corrected=0.6),
            dict(pair="nonsense", corrected=0.1), dict(pair="nonsense", corrected=0.25), dict(pair="nonsense", corrected=0.2)]
    assert matched_extremes(rows) == (0.5, 0.25) and matched_threshold(rows, 0.5) == 0.25
    assert specific_at_matched_size(rows, 0.5) and not specific_at_matched_size(rows, 0.4999)
    for missing in ("seeds", "nonsense"):
        with pytest.raises(ValueError, match="needs a pair of seeds and a nonsense circuit"):
            matched_extremes([r for r in rows if r["pair"] != missing])


def test_task_specificity_at_matched_size_supersedes_the_size_blind_rule_in_the_verdict():
    """Seeds overlap by 0.5 beyond chance; a nonsense circuit by 0.25 (exactly half: within) or 0.3 (beyond)."""
    def rows(nonsense):
        return [dict(pair="seeds", a="seed 0", b="seed 1", k=300, n=1000, corrected=0.5),
                dict(pair="nonsense", a="seed 0", b="shuffled", k=300, n=1000, corrected=nonsense)]

    specific = seven_summary(matched=rows(0.25))
    v = specific["verdicts"]
    assert v["task_specific_matched"] is True and v["matched_threshold"] == 0.25
    assert v["task_specific_matched_reach"] == dict(yes=True, no=True, decided_by="")
    line = verdict_line(specific)
    assert "task-specific at matched size: yes (every circuit cut to 300 of 1,000 directions" in line
    assert "the size-blind Jaccard rule: yes" in line
    assert seven_summary(matched=rows(0.3))["verdicts"]["task_specific_matched"] is False
    from helpers.singular.validation.verdicts import controls_title

    # the figure's title follows the rule that stands: matched size says NOT where the size-blind rule says yes
    assert controls_title("ioi", specific["verdicts"]).startswith("ioi: the circuit is task-specific;")
    assert controls_title("ioi", seven_summary(matched=rows(0.3))["verdicts"]).startswith("ioi: the circuit is NOT task-specific;")
    assert seven_summary()["verdicts"]["task_specific_matched"] is None  # no matched rows: not judged at matched size


def nested_rows(learned, random):
    """A nested attack's table: each ranking's outcome at 99.9, 99, 95 and 90 % kept (largest first)."""
    shares = [0.999, 0.99, 0.95, 0.9]
    return [dict(ranking=ranking, share=share, kept=round(1000 * share), kept_fraction=share, survives=ok,
                 adversarial_kl=0.1 if ok else 0.5, adversarial_kl_in_sample=0.1 if ok else 0.6,
                 stopped_at=None if ok else 20, inferred=None)
            for ranking, pattern in (("learned", learned), ("random", random)) for share, ok in zip(shares, pattern)]


def test_the_calibration_says_yes_only_when_the_learned_ranking_holds_at_a_strictly_smaller_share():
    from helpers.singular.validation.verdicts import calibration

    better = calibration(nested_rows([True, True, True, False], [True, True, False, False]))
    assert better["smallest_surviving"] == {"learned": 0.95, "random": 0.99} and better["ranking_holds_better"]
    tie = calibration(nested_rows([True, True, False, False], [True, True, False, False]))
    assert not tie["ranking_holds_better"] and tie["survivable"]  # equal shares: no better
    only_learned = calibration(nested_rows([True, False, False, False], [False] * 4))
    assert only_learned["ranking_holds_better"] and only_learned["smallest_surviving"]["random"] is None
    neither = calibration(nested_rows([False] * 4, [False] * 4))
    assert not neither["survivable"] and not neither["ranking_holds_better"] and neither["largest_share"] == 0.999
    assert calibration([]) is None and calibration(None) is None


def test_a_failed_circuit_reads_uninformative_when_no_nested_circuit_holds_the_bound():
    broken = seven_summary(nested=nested_rows([False] * 4, [False] * 4))
    line = verdict_line(broken)
    assert "role 1 (10.0 % kept): no, uninformative: a circuit keeping the top 99.9 % of directions fails too" in line
    assert "role 0 (10.0 % kept): yes" in line  # a circuit that held is not touched
    assert "the smallest kept share that holds the bound is none of the shares attacked by the learned ranking" in line
    calibrated = verdict_line(seven_summary(nested=nested_rows([True, True, True, False], [True, False, False, False])))
    assert "role 1 (10.0 % kept): no, largest KL" in calibrated
    assert "95 % by the learned ranking and 99.9 % at random (the learned ranking holds at a smaller share" in calibrated
    text = findings(seven_summary(nested=nested_rows([True, False, False, False], [False] * 4)))
    assert "top 99 % by the learned ranking (990 directions): fails; largest KL 0.500 (in sample 0.600), stopped at " \
           "step 20." in text


def test_results_say_each_tasks_calibration_only_where_its_run_attacked_nested_circuits():
    from helpers.results.documents import nested_calibration

    calibrated = seven_summary(nested=nested_rows([True, True, False, False], [True, False, False, False]))
    text = nested_calibration({"07_circuit_validation-ioi-smollm2-135m": calibrated,
                               "07_circuit_validation-gender-smollm2-135m": dict(seven_summary(), task="gender")})
    assert text == ("Notebook 07, per task. IOI: the attack calibrated on nested circuits: the smallest kept share that "
                    "holds the bound is 99 % by the learned ranking and 99.9 % at random (the learned ranking holds at "
                    "a smaller share than random).")
    assert nested_calibration({"07_circuit_validation-ioi-smollm2-135m": seven_summary()}) is None


def transfer_record(kl=2.0, low=1.5, decided_by="", posed_kl=0.05):
    """A ``transfer_check`` record by hand: both kinds of nonsense at KL ``kl`` on the task with the CI's lower end
    ``low``, the third seed posed as nonsense at ``posed_kl``."""
    from helpers.singular.validation.transfer import specific_by_transfer

    rows = [dict(kind=k, kl=kl, fails_bound=kl > 0.21, excess=low + 0.1, excess_low=low, excess_high=low + 0.2)
            for k in ("shuffled", "random_tokens")]
    posed = dict(kind="seed 2", kl=posed_kl, fails_bound=posed_kl > 0.21, excess=posed_kl - 0.04,
                 excess_low=posed_kl - 0.06, excess_high=posed_kl - 0.02)
    return dict(k=300, n=1000, bound=0.21, prompts=64, reference_kl=0.04, random_kl=1.2, rows=rows,
                reach=dict(yes=True, no=not decided_by, decided_by=decided_by), reference="seed 1", dropped_prompts=0,
                specific=specific_by_transfer(rows, 0.21), posed=posed, posed_specific=specific_by_transfer([posed], 0.21))


def test_task_specificity_by_transfer_supersedes_the_overlap_rules_and_reads_in_words():
    from helpers.singular.validation.verdicts import controls_title, specificity_key

    summary = seven_summary(nonsense=(0.1, 0.25), transfer=transfer_record())
    v = summary["verdicts"]
    assert (v["task_specific"], v["task_specific_transfer"]) == (False, True)  # the overlap says no, the task says yes
    assert v["task_specific_transfer_reach"] == dict(yes=True, no=True, decided_by="")
    assert specificity_key(v) == "task_specific_transfer"
    assert specificity_key({**v, "task_specific_matched": False}) == "task_specific_transfer"  # it supersedes both
    assert specificity_key({**v, "task_specific_transfer": None}) == "task_specific"
    assert specificity_key({**v, "task_specific_transfer": None, "task_specific_matched": False}) == "task_specific_matched"
    assert controls_title("ioi", v).startswith("ioi: the circuit is task-specific;")
    line = verdict_line(summary)
    assert ("task-specific by transfer: yes (the second seed's and each nonsense circuit cut to 300 of 1,000 directions "
            "and scored on the task: shuffled: KL 2.000 on the task, +1.600 [+1.500, +1.700] beyond the second seed's "
            "0.040; random tokens: KL 2.000") in line
    assert "; task-specific: no; Jaccard with a nonsense circuit up to 0.25" in line  # the overlap rule beside it
    text = findings(summary)
    assert "- **Task-specific by transfer?** yes: the seed 1 circuit and each nonsense circuit cut to 300 of 1,000" in text
    assert "  - The case known to be no, seed 2 scored as if it were nonsense: not specific (seed 2: KL 0.050" in text
    decided = seven_summary(transfer=transfer_record(decided_by="the cut: circuits of 300 of 1,000 directions fail"))
    assert controls_title("ioi", decided["verdicts"]).startswith("ioi: task-specificity decided by the cut;")
    assert "task-specific by transfer: uninformative: decided by the cut: circuits of 300" in verdict_line(decided)
    assert seven_summary(transfer=transfer_record(kl=0.21))["verdicts"]["task_specific_transfer"] is False
    assert judged_from_summary(summary, load_attack_rules())["task_specific_transfer"] is True
    assert "Task-specific by transfer" not in findings(seven_summary())


def test_transfer_check_judges_the_nonsense_against_the_second_seed_and_poses_the_third(monkeypatch):
    """The reference is the second seed, the third is scored beside the nonsense and judged apart (the case known
    to be no); without a second seed or a nonsense circuit nothing is judged."""
    from helpers.singular.validation import transfer as T
    from helpers.singular.validation.verdicts import transfer_check

    seen = {}

    def scores(evaluator, reference, nonsense, k, bound, rule):
        seen.update(reference=reference, kinds=list(nonsense), k=k, prompts=evaluator.task.prompts)
        kl = dict(shuffled=1.0, random_tokens=0.5, **{"seed 2": 0.05})
        return dict(k=k, n=1000, bound=bound, prompts=len(evaluator.task), reference_kl=0.04, random_kl=1.0,
                    reach=dict(yes=True, no=True, decided_by=""),
                    rows=[dict(kind=kind, kl=kl[kind], excess_low=kl[kind] - 0.1) for kind in nonsense])

    monkeypatch.setattr(T, "transfer_scores", scores)
    monkeypatch.setattr("helpers.singular.masking.circuits.CircuitEvaluator",
                        lambda masked, task, rule: type("E", (), {"task": task})())
    task = type("Task", (), {"name": "ioi", "prompts": ["a", "b", "c"], "__len__": lambda self: 3})()
    train = type("Task", (), {"prompts": ["x"]})()
    found = transfer_check(None, train, task, "rule", {0: "m0", 1: "m1", 2: "m2"},
                           {"shuffled": "n1", "random_tokens": "n2"}, 300, 0.21)
    assert seen == dict(reference="m1", kinds=["shuffled", "random_tokens", "seed 2"], k=300, prompts=["a", "b", "c"])
    assert [r["kind"] for r in found["rows"]] == ["shuffled", "random_tokens"] and found["posed"]["kind"] == "seed 2"
    assert (found["specific"], found["posed_specific"], found["reference"]) == (True, False, "seed 1")
    assert found["dropped_prompts"] == 0
    two = transfer_check(None, train, task, "rule", {0: "m0", 1: "m1"}, {"shuffled": "n1"}, 300, 0.21)
    assert two["posed"] is None and two["posed_specific"] is None and seen["kinds"] == ["shuffled"]
    assert transfer_check(None, train, task, "rule", {0: "m0"}, {"shuffled": "n1"}, 300, 0.21) is None
    assert transfer_check(None, train, task, "rule", {0: "m0", 1: "m1"}, {}, 300, 0.21) is None
    with pytest.raises(ValueError, match="collide"):
        transfer_check(None, train, task, "rule", {0: "m0", 1: "m1", 2: "m2"}, {"seed 2": "n"}, 300, 0.21)


def test_transfer_check_runs_on_real_masks_and_prompts():
    """The same on the tiny Llama's own masks and the planted task's prompts: every number comes from
    ``transfer_scores`` on the held-out prompts, the third seed scored beside the nonsense."""
    from helpers.singular.validation import planted_recovery as R
    from helpers.singular.validation.transfer import specific_by_transfer
    from helpers.singular.validation.verdicts import transfer_check
    from tests.unit.test_transfer import seeded_masks

    tiny = cached_model("tiny-llama", "fold_norm")
    run = MaskingRun.declared(fast=True)
    rules = {**R.load_plant_rules(), "plant": {**R.load_plant_rules()["plant"], "n_pairs": 4}}
    sets = R.prompt_sets(tiny, rules, run.n_prompts, fast=True)
    masks = lambda seed: seeded_masks(tiny, seed)  # noqa: E731
    k = masks(0).count() // 2
    found = transfer_check(MaskedModel(tiny), sets["train"], sets["held_out"], run.rule(),
                           {0: masks(0), 1: masks(1), 2: masks(2)}, {"shuffled": masks(3)}, k, 0.21)
    assert (found["k"], found["prompts"], found["dropped_prompts"], found["reference"]) == (k, len(sets["held_out"]), 0,
                                                                                          "seed 1")
    assert [r["kind"] for r in found["rows"]] == ["shuffled"] and found["posed"]["kind"] == "seed 2"
    assert found["specific"] == specific_by_transfer(found["rows"], 0.21)
    assert found["posed_specific"] == specific_by_transfer([found["posed"]], 0.21)
