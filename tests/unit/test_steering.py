"""Steering: additions land where they should (oracles from plain hook patching), receptor shifts move a
coefficient to the other class's mean, equal-norm controls, outcome counting."""
import pandas as pd
import pytest
import torch

from helpers.singular.masking.masks import MaskedModel
from helpers.singular.heads.receptors import answer_ov_coefficients, ov_write_directions
from helpers.singular.heads.steering import (DIRECT_HOOK, additions_at, direction_preview, dose_response, equal_norm_random,
                              explorer, layer_hook, outcome, prompts_to_flip, receptor_shifts, steered_final_logits)
from helpers.singular.tasks import gender_task
from tests.conftest import cached_model


def setup(name="tiny-llama", n=4):
    model = cached_model(name, "fold_norm")
    masked = MaskedModel(model)
    return model, masked, gender_task(model, n, seed=0)


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama", "tiny-gemma3"])
def test_direct_addition_equals_adding_to_the_last_residual_before_the_final_norm(name):
    model, masked, task = setup(name)
    rows = torch.arange(len(task))
    added = torch.randn(len(task), model.d_model, generator=torch.Generator().manual_seed(0))
    last = f"blocks.{model.n_layers - 1}.hook_resid_post"
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(task.clean, names_filter=[last])
        resid = cache[last][rows, task.answer_pos] + added
        final_norm = model.body.ln_f if model.architecture == "gpt2" else model.body.norm
        oracle = model.hf_model.lm_head(final_norm(resid))
        softcap = getattr(model.config, "final_logit_softcapping", None)
        if softcap:
            oracle = softcap * torch.tanh(oracle / softcap)
    steered = steered_final_logits(masked, task.clean, task.answer_pos, {DIRECT_HOOK: added})
    torch.testing.assert_close(steered, oracle, rtol=1e-4, atol=1e-4)
    plain = steered_final_logits(masked, task.clean, task.answer_pos, {})
    torch.testing.assert_close(plain, model.bridge(task.clean)[rows, task.answer_pos], rtol=1e-4, atol=1e-4)


def test_layer_addition_equals_the_same_change_made_by_the_heads_themselves():
    model, masked, task = setup()
    rows = torch.arange(len(task))
    delta_z = torch.randn(len(task), model.n_heads, model.d_head, generator=torch.Generator().manual_seed(1))
    o_proj = model.block(0).self_attn.o_proj.weight.detach()  # [d, H·dh]
    added = delta_z.reshape(len(task), -1) @ o_proj.T  # what the heads would write for a change δz of z

    def patch_z(value, hook):  # oracle: change the heads' z at the answer position
        value = value.clone()
        value[rows, task.answer_pos] += delta_z
        return value
    oracle = masked.final_logits(task.clean, task.answer_pos, [("blocks.0.attn.hook_z", patch_z)])
    steered = steered_final_logits(masked, task.clean, task.answer_pos, {layer_hook(0): added})
    torch.testing.assert_close(steered, oracle, rtol=1e-4, atol=1e-4)
    base = steered_final_logits(masked, task.clean, task.answer_pos, {})
    assert float((steered - base).abs().max()) > 1e-3
    # (the bridge's blocks.L.hook_resid_mid is NOT such a site: a change there reaches the MLP's norm only)


def test_receptor_shift_sets_the_coefficient_to_the_other_class_mean():
    model, masked, task = setup(n=6)
    coefficients = answer_ov_coefficients(masked, task.clean, task.answer_pos)
    directions = ov_write_directions(masked)
    is_a = torch.arange(len(task)) % 2 == 0
    receptors = pd.DataFrame([dict(layer=1, head=2, direction=3, mean_a=4.0, mean_b=-2.0)])
    shifts = receptor_shifts(receptors, coefficients, is_a, directions)
    assert set(shifts) == {1}
    moved = coefficients[:, 1, 2, 3].double() + shifts[1] @ directions[1, 2, :, 3]  # v_k is a unit vector
    torch.testing.assert_close(moved, torch.where(is_a, -2.0, 4.0).double())
    assert torch.equal(additions_at("direct", shifts, 2.0)[DIRECT_HOOK], 2.0 * shifts[1])
    with pytest.raises(ValueError, match="site='nowhere'"):
        additions_at("nowhere", shifts, 1.0)


