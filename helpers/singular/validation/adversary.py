"""Circuits under attack (docs/methods.md §1.8): does the model's output stay put for every setting of the
directions a circuit leaves out, not only for the one setting its ablation rule uses?

A circuit keeps some directions and ablates the rest under its rule: each coefficient is
a_k ← m_k a_k + (1 − m_k) a_k^ref (``helpers.singular.masking.masks``), with m_k = 1 for a kept direction and
m_k = 0 for an excluded one. Here the excluded directions' m_k range over [0, 1] (1: the direction's own
clean coefficient, 0: its reference, anything between: part of each), the kept ones stay at 1:

- ``partial_masks``: a circuit with its excluded directions at given values m;
- ``stochastic_kl``: ``draws`` settings with m_k ~ U(0, 1) drawn independently per direction (on the CPU,
  seeded, then moved); the mean and the largest held-out KL;
- ``adversarial_kl``: projected gradient ascent on m (signed steps, then clipped to [0, 1]) that searches
  for the setting with the largest held-out KL, from the rule's setting (m = 0) and from a random one. It
  climbs on ``Attack.climb_share`` of the held-out prompts and reports the KL on the others (out of sample)
  after each of ``Attack.checkpoints`` steps, the largest seen, and the in-sample KL beside it; it may stop
  once the reported KL exceeds a bound, whose verdict is then known;
- ``attacked``: one circuit under the declared attack, with its verdict;
- ``nested_attack``: the calibration. Circuits that keep the top 90, 95, 99 and 99.9 % of directions by a
  learned ranking, beside the same counts in every block at random, attacked from the largest down: the
  smallest kept share that holds the bound tells what the attack can break at all.

At m = 0 everywhere this is the rule's own ablation, and at m = 1 it is the full model (KL 0): both are
tested. For the full model the excluded set is empty and every attack leaves KL at 0.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd
import torch

from helpers.core.declared import load_declared
from helpers.singular.masking.circuits import CircuitEvaluator
from helpers.singular.masking.masks import FixedMasks
from helpers.singular.masking.references import kl_to_full, select_rows


@dataclass(frozen=True)
class Attack:
    """The adversary's settings (recorded with every result). The declared ones are in
    ``data/circuit_attack.toml`` (``load_attack_rules``), the only place their values are written."""

    checkpoints: tuple[int, ...]  # KL on every held-out prompt after these many steps
    step_size: float  # each step moves every excluded m_k by ± step_size (the sign of its gradient)
    batch: int | None  # held-out prompts per ascent step (None: all of them), cycled in a seeded order
    starts: tuple[str, ...]  # "rule": m = 0 (the rule's setting); "random": m ~ U(0, 1)
    seed: int
    climb_share: float | None  # the share of held-out prompts the ascent climbs on; the KL is reported on the
    #                            others (None: climbs and reports on all of them, in sample only)

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
        if self.climb_share is not None and (isinstance(self.climb_share, bool)
                                             or not isinstance(self.climb_share, (int, float))
                                             or not 0 < self.climb_share < 1):
            raise ValueError(f"climb_share={self.climb_share!r}: expected a share of the held-out prompts strictly "
                             "between 0 and 1 (0.5: climb on half, report on the other half), or None for all")

    def record(self) -> dict:
        return asdict(self)


ATTACK_RULES = Path(__file__).resolve().parents[3] / "data" / "circuit_attack.toml"
RULE_KEYS = {"attack": {"checkpoints", "step_size", "batch", "starts", "stochastic_draws", "seed", "climb_share"},
             "faithful": {"bound", "why"}, "task_specific": {"ratio", "why"}, "weight_controls": {"min_ratio", "why"},
             "nested": {"shares", "control_seed", "why"}}


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


def split_rows(n: int, climb_share: float | None, seed: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(climb, report): the held-out prompts the ascent climbs on and those its KL is reported on, a seeded
    split of ``n`` prompts (each sorted; round(n · climb_share) to climb), or (None, None) for all of both.
    Refused where either half would be empty."""
    if climb_share is None:
        return None, None
    n_climb = round(n * climb_share)
    if not 0 < n_climb < n:
        raise ValueError(f"climb_share={climb_share} of {n} held-out prompts leaves a half empty: give the attack more "
                         "prompts or climb_share = None")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed), device="cpu")
    return order[:n_climb].sort(stable=True).values, order[n_climb:].sort(stable=True).values


