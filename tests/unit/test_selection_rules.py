"""The rules that choose what a notebook reports, each against a hand-built case: the circuit drawn per
head (02), the boxed heads and their mask mass (02), the case-study head and its directions (03), receptors
fitted on one half and scored on the other (03, 06), the declared masking run of 02, the controls of 04."""
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from helpers.singular.heads.attribution import GPT2_IOI_HEADS, boxed_heads
from helpers.singular.masking.circuits import boxed_mass, circuit_for_heatmaps
from helpers.singular.heads.case_study import choose_directions, resolve_case_study_head
from helpers.singular.masking.masks import MaskedModel
from helpers.singular.heads.receptors import (answer_ov_coefficients, contrast_vector, final_norm_scale, find_receptors, fitted_and_rescored,
                                        footprints, ov_write_directions, statistics_at)
from helpers.singular.tasks import gender_task, token_id
from helpers.singular.masking.training import FAST_MASKING, MaskingRun, TrainConfig
from tests.conftest import cached_model


def points(kls, kept, fractions):
    return pd.DataFrame(dict(kl=kls, kept=kept, kept_fraction=fractions, source="threshold", alpha=1.0))


def test_the_circuit_drawn_is_the_sparsest_at_the_kl_or_else_the_lowest_kl_short_of_everything():
    table = points([0.5, 0.2, 0.1, 0.0], [10, 20, 40, 100], [0.1, 0.2, 0.4, 1.0])
    chosen, why = circuit_for_heatmaps(table, 0.21)
    assert chosen["kept"] == 20 and "KL ≤ 0.21" in why  # the sparsest that reaches it, not the lowest KL
    none_reach = points([0.9, 0.5, 0.7, 0.0], [10, 20, 40, 100], [0.1, 0.2, 0.4, 1.0])
    chosen, why = circuit_for_heatmaps(none_reach, 0.21)
    assert chosen["kept"] == 20 and "lowest KL" in why  # the full model (KL 0) is not a circuit
    with pytest.raises(ValueError, match="keeps all directions"):
        circuit_for_heatmaps(points([0.0], [100], [1.0]), 0.21)


def test_boxed_mass_separates_the_boxed_heads_from_all_the_others():
    mass = torch.tensor([[1.0, 2.0, 9.0], [4.0, 5.0, 6.0]])
    inside, outside = boxed_mass(mass, [(0, 2), (1, 0)])
    assert inside == pytest.approx(6.5) and outside == pytest.approx((1 + 2 + 5 + 6) / 4)  # not the mean of all (4.5)
    inside, outside = boxed_mass(mass, [])
    assert inside != inside and outside == pytest.approx(4.5)  # NaN: nothing boxed


def test_boxed_heads_are_wang_et_al_for_gpt2_and_the_top_attributions_otherwise():
    attribution = torch.tensor([[0.1, -2.0, 0.3], [5.0, 0.2, 0.4]])
    heads, label = boxed_heads(SimpleNamespace(name="smollm2-135m"), "ioi", attribution, top=2)
    assert heads == [(1, 0), (1, 2)] and "attribution" in label  # largest first
    assert boxed_heads(SimpleNamespace(name="smollm2-135m"), "greater_than", None) == ([], "none")
    heads, label = boxed_heads(SimpleNamespace(name="gpt2-small"), "ioi", attribution)
    assert heads == sorted(GPT2_IOI_HEADS) and "Wang" in label
    assert boxed_heads(SimpleNamespace(name="gpt2-small"), "gender", attribution)[0] == []


def mover_table(candidates):
    """A name_mover_table of four heads, sorted by attribution; ``candidates`` lists which of them are ones."""
    return pd.DataFrame(dict(layer=[7, 3, 2, 1], head=[1, 0, 2, 5], attribution=[3.0, 2.0, 1.0, -1.0],
                             mask_mass=[10.0, 50.0, 20.0, 48.0], name_mover=[False] * 4, candidate=candidates))


def test_the_case_study_head_is_the_parameter_then_paper_1s_head_then_the_top_candidate():
    model = SimpleNamespace(name="smollm2-135m", n_layers=30, n_heads=9)
    table = mover_table([False, True, True, False])
    assert resolve_case_study_head(model, "3.4", table)[:2] == (3, 4)
    assert resolve_case_study_head(model, None, table)[:2] == (3, 0)  # the candidate of largest attribution
    assert "candidate" in resolve_case_study_head(model, None, table)[2]
    nobody = resolve_case_study_head(model, None, mover_table([False] * 4))
    assert nobody[:2] == (7, 1) and "NO head" in nobody[2]
    gpt2 = SimpleNamespace(name="gpt2-small", n_layers=12, n_heads=12)
    assert resolve_case_study_head(gpt2, None, table)[:2] == (9, 6)
    with pytest.raises(ValueError, match="layers 0–29"):
        resolve_case_study_head(model, "30.0", table)
    with pytest.raises(ValueError, match="'layer.head'"):
        resolve_case_study_head(model, "nine", table)


