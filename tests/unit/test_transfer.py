"""Task-specificity by transfer (helpers.singular.validation.transfer): its per-prompt KL against the circuit
evaluator, its bootstrap against hand-computed cases, its reachability and its verdict at their boundaries, and
the whole rule on the tiny Llama."""
from pathlib import Path

import pytest
import torch

from helpers.singular.validation import planted_recovery as R
from helpers.singular.validation import transfer as T
from tests.conftest import cached_model

BOUND = 0.21
EPS = 1e-9
RULE = T.load_transfer_rule()


@pytest.fixture(scope="module")
def setting():
    """The tiny Llama, the planted task's held-out prompts under notebook 02's rule, and masks of seeded logits."""
    from helpers.singular.masking.circuits import CircuitEvaluator
    from helpers.singular.masking.masks import MaskedModel
    from helpers.singular.masking.training import MaskingRun

    tiny = cached_model("tiny-llama", "fold_norm")
    run = MaskingRun.declared(fast=True)
    rules = {**R.load_plant_rules(), "plant": {**R.load_plant_rules()["plant"], "n_pairs": 4}}
    sets = R.prompt_sets(tiny, rules, run.n_prompts, fast=True)
    masked = MaskedModel(tiny)
    return dict(evaluator=CircuitEvaluator(masked, sets["held_out"], run.rule()),
                masks=lambda seed: seeded_masks(tiny, seed), sets=sets)


def seeded_masks(model, seed: int):
    """Masks over ``model``'s directions whose logits are standard normal draws of a generator seeded by ``seed``."""
    from helpers.singular.masking.masks import DirectionMasks

    masks = DirectionMasks(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in masks.logits.values():
            p.copy_(torch.randn(p.shape, generator=generator, device="cpu"))
    return masks


def test_per_prompt_kl_averages_to_the_evaluators_kl(setting):
    from helpers.singular.masking.circuits import binarise_top

    masks = setting["masks"](0)
    for k in (1, masks.count() // 3, masks.count() - 1):
        circuit = binarise_top(masks, k)
        kl = T.per_prompt_kl(setting["evaluator"], circuit)
        assert kl.shape == (len(setting["sets"]["held_out"]),) and kl.dtype == torch.float64
        assert float(kl.mean()) == pytest.approx(setting["evaluator"].evaluate(circuit)["kl"], rel=1e-5, abs=1e-7)
        assert (kl >= -1e-6).all()


def test_excess_by_hand():
    same = T.excess(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.5, 1.5, 2.5]), 500, 0.95, 0)
    assert same == pytest.approx(dict(excess=0.5, excess_low=0.5, excess_high=0.5))  # a constant difference
    # two prompts differing by 0 and 1: a resample's mean is 0, 1/2 or 1 with chances 1/4, 1/2, 1/4, so the 2.5 % and
    # 97.5 % points are 0 and 1 exactly
    two = T.excess(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.0]), 4000, 0.95, 0)
    assert two == pytest.approx(dict(excess=0.5, excess_low=0.0, excess_high=1.0))
    narrower = T.excess(torch.tensor([0.0, 1.0]), torch.tensor([0.0, 0.0]), 4000, 0.4, 0)
    assert narrower["excess_low"] == pytest.approx(0.5) and narrower["excess_high"] == pytest.approx(0.5)
    # three prompts differing by 0, 0, 1: a resample's mean is 1 with chance 1/27 (3.7 %), so the 97.5 % point is 1
    # and the 95 % point 2/3
    three = T.excess(torch.tensor([0.0, 0.0, 1.0]), torch.zeros(3), 4000, 0.95, 0)
    assert three == pytest.approx(dict(excess=1 / 3, excess_low=0.0, excess_high=1.0))
    assert T.excess(torch.arange(8.0), torch.zeros(8), 300, 0.95, 3) == T.excess(torch.arange(8.0), torch.zeros(8), 300, 0.95, 3)
    with pytest.raises(ValueError, match="same prompts"):
        T.excess(torch.zeros(3), torch.zeros(4), 100, 0.95, 0)


