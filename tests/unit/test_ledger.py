"""Paper 1's recipe beside ours: the mixed rule with soft masks against patched activations, the released
code's "kept" rule, and the ledger's rows and arithmetic."""
import math

import pandas as pd
import pytest
import torch

from helpers.singular.masking.circuits import CircuitEvaluator
from helpers.singular.masking.ledger import PAPER_KEPT, STEPS, factor_table, largest_move, relative_sparsity
from helpers.singular.masking.masks import AblationRule, DirectionMasks, FixedMasks, MaskedModel
from helpers.singular.masking.references import kl_to_full
from helpers.singular.tasks import ioi_task
from helpers.singular.masking.training import PAPER_RECIPE, MaskingRun
from tests.conftest import cached_model

M_OV, M_MLP, M_QK = 0.6, 5e-4, 0.3  # soft masks of layer 0's OV, MLP-out and QK directions
LAYER = 0  # the first layer: later layers read its outputs at every position, so the positions rule shows


def hand_masks(model, qk: bool = False) -> DirectionMasks:
    """Sigmoid masks at 1 (float32) everywhere except layer ``LAYER``: OV at M_OV, MLP out at M_MLP (below
    the kept threshold) and, with ``qk``, QK at M_QK."""
    masks = DirectionMasks(model, parametrisation="sigmoid")
    last = LAYER
    with torch.no_grad():
        for name, p in masks.logits.items():
            p.fill_(20.0)  # sigmoid(20) is 1 in float32
        masks.logits[f"{last}_ov"].fill_(math.log(M_OV / (1 - M_OV)))
        masks.logits[f"{last}_mlp_out"].fill_(math.log(M_MLP / (1 - M_MLP)))
        if qk:
            masks.logits[f"{last}_qk"].fill_(math.log(M_QK / (1 - M_QK)))
    return masks


def hook_values(model, tokens, name):
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(tokens, names_filter=[name])
    return cache[name]


def paper_rule_oracle(model, masked, task, m_ov, m_mlp, m_qk=None):
    """Logits at the answer positions with the paper's rule applied by plain patching in layer ``LAYER``:
    queries scaled by m_qk at every position; at the answer position only, the attention output and the MLP
    output become m y_clean + (1 − m) y_corrupt, y_corrupt from the unmasked model on the corrupted prompt."""
    last = LAYER
    at_answer = torch.zeros(task.clean.shape)
    at_answer[torch.arange(len(task)), task.answer_pos] = 1.0
    corrupt = {name: hook_values(model, task.corrupted, f"blocks.{last}.{name}")
               for name in ("attn.o.hook_out", "mlp.out.hook_out")}

    def mix(name, m):
        def hook(value, hook):
            w = at_answer[..., None]
            return value * (1 - w) + (m * value + (1 - m) * corrupt[name]) * w
        return hook

    hooks = [(f"blocks.{last}.attn.o.hook_out", mix("attn.o.hook_out", m_ov)),
             (f"blocks.{last}.mlp.out.hook_out", mix("mlp.out.hook_out", m_mlp))]
    if m_qk is not None:
        hooks.append((f"blocks.{last}.attn.hook_q", lambda q, hook: m_qk * q))
    with torch.no_grad():
        return masked.final_logits(task.clean, task.answer_pos, hooks)


def paper_setup(name):
    """A tiny model, its masked runner, six IOI prompts and their evaluator under the paper's rule."""
    model = cached_model(name, "fold_norm")
    masked = MaskedModel(model)
    task = ioi_task(model, 6, seed=2)
    return model, masked, task, CircuitEvaluator(masked, task, AblationRule.paper())


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama"])
def test_the_papers_mixed_rule_with_soft_masks_equals_patching_by_hand(name):
    model, masked, task, evaluator = paper_setup(name)
    masks = hand_masks(model, qk=True)
    with torch.no_grad():
        out = masked.masked_final_logits(FixedMasks.soft(masks), evaluator.rule, task.clean, task.answer_pos,
                                         evaluator.prepared.references)
    expected = paper_rule_oracle(model, masked, task, M_OV, M_MLP, M_QK)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama"])
