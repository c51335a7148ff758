"""The α path (helpers.singular.masking.alpha_path): warm-started trainings against fresh ones, on tiny models."""
from dataclasses import replace

import pandas as pd
import pytest
import torch

from helpers.singular.masking.alpha_path import kept_overlap, path_comparison, warm_alpha_path, warm_masks, within_tolerance
from helpers.singular.masking.circuits import CircuitEvaluator
from helpers.singular.masking.masks import AblationRule, DirectionMasks, FixedMasks, MaskedModel
from helpers.singular.tasks import make_task
from helpers.singular.masking.training import TrainConfig, continue_training, train_masks
from tests.conftest import cached_model

CONFIG = TrainConfig(steps=4, batch=4, lr=2.0, log_every=1, parametrisation="hard_concrete")  # large steps: masks move


def setup():
    model = cached_model("tiny-llama", "fold_norm")
    masked = MaskedModel(model)
    train, held_out = make_task("ioi", model, 16, seed=0).split(0.5, seed=0)
    return model, masked, train, held_out, AblationRule.uniform("corrupted")


def assert_same_logits(a, b):
    assert a.logits.keys() == b.logits.keys()
    for name in a.logits:
        assert torch.equal(a.logits[name], b.logits[name]), name


def test_continuing_from_the_initial_masks_is_the_fresh_training(tmp_path, monkeypatch):
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    model, masked, train, _, rule = setup()
    fresh, history = train_masks(masked, train, rule, CONFIG, progress=False, use_cache=False)
    masks = DirectionMasks(model, init=CONFIG.init, parametrisation=CONFIG.parametrisation)
    rows = continue_training(masked, masks, train, rule, CONFIG, progress=False)
    assert_same_logits(masks, fresh)
    assert pd.DataFrame(rows).equals(history)
    assert not masks.training


def test_a_warm_training_starts_from_the_given_masks_and_leaves_them_as_they_were(tmp_path, monkeypatch):
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    model, masked, train, _, rule = setup()
    start, _ = train_masks(masked, train, rule, CONFIG, progress=False)
    before = {name: p.detach().clone() for name, p in start.logits.items()}
    frozen = replace(CONFIG, steps=2, lr=0.0)
    still, _, _ = warm_masks(masked, train, rule, frozen, start, progress=False)
    assert_same_logits(still, start)  # lr 0: nothing moves, so the result is the start itself, not the initial masks
    moved, _, _ = warm_masks(masked, train, rule, CONFIG, start, progress=False)
    assert any(not torch.equal(moved.logits[n], before[n]) for n in before)
    for name, value in before.items():
        assert torch.equal(start.logits[name], value), f"{name}: the start masks were trained in place"


def test_a_warm_training_is_saved_under_a_key_of_its_start_and_loaded_by_a_rerun(tmp_path, monkeypatch):
    import helpers.singular.masking.alpha_path as alpha_path

    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    model, masked, train, _, rule = setup()
    start, _ = train_masks(masked, train, rule, CONFIG, progress=False)
    other_start, _ = train_masks(masked, train, rule, replace(CONFIG, seed=1), progress=False)
    first, history, seconds = warm_masks(masked, train, rule, CONFIG, start, progress=False)
    assert seconds > 0 and len(list((tmp_path / "masks").glob("*-warm-*.pt"))) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("trained again although saved")

    monkeypatch.setattr(alpha_path, "continue_training", refuse)
    again, history_again, seconds_again = warm_masks(masked, train, rule, CONFIG, start, progress=False)
    assert seconds_again == 0.0 and history_again.equals(history)
    assert_same_logits(again, first)
    with pytest.raises(AssertionError, match="trained again"):  # another start, another training
        warm_masks(masked, train, rule, CONFIG, other_start, progress=False)
    key = alpha_path.warm_key(start, model, train, rule, CONFIG, masked.maps)
    assert masked.maps == "factored"
    assert alpha_path.warm_key(start, model, train, rule, CONFIG, "hooks") != key  # the maps are in the key


