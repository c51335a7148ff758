"""The quantization noise floor of offline (GGUF) weights, measured from the weights themselves.

GGUF block formats store each group of consecutive input weights as ``scale * q + offset`` with small
integers q (every format's scale block is a multiple of 16 values along the input dimension). We recover
each 16-group's grid step from the dequantized values (a float GCD of their differences), model the lost
precision as independent uniform errors of ±step/2, push one random draw of those errors through the
augmented matrices, and take the top singular value of the change: singular directions with σ below
that floor can be mixed by quantization alone and should not be read one by one.
"""
from __future__ import annotations

import contextlib

import torch

from helpers.singular.directions.augmented import mlp_in_matrices, mlp_out_matrix, ov_factors, qk_factors, svd_of_product
from helpers.core.weights import layer_weights

GROUP = 16


def grid_steps(weight: torch.Tensor, group: int = GROUP, max_divisor: int = 8, tol: float = 0.02) -> torch.Tensor:
    """Quantization step of each ``group`` consecutive entries along the last dimension (0 where the
    values lie on no common grid, i.e. were not quantized). Returns [..., n_in // group].

    The step divides the smallest gap between distinct values: try gap / k for k = 1..max_divisor, refit
    each candidate by least squares on the integer levels it implies, keep the largest that puts every
    value of the group within ``tol`` steps of the grid."""
    if weight.shape[-1] % group:
        raise ValueError(f"last dimension {weight.shape[-1]} is not a multiple of group={group}")
    values = weight.detach().double().reshape(-1, group)
    diffs = values - values.min(dim=1, keepdim=True).values
    ordered = diffs.sort(dim=1, stable=True).values
    gaps = ordered[:, 1:] - ordered[:, :-1]
    eps = 1e-5 * values.abs().amax(dim=1, keepdim=True).clamp_min(1e-30)  # float32 rounding of dequantized values
    smallest_gap = torch.where(gaps > eps, gaps, torch.inf).min(dim=1, keepdim=True).values
    step = torch.zeros_like(smallest_gap)
    for k in range(max_divisor, 0, -1):  # the largest passing candidate (smallest k) wins
        candidate = _refit(diffs, smallest_gap / k)
        on_grid = ((diffs - torch.round(diffs / candidate) * candidate).abs() <= tol * candidate).all(dim=1, keepdim=True)
        levels = torch.round(diffs.max(dim=1, keepdim=True).values / candidate)
        ok = on_grid & torch.isfinite(candidate) & (levels <= 255)  # at most 8-bit grids
        step = torch.where(ok, candidate, step)
    return step.reshape(*weight.shape[:-1], weight.shape[-1] // group).to(weight.dtype)


def _refit(diffs: torch.Tensor, step: torch.Tensor) -> torch.Tensor:
    """Least-squares step given the integer levels that ``step`` assigns (removes accumulated rounding)."""
    levels = torch.round(diffs / step)
    norm = (levels * levels).sum(dim=1, keepdim=True)
    refit = (levels * diffs).sum(dim=1, keepdim=True) / norm.clamp_min(1)
    return torch.where(torch.isfinite(step) & (norm > 0), refit, step)


def _quantized_parameters(model, layer: int) -> dict[str, torch.nn.Parameter]:
    block = model.block(layer)
    # The bridge wraps each HF module; its parameter names carry "_original_component." segments.
    return {name.replace("_original_component.", ""): p for name, p in block.named_parameters()
            if p.ndim == 2 and p.shape[-1] % GROUP == 0}


def layer_error_std(model, layer: int) -> dict[str, torch.Tensor]:
    """Per-entry standard deviation of the quantization error (step/√12) of each 2-D weight of a layer."""
    out = {}
    for name, p in _quantized_parameters(model, layer).items():
        step = grid_steps(p)
        out[name] = step.repeat_interleave(GROUP, dim=-1) / 12 ** 0.5
    return out


@contextlib.contextmanager
def _perturbed(model, layer: int, generator: torch.Generator):
    """Temporarily add one draw of uniform quantization error to the layer's weights (restored after)."""
    params = _quantized_parameters(model, layer)
    stds = layer_error_std(model, layer)
    originals = {name: p.detach().clone() for name, p in params.items()}
    try:
        with torch.no_grad():
            for name, p in params.items():
                # drawn on the CPU (the generator's), then moved: the same draw on every device
                uniform = torch.rand(p.shape, generator=generator, dtype=torch.float64, device="cpu").to(p.device) * 2 - 1
                p.add_((uniform * 3 ** 0.5 * stds[name].double()).to(p.dtype))
        yield
    finally:
        with torch.no_grad():
            for name, p in params.items():
                p.copy_(originals[name])


def noise_floor(model, layer: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """σ_max of the change of each augmented matrix under one draw of quantization error.

    Returns {"qk": [n_heads], "ov": [n_heads], "mlp_up": [], "mlp_gate": [] (gated MLPs), "mlp_out": []}."""
    clean = layer_weights(model, layer, device="cpu")  # weight-side SVDs on the CPU (docs/methods.md §0)
    with _perturbed(model, layer, torch.Generator().manual_seed(seed)):
        noisy = layer_weights(model, layer, device="cpu")
    out = {}
    for kind, factors in (("qk", qk_factors), ("ov", ov_factors)):
        (A, B), (A2, B2) = factors(clean), factors(noisy)
        difference = svd_of_product(torch.cat([A2, A], -1), torch.cat([B2, -B], -1))  # A2 B2ᵀ − A Bᵀ
        out[kind] = difference.S[..., 0]
    noisy_in = mlp_in_matrices(noisy)
    for name, matrix in mlp_in_matrices(clean).items():
        out[f"mlp_{name}"] = torch.linalg.matrix_norm(noisy_in[name].double() - matrix.double(), ord=2)
    out["mlp_out"] = torch.linalg.matrix_norm(mlp_out_matrix(noisy).double() - mlp_out_matrix(clean).double(), ord=2)
    return out


def quantization_summary(model, layer: int) -> dict[str, float]:
    """Fraction of 16-groups found on a grid and median step relative to the weights' RMS, per weight."""
    out = {}
    for name, p in _quantized_parameters(model, layer).items():
        step = grid_steps(p)
        rms = p.detach().double().pow(2).mean().sqrt()
        out[name] = dict(on_grid=float((step > 0).double().mean()),
                         median_step_over_rms=float(step[step > 0].double().median() / rms) if (step > 0).any() else 0.0)
    return out


def noise_floor_frame(model, layers, seed: int = 0, progress: bool = False):
    """Long table of noise floors: layer, kind, head (-1 for MLP), floor."""
    import pandas as pd

    if progress:
        from tqdm.auto import tqdm

        layers = tqdm(list(layers), desc="quantization noise floor")
    rows = []
    for layer in layers:
        for kind, floor in noise_floor(model, layer, seed=seed + layer).items():
            values = floor.reshape(-1).tolist()
            for head, value in enumerate(values):
                rows.append((layer, kind, head if floor.ndim else -1, value))
    return pd.DataFrame(rows, columns=["layer", "kind", "head", "floor"])


def fraction_above_floor(spectra, floors):
    """Per matrix kind, the fraction of singular directions (in layers with a measured floor) whose σ
    exceeds the noise floor of their own matrix."""
    merged = spectra.merge(floors, on=["layer", "kind", "head"])
    return (merged["sigma"] > merged["floor"]).groupby(merged["kind"]).mean().to_dict()