def test_the_ledgers_first_rows_score_soft_then_binarised_masks_and_count_kept_at_1e_3(name):
    model, masked, task, paper = paper_setup(name)
    ours = CircuitEvaluator(masked, task, AblationRule.uniform())
    masks = hand_masks(model)
    others = DirectionMasks(model, parametrisation="hard_concrete")
    table = factor_table(paper, ours, masks, others, others, control_seeds=1)
    assert list(table["step"]) == [step for step, _ in STEPS]
    dropped = masks.logits[f"{LAYER}_mlp_out"].numel()
    total = masks.count()
    for row in table.iloc[:2].itertuples():
        assert row.kept == total - dropped and row.relative_sparsity == pytest.approx(dropped / total)
        assert row.rule == AblationRule.paper().name
    soft = kl_to_full(paper.prepared.log_p_full, paper_rule_oracle(model, masked, task, M_OV, M_MLP)).mean()
    binary = kl_to_full(paper.prepared.log_p_full, paper_rule_oracle(model, masked, task, 1.0, 0.0)).mean()
    assert table["kl"].iloc[0] == pytest.approx(float(soft), rel=1e-3, abs=1e-6)
    assert table["kl"].iloc[1] == pytest.approx(float(binary), rel=1e-3, abs=1e-6)
    assert abs(float(soft) - float(binary)) > 1e-4  # the two evaluations differ on this case
    # hard-concrete masks at init are all 1 in eval mode: rows 3 and 4 keep everything, at KL 0
    assert list(table["kept"].iloc[2:]) == [total, total] and table["kl"].iloc[2:].abs().max() < 1e-4
    assert table["rule"].iloc[3] == AblationRule.uniform().name


def test_factor_table_refuses_evaluators_on_different_prompts():
    model = cached_model("tiny-gpt2", "fold_norm")
    masked = MaskedModel(model)
    paper = CircuitEvaluator(masked, ioi_task(model, 4, seed=1), AblationRule.paper())
    ours = CircuitEvaluator(masked, ioi_task(model, 4, seed=2), AblationRule.uniform())
    masks = DirectionMasks(model)
    with pytest.raises(ValueError, match="different prompts"):
        factor_table(paper, ours, masks, masks, masks)


def test_kept_means_at_least_the_threshold_and_binarised_means_above_it():
    model = cached_model("tiny-gpt2", "fold_norm")
    masks = DirectionMasks(model, parametrisation="sigmoid")
    with torch.no_grad():
        for p in masks.logits.values():
            p.fill_(-30.0)
        masks.logits["0_ov"].view(-1)[0] = math.log(PAPER_KEPT / (1 - PAPER_KEPT))
    at = float(masks.eval_values()["0_ov"].view(-1)[0])  # exactly the stored value
    assert sum(float(v.sum()) for v in FixedMasks.at_least(masks, at).blocks.values()) == 1
    assert sum(float(v.sum()) for v in FixedMasks.binarised(masks, at).blocks.values()) == 0
    soft = FixedMasks.soft(masks).blocks["0_ov"].view(-1)[0]
    assert float(soft) == at


def test_relative_sparsity_by_hand_and_refused_counts():
    assert relative_sparsity(3213, 37020) == pytest.approx(0.91321, abs=1e-5)  # paper 1's headline, GPT-2 small
    assert relative_sparsity(0, 10) == 1.0 and relative_sparsity(10, 10) == 0.0
    for kept, total in ((11, 10), (-1, 10), (0, 0)):
        with pytest.raises(ValueError, match="kept="):
            relative_sparsity(kept, total)


def test_largest_move_names_the_step_with_the_biggest_change():
    table = pd.DataFrame(dict(step=["paper", "binarised", "hard_concrete", "ours"], change=list("abcd"),
                              kept_percent=[8.0, 9.0, 30.0, 72.0]))
    assert largest_move(table) == dict(step="ours", change="d", before=30.0, after=72.0, delta=42.0)
    table["kept_percent"] = [8.0, 60.0, 50.0, 55.0]
    assert largest_move(table)["step"] == "binarised"
    table["kept_percent"] = [60.0, 10.0, 20.0, 25.0]  # a fall counts by its size
    assert largest_move(table)["delta"] == -50.0
    table["kept_percent"] = [5.0] * 4
    assert largest_move(table)["step"] is None
    with pytest.raises(ValueError, match="no step"):
        largest_move(table.iloc[:1])


def test_the_paper_recipe_is_declared_apart_and_its_rule_cannot_be_mixed_with_a_uniform_one():
    run = MaskingRun.declared({}, seed=0, recipe="paper")
    for field, value in PAPER_RECIPE.items():
        assert getattr(run, field) == value
    assert run.rule().name == AblationRule.paper().name and run.train_config().parametrisation == "sigmoid"
    assert run.train_config().lr == 0.02 and run.train_config().init == 0.99 and run.train_config().alpha == 1.95e-4
    assert MaskingRun.declared({"steps": 50}, recipe="paper").steps == 50
    ours = MaskingRun.declared({})
    assert ours.rule().name == "corrupted@all" and ours.parametrisation == "hard_concrete"
    assert MaskingRun.declared({"ablation": "paper"}).rule().name == AblationRule.paper().name
    with pytest.raises(ValueError, match="fixes the reference"):
        MaskingRun.declared({"ablation": "paper", "reference": "zero"})
    with pytest.raises(ValueError, match="ablation="):
        MaskingRun.declared({"ablation": "mixed"})
    with pytest.raises(ValueError, match="recipe="):
        MaskingRun.declared({}, recipe="released")
