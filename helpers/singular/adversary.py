"""Circuits under attack (docs/methods.md §1.8): does the model's output stay put for every setting of the
directions a circuit leaves out, not only for the one setting its ablation rule uses?

A circuit keeps some directions and ablates the rest under its rule: each coefficient is
a_k ← m_k a_k + (1 − m_k) a_k^ref (``helpers.singular.masks``), with m_k = 1 for a kept direction and
m_k = 0 for an excluded one. Here the excluded directions' m_k range over [0, 1] (1: the direction's own
clean coefficient, 0: its reference, anything between: part of each), the kept ones stay at 1:

- ``partial_masks``: a circuit with its excluded directions at given values m;
- ``stochastic_kl``: ``draws`` settings with m_k ~ U(0, 1) drawn independently per direction (on the CPU,
  seeded, then moved); the mean and the largest held-out KL;
- ``adversarial_kl``: projected gradient ascent on m (signed steps, then clipped to [0, 1]) that searches
  for the setting with the largest held-out KL, from the rule's setting (m = 0) and from a random one; the
  KL on every held-out prompt after each of ``Attack.checkpoints`` steps, and the largest seen.

At m = 0 everywhere this is the rule's own ablation, and at m = 1 it is the full model (KL 0): both are
tested. For the full model the excluded set is empty and every attack leaves KL at 0.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch

from helpers.core.declared import load_declared
from helpers.singular.circuits import CircuitEvaluator
from helpers.singular.masks import FixedMasks
from helpers.singular.references import kl_to_full, select_rows


@dataclass(frozen=True)
class Attack:
    """The adversary's settings (recorded with every result). The declared ones are in
    ``data/circuit_attack.toml`` (``load_attack_rules``), the only place their values are written."""

    checkpoints: tuple[int, ...]  # KL on every held-out prompt after these many steps
    step_size: float  # each step moves every excluded m_k by ± step_size (the sign of its gradient)
    batch: int | None  # held-out prompts per ascent step (None: all of them), cycled in a seeded order
    starts: tuple[str, ...]  # "rule": m = 0 (the rule's setting); "random": m ~ U(0, 1)
    seed: int

    def __post_init__(self):
        if not self.checkpoints or any(not isinstance(c, int) or c < 1 for c in self.checkpoints) \
                or list(self.checkpoints) != sorted(set(self.checkpoints)):
            raise ValueError(f"checkpoints={self.checkpoints!r}: expected increasing step counts ≥ 1, e.g. (20, 40, 80, 160)")
        if not self.step_size > 0:
            raise ValueError(f"step_size={self.step_size!r}: expected a positive step on m ∈ [0, 1]")
        if self.batch is not None and (isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1):
            raise ValueError(f"batch={self.batch!r}: expected a number of prompts ≥ 1, or None for all of them")
        unknown = sorted(set(self.starts) - {"rule", "random"})
        if unknown or not self.starts:
            raise ValueError(f"starts={self.starts!r}: choose from ('rule', 'random')")

    def record(self) -> dict:
        return asdict(self)


ATTACK_RULES = Path(__file__).resolve().parents[2] / "data" / "circuit_attack.toml"
RULE_KEYS = {"attack": {"checkpoints", "step_size", "batch", "starts", "stochastic_draws", "seed"},
             "faithful": {"bound", "why"}, "task_specific": {"ratio", "why"}, "weight_controls": {"min_ratio", "why"}}


def load_attack_rules(path: str | Path = ATTACK_RULES) -> dict:
    """The declared attack and verdict rules (``data/circuit_attack.toml``), every key present and none
    unknown; ``rules["attack"]`` is an ``Attack``, ``rules["stochastic_draws"]`` its number of random settings,
    the other sections as written."""
    table = load_declared(path, RULE_KEYS)
    attack = dict(table["attack"])
    draws = attack.pop("stochastic_draws")
    return dict(attack=Attack(**{**attack, "checkpoints": tuple(attack["checkpoints"]), "starts": tuple(attack["starts"])}),
                stochastic_draws=draws, **{section: table[section] for section in RULE_KEYS if section != "attack"})


def task_specific(nonsense_jaccard: float, seed_jaccards: list[float], ratio: float) -> bool:
    """The declared rule: the task circuit's Jaccard with its nonsense circuit is at most ``ratio`` times the
    lowest Jaccard between two of its own seeds."""
    if not seed_jaccards:
        raise ValueError("task-specificity needs the Jaccard of at least one pair of seeds")
    return bool(nonsense_jaccard <= ratio * min(seed_jaccards))


def excluded(circuit: FixedMasks) -> dict[str, torch.Tensor]:
    """Per block, 1.0 where the circuit leaves a direction out (its mask is 0), else 0.0."""
    return {name: (kept <= 0.5).to(kept.dtype) for name, kept in circuit.blocks.items()}


def partial_masks(circuit: FixedMasks, m: dict[str, torch.Tensor]) -> FixedMasks:
    """The circuit with each excluded direction at ``m`` (per block, values in [0, 1]); kept ones at 1."""
    out = {}
    for name, kept in circuit.blocks.items():
        keep = (kept > 0.5).to(m[name].dtype).to(m[name].device)
        out[name] = keep + (1 - keep) * m[name]
    return FixedMasks(out)


def project(m: dict[str, torch.Tensor]) -> None:
    """Clip every value into [0, 1], in place: the projection of projected gradient ascent."""
    with torch.no_grad():
        for value in m.values():
            value.clamp_(0.0, 1.0)


def held_out_kl(evaluator: CircuitEvaluator, masks, rows: torch.Tensor | None = None) -> torch.Tensor:
    """Mean KL(full ‖ masked) over the evaluator's held-out prompts (``rows`` of them), differentiable in the
    masks' values."""
    task, prepared = evaluator.task, evaluator.prepared
    references, log_p = prepared.references, prepared.log_p_full
    if rows is not None:
        task, references, log_p = task.subset(rows), select_rows(references, rows), log_p[rows]
    logits = evaluator.masked.masked_final_logits(masks, evaluator.rule, task.clean, task.answer_pos, references)
    return kl_to_full(log_p, logits).mean()