def _row(kl, low, kind="random_tokens"):
    return dict(kind=kind, kl=kl, excess=low + 0.1, excess_low=low, excess_high=low + 0.2)


def test_the_verdict_at_its_boundaries():
    assert T.specific_by_transfer([_row(BOUND + 1e-6, 1e-6)], BOUND) is True
    assert T.specific_by_transfer([_row(BOUND, 0.5)], BOUND) is False  # a KL at the bound holds it
    assert T.specific_by_transfer([_row(1.0, 0.0)], BOUND) is False  # a CI touching zero is no excess
    assert T.specific_by_transfer([_row(1.0, -0.1)], BOUND) is False
    assert T.specific_by_transfer([_row(1.0, 0.2, "shuffled"), _row(1.0, 0.2)], BOUND) is True
    assert T.specific_by_transfer([_row(1.0, 0.2, "shuffled"), _row(0.1, 0.2)], BOUND) is False  # every kind must fail
    with pytest.raises(ValueError, match="at least one nonsense circuit"):
        T.specific_by_transfer([], BOUND)


def test_reach_at_its_boundaries():
    both = T.transfer_reach(50, 100, random_kl=BOUND + EPS, reference_kl=BOUND, bound=BOUND)
    assert both.informative
    no_yes = T.transfer_reach(50, 100, random_kl=BOUND, reference_kl=0.05, bound=BOUND)
    assert (no_yes.yes, no_yes.no) == (False, True) and no_yes.decided_by.startswith("set sizes: circuits of 50 of 100")
    no_no = T.transfer_reach(50, 100, random_kl=2.0, reference_kl=BOUND + EPS, bound=BOUND)
    assert (no_no.yes, no_no.no) == (True, False) and no_no.decided_by.startswith("the cut: circuits of 50 of 100")
    odd = T.transfer_reach(50, 100, random_kl=0.1, reference_kl=0.3, bound=BOUND)  # a trained circuit worse than chance
    assert odd.informative


def test_unseen_prompts_drop_what_was_trained_on(setting):
    held_out, train = setting["sets"]["held_out"], setting["sets"]["train"]
    kept, dropped = T.unseen_prompts(held_out, train)
    assert (kept, dropped) == (held_out, 0)  # the split already shares nothing
    kept, dropped = T.unseen_prompts(held_out, held_out.subset([0, 2]))
    assert dropped == 2 and kept.prompts == [p for i, p in enumerate(held_out.prompts) if i not in (0, 2)]
    with pytest.raises(ValueError, match="draw more prompts"):
        T.unseen_prompts(held_out, train, held_out)


def test_transfer_scores_on_the_tiny_model(setting):
    """Every number by the evaluator's own: the second seed's KL at k, a random circuit of its counts, and each
    nonsense circuit's; a nonsense circuit equal to the second seed has no excess (CI [0, 0]) and is not specific;
    one ranked in reverse keeps the second seed's bottom k."""
    from helpers.singular.masking.circuits import binarise_top, random_like

    evaluator, reference = setting["evaluator"], setting["masks"](1)
    reverse = setting["masks"](1)
    with torch.no_grad():
        for p in reverse.logits.values():
            p.neg_()
    k = reference.count() // 2
    found = T.transfer_scores(evaluator, reference, {"same": setting["masks"](1), "reverse": reverse}, k, BOUND, RULE)
    assert (found["k"], found["n"], found["bound"], found["prompts"]) == (k, reference.count(), BOUND,
                                                                          len(setting["sets"]["held_out"]))
    cut = binarise_top(reference, k)
    assert found["reference_kl"] == pytest.approx(evaluator.evaluate(cut)["kl"], rel=1e-5, abs=1e-7)
    assert found["random_kl"] == pytest.approx(evaluator.evaluate(random_like(cut, RULE["seed"]))["kl"], rel=1e-5, abs=1e-7)
    same, reverse_row = found["rows"]
    assert same["kind"] == "same" and same["excess"] == same["excess_low"] == same["excess_high"] == 0
    assert T.specific_by_transfer([same], BOUND) is False
    assert reverse_row["kl"] == pytest.approx(evaluator.evaluate(binarise_top(reverse, k))["kl"], rel=1e-5, abs=1e-7)
    assert reverse_row["fails_bound"] == (reverse_row["kl"] > BOUND)
    assert reverse_row["excess_low"] <= reverse_row["excess"] <= reverse_row["excess_high"]
    reach = T.transfer_reach(k, reference.count(), found["random_kl"], found["reference_kl"], BOUND)
    assert found["reach"] == dict(yes=reach.yes, no=reach.no, decided_by=reach.decided_by)
    assert T.transfer_scores(evaluator, reference, {"same": reference}, reference.count(), BOUND, RULE) is None
    assert T.transfer_scores(evaluator, reference, {"same": reference}, 0, BOUND, RULE) is None