def test_the_studied_directions_have_the_largest_logits_and_never_a_null_ov_direction():
    ov, qk = torch.tensor([0.9, 0.1, 3.0, 0.5]), torch.tensor([0.2, 0.8, 0.6])
    null = torch.tensor([False, False, True, False])  # direction 2 writes nothing, whatever its logit
    sigma_ov, sigma_qk = torch.tensor([4.0, 3.0, 0.0, 1.0]), torch.tensor([3.0, 2.0, 1.0])
    assert choose_directions(ov, qk, null, sigma_ov, sigma_qk, 2) == {"ov": [0, 3], "qk": [1, 2]}


def test_tied_logits_are_ordered_by_sigma_then_by_index_whatever_the_sort_would_do():
    """Clamped masks tie; the logits can tie too (directions the loss never separates): σ decides, then the index."""
    logits = torch.tensor([2.0, 5.0, 2.0, 2.0, 2.0, 5.0, 2.0, 2.0] * 4)  # 32 entries, many ties
    sigma = torch.tensor([1.0, 1.0, 3.0, 3.0, 2.0, 1.0, 3.0, 0.5] * 4)
    null = torch.zeros(32, dtype=torch.bool)
    chosen = choose_directions(logits, logits, null, sigma, sigma, 12)
    # logit 5: indices 1, 5, 9, 13, ... (all σ 1): by index; then logit 2 at σ 3: 2, 3, 6, 10, ...
    assert chosen["ov"] == [1, 5, 9, 13, 17, 21, 25, 29, 2, 3, 6, 10]
    assert chosen["qk"] == chosen["ov"]
    null[2] = True
    assert choose_directions(logits, logits, null, sigma, sigma, 9)["ov"] == [1, 5, 9, 13, 17, 21, 25, 29, 3]


def test_receptors_are_fitted_on_one_half_and_scored_on_the_other():
    model = cached_model("tiny-llama", "fold_norm")
    masked = MaskedModel(model)
    fit, score = gender_task(model, 24, seed=0).split(0.5, seed=0)
    he, she = token_id(model.tokenizer, " he"), token_id(model.tokenizer, " she")
    contrast = lambda task: (contrast_vector(model, he, she), task.correct == he)  # noqa: E731
    table, coefficients = fitted_and_rescored(masked, fit, score, contrast, 0.0, 3, suffix="other_half")
    directions = ov_write_directions(masked)

    def measured(task):
        return (answer_ov_coefficients(masked, task.clean, task.answer_pos),
                footprints(directions, contrast_vector(model, he, she),
                           final_norm_scale(model, task.clean, task.answer_pos)), task.correct == he)

    oracle = find_receptors(*measured(fit), min_separation=0.0, top=3)
    again = statistics_at(oracle, *measured(score))
    assert len(table) == 3
    pd.testing.assert_frame_equal(table[oracle.columns], oracle)  # chosen on the fit half
    assert table["score_other_half"].tolist() == again["score"].tolist()  # scored on the other half
    assert table["score_other_half"].tolist() != table["score"].tolist()
    torch.testing.assert_close(coefficients, measured(score)[0])


def test_the_declared_masking_run_of_02_and_its_overrides():
    run = MaskingRun.declared({}, seed=0)
    assert run == MaskingRun() and run.train_config() == TrainConfig(steps=300, batch=16, lr=0.05, alpha=1.95e-4,
                                                                     parametrisation="hard_concrete")
    assert run.rule().name == "corrupted@all"
    fast = MaskingRun.declared({}, fast=True, seed=3)
    assert {k: getattr(fast, k) for k in FAST_MASKING} == FAST_MASKING and fast.seed == 3
    assert MaskingRun.declared({"alpha": 1}).train_config().alpha == 1.0  # an int is a float
    with pytest.raises(ValueError, match="no such field.*'steps'"):
        MaskingRun.declared({"step": 10})
    with pytest.raises(ValueError, match="'steps': '10'.*expected a int"):
        MaskingRun.declared({"steps": "10"})
    with pytest.raises(ValueError, match="notebook's own parameter"):
        MaskingRun.declared({"seed": 1})


def test_control_sweeps_refuse_an_unknown_control_before_loading_anything():
    from helpers.tiled.sweep import control_sweeps

    with pytest.raises(ValueError, match="'random'.*random-init"):
        control_sweeps("no-such-model", ["random"], sample=None, thresholds={})
