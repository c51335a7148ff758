"""Logit receptors: the search finds a planted receptor and nothing else; coefficients and footprints
match the model's own hook values and read-out."""
import pytest
import torch

from helpers.singular.masking.masks import MaskedModel
from helpers.core.logits import lens
from helpers.singular.heads.receptors import (answer_ov_coefficients, contrast_vector, final_norm_scale, find_receptors, footprints,
                               ioi_slot_contrast, ov_write_directions, statistics_at)
from helpers.singular.heads.steering import DIRECT_HOOK, steered_final_logits
from helpers.singular.tasks import gender_task, ioi_task
from helpers.core.weights import layer_weights
from tests.conftest import cached_model, final_residual


def planted(n=200, seed=0):
    """Noise everywhere; (1, 0, 2) a true receptor; decoys that each miss one condition."""
    g = torch.Generator().manual_seed(seed)
    is_a = torch.arange(n) % 2 == 0
    coefficients = torch.randn(n, 3, 2, 4, generator=g)
    footprint = 0.1 * torch.randn(3, 2, 4, generator=g)
    sign = torch.where(is_a, 1.0, -1.0)
    coefficients[:, 1, 0, 2] += 2 * sign  # separates the classes ...
    footprint[1, 0, 2] = 1.5  # ... and its write favours A when a is high: a receptor
    coefficients[:, 2, 1, 3] += 2 * sign  # separates, but writes nothing on the contrast
    footprint[2, 1, 3] = 0.0
    footprint[0, 1, 1] = 5.0  # large footprint, coefficient does not depend on the class
    coefficients[:, 0, 0, 0] += 2 * sign  # separates, but its write favours the wrong answer
    footprint[0, 0, 0] = -1.5
    return coefficients, footprint, is_a


def test_the_planted_receptor_is_found_first_and_the_decoys_are_not():
    coefficients, footprint, is_a = planted()
    found = find_receptors(coefficients, footprint, is_a, min_separation=1.0, top=10)
    assert (found.layer[0], found["head"][0], found.direction[0]) == (1, 0, 2)
    assert found.score[0] == pytest.approx(1.5 * 2, rel=0.1)  # f · (ā_A − ā_B) / 2
    assert found.mean_a[0] > 1.5 and found.mean_b[0] < -1.5 and found.separation[0] > 3
    listed = set(zip(found.layer, found["head"], found.direction))
    assert not listed & {(2, 1, 3), (0, 1, 1), (0, 0, 0)}
    assert len(found) == 1  # noise never reaches d' ≥ 1 with 100 prompts per class


def test_separation_and_score_against_a_hand_computation():
    from helpers.singular.heads.receptors import receptor_statistics

    values = torch.tensor([1.0, 3.0, 6.0, 6.0, 9.0, 9.0])  # class A: 1, 3 (var 2); class B: 6, 6, 9, 9 (var 3)
    is_a = torch.tensor([True, True, False, False, False, False])
    stats = receptor_statistics(values.reshape(6, 1, 1, 1), torch.full((1, 1, 1), 2.0), is_a)
    assert float(stats["mean_a"]) == pytest.approx(2.0) and float(stats["mean_b"]) == pytest.approx(7.5)
    assert float(stats["separation"]) == pytest.approx(5.5 / (0.5 * (2 + 3)) ** 0.5)  # pooled std of both classes
    # score = mean of s_n (a_n − ā) f with ā = 34/6, s = +1 for A, −1 for B, f = 2
    mean = 34 / 6
    by_hand = 2 * ((1 - mean) + (3 - mean) - (6 - mean) * 2 - (9 - mean) * 2) / 6
    assert float(stats["score"]) == pytest.approx(by_hand)


def test_per_prompt_footprints_give_the_same_answer_as_a_shared_one():
    coefficients, footprint, is_a = planted()
    shared = find_receptors(coefficients, footprint, is_a)
    per_prompt = find_receptors(coefficients, footprint.expand(len(is_a), *footprint.shape), is_a)
    assert shared.equals(per_prompt)


