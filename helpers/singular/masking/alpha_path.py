"""The α path: each heavier sparsity weight of an α sweep trained from the lighter one's masks, with fewer
steps, instead of from scratch (docs/methods.md §1.3, "The α path").

A candidate speed-up of notebook 02's α sweep, which trains one set of masks per α from the initial
masks. It changes the algorithm, so it was judged against the fresh trainings by ``WARM_TOLERANCE``
(``benchmarks/alpha_path.py``), and it failed on gender and greater-than at every step count tried: the
notebooks do not use it. It stays, tested, so that the comparison can be rerun (another model, another
schedule).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace

import pandas as pd

from helpers.core.cache import MASKS, cache_dir, load_verified, save_verified
from helpers.singular.masking.circuits import CircuitEvaluator, content_key, evaluate_circuit
from helpers.singular.masking.masks import AblationRule, DirectionMasks, FixedMasks, MaskedModel
from helpers.singular.tasks import Task
from helpers.singular.masking.training import TrainConfig, continue_training, saved_training, train_masks, training_key


WARM_TOLERANCE = dict(kept_points=2.0, kl_absolute=0.02, kl_relative=0.15)
"""Declared before the first comparison: a warm-started circuit matches the fresh training at the same α
when its kept fraction is within ``kept_points`` percentage points of the fresh one's and its held-out KL
within max(``kl_absolute``, ``kl_relative`` × the fresh KL)."""


def warm_key(start: DirectionMasks, model, task: Task, rule: AblationRule, config: TrainConfig, maps: str) -> str:
    """Cache key of a training that starts from ``start``: the digest of its logits and everything
    ``training_key`` covers for this training's own configuration."""
    own = training_key(model, task, rule, config, maps)
    logits = content_key(FixedMasks({name: p.detach() for name, p in start.logits.items()}))
    return hashlib.sha256(json.dumps(dict(start=logits, warm=own)).encode()).hexdigest()[:16]


def warm_masks(masked: MaskedModel, task: Task, rule: AblationRule, config: TrainConfig, start: DirectionMasks,
               progress: bool = True, use_cache: bool = True):
    """Masks trained with ``config`` from a copy of ``start`` (``start`` itself is left as it is). Saved, and
    loaded by a rerun, under ``warm_key``. Returns (masks, history, seconds spent training: 0 when loaded)."""
    if start.parametrisation != config.parametrisation:
        raise ValueError(f"start masks are {start.parametrisation!r}, the training is {config.parametrisation!r}: "
                         f"a warm start needs masks of the training's own parametrisation")
    model = masked.model
    key = warm_key(start, model, task, rule, config, masked.maps)
    path = cache_dir(MASKS) / f"{model.name}-{task.name}-warm-{key}.pt"
    masks = DirectionMasks(model, init=config.init, parametrisation=config.parametrisation)
    saved = load_verified(path, "trained masks") if use_cache else None
    if saved is not None:
        masks.load_state_dict(saved["state"])
        return masks, pd.DataFrame(saved["history"]), 0.0
    masks.load_state_dict(start.state_dict())
    began = time.perf_counter()
    history = continue_training(masked, masks, task, rule, config, progress,
                                desc=f"training masks from α's predecessor ({task.name})")
    seconds = time.perf_counter() - began
    save_verified(saved_training(masked, masks, history, task, rule, config), path)
    return masks, pd.DataFrame(history), seconds


