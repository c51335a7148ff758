"""Logits: the model's own at chosen positions (one forward), and the direct-path lens of a direction.

- ``logits_at``: one forward of the transformer body, then the LM head at one position per prompt only
  (the other positions are never unembedded), soft-capped where the checkpoint soft-caps.
- ``lens``: the logit change per vocabulary entry of writing a direction u into the residual stream before
  the final norm, to first order and up to the norm's positive per-token scale: (c(u) ⊙ g) W_U, with g the
  final norm's gain (Gemma's 1 + w) and c centring u for LayerNorm models, whose norm removes the mean of
  what it reads. ``token_columns`` gives the same lens one token at a time (the columns of g ⊙ W_U, centred
  alike), for contrasts such as w_he − w_she. The readout, check C and the receptors all use it.

Under the run's processing the final norm's gain may already be folded into W_U (``helpers.core.weights``);
``unembedding`` then reports a unit gain, so the lens is the same function of the model either way.
"""
from __future__ import annotations

import torch

from helpers.core.weights import final_norm, unembedding


def logits_at(model, tokens: torch.Tensor, positions: torch.Tensor, hooks=()) -> torch.Tensor:
    """[n, vocab] logits of each prompt at its ``positions`` entry, with forward ``hooks`` applied."""
    positions = torch.as_tensor(positions, device=model.device)
    with model.bridge.hooks(fwd_hooks=list(hooks)):
        hidden = model.body(input_ids=tokens.to(model.device)).last_hidden_state
    logits = model.hf_model.lm_head(hidden[torch.arange(tokens.shape[0], device=model.device), positions])
    cap = model.final_logit_softcap
    return cap * torch.tanh(logits / cap) if cap else logits


def lens(model, directions: torch.Tensor, centre: bool | None = None, float64: bool = True) -> torch.Tensor:
    """[..., vocab] the lens (c(u) ⊙ g) W_U of directions [..., d_model]; ``centre`` defaults to the
    architecture's (LayerNorm: centred). ``float64=False`` multiplies in float32 against the unembedding as
    stored, without a float64 copy of it (4.7 GB for Gemma-2-2B); the result is float64 either way, on the
    model's device."""
    u = directions.double().to(model.device)
    if model.arch.centred if centre is None else centre:
        u = u - u.mean(-1, keepdim=True)
    if not float64 and model.processing == "raw":  # the LM head's own weight is W_U: no copy
        gain = final_norm(model).gain.double()
        return ((u * gain).float() @ model.hf_model.lm_head.weight.detach().T).double()
    unembed = unembedding(model)
    if not float64:
        return ((u * unembed.ln_final.gain.double()).float() @ unembed.W_U).double()
    return u @ (unembed.ln_final.gain[:, None].double() * unembed.W_U.double())


def token_columns(model, token_ids: torch.Tensor | int, centre: bool | None = None) -> torch.Tensor:
    """[..., d_model] the lens of each token id: u·column = lens(u)[token] (float64)."""
    unembed = unembedding(model)
    picked = unembed.W_U[:, torch.as_tensor(token_ids, device=unembed.W_U.device)]  # the columns first: no [d, V] copy
    columns = unembed.ln_final.gain.double().reshape(-1, *[1] * (picked.ndim - 1)) * picked.double()
    columns = columns.movedim(0, -1)
    if model.arch.centred if centre is None else centre:
        columns = columns - columns.mean(-1, keepdim=True)
    return columns

