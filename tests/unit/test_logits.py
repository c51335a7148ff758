"""core.logits: the lens is the model's own first-order logit change through its final norm (centred for
LayerNorm), and logits_at is the model's forward at the chosen positions."""
import pytest
import torch

from helpers.core.logits import lens, logits_at
from helpers.singular.masking.masks import MaskedModel
from helpers.singular.heads.receptors import final_norm_scale
from helpers.singular.heads.steering import DIRECT_HOOK, steered_final_logits
from helpers.singular.tasks import gender_task
from tests.conftest import cached_model, final_residual


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama", "tiny-gemma3"])
def test_the_lens_is_the_first_order_change_of_every_logit_through_the_final_norm(name):
    """Oracle: ε·x added before the final norm, x orthogonal to the (centred) residual but not to 1, changes
    every logit by ε·lens(x)/s to first order. For GPT-2's LayerNorm only the centred lens agrees."""
    model = cached_model(name, "fold_norm")
    masked = MaskedModel(model)
    task = gender_task(model, 3, seed=0)
    resid = final_residual(model, task)
    residual = resid - resid.mean(-1, keepdim=True) if model.arch.centred else resid
    residual = residual / residual.norm(dim=-1, keepdim=True)
    x = torch.randn(len(task), model.d_model, generator=torch.Generator().manual_seed(1), dtype=torch.float64) + 0.5
    x = x - (x * residual).sum(-1, keepdim=True) * residual  # keeps its mean: centring matters for GPT-2
    eps = 1e-3 * float(resid.norm(dim=-1).mean())
    base = steered_final_logits(masked, task.clean, task.answer_pos, {}).double()
    moved = steered_final_logits(masked, task.clean, task.answer_pos, {DIRECT_HOOK: eps * x}).double()
    predicted = eps * lens(model, x) / final_norm_scale(model, task.clean, task.answer_pos)[:, None]
    torch.testing.assert_close(moved - base, predicted, rtol=2e-2, atol=2e-2 * float(predicted.abs().max()))
    torch.testing.assert_close(lens(model, x, float64=False), lens(model, x), rtol=1e-5, atol=1e-5)


def test_logits_at_are_the_models_logits_at_those_positions():
    model = cached_model("tiny-gemma2", "raw")  # soft-capped final logits
    task = gender_task(model, 3, seed=0)
    with torch.no_grad():
        full = model.bridge(task.clean)
        picked = logits_at(model, task.clean, task.answer_pos)
    torch.testing.assert_close(picked, full[torch.arange(len(task)), task.answer_pos], rtol=1e-4, atol=1e-4)
