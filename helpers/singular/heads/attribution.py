"""Direct logit attribution of attention heads to a task's answer contrast."""
from __future__ import annotations

import torch

from helpers.core.logits import token_columns
from helpers.core.weights import layer_weights
from helpers.singular.tasks import Task

GPT2_IOI_HEADS = {  # Wang et al. 2023, docs/methods.md §1.4: (layer, head) -> class
    **{h: "name mover" for h in [(9, 6), (9, 9), (10, 0)]},
    **{h: "backup name mover" for h in [(9, 0), (9, 7), (10, 1), (10, 2), (10, 6), (10, 10), (11, 2), (11, 9)]},
    **{h: "negative name mover" for h in [(10, 7), (11, 10)]},
    **{h: "S-inhibition" for h in [(7, 3), (7, 9), (8, 6), (8, 10)]},
    **{h: "induction" for h in [(5, 5), (5, 8), (5, 9), (6, 9)]},
    **{h: "duplicate token" for h in [(0, 1), (0, 10), (3, 0)]},
    **{h: "previous token" for h in [(2, 2), (4, 11)]},
}


def head_logit_attribution(model, task: Task) -> torch.Tensor:
    """[n_layers, n_heads] mean direct effect of each head's output at the answer position on
    logit(correct) − logit(wrong), through the final norm frozen at its actual scale (and, for Gemma,
    the post-attention norm frozen likewise). On the CPU, whatever the model's device."""
    names = lambda layer: [f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.ln1_post.hook_scale"]  # noqa: E731
    wanted = {n for layer in range(model.n_layers) for n in names(layer)} | {"ln_final.hook_scale"}
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(task.clean.to(model.device), names_filter=lambda n: n in wanted)
    task = task.to(model.device)
    rows = torch.arange(len(task), device=model.device)
    contrast = (token_columns(model, task.correct) - token_columns(model, task.wrong)).float()  # [n, d]
    final_scale = cache["ln_final.hook_scale"][rows, task.answer_pos]  # [n, 1]
    out = torch.zeros(model.n_layers, model.n_heads, device=model.device)
    for layer in range(model.n_layers):
        w = layer_weights(model, layer)
        z = cache[f"blocks.{layer}.attn.hook_z"][rows, task.answer_pos]  # [n, H, dh]
        heads = torch.einsum("nhe,hed->nhd", z, w.W_O) + w.b_O / w.n_heads
        post = f"blocks.{layer}.ln1_post.hook_scale"
        if post in cache:  # Gemma: post-attention RMSNorm, frozen at its scale
            weight = model.block(layer).post_attention_layernorm.weight.detach()
            gain = 1.0 + weight if model.arch.gain_one_plus else weight
            heads = heads * gain / cache[post][rows, task.answer_pos][:, None]
        out[layer] = torch.einsum("nhd,nd->nh", heads / final_scale[:, None], contrast).mean(0)
    return out.cpu()


def boxed_heads(model, task_name: str, attribution: torch.Tensor | None, top: int = 3) -> tuple[list, str]:
    """The heads notebook 02 draws a box around, and what the boxes mean: Wang et al.'s IOI circuit for
    GPT-2 small on IOI (nothing on its other tasks), else the ``top`` heads by direct logit attribution to the
    task's contrast (on IOI: name-mover candidates) where the task has one, else none."""
    if model.name == "gpt2-small":
        return (sorted(GPT2_IOI_HEADS) if task_name == "ioi" else []), "Wang et al.'s IOI circuit"
    if attribution is None:
        return [], "none"
    attribution = torch.as_tensor(attribution, device="cpu")
    order = torch.sort(attribution.reshape(-1), descending=True, stable=True).indices[:top]  # ties: the earlier head
    n_heads = attribution.shape[1]
    return ([(int(i) // n_heads, int(i) % n_heads) for i in order],
            f"top-{top} direct logit attribution" + (" (name-mover candidates)" if task_name == "ioi" else ""))