def _uniform(circuit: FixedMasks, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """m ~ U(0, 1) per direction, drawn on the CPU (the same numbers on every device), then moved."""
    return {name: torch.rand(kept.shape, generator=generator, device="cpu").to(kept.device)
            for name, kept in circuit.blocks.items()}


def stochastic_kl(evaluator: CircuitEvaluator, circuit: FixedMasks, draws: int, seed: int) -> dict:
    """Held-out KL under ``draws`` independent settings m ~ U(0, 1) of the excluded directions: the mean, the
    largest and every draw's."""
    if isinstance(draws, bool) or not isinstance(draws, int) or draws < 1:
        raise ValueError(f"draws={draws!r}: expected a number of draws ≥ 1")
    generator = torch.Generator().manual_seed(seed)
    kls = []
    with torch.no_grad():
        for _ in range(draws):
            kls.append(float(held_out_kl(evaluator, partial_masks(circuit, _uniform(circuit, generator)))))
    return dict(mean=sum(kls) / len(kls), max=max(kls), draws=kls, seed=seed)


def adversarial_kl(evaluator: CircuitEvaluator, circuit: FixedMasks, attack: Attack,
                   progress: bool = False) -> pd.DataFrame:
    """Projected gradient ascent on the excluded directions' m to maximise the held-out KL, from each of
    ``attack.starts``. One row per (start, step) at step 0 and at each checkpoint: the KL on every held-out
    prompt at that m, and the largest of those so far (``best``). Directions the circuit keeps never move."""
    out = excluded(circuit)
    n = len(evaluator.task)
    rows = []
    for start in attack.starts:
        generator = torch.Generator().manual_seed(attack.seed)
        m = ({name: torch.zeros_like(v) for name, v in out.items()} if start == "rule"
             else {name: v * u for (name, v), u in zip(out.items(), _uniform(circuit, generator).values())})
        for value in m.values():
            value.requires_grad_(True)
        order = torch.randperm(n, generator=generator, device="cpu")  # the ascent's prompts, cycled
        best = 0.0
        steps = range(max(attack.checkpoints) + 1)
        if progress:
            from tqdm.auto import tqdm

            steps = tqdm(steps, desc=f"attack from the {start} setting")
        for step in steps:
            if step == 0 or step in attack.checkpoints:
                with torch.no_grad():
                    kl = float(held_out_kl(evaluator, partial_masks(circuit, m)))
                best = max(best, kl)
                rows.append(dict(start=start, step=step, kl=kl, best=best))
            if step == max(attack.checkpoints):
                break
            if attack.batch is None or attack.batch >= n:
                batch = None
            else:
                first = (step * attack.batch) % n
                batch = torch.cat([order, order])[first: first + attack.batch].to(evaluator.task.clean.device)
            objective = held_out_kl(evaluator, partial_masks(circuit, m), batch)
            grads = torch.autograd.grad(objective, list(m.values()), allow_unused=True)
            with torch.no_grad():
                for (name, value), grad in zip(m.items(), grads):
                    if grad is not None:
                        value.add_(attack.step_size * torch.sign(grad) * out[name])
            project(m)
    return pd.DataFrame(rows)


def survives(curve: pd.DataFrame, bound: float) -> bool:
    """Whether the circuit held the declared bound under every attack: the largest KL the adversary found, at
    any start and checkpoint, is at most ``bound``."""
    return bool(curve["best"].max() <= bound)
