"""Batches of token sequences of different lengths, right-padded: causal models never look ahead, so what
follows a sequence's last token changes nothing at or before it. The one padding rule of the package."""
from __future__ import annotations

import torch


def right_padded(sequences, pad_id: int = 0) -> torch.Tensor:
    """[n, T_max] ids: each sequence (a list or tensor of ids) left-aligned, followed by ``pad_id``."""
    sequences = [torch.as_tensor(s, dtype=torch.long, device="cpu") for s in sequences]  # built on the CPU; consumers move them
    if not sequences:
        raise ValueError("right_padded needs at least one sequence")
    tokens = torch.full((len(sequences), max(len(s) for s in sequences)), pad_id, dtype=torch.long, device="cpu")
    for row, s in enumerate(sequences):
        tokens[row, : len(s)] = s
    return tokens
