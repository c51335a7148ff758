"""Learning direction masks: KL(full ‖ masked) at the answer position + α Σ m (METHODS.md section 1.3).

One AdamW optimiser for the whole run. The full model's answer distributions and every reference the
ablation rule needs are computed once for the training prompts, before the first step; each step is
then one masked forward and backward, with logits only at the answer positions. Trained masks are saved
under a key of their whole configuration; a rerun with the same configuration loads them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

import pandas as pd
import torch

from helpers.core.cache import cache_dir, load_verified, save_verified
from helpers.singular.masks import AblationRule, DirectionMasks, MaskedModel
from helpers.singular.tasks import Task, check_prompt_count, make_task


MASK_FORMAT = 1
"""Bumped whenever what a saved mask means changes (its hooks, rule or parametrisation): part of the cache key."""


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 800
    batch: int = 32
    lr: float = 0.02
    alpha: float = 1.95e-4  # paper 1's L1 weight
    init: float = 0.99  # paper 1's initial mask value
    clip: float = 1.0
    seed: int = 0
    log_every: int = 10
    parametrisation: str = "sigmoid"  # or "hard_concrete" (L0): see helpers.singular.masks.DirectionMasks


FAST_MASKING = dict(n_prompts=24, steps=12, batch=8)
"""Sizes of a fast (CI) masking run; notebooks that reuse notebook 02's masks apply the same override."""


def masking_run(masked: MaskedModel, task_name: str, n_prompts: int, rule: AblationRule, config: TrainConfig,
                seed: int = 0, progress: bool = True):
    """Notebook 02's run as one call: the task (``n_prompts``, ``seed``), its half/half training and held-out
    split, and masks trained on the training half (loaded when a run with the same configuration exists).
    Returns (train, held_out, masks, history)."""
    check_prompt_count(n_prompts, 2, " (half of them train the masks, the other half is held out)")
    task = make_task(task_name, masked.model, n_prompts, seed=seed)
    train, held_out = task.split(0.5, seed=seed)
    masks, history = train_masks(masked, train, rule, config, progress=progress)
    return train, held_out, masks, history


def valid_positions(task: Task) -> torch.Tensor:
    """[n, T] True up to each prompt's answer position (right padding excluded)."""
    return torch.arange(task.clean.shape[1])[None] <= task.answer_pos[:, None]


@dataclass
class Prepared:
    """Everything a step needs that does not depend on the masks."""

    log_p_full: torch.Tensor  # [n, vocab]
    references: list  # per layer, per kind: [n, T, ...], a broadcastable mean, or None


def prepare(masked: MaskedModel, task: Task, rule: AblationRule) -> Prepared:
    with torch.no_grad():
        log_p = torch.log_softmax(masked.final_logits(task.clean, task.answer_pos).double(), -1).float()
        refs = masked.references(rule, task.clean, task.corrupted, valid_positions(task))
    return Prepared(log_p, refs)


def _select(references: list, index: torch.Tensor) -> list:
    """Rows of per-prompt references; dataset means and None pass through."""
    return [{kind: (r[index] if r is not None and r.ndim >= 3 else r) for kind, r in layer.items()}
            for layer in references]


def kl_to_full(log_p_full: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """[n] KL(p_full ‖ p_masked) in nats."""
    log_q = torch.log_softmax(logits, -1)
    return (log_p_full.exp() * (log_p_full - log_q)).sum(-1)


def training_key(model, task: Task, rule: AblationRule, config: TrainConfig) -> str:
    settings = asdict(config)
    if settings["parametrisation"] == "sigmoid":  # masks saved before the field existed keep their key
        del settings["parametrisation"]
    record = dict(format=MASK_FORMAT, model=model.record(), task=task.name, prompts=task.prompts, rule=rule.record(),
                  config=settings, torch_threads=torch.get_num_threads())  # results differ between thread counts
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def train_masks(masked: MaskedModel, task: Task, rule: AblationRule, config: TrainConfig = TrainConfig(),
                progress: bool = True, use_cache: bool = True) -> tuple[DirectionMasks, pd.DataFrame]:
    """Train masks on ``task`` (the training split); returns the masks and the training history."""
    model = masked.model
    path = cache_dir("masks") / f"{model.name}-{task.name}-{training_key(model, task, rule, config)}.pt"
    masks = DirectionMasks(model, init=config.init, parametrisation=config.parametrisation)
    saved = load_verified(path, "trained masks") if use_cache else None
    if saved is not None:
        masks.load_state_dict(saved["state"])
        return masks, pd.DataFrame(saved["history"])
    prepared = prepare(masked, task, rule)
    masks.noise.manual_seed(config.seed)
    masks.train()
    optimiser = torch.optim.AdamW(masks.parameters(), lr=config.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    history = []
    steps = range(config.steps)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc=f"training masks ({task.name})")
    for step in steps:
        index = torch.randperm(len(task), generator=generator)[: config.batch]
        batch = task.subset(index)
        logits = masked.masked_final_logits(masks, rule, batch.clean, batch.answer_pos,
                                            _select(prepared.references, index))
        kl = kl_to_full(prepared.log_p_full[index], logits).mean()
        total = masks.total()
        loss = kl + config.alpha * total
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(masks.parameters(), config.clip)
        optimiser.step()
        if step % config.log_every == 0 or step == config.steps - 1:
            kept = masks.n_kept()
            history.append(dict(step=step, kl=kl.item(), mask_sum=total.item(), loss=loss.item(),
                                kept_at_half=kept, kept_fraction_at_half=kept / masks.count()))
    masks.eval()
    save_verified({"state": masks.state_dict(), "history": history,
                   "record": dict(model=model.record(), task=task.name, rule=rule.record(), config=asdict(config),
                                  torch_threads=torch.get_num_threads())}, path)
    return masks, pd.DataFrame(history)
