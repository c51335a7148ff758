"""The identities of docs/methods.md §1.1 checked against the model's own hook values."""
from __future__ import annotations

import torch

from helpers.singular.directions.augmented import (homogeneous, mlp_in_matrices, mlp_out_matrix, ov_matrix, qk_factors, qk_matrix,
                               svd_of_product)
from helpers.core.weights import input_hook, layer_weights


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual − expected| / max |expected|."""
    return float((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-12))


def centred_if_processed(model, x: torch.Tensor) -> torch.Tensor:
    """TransformerLens' processing centres the writes of LayerNorm models: compare with centred values."""
    if model.processing == "transformer_lens" and model.arch.centred:
        return x - x.mean(-1, keepdim=True)
    return x


def identity_errors(model, cache, layer: int, batch: int = 0) -> dict[str, float]:
    """Relative error of each identity on one prompt of a ``run_with_cache`` result:

    - ``qk``: x̃_iᵀ W̃_QK x̃_j = q_i · k_j (raw projections, before any q/k norm and rotation);
    - ``qk_svd``: the same through the singular directions, Σ_k σ_k (x̃_i·u_k)(x̃_j·v_k);
    - ``ov``: Σ_h c̃_h W̃_OV,h = attention output, c̃_h = [1, Σ_j A_ij x_j];
    - ``ov_per_head``: c̃_h W̃_OV,h = z_h W_O,h + b_O/H (not defined under ``transformer_lens`` processing,
      which moves value biases into b_O);
    - ``mlp_up`` / ``mlp_gate``: x̃ W̃_in = pre-activations; ``mlp_out``: [1, act] W̃_out = MLP output."""
    w = layer_weights(model, layer, device="cpu")  # checked on the CPU, in float64, whatever the model's device
    hook = lambda name: cache[f"blocks.{layer}.{name}"][batch].cpu().double()  # noqa: E731
    x = homogeneous(cache[input_hook(model, layer, "attn")][batch].cpu().double())
    q, k = hook("attn.hook_q"), hook("attn.hook_k")[:, w.kv_head]
    dots = torch.einsum("ihe,jhe->hij", q, k)
    # Two operands per product: torch contracts a longer einsum left to right, through a
    # [i, h, r, j, e] intermediate (1 GB for one Gemma-3 layer) without opt_einsum.
    errors = {"qk": relative_error((x @ qk_matrix(w)) @ x.T, dots)}
    qk = svd_of_product(*qk_factors(w))
    errors["qk_svd"] = relative_error((x @ qk.U * qk.S[:, None, :]) @ (x @ qk.V).transpose(-1, -2), dots)
    pattern = hook("attn.hook_pattern")  # [head, query, key]
    c = torch.einsum("hqk,kd->hqd", pattern, x[:, 1:])
    heads = torch.einsum("hqd,hdm->hqm", homogeneous(c), ov_matrix(w))
    errors["ov"] = relative_error(heads.sum(0), centred_if_processed(model, hook("attn.o.hook_out")))
    if model.processing != "transformer_lens":
        z = hook("attn.hook_z")
        expected = torch.einsum("qhe,hem->hqm", z, w.W_O.double()) + w.b_O.double() / w.n_heads
        errors["ov_per_head"] = relative_error(heads, expected)
    x_mlp = homogeneous(cache[input_hook(model, layer, "mlp")][batch].cpu().double())
    hooks = {"up": "mlp.in.hook_out", "gate": "mlp.gate.hook_out"}
    for name, matrix in mlp_in_matrices(w).items():
        errors[f"mlp_{name}"] = relative_error(x_mlp @ matrix.double(), hook(hooks[name]))
    post = homogeneous(hook("mlp.hook_post"))
    errors["mlp_out"] = relative_error(post @ mlp_out_matrix(w).double(),
                                       centred_if_processed(model, hook("mlp.out.hook_out")))
    return errors


# --- whether the identities can fail through a bias ---------------------------------------------------------

BIAS_KINDS = {"qk": ("b_Q", "b_K"), "ov": ("b_V", "b_O"), "mlp_in": ("b_in", "b_gate"), "mlp_out": ("b_out",)}
"""The biases each kind of augmented matrix folds in (``b_gate`` only in gated MLPs)."""


def largest_bias(model) -> dict[str, float]:
    """Per kind of augmented matrix, the largest |entry| of the biases it folds in, over every layer, as the run's
    processing leaves them (``fold_norm`` moves a LayerNorm's bias into them). All zero: the bias rows of the
    augmented matrices are zero, and the identities cannot fail through a bias."""
    out = dict.fromkeys(BIAS_KINDS, 0.0)
    for layer in range(model.n_layers):
        w = layer_weights(model, layer, device="cpu")
        for kind, names in BIAS_KINDS.items():
            for name in names:
                bias = getattr(w, name)
                if bias is not None:
                    out[kind] = max(out[kind], float(bias.abs().max()))
    return out


def misfolded_ov_error(model, cache, layer: int, batch: int = 0) -> float:
    """The OV identity's relative error with the bias row of every W̃_OV dropped (b_V W_O + b_O/H set to 0): a
    planted misfold. It must exceed the identities' bound wherever a bias is non-zero; on a model without
    biases it stays at rounding, which is why its identities say nothing about biases."""
    w = layer_weights(model, layer, device="cpu")
    x = homogeneous(cache[input_hook(model, layer, "attn")][batch].cpu().double())
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][batch].cpu().double()
    c = torch.einsum("hqk,kd->hqd", pattern, x[:, 1:])
    misfolded = ov_matrix(w).clone()
    misfolded[:, 0] = 0.0
    heads = torch.einsum("hqd,hdm->hqm", homogeneous(c), misfolded)
    expected = centred_if_processed(model, cache[f"blocks.{layer}.attn.o.hook_out"][batch].cpu().double())
    return relative_error(heads.sum(0), expected)


def gpt2_shaped_with_biases(folder, processing: str = "fold_norm", seed: int = 0, device: str = "cpu"):
    """GPT-2 small's shapes (12 layers, d_model 768, 12 heads, its vocabulary and tokenizer) with random weights
    whose every bias and norm gain is non-zero, written to ``folder`` as the hub's files (config.json,
    model.safetensors) and read back by the real loader as ``gpt2-small``: the model on which the bias terms
    of the identities are tested, where the embedded models have none."""
    from helpers.core.models import load_model
    from helpers.core.stand_ins import write_stand_in

    folder = write_stand_in("gpt2-small", folder, seed=seed, dtype=torch.float32)
    return load_model("gpt2-small", processing=processing, weights_dir=folder, device=device)
