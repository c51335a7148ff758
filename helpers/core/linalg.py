"""The sign convention of every SVD and eigenbasis in the package (both papers), written once.

A singular vector is defined up to sign; flipping each column so that its largest-|·| entry is positive
makes results reproducible across LAPACK builds and runs.
"""
from __future__ import annotations

import torch


def column_signs(M: torch.Tensor) -> torch.Tensor:
    """[..., 1, r] ±1 per column of M [..., m, r] that makes the column's largest-|·| entry positive (a zero
    column keeps +1). Multiply the paired factor (u_k with v_k) by the same signs."""
    sign = torch.sign(torch.gather(M, -2, M.abs().argmax(dim=-2, keepdim=True)))
    sign[sign == 0] = 1
    return sign


def canonical_signs(M: torch.Tensor) -> torch.Tensor:
    """M with each column's largest-|·| entry positive."""
    return M * column_signs(M)
