"""Reading a residual-stream direction through the unembedding, as tokens."""
from __future__ import annotations

import torch

from helpers.core.logits import lens


def top_tokens(model, direction: torch.Tensor, k: int = 8) -> dict[str, list[str]]:
    """The ``k`` tokens a direction promotes most and suppresses most (by its lens, ``helpers.core.logits``)."""
    logits = lens(model, direction)
    decode = lambda ids: [model.tokenizer.decode([int(i)]) for i in ids]  # noqa: E731
    return {"promotes": decode(logits.topk(k).indices), "suppresses": decode((-logits).topk(k).indices)}


def readout_table(model, svds: list[dict], layers, n_directions: int = 2, k: int = 6):
    """Top OV write directions of every head and top MLP-out directions of ``layers``, read as tokens."""
    import pandas as pd

    rows = []
    for layer in layers:
        ov, mlp_out = svds[layer]["ov"], svds[layer]["mlp_out"]
        for head in range(ov.S.shape[0]):
            for index in range(n_directions):
                rows.append(dict(layer=layer, matrix="OV", head=head, index=index, sigma=float(ov.S[head, index]),
                                 **_joined(top_tokens(model, ov.V[head, :, index], k))))
        for index in range(n_directions):
            rows.append(dict(layer=layer, matrix="MLP out", head=-1, index=index, sigma=float(mlp_out.S[index]),
                             **_joined(top_tokens(model, mlp_out.V[:, index], k))))
    return pd.DataFrame(rows)


def _joined(tokens: dict[str, list[str]]) -> dict[str, str]:
    return {key: " | ".join(repr(t)[1:-1] for t in values) for key, values in tokens.items()}
