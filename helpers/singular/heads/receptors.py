"""Logit receptors (docs/methods.md §1.5): OV write directions whose logit footprint is fixed by the
weights and whose coefficient, set by the head, differs between two classes of prompts.

Head h writes Σ_k a_k v_k with a_k its coefficient along write direction v_k (``MaskedModel`` units: a_k
already includes σ_k). Through the direct path, v_k changes logit(A) − logit(B) by f_k = v_k·(w_A − w_B) / s
per unit of a_k (the footprint; w = unembedding column with the final norm's gain, s = the final norm's
scale at the answer position, which makes the footprint per prompt). A receptor is a
direction whose coefficient separates the classes (separation d' ≥ a declared minimum) in the direction its
footprint favours the correct answer. Nothing is hard-coded: indices and signs come from the data.
"""
from __future__ import annotations

import pandas as pd
import torch

from helpers.singular.masking.masks import MaskedModel
from helpers.singular.tasks import Task, ioi_positions
from helpers.core.logits import token_columns


def answer_ov_coefficients(masked: MaskedModel, tokens: torch.Tensor, answer_pos: torch.Tensor) -> torch.Tensor:
    """[n, L, H, r] OV coefficients of every head at each prompt's answer position."""
    answer_pos = answer_pos.to(masked.model.device)
    rows = torch.arange(tokens.shape[0], device=answer_pos.device)
    per_layer = masked.coefficients(tokens, kinds=("ov",))
    return torch.stack([layer["ov"][rows, answer_pos] for layer in per_layer], dim=1)


def contrast_vector(model, token_a: torch.Tensor | int, token_b: torch.Tensor | int) -> torch.Tensor:
    """[..., d] c = w_A − w_B: writing x into the residual stream before the final norm changes
    logit(A) − logit(B) by x·c / s to first order, s the norm's scale at that token, when x is orthogonal to
    the residual (``final_norm_scale``; final norm's gain applied; for LayerNorm models c is centred,
    because the norm removes the mean of x)."""
    return token_columns(model, token_a) - token_columns(model, token_b)


def final_norm_scale(model, tokens: torch.Tensor, answer_pos: torch.Tensor) -> torch.Tensor:
    """[n] the final norm's scale (RMS or std of the residual) at each prompt's answer position."""
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(tokens.to(model.device), names_filter=["ln_final.hook_scale"])
    rows, answer_pos = torch.arange(tokens.shape[0], device=model.device), answer_pos.to(model.device)
    return cache["ln_final.hook_scale"][rows, answer_pos].reshape(-1).double()


def ov_write_directions(masked: MaskedModel) -> torch.Tensor:
    """[L, H, d, r] every head's OV write directions."""
    return torch.stack([b.ov_V for b in masked.bases]).double()


