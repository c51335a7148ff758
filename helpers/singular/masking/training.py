"""Learning direction masks: KL(full ‖ masked) at the answer position + α Σ m (docs/methods.md §1.3).

One AdamW optimiser for the whole run. The full model's answer distributions and every reference the
ablation rule needs are computed once for the training prompts, before the first step; each step is
then one masked forward and backward, with logits only at the answer positions. Trained masks are saved
under a key of their whole configuration; a rerun with the same configuration loads them.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace

import pandas as pd
import torch

from helpers.core.cache import MASKS, cache_dir, load_verified, save_verified
from helpers.core.device import off_cpu_key
from helpers.singular.masking.circuits import CircuitEvaluator, evaluate_circuit
from helpers.singular.masking.masks import AblationRule, DirectionMasks, FixedMasks, MaskedModel
from helpers.singular.masking.references import Prepared, kl_to_full, prepare, select_rows
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
    parametrisation: str = "sigmoid"  # or "hard_concrete" (L0): see helpers.singular.masking.masks.DirectionMasks


FAST_MASKING = dict(n_prompts=24, steps=12, batch=8)
"""Sizes of a fast (CI) masking run (``MaskingRun.declared(fast=True)``)."""

ABLATIONS = ("uniform", "paper")
"""``uniform``: one rule for every matrix kind (``reference`` at ``positions``); ``paper``: paper 1's mixed
rule, ``AblationRule.paper()`` (its reference and positions are fixed by the rule)."""

PAPER_RECIPE = dict(ablation="paper", parametrisation="sigmoid", lr=0.02, steps=600, batch=16)
"""Paper 1's released recipe (docs/methods.md §1.6) as ``MaskingRun.declared(recipe="paper")`` runs it:
sigmoid masks from 0.99, α = 1.95e-4, AdamW lr 0.02, clip 1, the mixed ablation rule. Two sizes differ and
are stated: the paper's batch is 64 (here 16, this machine's batch) and its number of steps is not
released (here 600, about what a mask needs at lr 0.02 to fall from 0.99 below the 1e-3 "kept"
threshold). The paper re-created its optimiser every batch; one optimiser serves the whole run here."""

RECIPES = ("ours", "paper")


@dataclass(frozen=True)
class MaskingRun:
    """The masking run of notebooks 02 and 03, declared once: notebook 03 studies the IOI masks notebook 02
    trained, and finds them in the cache only when every field here is the same. Both notebooks build it
    with ``MaskingRun.declared(masking, fast, seed)`` from the same ``masking`` overrides (none by default)."""

    reference: str = "corrupted"  # "zero", "mean" or "corrupted"
    positions: str = "all"  # "all" or "answer"
    ablation: str = "uniform"  # or "paper": the paper's mixed rule (reference and positions left at their defaults)
    n_prompts: int = 192  # half train the masks, half are held out
    steps: int = 300  # AdamW steps (one optimiser for the run)
    batch: int = 16
    alpha: float = 1.95e-4  # paper 1's L1 weight
    lr: float = 0.05  # paper 1: 0.02 (with 800 steps of batch 32, too slow for a CPU run)
    parametrisation: str = "hard_concrete"  # or "sigmoid" (paper 1)
    seed: int = 0

    def __post_init__(self):
        if self.ablation not in ABLATIONS:
            raise ValueError(f"ablation={self.ablation!r} is not one of {ABLATIONS}")
        if self.ablation == "paper" and (self.reference, self.positions) != ("corrupted", "all"):
            raise ValueError(f"ablation='paper' fixes the reference and positions of every kind (QK zero at all "
                             f"positions, OV/MLP corrupted at the answer); reference={self.reference!r} and "
                             f"positions={self.positions!r} would be ignored: leave them out")

    @classmethod
    def declared(cls, overrides: dict | None = None, fast: bool = False, seed: int = 0,
                 recipe: str = "ours") -> "MaskingRun":
        """The declared run with ``overrides`` (field → value, each checked), the notebook's ``seed``, and
        the fast sizes under ``fast``. ``recipe="paper"`` starts from ``PAPER_RECIPE`` instead of the
        defaults; the overrides then change the paper's recipe."""
        if recipe not in RECIPES:
            raise ValueError(f"recipe={recipe!r} is not one of {RECIPES}")
        fields = {name: f.default for name, f in cls.__dataclass_fields__.items()}
        overrides = dict(overrides or {})
        for name, value in overrides.items():
            if name not in fields or name == "seed":
                raise ValueError(f"masking={{{name!r}: …}}: no such field of MaskingRun; fields: "
                                 f"{sorted(set(fields) - {'seed'})} (the seed is the notebook's own parameter)")
            default = fields[name]
            if not isinstance(value, type(default)) and not (isinstance(default, float) and isinstance(value, int)):
                raise ValueError(f"masking={{{name!r}: {value!r}}} is a {type(value).__name__}; expected a "
                                 f"{type(default).__name__} like the default {default!r}")
        base = PAPER_RECIPE if recipe == "paper" else {}
        run = cls(**{**base, **overrides, "seed": seed})
        return replace(run, **FAST_MASKING) if fast else run

    def rule(self) -> AblationRule:
        return AblationRule.paper() if self.ablation == "paper" else AblationRule.uniform(self.reference, self.positions)

    def train_config(self) -> TrainConfig:
        return TrainConfig(steps=self.steps, batch=self.batch, lr=self.lr, alpha=float(self.alpha), seed=self.seed,
                           parametrisation=self.parametrisation)

    def run(self, masked: MaskedModel, task_name: str, progress: bool = True):
        """``masking_run`` with this configuration: (train, held_out, masks, history)."""
        return masking_run(masked, task_name, self.n_prompts, self.rule(), self.train_config(), seed=self.seed,
                           progress=progress)


