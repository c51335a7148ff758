import torch

from helpers.singular.heads.attribution import head_logit_attribution
from helpers.singular.tasks import ioi_task, logit_diff
from tests.conftest import cached_model


def test_head_attributions_plus_the_rest_add_up_to_the_logit_difference():
    """GPT-2 (no post-norm): Σ heads + everything else written to the residual = the logit difference."""
    model = cached_model("tiny-gpt2", "fold_norm")
    task = ioi_task(model, 8, seed=3)
    dla = head_logit_attribution(model, task)
    rows = torch.arange(len(task))
    names = ["hook_embed", "hook_pos_embed", "ln_final.hook_scale"] + [
        f"blocks.{l}.hook_mlp_out" for l in range(model.n_layers)]
    with torch.no_grad():
        logits, cache = model.bridge.run_with_cache(task.clean, names_filter=lambda n: n in names)
    from helpers.core.weights import unembedding

    u = unembedding(model)
    W = u.W_U[:, task.correct] - u.W_U[:, task.wrong]  # [d, n]
    scale = cache["ln_final.hook_scale"][rows, task.answer_pos]
    rest = sum(cache[n][rows, task.answer_pos] for n in names if n != "ln_final.hook_scale")
    rest = rest - rest.mean(-1, keepdim=True)  # LayerNorm centres the residual
    rest_effect = torch.einsum("nd,dn->n", rest / scale, W).mean()
    bias = (u.b_U[task.correct] - u.b_U[task.wrong]).mean()
    expected = logit_diff(logits[rows, task.answer_pos], task).mean()
    assert dla.shape == (model.n_layers, model.n_heads)
    torch.testing.assert_close(dla.sum() + rest_effect + bias, expected, rtol=1e-4, atol=1e-4)
