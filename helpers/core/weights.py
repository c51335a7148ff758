"""One weight accessor for every architecture in the registry (GPT-2, Llama/SmolLM2, Gemma-2, Gemma-3).

Convention: matrices act on row vectors, ``y = x @ W + b``. Per layer:

- attention: ``W_Q, W_K, W_V`` [n_heads, d_model, d_head], ``b_Q, b_K, b_V`` [n_heads, d_head] (zeros where
  the architecture has none; GQA key/value heads repeated for their query heads, query head h reads KV
  head h // group), ``W_O`` [n_heads, d_head, d_model], ``b_O`` [d_model];
- MLP: ``W_in`` [d_model, d_mlp] (the "up" map), ``W_gate`` (gated MLPs, else None), ``W_out`` [d_mlp, d_model]
  and biases;
- plus the unembedding ``W_U`` [d_model, vocab], ``b_U``.

Which residual-stream vector the matrices read depends on the run's processing (``helpers.core.models.PROCESSINGS``):
``raw`` reads the norm's output, the others read the normalised residual. ``input_hook`` names the hook.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch



@dataclass
class Norm:
    """The affine part of a norm: ``normalised * gain + bias`` (bias None for RMSNorm)."""

    gain: torch.Tensor
    bias: torch.Tensor | None


@dataclass
class LayerWeights:
    W_Q: torch.Tensor
    b_Q: torch.Tensor
    W_K: torch.Tensor
    b_K: torch.Tensor
    W_V: torch.Tensor
    b_V: torch.Tensor
    W_O: torch.Tensor
    b_O: torch.Tensor
    W_in: torch.Tensor
    b_in: torch.Tensor
    W_gate: torch.Tensor | None
    b_gate: torch.Tensor | None
    W_out: torch.Tensor
    b_out: torch.Tensor
    ln_attn: Norm
    ln_mlp: Norm
    kv_head: torch.Tensor  # [n_heads] the KV head each query head reads

    @property
    def n_heads(self) -> int:
        return self.W_Q.shape[0]


@dataclass
class Unembedding:
    W_U: torch.Tensor  # [d_model, vocab]
    b_U: torch.Tensor  # [vocab]
    ln_final: Norm


def input_hook(model, layer: int, sublayer: str) -> str:
    """Hook whose value the layer's matrices read (``sublayer`` is ``"attn"`` or ``"mlp"``)."""
    norm = {"attn": "ln1", "mlp": "ln2"}[sublayer]
    suffix = "hook_out" if model.processing == "raw" else "hook_normalized"
    return f"blocks.{layer}.{norm}.{suffix}"


def layer_weights(model, layer: int, device=None) -> LayerWeights:
    """Weights of one layer under the model's processing, copied to ``device`` (default: the model's).
    Weight-side linear algebra (SVDs, QR, inverses) asks for ``device="cpu"``: docs/methods.md §0."""
    return process_layer(model, raw_layer_weights(model, layer, device))


def unembedding(model, device=None) -> Unembedding:
    """The unembedding under the model's processing (final norm folded unless ``raw``), on ``device``
    (default: the model's)."""
    raw = _raw_unembedding(model, device)
    if model.processing == "raw":
        return raw
    W_U, b_U = _fold(raw.ln_final, raw.W_U, raw.b_U)
    if model.processing == "transformer_lens" and model.arch.centred:
        W_U = W_U - W_U.mean(-1, keepdim=True)
        b_U = b_U - b_U.mean()
    return Unembedding(W_U, b_U, Norm(torch.ones_like(raw.ln_final.gain), None))


def process_layer(model, raw: LayerWeights) -> LayerWeights:
    """Apply the model's processing to raw weights (also used on perturbed copies of them)."""
    if model.processing == "raw":
        return raw
    W_Q, b_Q = _fold(raw.ln_attn, raw.W_Q, raw.b_Q)
    W_K, b_K = _fold(raw.ln_attn, raw.W_K, raw.b_K)
    W_V, b_V = _fold(raw.ln_attn, raw.W_V, raw.b_V)
    W_in, b_in = _fold(raw.ln_mlp, raw.W_in, raw.b_in)
    W_gate, b_gate = (None, None) if raw.W_gate is None else _fold(raw.ln_mlp, raw.W_gate, raw.b_gate)
    identity = lambda n: Norm(torch.ones_like(n.gain), None)  # noqa: E731
    out = replace(raw, W_Q=W_Q, b_Q=b_Q, W_K=W_K, b_K=b_K, W_V=W_V, b_V=b_V, W_in=W_in, b_in=b_in,
                  W_gate=W_gate, b_gate=b_gate, ln_attn=identity(raw.ln_attn), ln_mlp=identity(raw.ln_mlp))
    if model.processing == "transformer_lens":
        b_O = out.b_O + torch.einsum("hd,hdm->m", out.b_V, out.W_O)
        out = replace(out, b_O=b_O, b_V=torch.zeros_like(out.b_V))
        if model.arch.centred:
            centre = lambda w: w - w.mean(-1, keepdim=True)  # noqa: E731
            out = replace(out, W_O=centre(out.W_O), b_O=centre(out.b_O), W_out=centre(out.W_out),
                          b_out=centre(out.b_out))
    return out