def masking_run(masked: MaskedModel, task_name: str, n_prompts: int, rule: AblationRule, config: TrainConfig,
                seed: int = 0, progress: bool = True):
    """Notebook 02's run as one call: the task (``n_prompts``, ``seed``), its half/half training and held-out
    split, and masks trained on the training half (loaded when a run with the same configuration exists).
    Returns (train, held_out, masks, history)."""
    train, held_out = masking_prompts(masked.model, task_name, n_prompts, seed)
    masks, history = train_masks(masked, train, rule, config, progress=progress)
    return train, held_out, masks, history


def masking_prompts(model, task_name: str, n_prompts: int, seed: int = 0) -> tuple[Task, Task]:
    """The (training, held-out) prompts of a masking run: ``n_prompts`` of the task from ``seed``, split half/half
    with the same seed."""
    check_prompt_count(n_prompts, 2, " (half of them train the masks, the other half is held out)")
    return make_task(task_name, model, n_prompts, seed=seed).to(model.device).split(0.5, seed=seed)


def training_key(model, task: Task, rule: AblationRule, config: TrainConfig, maps: str) -> str:
    """Cache key of a training: everything that changes its result, ``maps`` (``MaskedModel.maps``) included,
    since factored and hooked MLP maps differ by float rounding, which training carries into its masks; off
    the CPU, also the device's numerics (``helpers.core.device.off_cpu_key``): masks trained on a GPU are
    never loaded for a CPU run, nor the other way round."""
    settings = asdict(config)
    if settings["parametrisation"] == "sigmoid":  # masks saved before the field existed keep their key
        del settings["parametrisation"]
    record = dict(format=MASK_FORMAT, model=model.record(), task=task.name, prompts=task.prompts, rule=rule.record(),
                  config=settings, torch_threads=torch.get_num_threads())  # results differ between thread counts
    if maps != "hooks":  # masks trained through hooks, saved before maps could be factored, keep their key
        record["maps"] = maps
    record.update(off_cpu_key(model.device))  # empty on the CPU: CPU masks keep the keys they always had
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def training_step(masked: MaskedModel, masks: DirectionMasks, rule: AblationRule, task: Task, prepared: Prepared,
                  index: torch.Tensor, optimiser: torch.optim.Optimizer, config: TrainConfig):
    """One step on the prompts ``index`` of ``task``: masked forward (logits at the answer positions only),
    KL(full ‖ masked) + α Σ m, backward into the mask logits, gradient clipping, optimiser step.
    Returns (kl, sparsity term, loss) as tensors."""
    batch = task.subset(index)
    logits = masked.masked_final_logits(masks, rule, batch.clean, batch.answer_pos, select_rows(prepared.references, index))
    kl = kl_to_full(prepared.log_p_full[index], logits).mean()
    total = masks.total()
    loss = kl + config.alpha * total
    optimiser.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(masks.parameters(), config.clip)
    optimiser.step()
    return kl, total, loss