def test_the_words_say_each_kind_and_when_the_cut_decided_it():
    found = dict(k=900, n=1000, bound=0.21, prompts=64, reference_kl=0.043, random_kl=1.5,
                 rows=[dict(kind="random_tokens", kl=2.314, fails_bound=True, excess=2.271, excess_low=2.105,
                            excess_high=2.44), dict(kind="shuffled", kl=0.05, fails_bound=False, excess=0.007,
                                                    excess_low=-0.002, excess_high=0.016)],
                 reach=dict(yes=True, no=True, decided_by=""))
    assert T.transfer_words(found, ["random_tokens"], True) == (
        "specific (random tokens: KL 2.314 on the task, +2.271 [+2.105, +2.440] beyond the second seed's 0.043; "
        "bound 0.21)")
    assert T.transfer_words(found, ["shuffled"], False).startswith("not specific (shuffled: KL 0.050 on the task, "
                                                                   "+0.007 [-0.002, +0.016]")
    found["reach"] = dict(yes=True, no=False, decided_by="the cut: …")
    assert T.transfer_words(found, ["shuffled"], False).endswith("; bound 0.21; uninformative: decided by the cut: …)")
    with pytest.raises(ValueError, match="none among the scored kinds"):
        T.transfer_words(found, ["nothing"], False)


def test_load_transfer_rule_refuses_a_mistyped_key_and_bad_values(tmp_path: Path):
    text = T.TRANSFER_RULES.read_text()
    assert RULE["bootstrap"] >= 100 and 0 < RULE["confidence"] < 1
    for bad, match in ((text.replace("bootstrap =", "bootstraps ="), "must hold exactly"),
                       (text.replace("confidence = 0.95", "confidence = 95"), "confidence=95"),
                       (text.replace("bootstrap = 2000", "bootstrap = 20"), "bootstrap=20")):
        path = tmp_path / "rule.toml"
        path.write_text(bad)
        with pytest.raises(ValueError, match=match):
            T.load_transfer_rule(path)


def _planted_row(free_kl, declared_kl, decided_by="", site="middle", strength=8.0):
    """A notebook-08 plant row holding only what the transfer words read."""
    rows = [dict(kind="shuffled", kl=declared_kl, fails_bound=declared_kl > BOUND, excess=declared_kl - 0.04,
                 excess_low=declared_kl - 0.05, excess_high=declared_kl - 0.03),
            dict(kind=R.WITHOUT_TRIGGERS, kl=free_kl, fails_bound=free_kl > BOUND, excess=free_kl - 0.04,
                 excess_low=free_kl - 0.05, excess_high=free_kl - 0.03)]
    transfer = dict(k=900, n=1000, bound=BOUND, prompts=60, dropped_prompts=4, reference_kl=0.04, random_kl=1.0,
                    rows=rows, reach=dict(yes=True, no=not decided_by, decided_by=decided_by),
                    specific=T.specific_by_transfer(rows[:1], BOUND),
                    specific_without_triggers=T.specific_by_transfer(rows[1:], BOUND))
    return dict(site=site, strength=strength, drives_task=True, n_truth=8, recovery=dict(median_rank=5000.0),
                specificity=dict(matched=[dict(pair="seeds", b="seed 1", k=900, n=1000, corrected=0.6),
                                          dict(pair="nonsense", b="shuffled", k=900, n=1000, corrected=0.5),
                                          dict(pair="nonsense", b=R.WITHOUT_TRIGGERS, k=900, n=1000, corrected=0.5)],
                                 ratio=0.5, threshold=0.3, specific=False, reach=dict(yes=True, no=True, decided_by=""),
                                 trigger_share={"shuffled": 1.0, R.WITHOUT_TRIGGERS: 0.0},
                                 without_triggers=dict(kind=R.WITHOUT_TRIGGERS, specific=False, corrected=0.5),
                                 transfer=transfer))


