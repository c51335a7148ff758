"""Sparsity counting, random controls and the read-out of the curve."""
import pandas as pd
import pytest
import torch

from helpers.singular.masking.circuits import (CircuitEvaluator, binarise_top, kept_by_kind, kept_mlp_per_layer, kept_per_head,
                                  point_at_kl, random_like)
from helpers.singular.masking.masks import AblationRule, DirectionMasks, FixedMasks, MaskedModel
from helpers.singular.tasks import greater_than_task, ioi_task
from tests.conftest import cached_model


def ranked_masks():
    model = cached_model("tiny-llama", "fold_norm")
    masks = DirectionMasks(model)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in masks.logits.values():
            p.copy_(torch.randn(p.shape, generator=g))
    return model, masks


def test_binarise_top_keeps_exactly_the_largest_masks():
    model, masks = ranked_masks()
    all_logits = torch.cat([p.detach().reshape(-1) for p in masks.logits.values()])
    for n_keep in (1, 7, 100, masks.count()):
        circuit = binarise_top(masks, n_keep)
        kept = torch.cat([circuit.values(l, k).reshape(-1) for l in range(model.n_layers) for k in masks.shapes])
        assert int(kept.sum()) == n_keep
        threshold = all_logits.sort(descending=True).values[n_keep - 1]
        order = [f"{l}_{k}" for l in range(model.n_layers) for k in masks.shapes]
        logits = torch.cat([masks.logits[n].detach().reshape(-1) for n in order])
        assert bool((logits[kept.bool()] >= threshold).all())


def test_counts_by_kind_head_and_layer_add_up():
    model, masks = ranked_masks()
    circuit = binarise_top(masks, 50)
    by_kind = kept_by_kind(circuit)
    assert sum(by_kind.values()) == 50
    heads = kept_per_head(circuit, model.n_layers)
    assert heads.shape == (model.n_layers, model.n_heads)
    assert int(heads.sum()) == by_kind["qk"] + by_kind["ov"]
    assert int(kept_mlp_per_layer(circuit, model.n_layers).sum()) == by_kind["mlp_up"] + by_kind["mlp_gate"] + by_kind["mlp_out"]


def test_random_control_keeps_the_same_count_in_every_block_elsewhere():
    _, masks = ranked_masks()
    circuit = binarise_top(masks, 40)
    control = random_like(circuit, seed=0)
    for name, values in circuit.blocks.items():
        assert int(control.blocks[name].sum()) == int(values.sum())
    overlap = sum(float((control.blocks[n] * v).sum()) for n, v in circuit.blocks.items())
    assert overlap < 40
    assert torch.equal(torch.cat([v.reshape(-1) for v in random_like(circuit, 0).blocks.values()]),
                       torch.cat([v.reshape(-1) for v in control.blocks.values()]))


def test_point_at_kl_is_the_sparsest_circuit_under_the_threshold():
    curve = pd.DataFrame({"kept": [10, 100, 1000, 2000], "kl": [0.9, 0.2, 0.01, 0.0],
                          "kept_fraction": [0.005, 0.05, 0.5, 1.0]})
    assert point_at_kl(curve, 0.21)["kept"] == 100
    assert point_at_kl(curve, 0.001) is None  # the full model (every direction kept) is not a circuit


def test_alpha_sweep_evaluates_the_circuit_each_training_found(tmp_path, monkeypatch):
    from helpers.singular.masking.circuits import CircuitEvaluator, evaluate_circuit
    from helpers.singular.masking.training import alpha_sweep
    from helpers.singular.masking.training import TrainConfig
    from helpers.singular.masking.masks import AblationRule, FixedMasks, MaskedModel
    from helpers.singular.tasks import make_task

    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    model = cached_model("tiny-llama", "fold_norm")
    masked = MaskedModel(model)
    train, held_out = make_task("ioi", model, 16, seed=0).split(0.5, seed=0)
    rule = AblationRule.uniform("corrupted")
    evaluator = CircuitEvaluator(masked, held_out, rule)
    config = TrainConfig(steps=4, batch=4, lr=2.0, parametrisation="hard_concrete")  # large steps: masks move
    table, trained = alpha_sweep(masked, train, evaluator, rule, config, [0.5, 1e-4], control_seeds=1, progress=False)
    assert table["alpha"].tolist() == [1e-4, 0.5]
    for _, row in table.iterrows():
        masks = trained[row["alpha"]]
        assert row["kept"] == masks.n_kept() and row["kept_fraction"] == masks.n_kept() / masks.count()
        assert row["kl"] == evaluator.evaluate(FixedMasks.binarised(masks))["kl"]
    assert table["kept"].iloc[0] > table["kept"].iloc[1]  # a heavier penalty keeps fewer directions
    everything = evaluate_circuit(evaluator, FixedMasks.ones(model), control_seeds=1)
    assert abs(everything["kl"]) < 1e-4 and abs(everything["random_kl"]) < 1e-4 and everything["kept_fraction"] == 1.0


def _greater_than_with_digit_tokens(model, n):
    """Greater-than prompts scored as a digit tokenizer would: years as first digit, then second digit."""
    task = greater_than_task(model, n, seed=0)
    task.digit_tokens = torch.tensor([model.tokenizer(str(d), add_special_tokens=False)["input_ids"][0]
                                      for d in range(10)])
    return task


