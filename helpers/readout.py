"""Reading a residual-stream direction through the unembedding, as tokens."""
from __future__ import annotations

import torch

from helpers.weights import unembedding


def direction_logits(model, direction: torch.Tensor) -> torch.Tensor:
    """Logit change per vocabulary entry for writing ``direction`` [..., d_model] into the residual stream,
    through the (processed) unembedding, ignoring the final norm's per-token scale."""
    u = unembedding(model)
    return direction.double() @ (u.ln_final.gain[:, None].double() * u.W_U.double())


def top_tokens(model, direction: torch.Tensor, k: int = 8) -> dict[str, list[str]]:
    """The ``k`` tokens a direction promotes most and suppresses most (by direct logit effect)."""
    logits = direction_logits(model, direction)
    decode = lambda ids: [model.tokenizer.decode([int(i)]) for i in ids]  # noqa: E731
    return {"promotes": decode(logits.topk(k).indices), "suppresses": decode((-logits).topk(k).indices)}
