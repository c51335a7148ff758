"""Reading a residual-stream direction through the unembedding, as tokens."""
from __future__ import annotations

import torch

from helpers.core.logits import lens


def top_tokens(model, direction: torch.Tensor, k: int = 8) -> dict[str, list[str]]:
    """The ``k`` tokens a direction promotes most and suppresses most (by its lens, ``helpers.core.logits``)."""
    return top_tokens_of(model, direction[None], k)[0]


def top_tokens_of(model, directions: torch.Tensor, k: int = 8) -> list[dict[str, list[str]]]:
    """``top_tokens`` of each row of ``directions`` [n, d_model], through one lens product: the float64
    unembedding (1.3 GB for a 262k vocabulary) is formed once, not once per direction."""
    logits = lens(model, directions)
    decode = lambda ids: [model.tokenizer.decode([int(i)]) for i in ids]  # noqa: E731
    return [{"promotes": decode(up), "suppresses": decode(down)}
            for up, down in zip(logits.topk(k).indices, (-logits).topk(k).indices)]


def readout_table(model, svds: list[dict], layers, n_directions: int = 2, k: int = 6):
    """Top OV write directions of every head and top MLP-out directions of ``layers``, read as tokens."""
    import pandas as pd

    rows, directions = [], []
    for layer in layers:
        ov, mlp_out = svds[layer]["ov"], svds[layer]["mlp_out"]
        for head in range(ov.S.shape[0]):
            for index in range(n_directions):
                rows.append(dict(layer=layer, matrix="OV", head=head, index=index, sigma=float(ov.S[head, index])))
                directions.append(ov.V[head, :, index])
        for index in range(n_directions):
            rows.append(dict(layer=layer, matrix="MLP out", head=-1, index=index, sigma=float(mlp_out.S[index])))
            directions.append(mlp_out.V[:, index])
    tokens = top_tokens_of(model, torch.stack(directions), k) if directions else []
    return pd.DataFrame([{**row, **_joined(read)} for row, read in zip(rows, tokens)])


def _joined(tokens: dict[str, list[str]]) -> dict[str, str]:
    return {key: " | ".join(repr(t)[1:-1] for t in values) for key, values in tokens.items()}