def footprints(directions: torch.Tensor, contrast: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    """Footprint of every direction [L, H, d, r] on a contrast: [L, H, r] for one contrast [d]; [n, L, H, r]
    for per-prompt contrasts [n, d] or when the final norm's ``scale`` [n] is given (divided by it)."""
    if scale is not None:
        contrast = contrast.expand(len(scale), contrast.shape[-1]) / scale[:, None]
    if contrast.ndim == 1:
        return torch.einsum("lhdr,d->lhr", directions, contrast)
    return torch.einsum("lhdr,nd->nlhr", directions, contrast)


def receptor_statistics(coefficients: torch.Tensor, footprint: torch.Tensor, is_a: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per direction ([L, H, r] each): class means ``mean_a``, ``mean_b``, ``separation`` = |ā_A − ā_B| / pooled
    std (d'), mean ``footprint``, and ``score`` = mean_n s_n (a_n − ā) f_n with s_n = ±1 for class A / B: the
    logits of correct − wrong that the class-dependence of the coefficient contributes through the direct path.

    ``coefficients`` [n, L, H, r]; ``footprint`` [L, H, r] or [n, L, H, r]: change of logit(A) − logit(B) per
    unit coefficient; ``is_a`` [n] bool, True where A is the correct answer."""
    is_a = torch.as_tensor(is_a, dtype=torch.bool, device=coefficients.device)
    if is_a.all() or not is_a.any():
        raise ValueError("receptors need prompts of both classes (is_a has only one value)")
    a = coefficients.double()
    mean_a, mean_b = a[is_a].mean(0), a[~is_a].mean(0)
    pooled = torch.sqrt(0.5 * (a[is_a].var(0) + a[~is_a].var(0))).clamp_min(1e-12)
    sign = torch.where(is_a, 1.0, -1.0).double().reshape(-1, *([1] * (a.ndim - 1)))
    f = footprint.double().expand_as(a)
    return dict(score=(sign * (a - a.mean(0)) * f).mean(0), separation=(mean_a - mean_b).abs() / pooled,
                mean_a=mean_a, mean_b=mean_b, footprint=f.mean(0))


COLUMNS = ["layer", "head", "direction", "score", "separation", "mean_a", "mean_b", "footprint"]


def find_receptors(coefficients: torch.Tensor, footprint: torch.Tensor, is_a: torch.Tensor,
                   min_separation: float = 1.0, top: int = 8) -> pd.DataFrame:
    """Receptors for a two-class contrast (arguments as in ``receptor_statistics``): separation ≥
    ``min_separation`` and score > 0, the ``top`` by score."""
    stats = receptor_statistics(coefficients, footprint, is_a)
    eligible = (stats["separation"] >= min_separation) & (stats["score"] > 0)
    index = eligible.nonzero()
    order = torch.sort(stats["score"][eligible], descending=True, stable=True).indices[:top]  # ties: the earlier direction
    return pd.DataFrame([_row(stats, *(int(v) for v in index[i])) for i in order.tolist()], columns=COLUMNS)


def statistics_at(receptors: pd.DataFrame, coefficients: torch.Tensor, footprint: torch.Tensor,
                  is_a: torch.Tensor) -> pd.DataFrame:
    """The statistics of the given directions on other prompts (e.g. receptors found on training prompts,
    scored on held-out ones)."""
    stats = receptor_statistics(coefficients, footprint, is_a)
    return pd.DataFrame([_row(stats, r.layer, r.head, r.direction) for r in receptors.itertuples()], columns=COLUMNS)


def _row(stats: dict, layer: int, head: int, k: int) -> dict:
    return dict(layer=layer, head=head, direction=k, **{name: float(v[layer, head, k]) for name, v in stats.items()})


def ioi_slot_contrast(model, task: Task) -> tuple[torch.Tensor, torch.Tensor]:
    """IOI as two classes: ([n, d] contrast w_first − w_second of the two names in the order they appear,
    [n] True for ABBA prompts, where the first name is the IO)."""
    roles = ioi_positions(task)  # on the CPU
    rows, clean = torch.arange(len(task), device="cpu"), task.clean.cpu()
    first, second = torch.minimum(roles["IO"], roles["S1"]), torch.maximum(roles["IO"], roles["S1"])
    return contrast_vector(model, clean[rows, first], clean[rows, second]), roles["IO"] < roles["S1"]


def fitted_and_rescored(masked: MaskedModel, fit: Task, score: Task, contrast_of, min_separation: float, top: int,
                        suffix: str) -> tuple[pd.DataFrame, torch.Tensor]:
    """Receptors found on the ``fit`` prompts and their statistics again on the ``score`` prompts (never
    the same prompts: a receptor's score on the prompts it was chosen from is optimistic).

    ``contrast_of(task)`` gives (contrast [d] or [n, d], is_a [n]) for a task's prompts. Returns (the fitted
    table with ``score_<suffix>`` and ``separation_<suffix>`` columns, the score half's coefficients
    [n, L, H, r])."""
    directions = ov_write_directions(masked)

    def measured(task: Task):
        contrast, is_a = contrast_of(task)
        coefficients = answer_ov_coefficients(masked, task.clean, task.answer_pos)
        footprint = footprints(directions, contrast, final_norm_scale(masked.model, task.clean, task.answer_pos))
        return coefficients, footprint, is_a

    fitted = find_receptors(*measured(fit), min_separation=min_separation, top=top)
    coefficients, footprint, is_a = measured(score)
    again = statistics_at(fitted, coefficients, footprint, is_a)
    table = fitted.assign(**{f"score_{suffix}": again["score"], f"separation_{suffix}": again["separation"]})
    return table, coefficients
