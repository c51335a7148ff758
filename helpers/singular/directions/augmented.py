"""Augmented matrices (biases folded in, docs/methods.md §1.1) and their SVDs, computed from factors.

Homogeneous input x̃ = [1, x]. Per head h: W̃_QK = [b_Q; W_Q] [b_K; W_K]ᵀ (so x̃_iᵀ W̃_QK x̃_j = q_i · k_j with
q, k the raw, pre-norm, pre-rotation projections) and W̃_OV = [b_V W_O + b_O/H ; W_V W_O] (so c̃ W̃_OV is the
head's output including b_O/H, with c̃ = [1, Σ_j A_ij x_j]). Per layer: W̃_in = [b_in; W_in] (gate and up
for gated MLPs) acting on the MLP input, W̃_out = [b_out; W_out] acting on [1, activation].

An ``SVD`` holds W = U diag(S) Vᵀ with U the read (input) directions and V the write (output)
directions, signs canonicalised, and near-equal singular values flagged.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from helpers.core.linalg import column_signs

from helpers.core.weights import LayerWeights, layer_weights

DEGENERATE_RTOL = 1e-4
"""Neighbouring singular values closer than this (relative to the larger) form a degenerate block:
the directions inside it are a subspace, not individually meaningful."""
NULL_RTOL = 1e-9
"""σ_k below this fraction of σ_1 is numerically zero (e.g. the OV bias direction of a model without
biases): its directions are not determined by the matrix and are flagged like a degenerate block."""


@dataclass
class SVD:
    U: torch.Tensor  # [..., m, r] read directions (rows of the augmented input space)
    S: torch.Tensor  # [..., r] descending
    V: torch.Tensor  # [..., n, r] write directions
    degenerate: torch.Tensor  # [..., r] bool: σ_k within DEGENERATE_RTOL of a neighbour, or ≈ 0

    def dense(self) -> torch.Tensor:
        if self.U.shape[-2] == 0 or self.V.shape[-2] == 0:
            raise ValueError("this SVD keeps its spectrum only: compute its layer with augmented_svds(..., vectors=[layer])")
        return (self.U * self.S[..., None, :]) @ self.V.transpose(-1, -2)

    def __getitem__(self, index) -> "SVD":
        return SVD(self.U[index], self.S[index], self.V[index], self.degenerate[index])

    def spectrum(self) -> "SVD":
        """The singular values and degenerate flags alone: U and V become empty [..., 0, r] tensors (new ones, so
        the vectors' memory is freed); ``dense`` refuses it."""
        def empty(M):
            return M.new_empty((*M.shape[:-2], 0, M.shape[-1]))

        return SVD(empty(self.U), self.S, empty(self.V), self.degenerate)


def svd_of_product(A: torch.Tensor, B: torch.Tensor) -> SVD:
    """SVD of A Bᵀ without forming it: QR of each factor, SVD of the small r×r core. Batched.

    A [..., m, r], B [..., n, r]; cost O((m + n) r²) instead of O(m n min(m, n)). Any width r works: a
    factor wider than it is tall (r > m or r > n) has a QR core of min(m, r) rows, so the core may be
    rectangular; the thin SVD then gives min(m, n, r) directions, as the dense SVD of A Bᵀ does."""
    Qa, Ra = torch.linalg.qr(A.double())
    Qb, Rb = torch.linalg.qr(B.double())
    Uc, S, Vch = torch.linalg.svd(Ra @ Rb.transpose(-1, -2), full_matrices=False)
    return _canonical(Qa @ Uc, S, Qb @ Vch.transpose(-1, -2))


def svd_dense(W: torch.Tensor) -> SVD:
    """Thin SVD of a dense matrix (batched), same conventions as ``svd_of_product``."""
    U, S, Vh = torch.linalg.svd(W.double(), full_matrices=False)
    return _canonical(U, S, Vh.transpose(-1, -2))


def _canonical(U: torch.Tensor, S: torch.Tensor, V: torch.Tensor) -> SVD:
    """Flip each pair (u_k, v_k) so the largest-|·| entry of v_k is positive; flag degenerate blocks."""
    sign = column_signs(V)
    close = (S[..., :-1] - S[..., 1:]) <= DEGENERATE_RTOL * S[..., :-1].clamp_min(torch.finfo(S.dtype).tiny)
    degenerate = torch.zeros(S.shape, dtype=torch.bool, device=S.device)
    degenerate[..., :-1] |= close
    degenerate[..., 1:] |= close
    degenerate |= numerically_zero(S)
    return SVD(U * sign, S, V * sign, degenerate)


def numerically_zero(S: torch.Tensor) -> torch.Tensor:
    """σ_k ≤ NULL_RTOL σ_1 (along the last dimension)."""
    return S <= NULL_RTOL * S[..., :1]


def homogeneous(x: torch.Tensor) -> torch.Tensor:
    """x̃ = [1, x] along the last dimension."""
    return torch.cat([torch.ones_like(x[..., :1]), x], dim=-1)


# --- factors ----------------------------------------------------------------------------------------------

def qk_factors(w: LayerWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """(Q̃, K̃) with W̃_QK = Q̃ K̃ᵀ, each [n_heads, d_model + 1, d_head]."""
    return _stack_bias(w.b_Q, w.W_Q), _stack_bias(w.b_K, w.W_K)


def ov_factors(w: LayerWeights) -> tuple[torch.Tensor, torch.Tensor]:
    """(L, R) with W̃_OV = L Rᵀ: L = [[1, b_V], [0, W_V]] [H, d+1, d_head+1], R = [b_O/H, W_Oᵀ] [H, d, d_head+1]."""
    H, d, _ = w.W_V.shape
    left = _stack_bias(w.b_V, w.W_V)
    first = left.new_zeros(H, d + 1, 1)
    first[:, 0, 0] = 1.0
    right = torch.cat([(w.b_O / H).expand(H, d)[..., None], w.W_O.transpose(1, 2)], dim=-1)
    return torch.cat([first, left], dim=-1), right


def qk_matrix(w: LayerWeights) -> torch.Tensor:
    """Dense W̃_QK [H, d+1, d+1] (tests and benchmarks only; use the factors)."""
    Q, K = qk_factors(w)
    return Q.double() @ K.double().transpose(1, 2)


def ov_matrix(w: LayerWeights) -> torch.Tensor:
    """Dense W̃_OV [H, d+1, d] (tests and benchmarks only; use the factors)."""
    L, R = ov_factors(w)
    return L.double() @ R.double().transpose(1, 2)


def mlp_in_matrices(w: LayerWeights) -> dict[str, torch.Tensor]:
    """{"up": W̃_in} and, for gated MLPs, {"gate": W̃_gate}; each [d+1, d_mlp]."""
    out = {"up": _stack_bias(w.b_in, w.W_in)}
    if w.W_gate is not None:
        out["gate"] = _stack_bias(w.b_gate, w.W_gate)
    return out


def mlp_out_matrix(w: LayerWeights) -> torch.Tensor:
    """W̃_out [d_mlp + 1, d_model]."""
    return _stack_bias(w.b_out, w.W_out)


def _stack_bias(b: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    return torch.cat([b.unsqueeze(-2), W], dim=-2)


# --- all SVDs of a model ----------------------------------------------------------------------------------

MATRIX_KINDS = ("qk", "ov", "mlp_gate", "mlp_up", "mlp_out")
"""The kinds of augmented matrix of a layer (``mlp_gate`` in gated MLPs only); ranks in ``direction_ranks``."""


def layer_svds(w: LayerWeights) -> dict[str, SVD]:
    """SVDs of one layer's augmented matrices: "qk", "ov" (batched over heads), "mlp_up", "mlp_gate"
    (gated MLPs only; "mlp_up" is the only MLP-in matrix otherwise) and "mlp_out"."""
    out = {"qk": svd_of_product(*qk_factors(w)), "ov": svd_of_product(*ov_factors(w))}
    for name, matrix in mlp_in_matrices(w).items():
        out[f"mlp_{name}"] = svd_dense(matrix)
    out["mlp_out"] = svd_dense(mlp_out_matrix(w))
    return out


def augmented_svds(model, layers=None, progress: bool = False, vectors=None) -> list[dict[str, SVD]]:
    """``layer_svds`` for every layer (or the given ones) of a loaded model, under its processing; on the
    CPU whatever the model's device (docs/methods.md §0), so that direction k is the same vector everywhere.
    ``vectors``: the layers whose read and write directions are kept (None: every layer); the others keep their
    ``SVD.spectrum`` only, as each is computed. Gemma-2-2B's directions take 0.79 GB of float64 a layer, so a
    whole model's would not fit in 24 GB beside its weights; its spectra take kilobytes."""
    layers = range(model.n_layers) if layers is None else layers
    keep = None if vectors is None else set(vectors)
    if progress:
        from tqdm.auto import tqdm

        layers = tqdm(layers, desc="augmented SVDs")
    out = []
    for layer in layers:
        svds = layer_svds(layer_weights(model, layer, device="cpu"))
        out.append(svds if keep is None or layer in keep else {kind: svd.spectrum() for kind, svd in svds.items()})
    return out


def direction_ranks(n_heads: int, d_model: int, d_head: int, d_mlp: int, gated: bool) -> dict[str, tuple]:
    """Shape of the singular directions of each kind in one layer: the ranks of its augmented matrices,
    generically (per head for QK and OV). The one place these ranks are written; masks have these shapes."""
    H, d, dh = n_heads, d_model, d_head
    shapes = {"qk": (H, min(dh, d + 1)), "ov": (H, min(dh + 1, d)), "mlp_up": (min(d + 1, d_mlp),),
              "mlp_out": (min(d_mlp + 1, d),)}
    if gated:
        shapes["mlp_gate"] = (min(d + 1, d_mlp),)
    return shapes


def direction_shapes(model) -> dict[str, tuple]:
    """``direction_ranks`` of a loaded model."""
    return direction_ranks(model.n_heads, model.d_model, model.d_head, model.d_mlp, model.arch.gated_mlp)


def direction_counts(n_layers: int, n_heads: int, d_model: int, d_head: int, d_mlp: int, gated: bool) -> dict[str, int]:
    """Number of singular directions of each kind in the model (MLP in: up and gate together)."""
    shapes = direction_ranks(n_heads, d_model, d_head, d_mlp, gated)
    size = {kind: n_layers * math.prod(shape) for kind, shape in shapes.items()}
    counts = {"qk": size["qk"], "ov": size["ov"], "mlp_in": size["mlp_up"] + size.get("mlp_gate", 0),
              "mlp_out": size["mlp_out"]}
    counts["total"] = sum(counts.values())
    return counts


def spectra_frame(svds: list[dict[str, SVD]], layers=None):
    """Long table of singular values: layer, kind, head (-1 for MLP), index, sigma, degenerate, and null
    (σ numerically zero, e.g. the bias row of a model without biases)."""
    import pandas as pd

    layers = range(len(svds)) if layers is None else layers
    rows = []
    for layer, per_kind in zip(layers, svds):
        for kind, svd in per_kind.items():
            S = svd.S.reshape(-1, svd.S.shape[-1])
            D = svd.degenerate.reshape(S.shape)
            N = numerically_zero(S)
            for head in range(S.shape[0]):
                for index, row in enumerate(zip(S[head].tolist(), D[head].tolist(), N[head].tolist())):
                    rows.append((layer, kind, head if svd.S.ndim > 1 else -1, index, *row))
    return pd.DataFrame(rows, columns=["layer", "kind", "head", "index", "sigma", "degenerate", "null"])


def qk_semantics(model) -> str:
    """What the QK singular directions mean for this architecture (docs/methods.md §1.1)."""
    config = model.config
    if not model.arch.rope:
        return "GPT-2: the attention score is exactly x̃_iᵀ W̃_QK x̃_j / √d_head; QK directions are directions of the score."
    text = ("RoPE rotates q and k by position, so W̃_QK is the pre-rotation bilinear form; the score at offset "
            "i − j is a rotated version of it.")
    if model.arch.qk_norm:
        text = ("Gemma-3 normalises q and k per head (q_norm, k_norm: RMSNorm) before RoPE, so W̃_QK is the bilinear "
                "form of the pre-norm, pre-rotation projections; scores depend on it only through the normalised, "
                "rotated q and k.")
    if getattr(config, "attn_logit_softcapping", None):
        text += f" Scores are soft-capped at {config.attn_logit_softcapping}."
    return text
