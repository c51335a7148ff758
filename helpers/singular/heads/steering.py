"""Steering through logit receptors (docs/methods.md §1.5) and its equal-norm random control.

Receptor intervention: for each receptor k, set its coefficient to the other class's mean, i.e. add
s · (ā_other − a_k) v_k, at the answer position, either

- ``direct``: to the residual stream just before the final norm (only the direct path to the logits), or
- ``layer``: to the attention output of the receptor's layer (what the head would write; every later layer
  sees it, and for Gemma the post-attention norm applies as it would to the head's own write).

The control adds, at the same hooks and positions, random directions with the same norm per prompt.
"""
from __future__ import annotations

import pandas as pd
import torch

from helpers.singular.masking.masks import MaskedModel
from helpers.singular.directions.readout import top_tokens
from helpers.singular.tasks import Task, logit_diff

SITES = ("direct", "layer")
DIRECT_HOOK = "ln_final.hook_in"


def layer_hook(layer: int) -> str:
    return f"blocks.{layer}.attn.o.hook_out"


def receptor_shifts(receptors: pd.DataFrame, coefficients: torch.Tensor, is_a: torch.Tensor,
                    directions: torch.Tensor) -> dict[int, torch.Tensor]:
    """Per layer, [n, d] Σ_k (ā_other − a_k) v_k over that layer's receptors (scale 1). Class means come
    from ``receptors`` (fitted on other prompts); ``coefficients`` [n, L, H, r] are these prompts' own."""
    shifts: dict[int, torch.Tensor] = {}
    is_a = torch.as_tensor(is_a, dtype=torch.bool, device=coefficients.device)
    for r in receptors.itertuples():
        target = torch.where(is_a, r.mean_b, r.mean_a).double()
        delta = target - coefficients[:, r.layer, r.head, r.direction].double()
        shift = delta[:, None] * directions[r.layer, r.head, :, r.direction].double()[None]
        shifts[r.layer] = shifts.get(r.layer, 0) + shift
    return shifts