def warm_alpha_path(masked: MaskedModel, train: Task, evaluator: CircuitEvaluator, rule: AblationRule,
                    config: TrainConfig, alphas, warm_steps: int, control_seeds: int = 3, progress: bool = True,
                    reuse_warm: bool = True):
    """The α sweep of ``helpers.singular.masking.training.alpha_sweep`` along a path: the lightest α trained fresh
    (``config.steps`` steps, the same training as the sweep's), each heavier α for ``warm_steps`` steps from
    the masks of the α before it. Each circuit is evaluated as the sweep evaluates it. The fresh training
    loads when saved, as the sweep's does; ``reuse_warm=False`` trains the warm-started ones again even when
    saved (to time them).
    Returns (table sorted by α with ``start``, ``steps`` and training ``seconds`` columns, {α: masks})."""
    if warm_steps < 1:
        raise ValueError(f"warm_steps={warm_steps}: a warm-started training needs at least one step")
    rows, trained = [], {}
    previous, previous_alpha = None, None
    for alpha in sorted(float(a) for a in alphas):
        if previous is None:
            fresh = replace(config, alpha=alpha)
            began = time.perf_counter()
            masks, history = train_masks(masked, train, rule, fresh, progress=progress)
            seconds = time.perf_counter() - began
            start, steps = "fresh", config.steps
        else:
            warm = replace(config, alpha=alpha, steps=warm_steps)
            masks, history, seconds = warm_masks(masked, train, rule, warm, previous, progress=progress,
                                                 use_cache=reuse_warm)
            start, steps = f"from α {previous_alpha:.3g}", warm_steps
        trained[alpha] = masks
        row = evaluate_circuit(evaluator, FixedMasks.binarised(masks), control_seeds)
        rows.append(dict(alpha=alpha, start=start, steps=steps, seconds=seconds,
                         train_kl=float(history["kl"].iloc[-1]), **row))
        previous, previous_alpha = masks, alpha
    return pd.DataFrame(rows), trained


def kept_overlap(a: FixedMasks, b: FixedMasks) -> float:
    """|kept in both| / |kept in either| (Jaccard) of two binarised circuits over the same directions."""
    both = sum(float((a.blocks[name] * b.blocks[name]).sum()) for name in a.blocks)
    either = sum(float(((a.blocks[name] + b.blocks[name]) > 0).sum()) for name in a.blocks)
    return both / either if either else 1.0


def within_tolerance(fresh: dict, warm: dict, tolerance: dict = WARM_TOLERANCE) -> bool:
    """Whether a warm-started circuit (a row of ``warm_alpha_path``) matches the fresh one at its α."""
    kept_gap = 100 * abs(warm["kept_fraction"] - fresh["kept_fraction"])
    kl_allowed = max(tolerance["kl_absolute"], tolerance["kl_relative"] * fresh["kl"])
    return kept_gap <= tolerance["kept_points"] and abs(warm["kl"] - fresh["kl"]) <= kl_allowed


def path_comparison(fresh: pd.DataFrame, fresh_masks: dict, warm: pd.DataFrame, warm_masks_by_alpha: dict,
                    tolerance: dict = WARM_TOLERANCE) -> pd.DataFrame:
    """One row per α: the fresh circuit (``…_fresh`` columns) and the compared one (a warm-started circuit, or a
    fresh one of another training seed) side by side: kept %, held-out KL, the random control's KL, the
    overlap of their kept sets, and whether the compared one is within ``tolerance``."""
    if len(fresh) != len(warm):
        raise ValueError(f"{len(fresh)} fresh and {len(warm)} warm-started circuits: compare the same sweep")
    rows = []
    for f, w in zip(fresh.sort_values("alpha").to_dict("records"), warm.sort_values("alpha").to_dict("records")):
        if f["alpha"] != w["alpha"]:
            raise ValueError(f"the two tables differ in α ({f['alpha']} vs {w['alpha']}): compare the same sweep")
        overlap = kept_overlap(FixedMasks.binarised(fresh_masks[f["alpha"]]),
                               FixedMasks.binarised(warm_masks_by_alpha[w["alpha"]]))
        rows.append(dict(alpha=f["alpha"], start=w.get("start", "fresh"), steps=w.get("steps"),
                         kept_percent_fresh=100 * f["kept_fraction"], kept_percent=100 * w["kept_fraction"],
                         kl_fresh=f["kl"], kl=w["kl"], random_kl_fresh=f["random_kl"], random_kl=w["random_kl"],
                         overlap=overlap, within=within_tolerance(f, w, tolerance)))
    return pd.DataFrame(rows)
