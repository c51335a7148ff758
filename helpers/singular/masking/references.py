"""What a masked run is compared with, computed once per set of prompts: the full model's answer
distribution, the references of the ablation rule, and the KL between the two distributions.

Used by mask training (``helpers.singular.masking.training``) and by circuit evaluation
(``helpers.singular.masking.circuits``); neither imports the other for it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.singular.masking.masks import AblationRule, MaskedModel
from helpers.singular.tasks import Task


def valid_positions(task: Task) -> torch.Tensor:
    """[n, T] True up to each prompt's answer position (right padding excluded)."""
    return torch.arange(task.clean.shape[1], device=task.answer_pos.device)[None] <= task.answer_pos[:, None]


@dataclass
class Prepared:
    """Everything a step needs that does not depend on the masks."""

    log_p_full: torch.Tensor  # [n, vocab]
    references: list  # per layer, per kind: [n, T, ...], a broadcastable mean, or None


def prepare(masked: MaskedModel, task: Task, rule: AblationRule) -> Prepared:
    task = task.to(masked.model.device)
    with torch.no_grad():
        log_p = torch.log_softmax(masked.final_logits(task.clean, task.answer_pos).double(), -1).float()
        refs = masked.references(rule, task.clean, task.corrupted, valid_positions(task))
    return Prepared(log_p, refs)


def select_rows(references: list, index: torch.Tensor) -> list:
    """Rows of per-prompt references; dataset means and None pass through."""
    return [{kind: (r[index] if r is not None and r.ndim >= 3 else r) for kind, r in layer.items()}
            for layer in references]


def kl_to_full(log_p_full: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """[n] KL(p_full ‖ p_masked) in nats."""
    log_q = torch.log_softmax(logits, -1)
    return (log_p_full.exp() * (log_p_full - log_q)).sum(-1)
