"""Logit receptors (METHODS.md section 1.5): OV write directions whose logit footprint is fixed by the
weights and whose coefficient, set by the head, differs between two classes of prompts.

Head h writes Σ_k a_k v_k with a_k its coefficient along write direction v_k (``MaskedModel`` units: a_k
already includes σ_k). Through the direct path, v_k changes logit(A) − logit(B) by f_k = v_k·(w_A − w_B)
per unit of a_k (the footprint; w = unembedding column with the final norm's gain). A receptor is a
direction whose coefficient separates the classes (separation d' ≥ a declared minimum) in the direction its
footprint favours the correct answer. Nothing is hard-coded: indices and signs come from the data.
"""
from __future__ import annotations

import pandas as pd
import torch

from helpers.masks import MaskedModel
from helpers.weights import unembedding


def answer_ov_coefficients(masked: MaskedModel, tokens: torch.Tensor, answer_pos: torch.Tensor) -> torch.Tensor:
    """[n, L, H, r] OV coefficients of every head at each prompt's answer position."""
    rows = torch.arange(tokens.shape[0])
    per_layer = masked.coefficients(tokens, kinds=("ov",))
    return torch.stack([layer["ov"][rows, answer_pos] for layer in per_layer], dim=1)


def contrast_vector(model, token_a: torch.Tensor | int, token_b: torch.Tensor | int) -> torch.Tensor:
    """[..., d] w_A − w_B: writing x into the residual stream changes logit(A) − logit(B) by x·(w_A − w_B)
    (direct path, final norm's gain applied, its per-token scale ignored)."""
    u = unembedding(model)
    W = u.ln_final.gain[:, None].double() * u.W_U.double()
    return (W[:, torch.as_tensor(token_a)] - W[:, torch.as_tensor(token_b)]).movedim(0, -1)


def ov_write_directions(masked: MaskedModel) -> torch.Tensor:
    """[L, H, d, r] every head's OV write directions."""
    return torch.stack([b.ov_V for b in masked.bases]).double()


def footprints(directions: torch.Tensor, contrast: torch.Tensor) -> torch.Tensor:
    """Footprint of every direction: [L, H, r] for one contrast [d], [n, L, H, r] for per-prompt contrasts [n, d]."""
    if contrast.ndim == 1:
        return torch.einsum("lhdr,d->lhr", directions, contrast)
    return torch.einsum("lhdr,nd->nlhr", directions, contrast)


def find_receptors(coefficients: torch.Tensor, footprint: torch.Tensor, is_a: torch.Tensor,
                   min_separation: float = 1.0, top: int = 8) -> pd.DataFrame:
    """Rank directions as receptors for a two-class contrast.

    ``coefficients`` [n, L, H, r]; ``footprint`` [L, H, r] or [n, L, H, r]: change of logit(A) − logit(B) per
    unit coefficient; ``is_a`` [n] bool, True where A is the correct answer. Per direction:

    - ``separation`` = |ā_A − ā_B| / pooled std of the coefficient (d'),
    - ``score`` = mean_n s_n (a_n − ā) f_n with s_n = ±1 for class A / B: the logits of correct − wrong that the
      class-dependence of the coefficient contributes through the direct path.

    Receptors: separation ≥ ``min_separation`` and score > 0, the ``top`` by score."""
    is_a = torch.as_tensor(is_a, dtype=torch.bool)
    if is_a.all() or not is_a.any():
        raise ValueError("find_receptors needs prompts of both classes (is_a has only one value)")
    a = coefficients.double()
    mean_a, mean_b = a[is_a].mean(0), a[~is_a].mean(0)
    pooled = torch.sqrt(0.5 * (a[is_a].var(0) + a[~is_a].var(0))).clamp_min(1e-12)
    separation = (mean_a - mean_b).abs() / pooled
    sign = torch.where(is_a, 1.0, -1.0).double().reshape(-1, *([1] * (a.ndim - 1)))
    f = footprint.double().expand_as(a)
    score = (sign * (a - a.mean(0)) * f).mean(0)
    eligible = (separation >= min_separation) & (score > 0)
    index = eligible.nonzero()
    order = score[eligible].argsort(descending=True)[:top]
    rows = []
    for i in order.tolist():
        layer, head, k = (int(v) for v in index[i])
        rows.append(dict(layer=layer, head=head, direction=k, score=float(score[layer, head, k]),
                         separation=float(separation[layer, head, k]), mean_a=float(mean_a[layer, head, k]),
                         mean_b=float(mean_b[layer, head, k]), footprint=float(f[:, layer, head, k].mean())))
    return pd.DataFrame(rows, columns=["layer", "head", "direction", "score", "separation", "mean_a", "mean_b",
                                       "footprint"])