def test_a_warm_start_of_another_parametrisation_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    model, masked, train, _, rule = setup()
    sigmoid = DirectionMasks(model, parametrisation="sigmoid")
    with pytest.raises(ValueError, match="'sigmoid', the training is 'hard_concrete'"):
        warm_masks(masked, train, rule, CONFIG, sigmoid, progress=False)


def test_the_path_trains_the_lightest_alpha_fresh_and_each_heavier_one_from_the_one_before(tmp_path, monkeypatch):
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    model, masked, train, held_out, rule = setup()
    evaluator = CircuitEvaluator(masked, held_out, rule)
    table, trained = warm_alpha_path(masked, train, evaluator, rule, CONFIG, [0.5, 1e-4, 0.05], warm_steps=2,
                                     control_seeds=1, progress=False)
    assert table["alpha"].tolist() == [1e-4, 0.05, 0.5]
    assert table["start"].tolist() == ["fresh", "from α 0.0001", "from α 0.05"]
    assert table["steps"].tolist() == [CONFIG.steps, 2, 2]
    fresh, _ = train_masks(masked, train, rule, replace(CONFIG, alpha=1e-4), progress=False, use_cache=False)
    assert_same_logits(trained[1e-4], fresh)
    second, _, _ = warm_masks(masked, train, rule, replace(CONFIG, alpha=0.05, steps=2), fresh, progress=False,
                              use_cache=False)
    assert_same_logits(trained[0.05], second)
    third, _, _ = warm_masks(masked, train, rule, replace(CONFIG, alpha=0.5, steps=2), second, progress=False,
                             use_cache=False)
    assert_same_logits(trained[0.5], third)
    for _, row in table.iterrows():
        circuit = FixedMasks.binarised(trained[row["alpha"]])
        assert row["kept"] == trained[row["alpha"]].n_kept() and row["kl"] == evaluator.evaluate(circuit)["kl"]
    with pytest.raises(ValueError, match="warm_steps=0"):
        warm_alpha_path(masked, train, evaluator, rule, CONFIG, [1e-4], warm_steps=0, progress=False)


def test_kept_overlap_by_hand():
    a = FixedMasks({"0_qk": torch.tensor([1., 1., 0., 0.]), "0_ov": torch.tensor([1., 0.])})
    b = FixedMasks({"0_qk": torch.tensor([1., 0., 1., 0.]), "0_ov": torch.tensor([1., 0.])})
    assert kept_overlap(a, b) == 2 / 4  # both: qk0, ov0; either: qk0, qk1, qk2, ov0
    assert kept_overlap(a, a) == 1.0


@pytest.mark.parametrize("fresh, warm, within", [
    ((0.500, 0.10), (0.515, 0.118), True),   # 1.5 points, KL 0.018 ≤ max(0.02, 0.015)
    ((0.500, 0.10), (0.525, 0.100), False),  # 2.5 points
    ((0.500, 0.10), (0.500, 0.125), False),  # KL 0.025 > max(0.02, 0.015)
    ((0.500, 0.30), (0.500, 0.340), True),   # KL 0.04 ≤ 15 % of 0.30
    ((0.500, 0.30), (0.490, 0.250), False),  # KL 0.05 > 0.045
])
def test_within_tolerance_by_hand(fresh, warm, within):
    as_row = lambda pair: dict(kept_fraction=pair[0], kl=pair[1])  # noqa: E731
    assert within_tolerance(as_row(fresh), as_row(warm)) is within


def test_path_comparison_refuses_two_different_sweeps():
    masks = {a: FixedMasks({"0_qk": torch.ones(2)}) for a in (1.0, 2.0)}
    table = pd.DataFrame([dict(alpha=1.0, kept_fraction=1.0, kl=0.0, random_kl=0.0)])
    with pytest.raises(ValueError, match="same sweep"):
        path_comparison(table, masks, table.assign(alpha=2.0), masks)
    with pytest.raises(ValueError, match="same sweep"):
        path_comparison(table, masks, pd.concat([table, table]), masks)