def test_two_digit_metric_of_a_circuit_equals_a_prompt_by_prompt_computation_by_hand():
    model = cached_model("tiny-llama", "fold_norm")
    masked = MaskedModel(model)
    task = _greater_than_with_digit_tokens(model, 3)
    rule = AblationRule.uniform("corrupted", "all")
    evaluator = CircuitEvaluator(masked, task, rule)
    g = torch.Generator().manual_seed(1)
    circuit = FixedMasks({n: (torch.rand(v.shape, generator=g) < 0.5).float()
                          for n, v in FixedMasks.ones(model).blocks.items()})
    digits = task.digit_tokens.tolist()

    def p_years(i, logits_of):  # logits_of(clean ids, corrupted ids) -> next-token logits [vocab]
        end = int(task.answer_pos[i]) + 1
        clean, corrupt = task.clean[i, :end].tolist(), task.corrupted[i, :end].tolist()
        first = torch.softmax(logits_of(clean, corrupt).double(), -1)[digits]
        return torch.stack([first[d1] * torch.softmax(logits_of(clean + [digits[d1]], corrupt + [digits[d1]]).double(),
                                                      -1)[digits] for d1 in range(10)]).reshape(100)

    def plain(clean, corrupt):
        with torch.no_grad():
            return model.bridge(torch.tensor([clean]))[0, -1]

    def masked_run(clean, corrupt):
        tokens, answer = torch.tensor([clean]), torch.tensor([len(clean) - 1])
        with torch.no_grad():
            refs = masked.references(rule, tokens, torch.tensor([corrupt]), torch.ones(1, len(clean), dtype=torch.bool))
            return masked.masked_final_logits(circuit, rule, tokens, answer, refs)[0]

    def metric(probs, i):
        above = torch.arange(100) > int(task.correct[i])
        return float(probs[above].sum() - probs[~above].sum())

    full = [metric(p_years(i, plain), i) for i in range(len(task))]
    ours = [metric(p_years(i, masked_run), i) for i in range(len(task))]
    got, everything = evaluator.two_digit([circuit, FixedMasks.ones(model)])
    # a random tiny model puts little mass on digits: compare relative to the metric's own size
    assert got["full_metric"] == pytest.approx(sum(full) / len(full), rel=1e-4)
    assert got["metric"] == pytest.approx(sum(ours) / len(ours), rel=1e-4)
    assert abs(got["metric"] - got["full_metric"]) > 0.01 * abs(got["full_metric"])  # the circuit changes it
    assert everything["metric"] == pytest.approx(everything["full_metric"], rel=1e-4)


def test_two_digit_metric_on_a_two_digit_tokenizer_is_the_one_step_metric():
    model = cached_model("tiny-llama", "fold_norm")
    masked = MaskedModel(model)
    task = greater_than_task(model, 4, seed=0)
    evaluator = CircuitEvaluator(masked, task, AblationRule.uniform("zero", "all"))
    circuit = binarise_top(DirectionMasks(model), 10)
    one_step, (exact,) = evaluator.evaluate(circuit), evaluator.two_digit([circuit])
    assert exact["metric"] == pytest.approx(one_step["metric"], rel=1e-6)
    assert exact["full_metric"] == pytest.approx(one_step["full_metric"], rel=1e-6)
    assert exact["metric"] != pytest.approx(exact["full_metric"], rel=1e-3)


def test_two_digit_metric_refuses_other_tasks():
    model = cached_model("tiny-llama", "fold_norm")
    evaluator = CircuitEvaluator(MaskedModel(model), ioi_task(model, 4, seed=0), AblationRule.uniform("zero", "all"))
    with pytest.raises(ValueError, match="greater-than"):
        evaluator.two_digit([FixedMasks.ones(model)])


def test_a_circuit_with_the_same_values_is_run_once_and_any_change_is_run_again():
    model = cached_model("tiny-llama", "fold_norm")
    masked = MaskedModel(model)
    task = ioi_task(model, 6, seed=2)
    evaluator = CircuitEvaluator(masked, task, AblationRule.uniform("corrupted"))
    calls = []
    run = evaluator._logits
    evaluator._logits = lambda *args: calls.append(1) or run(*args)
    circuit = random_like(FixedMasks.binarised(ranked_masks()[1]), seed=0)
    first = evaluator.evaluate(circuit)
    copy = FixedMasks({n: v.clone() for n, v in circuit.blocks.items()})
    first["kl"] = -1.0  # a caller changing its result does not change the kept one
    assert evaluator.evaluate(copy) != first and len(calls) == 1
    assert evaluator.evaluate(copy) == CircuitEvaluator(masked, task, evaluator.rule).evaluate(circuit)
    flipped = FixedMasks({n: v.clone() for n, v in circuit.blocks.items()})
    block = next(iter(flipped.blocks))
    flipped.blocks[block].view(-1)[0] = 1 - flipped.blocks[block].view(-1)[0]
    changed = evaluator.evaluate(flipped)
    assert len(calls) == 2 and changed["kl"] != evaluator.evaluate(copy)["kl"]
    learnable = DirectionMasks(model)  # masks that can change are never kept
    evaluator.evaluate(learnable), evaluator.evaluate(learnable)
    assert len(calls) == 4


def test_a_circuit_beats_its_random_control_at_the_ratio_and_never_a_control_that_loses_nothing():
    from helpers.singular.masking.circuits import beats_random_by

    assert beats_random_by(0.125, 0.375, 3.0) and not beats_random_by(0.125, 0.37499, 3.0)  # at, and just short of, 3×
    assert not beats_random_by(0.0, 0.0, 3.0) and beats_random_by(0.0, 1e-9, 3.0)