def _fold(norm: Norm, W: torch.Tensor, b: torch.Tensor):
    """(x̂ ⊙ g + β) W + b = x̂ (diag(g) W) + (β W + b), for W [..., d_model, n]."""
    W_folded = norm.gain[:, None] * W
    b_folded = b if norm.bias is None else b + torch.einsum("d,...dn->...n", norm.bias, W)
    return W_folded, b_folded


def _copy(tensor: torch.Tensor, device=None) -> torch.Tensor:
    """A float32 copy on ``device`` (default: the tensor's): returned weights never alias the model's parameters."""
    return tensor.detach().to(device=device or tensor.device, dtype=torch.float32, copy=True)


def _norm(model, module, device=None) -> Norm:
    arch = model.arch
    weight = _copy(module.weight, device)
    if arch.norm == "layernorm":
        return Norm(weight, _copy(module.bias, device))
    return Norm(1.0 + weight if arch.gain_one_plus else weight, None)


def raw_layer_weights(model, layer: int, device=None) -> LayerWeights:
    """The checkpoint's weights of one layer in the accessor's convention (no processing), on ``device``
    (default: the model's)."""
    model.arch  # refuses an unsupported architecture before reading anything
    H, G, dh, d = model.n_heads, model.n_kv_heads, model.d_head, model.d_model
    device = device or model.device
    kv_head = torch.arange(H, device=device) // (H // G)
    if model.arch.layout == "gpt2":
        block = model.block(layer)
        W_qkv, b_qkv = _copy(block.attn.c_attn.weight, device), _copy(block.attn.c_attn.bias, device)
        W_q, W_k, W_v = (w.reshape(d, H, dh).transpose(0, 1) for w in W_qkv.split(d, dim=1))
        b_q, b_k, b_v = (b.reshape(H, dh) for b in b_qkv.split(d))
        return LayerWeights(
            W_q, b_q, W_k, b_k, W_v, b_v,
            W_O=_copy(block.attn.c_proj.weight, device).reshape(H, dh, d), b_O=_copy(block.attn.c_proj.bias, device),
            W_in=_copy(block.mlp.c_fc.weight, device), b_in=_copy(block.mlp.c_fc.bias, device),
            W_gate=None, b_gate=None,
            W_out=_copy(block.mlp.c_proj.weight, device), b_out=_copy(block.mlp.c_proj.bias, device),
            ln_attn=_norm(model, block.ln_1, device), ln_mlp=_norm(model, block.ln_2, device), kv_head=kv_head)
    block = model.block(layer)
    attn, mlp = block.self_attn, block.mlp

    def heads(linear, n):  # nn.Linear [n*dh, d] -> W [n, d, dh], b [n, dh]
        W = _copy(linear.weight, device).reshape(n, dh, d).transpose(1, 2)
        b = _copy(linear.bias, device).reshape(n, dh) if linear.bias is not None else W.new_zeros(n, dh)
        return W, b

    def dense(linear):  # nn.Linear [out, in] -> W [in, out], b [out]
        W = _copy(linear.weight, device).T
        return W, (_copy(linear.bias, device) if linear.bias is not None else W.new_zeros(W.shape[1]))

    W_q, b_q = heads(attn.q_proj, H)
    W_k, b_k = (t[kv_head] for t in heads(attn.k_proj, G))
    W_v, b_v = (t[kv_head] for t in heads(attn.v_proj, G))
    W_o, b_o = dense(attn.o_proj)
    W_in, b_in = dense(mlp.up_proj)
    W_gate, b_gate = dense(mlp.gate_proj)
    W_out, b_out = dense(mlp.down_proj)
    ln_mlp = block.pre_feedforward_layernorm if hasattr(block, "pre_feedforward_layernorm") else block.post_attention_layernorm
    return LayerWeights(W_q, b_q, W_k, b_k, W_v, b_v, W_O=W_o.reshape(H, dh, d), b_O=b_o, W_in=W_in, b_in=b_in,
                        W_gate=W_gate, b_gate=b_gate, W_out=W_out, b_out=b_out,
                        ln_attn=_norm(model, block.input_layernorm, device), ln_mlp=_norm(model, ln_mlp, device),
                        kv_head=kv_head)


def final_norm(model, device=None) -> Norm:
    """The affine part of the final norm as the checkpoint has it (Gemma's gain is 1 + w)."""
    return _norm(model, model.body.ln_f if model.arch.layout == "gpt2" else model.body.norm, device)


def _raw_unembedding(model, device=None) -> Unembedding:
    hf = model.hf_model
    W_U = _copy(hf.lm_head.weight, device).T
    b_U = _copy(hf.lm_head.bias, device) if hf.lm_head.bias is not None else W_U.new_zeros(W_U.shape[1])
    return Unembedding(W_U, b_U, final_norm(model, device))