def test_notebook_08_and_the_results_page_say_what_the_transfer_rule_found():
    from helpers.results.documents import PLANTED_RUN, specificity_calibration, transfer_row

    row = _planted_row(free_kl=2.0, declared_kl=0.05)
    said = R.transfer_case_words(row)
    assert said.startswith("middle ×8 (top 900 of 1,000, 60 held-out prompts): against nonsense holding the triggers "
                           "not specific (shuffled: KL 0.050 on the task")
    assert "against random tokens without the triggers specific (random tokens without triggers: KL 2.000" in said
    assert R.transfer_lines([row])[0].startswith("- **Task-specificity by transfer on the planted circuits**")
    assert R.transfer_case_words({**row, "specificity": {**row["specificity"], "transfer": None}}) is None
    assert R.transfer_lines([{"site": "late", "strength": 2.0, "specificity": None}]) == []
    summaries = {PLANTED_RUN: {"plants": [row, _planted_row(0.1, 0.05, site="late", strength=2.0)]}}
    table = transfer_row(summaries)
    assert table.startswith("| Task-specific by transfer (08; not yet run by 07) | the planted circuits against random "
                            "tokens without the triggers (08): middle ×8: specific (")
    assert table.endswith("| a third training seed of the task scored as if it were nonsense (07): not run yet | "
                          "middle ×8: yes; late ×2: yes |")
    assert "; beside them, against nonsense that holds the triggers (the plant can fire on it): middle ×8: not " in table
    assert "late ×2: not specific (random tokens without triggers: KL 0.100" in table
    paragraph = specificity_calibration(summaries)
    assert paragraph.endswith("says specific against random tokens without the triggers at 1 of 2 planted circuits "
                              "(middle ×8, late ×2) and not specific against nonsense holding them at 2 of 2; it tells "
                              "the two apart, with both outcomes reachable, at 1 of 2.")
    decided = {PLANTED_RUN: {"plants": [_planted_row(2.0, 0.05, decided_by="the cut: …")]}}
    assert transfer_row(decided).endswith("| middle ×8: no, decided by the cut: … |")
    assert specificity_calibration(decided).endswith("at 0 of 1.")
    assert transfer_row({}).endswith("| not run | not run |")


def test_the_results_row_adds_notebook_07s_tasks_once_they_are_judged_by_transfer():
    from helpers.results.documents import PLANTED_RUN, transfer_row
    from tests.unit.test_validation import transfer_record

    planted = {PLANTED_RUN: {"plants": [_planted_row(free_kl=2.0, declared_kl=0.05)]}}
    seven = {"07_circuit_validation-gender-smollm2-135m": {"task": "gender", "transfer": transfer_record()},
             "07_circuit_validation-ioi-smollm2-135m": {"task": "ioi", "transfer": transfer_record(
                 posed_kl=0.5, decided_by="the cut: …")}}
    row = transfer_row({**planted, **seven})
    assert row.startswith("| Task-specific by transfer (07, 08) | the planted circuits against random tokens without ")
    assert ("| a third training seed of the task scored as if it were nonsense (07): IOI: says yes; Gender pronoun: "
            "says no |") in row
    assert row.endswith("| middle ×8: yes; IOI: no, decided by the cut: …; Gender pronoun: yes |")
    alone = transfer_row(seven)  # 07 without notebook 08's plants
    assert alone.startswith("| Task-specific by transfer (07, 08) | none yet") and "| a third training seed" in alone
    assert transfer_row({}) == "| Task-specific by transfer (08; not yet run by 07) | none yet: no planted mechanism | not run | not run |"