def test_flipping_the_class_labels_flips_the_receptors_sign():
    coefficients, footprint, is_a = planted()
    found = find_receptors(coefficients, -footprint, ~is_a)
    assert (found.layer[0], found["head"][0], found.direction[0]) == (1, 0, 2)
    with pytest.raises(ValueError, match="both classes"):
        find_receptors(coefficients, footprint, torch.ones(len(is_a), dtype=torch.bool))


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_coefficients_rebuild_each_heads_output_and_footprints_match_the_readout(name):
    model = cached_model(name, "fold_norm")
    masked = MaskedModel(model)
    task = gender_task(model, 4, seed=0)
    coefficients = answer_ov_coefficients(masked, task.clean, task.answer_pos)  # [n, L, H, r]
    directions = ov_write_directions(masked)  # [L, H, d, r]
    layer = model.n_layers - 1
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(task.clean, names_filter=[f"blocks.{layer}.attn.hook_z"])
    w = layer_weights(model, layer)
    z = cache[f"blocks.{layer}.attn.hook_z"][torch.arange(len(task)), task.answer_pos].double()
    heads = torch.einsum("nhe,hed->nhd", z, w.W_O.double()) + w.b_O.double() / w.n_heads
    rebuilt = torch.einsum("nhr,hdr->nhd", coefficients[:, layer].double(), directions[layer])
    torch.testing.assert_close(rebuilt, heads, rtol=1e-4, atol=1e-4 * float(heads.abs().max()))
    a, b = int(task.correct[0]), int(task.wrong[0])
    f = footprints(directions, contrast_vector(model, a, b))
    logits = lens(model, directions[layer, 0].T)  # [r, vocab]
    torch.testing.assert_close(f[layer, 0], logits[:, a] - logits[:, b])


def test_statistics_at_rescore_the_same_directions_on_other_prompts():
    coefficients, footprint, is_a = planted(seed=0)
    found = find_receptors(coefficients, footprint, is_a)
    fresh, fresh_footprint, fresh_is_a = planted(seed=1)
    again = statistics_at(found, fresh, footprint, fresh_is_a)
    assert list(again["direction"]) == list(found["direction"])
    assert again["score"][0] == pytest.approx(found["score"][0], rel=0.15)  # the planted effect generalises


def test_ioi_slot_contrast_orders_the_names_as_they_appear():
    model = cached_model("tiny-llama", "fold_norm")
    task = ioi_task(model, 8, seed=0)
    contrast, is_abba = ioi_slot_contrast(model, task)
    assert int(is_abba.sum()) == 4  # half ABBA
    for n in range(len(task)):
        first = task.correct[n] if is_abba[n] else task.wrong[n]
        second = task.wrong[n] if is_abba[n] else task.correct[n]
        torch.testing.assert_close(contrast[n], contrast_vector(model, int(first), int(second)))


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama", "tiny-gemma3"])
def test_footprint_over_the_final_norm_scale_is_the_first_order_logit_change(name):
    """Oracle: a small step ε·x before the final norm, x orthogonal to the residual (and to 1 for LayerNorm),
    changes logit(A) − logit(B) by ε·(x·c)/s to first order (models without a logit soft-cap)."""
    model = cached_model(name, "fold_norm")
    masked = MaskedModel(model)
    task = gender_task(model, 4, seed=0)
    resid = final_residual(model, task)
    x = torch.randn(len(task), model.d_model, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    basis = [resid] if model.architecture != "gpt2" else [torch.ones_like(resid), resid - resid.mean(-1, keepdim=True)]
    for b in basis:
        b = b / b.norm(dim=-1, keepdim=True)
        x = x - (x * b).sum(-1, keepdim=True) * b
    eps = 1e-3 * float(resid.norm(dim=-1).mean())
    a, b = int(task.correct[0]), int(task.wrong[0])
    diff = lambda logits: logits[:, a].double() - logits[:, b].double()  # noqa: E731
    base = diff(steered_final_logits(masked, task.clean, task.answer_pos, {}))
    moved = diff(steered_final_logits(masked, task.clean, task.answer_pos, {DIRECT_HOOK: eps * x}))
    scale = final_norm_scale(model, task.clean, task.answer_pos)
    predicted = eps * (x @ contrast_vector(model, a, b)) / scale
    torch.testing.assert_close(moved - base, predicted, rtol=2e-2, atol=2e-2 * float(predicted.abs().max()))  # float32 model
    f = footprints(ov_write_directions(masked), contrast_vector(model, a, b), scale)
    assert f.shape == (len(task), model.n_layers, model.n_heads, ov_write_directions(masked).shape[-1])