def adversarial_kl(evaluator: CircuitEvaluator, circuit: FixedMasks, attack: Attack, progress: bool = False,
                   stop_above: float | None = None) -> pd.DataFrame:
    """Projected gradient ascent on the excluded directions' m to maximise the held-out KL, from each of
    ``attack.starts``, climbing on the ``split_rows`` climb half. One row per (start, step) at step 0 and at each
    checkpoint: the KL on the report half at that m (``kl``) and the largest so far (``best``), the same on the
    climb half (``kl_in_sample``, ``best_in_sample``), and ``stopped``. Directions the circuit keeps never move.
    With ``stop_above``, the attack stops at the first checkpoint where ``best`` exceeds it (every later start
    too): the verdict against that bound is then known."""
    out = excluded(circuit)
    device = evaluator.task.clean.device
    climb, report = split_rows(len(evaluator.task), attack.climb_share, attack.seed)
    pool = torch.arange(len(evaluator.task), device="cpu") if climb is None else climb
    rows = []
    for start in attack.starts:
        generator = torch.Generator().manual_seed(attack.seed)
        m = ({name: torch.zeros_like(v) for name, v in out.items()} if start == "rule"
             else {name: v * u for (name, v), u in zip(out.items(), _uniform(circuit, generator).values())})
        for value in m.values():
            value.requires_grad_(True)
        order = pool[torch.randperm(len(pool), generator=generator, device="cpu")]  # the ascent's prompts, cycled
        best = best_in_sample = 0.0
        steps = range(max(attack.checkpoints) + 1)
        if progress:
            from tqdm.auto import tqdm

            steps = tqdm(steps, desc=f"attack from the {start} setting")
        for step in steps:
            if step == 0 or step in attack.checkpoints:
                with torch.no_grad():
                    masks = partial_masks(circuit, m)
                    kl = float(held_out_kl(evaluator, masks, None if report is None else report.to(device)))
                    in_sample = kl if climb is None else float(held_out_kl(evaluator, masks, climb.to(device)))
                best, best_in_sample = max(best, kl), max(best_in_sample, in_sample)
                stopped = stop_above is not None and best > stop_above
                rows.append(dict(start=start, step=step, kl=kl, best=best, kl_in_sample=in_sample,
                                 best_in_sample=best_in_sample, stopped=stopped))
                if stopped:
                    return pd.DataFrame(rows)
            if step == max(attack.checkpoints):
                break
            if attack.batch is None or attack.batch >= len(order):
                batch = climb  # every prompt it climbs on (None: all of them)
            else:
                first = (step * attack.batch) % len(order)
                batch = torch.cat([order, order])[first: first + attack.batch]
            objective = held_out_kl(evaluator, partial_masks(circuit, m), None if batch is None else batch.to(device))
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


def attacked(evaluator: CircuitEvaluator, circuit, rules: dict) -> dict:
    """The circuit under the declared attack (``rules``: ``load_attack_rules``): its KL under the rule, under
    stochastic partial ablation, and along the adversary's ascent, with the settings and the verdict. The
    largest KL (``best_kl``) is the report half's; ``best_kl_in_sample`` the climb half's."""
    attack, bound = rules["attack"], rules["faithful"]["bound"]
    curve = adversarial_kl(evaluator, circuit, attack)
    return dict(settings=attack.record(), under_rule_kl=evaluator.evaluate(circuit)["kl"],
                stochastic=stochastic_kl(evaluator, circuit, rules["stochastic_draws"], attack.seed), curve=curve,
                best_kl=float(curve["best"].max()), best_kl_in_sample=float(curve["best_in_sample"].max()),
                bound=bound, survives=survives(curve, bound))