def test_equal_norm_random_controls_keep_the_norm_per_prompt_and_are_seeded():
    vectors = {"a": torch.randn(5, 16, generator=torch.Generator().manual_seed(0))}
    one, again, other = equal_norm_random(vectors, 3), equal_norm_random(vectors, 3), equal_norm_random(vectors, 4)
    torch.testing.assert_close(one["a"].norm(dim=-1), vectors["a"].double().norm(dim=-1))
    assert torch.equal(one["a"], again["a"]) and not torch.equal(one["a"], other["a"])
    cos = torch.nn.functional.cosine_similarity(one["a"], vectors["a"].double(), dim=-1)
    assert float(cos.abs().max()) < 0.9


def test_outcome_counts_flips_among_prompts_the_model_got_right():
    task = type("T", (), {})()
    task.correct, task.wrong = torch.tensor([0, 0, 1, 1]), torch.tensor([1, 1, 0, 0])
    base = torch.tensor([[2.0, 0.0], [2.0, 0.0], [0.0, 2.0], [3.0, 0.0]])  # last prompt wrong already
    after = torch.tensor([[0.0, 1.0], [2.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    result = outcome(task, base, after)
    assert result["flipped"] == pytest.approx(100 * 2 / 3)
    assert result["accuracy"] == 0.25 and result["logit_diff"] == pytest.approx((-1 + 2 - 1 - 3) / 4)


def test_dose_response_has_every_site_scale_and_control():
    model, masked, task = setup(n=4)
    shifts = {0: torch.randn(len(task), model.d_model, generator=torch.Generator().manual_seed(0)).double()}
    table = dose_response(masked, task, shifts, scales=(1, 3), n_random=2, progress=False)
    assert len(table) == 2 + 2 * 2 * (1 + 2)
    none = table[table.intervention == "none"]
    assert bool((none.flipped == 0).all())


def test_preview_at_scale_zero_changes_nothing_and_the_explorer_builds():
    model, masked, task = setup()
    tokens = model.to_tokens([task.prompts[0]])
    preview = direction_preview(masked, tokens, 1, 0, 0, 0.0)
    assert preview["before"] == preview["after"] and len(preview["promotes"]) == 5
    moved = direction_preview(masked, tokens, 1, 0, 0, 500.0)
    assert moved["after"][0] in moved["promotes"]  # a huge write along v_k wins the top token
    widget = explorer(masked, task.prompts[:2])
    assert widget.children[1].max == model.n_layers - 1 and widget.children[2].max == model.n_heads - 1


def test_the_explorer_opens_on_the_direction_it_is_given_and_refuses_one_outside_the_model():
    model, masked, task = setup()
    widget = explorer(masked, task.prompts[:2], start={"layer": 1, "head": 1, "direction": 2})
    layer, head, direction, scale = (widget.children[i] for i in range(1, 5))
    assert (layer.value, head.value, direction.value) == (1, 1, 2)
    assert scale.value == 0.0
    assert explorer(masked, task.prompts[:2]).children[1].value == 0
    last = {"layer": model.n_layers - 1, "head": model.n_heads - 1, "direction": masked.bases[0].ov_V.shape[-1] - 1}
    assert [w.value for w in explorer(masked, task.prompts[:2], start=last).children[1:4]] == list(last.values())
    for key in last:  # one past the end of each slider is refused
        with pytest.raises(ValueError, match=rf"'{key}': {last[key] + 1}"):
            explorer(masked, task.prompts[:2], start={**last, key: last[key] + 1})
    with pytest.raises(ValueError, match=r"'head': 99"):
        explorer(masked, task.prompts[:2], start={"layer": 0, "head": 99, "direction": 0})
    with pytest.raises(ValueError, match=r"'layer': -1"):
        explorer(masked, task.prompts[:2], start={"layer": -1, "head": 0, "direction": 0})


def test_prompts_to_flip_are_those_whose_answer_is_not_the_receptors_pronoun_in_order():
    model, masked, task = setup(n=8)
    pronoun = int(task.correct[0])
    flippable = prompts_to_flip(task, pronoun, n=3)
    others = [p for p, a in zip(task.prompts, task.correct.tolist()) if a != pronoun]
    assert others and flippable == others[:3]
    assert all(task.correct[task.prompts.index(p)] != pronoun for p in flippable)
    assert prompts_to_flip(task, -1, n=100) == task.prompts  # no answer is token -1: every prompt