def train_masks(masked: MaskedModel, task: Task, rule: AblationRule, config: TrainConfig = TrainConfig(),
                progress: bool = True, use_cache: bool = True) -> tuple[DirectionMasks, pd.DataFrame]:
    """Train masks on ``task`` (the training split); returns the masks and the training history."""
    model = masked.model
    task = task.to(model.device)
    path = cache_dir(MASKS) / f"{model.name}-{task.name}-{training_key(model, task, rule, config, masked.maps)}.pt"
    masks = DirectionMasks(model, init=config.init, parametrisation=config.parametrisation)
    saved = load_verified(path, "trained masks") if use_cache else None
    if saved is not None:
        masks.load_state_dict(saved["state"])
        return masks, pd.DataFrame(saved["history"])
    history = continue_training(masked, masks, task, rule, config, progress, desc=f"training masks ({task.name})")
    save_verified(saved_training(masked, masks, history, task, rule, config), path)
    return masks, pd.DataFrame(history)


def continue_training(masked: MaskedModel, masks: DirectionMasks, task: Task, rule: AblationRule,
                      config: TrainConfig, progress: bool = True, desc: str | None = None) -> list[dict]:
    """Train ``masks`` from their present logits: ``config.steps`` steps of one new AdamW optimiser, with
    batches and hard-concrete noise seeded from ``config.seed``. ``train_masks`` runs it from the initial
    masks, ``helpers.singular.masking.alpha_path`` from a lighter α's trained ones. Returns the history rows."""
    task = task.to(masked.model.device)
    prepared = prepare(masked, task, rule)
    masks.noise.manual_seed(config.seed)
    masks.train()
    optimiser = torch.optim.AdamW(masks.parameters(), lr=config.lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)  # batches drawn on the CPU: the same on every device
    history = []
    steps = range(config.steps)
    if progress:
        from tqdm.auto import tqdm

        steps = tqdm(steps, desc=desc or f"training masks ({task.name})")
    for step in steps:
        index = torch.randperm(len(task), generator=generator, device="cpu")[: config.batch].to(task.clean.device)
        kl, total, loss = training_step(masked, masks, rule, task, prepared, index, optimiser, config)
        if step % config.log_every == 0 or step == config.steps - 1:
            kept = masks.n_kept()
            history.append(dict(step=step, kl=kl.item(), mask_sum=total.item(), loss=loss.item(),
                                kept_at_half=kept, kept_fraction_at_half=kept / masks.count()))
    masks.eval()
    return history


def saved_training(masked: MaskedModel, masks: DirectionMasks, history: list[dict], task: Task, rule: AblationRule,
                   config: TrainConfig) -> dict:
    """What a trained set of masks is saved as: their state, the history, and a record of the training."""
    return {"state": masks.state_dict(), "history": history,
            "record": dict(model=masked.model.record(), task=task.name, rule=rule.record(), config=asdict(config),
                           maps=masked.maps, torch_threads=torch.get_num_threads(),
                           numerics=masked.model.numerics())}


def alpha_sweep(masked: MaskedModel, train: Task, evaluator: CircuitEvaluator, rule: AblationRule,
                config: TrainConfig, alphas, control_seeds: int = 3, progress: bool = True):
    """Train one set of masks per sparsity weight α (all else as ``config``) and evaluate the circuit each
    training found (kept = its own masks, logit > 0) on the held-out prompts. Each α gives one point of
    the faithfulness–sparsity frontier that needs no choice of threshold.
    Returns (table sorted by α, {α: masks})."""
    rows, trained = [], {}
    for alpha in alphas:
        masks, history = train_masks(masked, train, rule, replace(config, alpha=float(alpha)), progress=progress)
        trained[float(alpha)] = masks
        row = evaluate_circuit(evaluator, FixedMasks.binarised(masks), control_seeds)
        rows.append(dict(alpha=float(alpha), train_kl=float(history["kl"].iloc[-1]), **row))
    return pd.DataFrame(rows).sort_values("alpha", ignore_index=True), trained