def nested_count(share: float, total: int) -> int:
    """How many directions a circuit keeping ``share`` of ``total`` keeps: ⌈share · total⌉, a product that is a
    whole number up to rounding (0.07 × 100) staying that number."""
    return math.ceil(share * total - 1e-9)


def nested_circuits(masks, shares, control_seed: int) -> list[dict]:
    """For each kept share (largest first), the circuit of the top ``nested_count`` directions by ``masks``' logits
    (``binarise_top``) and its random control with the same count in every block (``random_like`` at
    ``control_seed``: one permutation per block whatever the count, so the random circuits are nested too)."""
    from helpers.singular.masking.circuits import binarise_top, random_like

    if not shares or any(isinstance(s, bool) or not 0 < s < 1 for s in shares) or len(set(shares)) != len(shares):
        raise ValueError(f"shares={shares!r}: expected distinct kept shares strictly between 0 and 1, "
                         "e.g. [0.9, 0.95, 0.99, 0.999]")
    total = masks.count()
    out = []
    for share in sorted(shares, reverse=True):
        kept = nested_count(share, total)
        learned = binarise_top(masks, kept)
        out.append(dict(share=share, kept=kept, learned=learned, random=random_like(learned, control_seed)))
    return out


def nested_attack(evaluator: CircuitEvaluator, masks, rules: dict, shares=None, log=print) -> pd.DataFrame:
    """The attack calibrated (``rules["nested"]``): the ``nested_circuits`` of ``masks`` (a learned ranking) and
    their random controls, each ranking attacked from its largest share down, every attack stopping once the
    reported KL exceeds the bound. Once a circuit fails, every smaller one of its ranking fails too without
    being attacked: it leaves out all the larger one's left-out directions, so the setting that broke the larger
    one (the rest at m = 1) breaks it. One row per (ranking, share): kept, the KL under the rule, the largest
    KL found (report half, and in sample), survives, the step it stopped at, ``inferred`` (not attacked)."""
    bound = rules["faithful"]["bound"]
    shares = rules["nested"]["shares"] if shares is None else shares
    circuits = nested_circuits(masks, shares, rules["nested"]["control_seed"])
    total = masks.count()
    rows = []
    for ranking in ("learned", "random"):
        broken_at = None
        for entry in circuits:
            row = dict(ranking=ranking, share=entry["share"], kept=entry["kept"], kept_fraction=entry["kept"] / total)
            if broken_at is not None:
                rows.append(dict(row, under_rule_kl=None, adversarial_kl=None, adversarial_kl_in_sample=None,
                                 survives=False, stopped_at=None, inferred=f"the {broken_at:g} circuit failed"))
                continue
            started = time.perf_counter()
            circuit = entry[ranking]
            curve = adversarial_kl(evaluator, circuit, rules["attack"], stop_above=bound)
            held = survives(curve, bound)
            rows.append(dict(row, under_rule_kl=evaluator.evaluate(circuit)["kl"],
                             adversarial_kl=float(curve["best"].max()),
                             adversarial_kl_in_sample=float(curve["best_in_sample"].max()), survives=held,
                             stopped_at=int(curve["step"].iloc[-1]) if bool(curve["stopped"].iloc[-1]) else None,
                             inferred=None, seconds=round(time.perf_counter() - started, 1)))
            log(f"{ranking} ranking, {100 * entry['share']:g} % kept: largest KL {rows[-1]['adversarial_kl']:.3f}"
                f"{'' if held else ' > ' + format(bound, 'g')} ({rows[-1]['seconds']:.0f} s)")
            if not held:
                broken_at = entry["share"]
    return pd.DataFrame(rows)


def smallest_surviving_share(nested: pd.DataFrame | list[dict], ranking: str) -> float | None:
    """The smallest kept share of ``ranking``'s nested circuits that held the bound, every larger one holding
    too (None: not even the largest held)."""
    rows = sorted((r for r in pd.DataFrame(nested).to_dict("records") if r["ranking"] == ranking),
                  key=lambda r: r["share"], reverse=True)
    smallest = None
    for row in rows:
        if not row["survives"]:
            break
        smallest = row["share"]
    return smallest