def additions_at(site: str, shifts: dict[int, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """Hook name → [n, d] vector added at the answer position."""
    if site == "direct":
        return {DIRECT_HOOK: scale * sum(shifts.values())}
    if site == "layer":
        return {layer_hook(layer): scale * shift for layer, shift in shifts.items()}
    raise ValueError(f"site={site!r} is not one of {SITES}")


def equal_norm_random(additions: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Random directions with the same norm per prompt at the same hooks (drawn on the CPU, then moved: the
    same control on every device)."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, vectors in additions.items():
        noise = torch.randn(vectors.shape, generator=generator, dtype=torch.float64, device="cpu").to(vectors.device)
        out[name] = noise / noise.norm(dim=-1, keepdim=True) * vectors.double().norm(dim=-1, keepdim=True)
    return out


def steered_final_logits(masked: MaskedModel, tokens: torch.Tensor, answer_pos: torch.Tensor,
                         additions: dict[str, torch.Tensor]) -> torch.Tensor:
    """[n, vocab] answer-position logits with each [n, d] vector added at its hook, answer position only."""
    answer_pos = answer_pos.to(masked.model.device)
    rows = torch.arange(tokens.shape[0], device=answer_pos.device)

    def adder(vectors):
        def hook(value, hook):
            value = value.clone()
            value[rows, answer_pos] += vectors.to(value.device, value.dtype)
            return value
        return hook
    with torch.no_grad():
        return masked.final_logits(tokens, answer_pos, [(name, adder(v)) for name, v in additions.items()])


def outcome(task: Task, base_logits: torch.Tensor, logits: torch.Tensor) -> dict:
    """Accuracy and mean logit diff (correct − wrong, the unsteered labels) after steering, and the % of
    prompts the unsteered model got right that now prefer the wrong answer (flipped)."""
    before, after = logit_diff(base_logits, task), logit_diff(logits, task)
    right = before > 0
    flipped = float(((after < 0) & right).double().sum() / right.sum().clamp_min(1))
    return dict(accuracy=float((after > 0).double().mean()), logit_diff=float(after.mean()), flipped=100 * flipped)


def dose_response(masked: MaskedModel, task: Task, shifts: dict[int, torch.Tensor], scales=(1, 1.5, 2, 3, 5),
                  n_random: int = 3, seed: int = 0, progress: bool = True) -> pd.DataFrame:
    """Receptor intervention and its random controls, per site and scale, on ``task``'s prompts."""
    base = steered_final_logits(masked, task.clean, task.answer_pos, {})
    rows = [dict(site=site, intervention="none", seed=-1, scale=0.0, **outcome(task, base, base)) for site in SITES]
    jobs = [(site, s) for site in SITES for s in scales]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc="steering")
    for site, scale in jobs:
        added = additions_at(site, shifts, scale)
        logits = steered_final_logits(masked, task.clean, task.answer_pos, added)
        rows.append(dict(site=site, intervention="receptors", seed=-1, scale=float(scale), **outcome(task, base, logits)))
        for r in range(n_random):
            logits = steered_final_logits(masked, task.clean, task.answer_pos, equal_norm_random(added, seed + r))
            rows.append(dict(site=site, intervention="random", seed=seed + r, scale=float(scale), **outcome(task, base, logits)))
    return pd.DataFrame(rows)


def direction_preview(masked: MaskedModel, tokens: torch.Tensor, layer: int, head: int, direction: int,
                      scale: float, k: int = 5) -> dict:
    """For one prompt [1, T]: top next tokens before and after changing the head's coefficient along its OV
    write direction v_k by ``scale`` (adding scale · v_k to the layer's attention output at the last
    position), and what v_k promotes directly."""
    v = masked.bases[layer].ov_V[head, :, direction]
    pos = torch.tensor([tokens.shape[1] - 1], device=v.device)
    before = steered_final_logits(masked, tokens, pos, {})
    after = steered_final_logits(masked, tokens, pos, {layer_hook(layer): scale * v[None]})
    decode = lambda logits: [masked.model.tokenizer.decode([int(i)]) for i in logits[0].topk(k).indices]  # noqa: E731
    return dict(before=decode(before), after=decode(after), promotes=top_tokens(masked.model, v, k)["promotes"])


def prompts_to_flip(task, pronoun: int, n: int = 20) -> list[str]:
    """The first ``n`` prompts of ``task`` whose answer is not the token ``pronoun``: the prompts that steering
    toward ``pronoun`` (a receptor active for it) can flip, for the explorer to open on."""
    return [prompt for prompt, answer in zip(task.prompts, task.correct.tolist()) if answer != pronoun][:n]


def explorer(masked: MaskedModel, prompts: list[str], start=None):
    """ipywidgets explorer (layer, head, direction, scale, prompt → prediction and top tokens). Call it only
    where a person is looking: papermill runs skip it. ``start``: the direction it opens on, anything with
    ``layer``, ``head`` and ``direction`` (notebook 06 gives its strongest receptor); None: L0.H0, direction 0.
    The scale is the coefficient added along the direction, ±20."""
    import ipywidgets as widgets

    model = masked.model
    r = masked.bases[0].ov_V.shape[-1]
    at = {key: 0 if start is None else int(start[key]) for key in ("layer", "head", "direction")}
    ends = {"layer": model.n_layers - 1, "head": model.n_heads - 1, "direction": r - 1}
    outside = {key: value for key, value in at.items() if not 0 <= value <= ends[key]}
    if outside:
        raise ValueError(f"start {outside} is outside this model's range {ends}: give a direction of this model")

    def show(prompt, layer, head, direction, scale):
        preview = direction_preview(masked, model.to_tokens([prompt]), layer, head, direction, scale)
        print(f"L{layer}.H{head} OV direction {direction}, scale {scale:+.1f}")
        for key, values in preview.items():
            print(f"  {key:>8}: {' | '.join(repr(v) for v in values)}")
    return widgets.interactive(
        show, prompt=widgets.Dropdown(options=prompts),
        **{key: widgets.IntSlider(at[key], 0, ends[key]) for key in ("layer", "head", "direction")},
        scale=widgets.FloatSlider(value=0.0, min=-20, max=20, step=0.5))
