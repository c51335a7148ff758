"""Notebook 07's judgement of notebook 02's direction circuits (docs/methods.md §1.8): which circuits are
attacked, the trainings where no mechanism should be found, and the verdicts ``data/circuit_attack.toml``
declares.

- ``attack_targets``: the two circuits of a task, read from notebook 02's summary: the default α, and the
  sparsest trained circuit whose held-out KL is within the bound (one circuit when they are the same);
- ``control_training``: a circuit trained exactly as the task circuit was (the run its file records), on
  other prompts or another model, scored on its own held-out prompts: its binarised circuit against a
  same-count random one, and the fewest top-ranked directions within the bound (bisection);
- ``seed_overlaps``: the Jaccard of the kept sets between every pair of seeds;
- ``specificity`` and ``weights_matter``: the declared rules, at their boundaries in the tests.

The weight controls are paper 2's (``helpers.tiled.sites.control_model``: every weight re-drawn, or each
linear map's input columns permuted), whose record names the control, so that their trainings never share a
cache key with the trained model's.
"""
from __future__ import annotations

import math
import time
from fractions import Fraction
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import pandas as pd

from helpers.singular.adversary import task_specific
from helpers.singular.alpha_path import kept_overlap
from helpers.singular.circuit_files import circuit_label, circuit_prompts, load_circuit
from helpers.singular.circuits import CircuitEvaluator, binarise_top, evaluate_circuit, random_like
from helpers.singular.masks import FixedMasks
from helpers.singular.nonsense import nonsense_task
from helpers.singular.training import train_masks


def attack_targets(summary: dict, bound: float) -> list[dict]:
    """The circuits of one notebook-02 summary that notebook 07 attacks, each with its ``role``, ``alpha`` and
    file ``label``: the default α's, then the sparsest trained circuit with held-out KL ≤ ``bound`` (fewest
    directions; equal counts: the lower KL, then the smaller α). When that is the default α's circuit, or no
    trained circuit is within the bound, the default α's is the only one."""
    task, default = summary["task"], float(summary["masking_run"]["alpha"])
    within = [p for p in summary["alpha_sweep"] if p["kl"] <= bound and p["kept_fraction"] < 1]
    sparsest = min(within, key=lambda p: (p["kept"], p["kl"], p["alpha"])) if within else None
    if sparsest is None:
        targets = [dict(role=f"default α (no trained circuit is within KL {bound:g})", alpha=default)]
    elif float(sparsest["alpha"]) == default:
        targets = [dict(role=f"default α, also the sparsest within KL {bound:g}", alpha=default)]
    else:
        targets = [dict(role="default α", alpha=default),
                   dict(role=f"sparsest within KL {bound:g}", alpha=float(sparsest["alpha"]))]
    return [dict(t, label=circuit_label(task, "ours", t["alpha"])) for t in targets]


def smallest_count_within(kl_of, total: int, bound: float, resolution: float = 0.01) -> int:
    """The smallest n in [0, total] with ``kl_of(n)`` ≤ ``bound``, found by bisection to within
    ``resolution`` × total (rounded up to a whole direction): the count returned is within the bound, and the
    count ``resolution`` × total below it was not. Assumes the KL falls as directions are added; n = total (the
    full model) is within by definition and never evaluated."""
    step = max(1, math.ceil(resolution * total))
    lo, hi = 0, total
    if kl_of(0) <= bound:
        return 0
    while hi - lo > step:
        mid = (lo + hi) // 2
        if kl_of(mid) <= bound:
            hi = mid
        else:
            lo = mid
    return hi


def scored_masks(masked, masks, held_out, rule, bound: float, control_seeds: int = 3,
                 resolution: float = 0.01) -> tuple[dict, FixedMasks]:
    """Trained ``masks`` scored on ``held_out`` under ``rule``: the binarised circuit's kept count, KL and
    same-count random KL; and the fewest top-ranked directions (largest mask logits first, ``binarise_top``)
    whose held-out KL is within ``bound`` (``smallest_count_within`` to ``resolution``), with its KL and one
    same-count random control's (``at_bound_*``: None where only the full model is within). Returns (that
    row, the binarised circuit)."""
    evaluator = CircuitEvaluator(masked, held_out, rule)
    circuit = FixedMasks.binarised(masks)
    row = evaluate_circuit(evaluator, circuit, control_seeds)
    total = masks.count()
    n = smallest_count_within(lambda k: evaluator.evaluate(binarise_top(masks, k))["kl"], total, bound, resolution)
    at = None if n == total else binarise_top(masks, n)
    row.update(at_bound_kept=None if at is None else n, at_bound_kept_fraction=None if at is None else n / total,
               at_bound_kl=None if at is None else evaluator.evaluate(at)["kl"],
               at_bound_random_kl=None if at is None else evaluator.evaluate(random_like(at, 0))["kl"])
    return row, circuit


def control_training(masked, run, train, held_out, bound: float, control_seeds: int = 3, resolution: float = 0.01,
                     progress: bool = True) -> tuple[dict, FixedMasks]:
    """Masks trained by ``run`` (a ``MaskingRun``: its rule and training settings, those the task circuit's
    file records) on ``train``, then ``scored_masks`` on ``held_out``."""
    masks, history = train_masks(masked, train, run.rule(), run.train_config(), progress=progress)
    row, circuit = scored_masks(masked, masks, held_out, run.rule(), bound, control_seeds, resolution)
    return dict(row, train_kl=float(history["kl"].iloc[-1])), circuit


def seed_overlaps(circuits: dict[int, FixedMasks]) -> list[dict]:
    """Jaccard of the kept sets of every pair of seeds, in seed order."""
    return [dict(a=a, b=b, jaccard=kept_overlap(circuits[a], circuits[b]))
            for a, b in combinations(sorted(circuits), 2)]


def specificity(nonsense_jaccards: dict[str, float], seed_jaccards: list[float], ratio: float) -> bool:
    """The declared rule (``[task_specific]``): the task circuit is task-specific when its Jaccard with the
    circuit trained on every kind of nonsense is at most ``ratio`` times the lowest Jaccard between two of its
    own seeds."""
    if not nonsense_jaccards:
        raise ValueError("task-specificity needs the Jaccard with at least one nonsense circuit")
    return task_specific(max(nonsense_jaccards.values()), seed_jaccards, ratio)


def weights_matter(task_kept: int | None, control_kept: dict[str, int | None], min_ratio: float) -> bool:
    """The declared rule (``[weight_controls]``): the trained model's kept share at the bound says something
    about its training when every weight control needs at least ``min_ratio`` times as many directions (counts:
    the models have the same directions) to stay within the bound, or cannot (None). The ratio is taken as the
    decimal it is declared as, so that a control exactly at it is within. Without a task circuit within the
    bound there is nothing to judge."""
    if task_kept is None:
        raise ValueError("the task has no circuit within the bound: there is no kept fraction to compare")
    if not control_kept:
        raise ValueError("the rule needs at least one weight control")
    ratio = Fraction(str(min_ratio))
    return all(k is None or k * ratio.denominator >= ratio.numerator * task_kept for k in control_kept.values())


# --- notebook 07's sections, one call each ----------------------------------------------------------------

def attack_circuits(masked, targets: list[dict], folder: str | Path, rules: dict, control_seed: int = 0,
                    log=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each target's circuit file in ``folder`` (checked against the model) and its same-count random control
    (``random_like``, seed ``control_seed``), attacked by ``rules`` on the circuit's own held-out prompts
    (``helpers.evaluate.attacked``). Returns one row per (target, circuit or random) and their curves."""
    from helpers.evaluate import attacked

    rows, curves = [], []
    for target in targets:
        circuit = load_circuit(Path(folder) / f"{target['label']}.safetensors", masked.model)
        _, held_out = circuit_prompts(circuit, masked.model)
        evaluator = CircuitEvaluator(masked, held_out, circuit.rule())
        kept = circuit.fixed()
        for which, masks in (("circuit", kept), ("random", random_like(kept, control_seed))):
            started = time.perf_counter()
            result = attacked(evaluator, masks, rules)
            log(f"{target['label']} ({which}): largest KL {result['best_kl']:.3f} "
                f"({time.perf_counter() - started:.0f} s)")
            rows.append(dict(label=target["label"], role=target["role"], circuit=which, kept=circuit.n_kept(),
                             kept_fraction=circuit.n_kept() / circuit.count(), under_rule_kl=result["under_rule_kl"],
                             stochastic_mean_kl=result["stochastic"]["mean"], stochastic_max_kl=result["stochastic"]["max"],
                             adversarial_kl=result["best_kl"], survives=result["survives"],
                             seconds=time.perf_counter() - started))
            curves.append(result["curve"].assign(label=target["label"], circuit=which))
    return pd.DataFrame(rows), pd.concat(curves, ignore_index=True)


def seed_spread(masked, run, task_name: str, first: tuple, n_seeds: int, bound: float, control_seeds: int = 3,
                resolution: float = 0.01, progress: bool = True) -> tuple[pd.DataFrame, dict[int, FixedMasks]]:
    """The task circuit at ``n_seeds`` training seeds (``run.seed`` and the next ones; each seed draws its own
    prompts, split, batches and noise), each scored on its own held-out prompts. ``first``: (masks, held-out
    prompts) of ``run.seed``, already trained (notebook 02's). Returns one row per seed and the circuits."""
    rows, circuits = [], {}
    for seed in range(run.seed, run.seed + n_seeds):
        if seed == run.seed:
            masks, held_out = first
        else:
            _, held_out, masks, _ = replace(run, seed=seed).run(masked, task_name, progress=progress)
        row, circuits[seed] = scored_masks(masked, masks, held_out, run.rule(), bound, control_seeds, resolution)
        rows.append(dict(seed=seed, **row))
    return pd.DataFrame(rows), circuits


def nonsense_controls(masked, run, train, held_out, kinds, task_circuit: FixedMasks, bound: float, seed: int = 0,
                      control_seeds: int = 3, resolution: float = 0.01, progress: bool = True) -> pd.DataFrame:
    """For each kind of nonsense (``helpers.singular.nonsense``), masks trained by ``run`` on the training prompts
    made nonsense (seed ``seed``) and scored on the held-out ones (seed ``seed + 1``), with the Jaccard of their
    circuit with ``task_circuit``."""
    rows = []
    for kind in kinds:
        row, circuit = control_training(masked, run, nonsense_task(train, kind, seed), nonsense_task(held_out, kind, seed + 1),
                                        bound, control_seeds, resolution, progress)
        rows.append(dict(kind=kind, jaccard_with_task=kept_overlap(circuit, task_circuit), **row))
    return _table(rows, ["kind", "jaccard_with_task"])


def weight_controls(model_name: str, processing: str, run, train, held_out, controls, bound: float, seed: int = 0,
                    device: str = "cpu", control_seeds: int = 3, resolution: float = 0.01, progress: bool = True) -> pd.DataFrame:
    """For each weight control (``helpers.tiled.sites.control_model``), masks trained by ``run`` on the same
    prompts and scored on the same held-out prompts, against the control model's own output. One control model
    in memory at a time."""
    from helpers.singular.masks import MaskedModel
    from helpers.tiled.sites import control_model

    rows = []
    for control in controls:
        masked = MaskedModel(control_model(model_name, control, processing, seed, device))
        row, _ = control_training(masked, run, train, held_out, bound, control_seeds, resolution, progress)
        rows.append(dict(control=control, **row))
        del masked
    return _table(rows, ["control"])


CONTROL_COLUMNS = ["kept", "kept_fraction", "kl", "random_kl", "at_bound_kept", "at_bound_kept_fraction", "at_bound_kl",
                   "at_bound_random_kl", "train_kl"]
"""What every control training's row holds, also when no control was asked for (the workshop's attack alone)."""


def _table(rows: list[dict], first: list[str]) -> pd.DataFrame:
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=first + CONTROL_COLUMNS)


# --- verdicts and what they say ----------------------------------------------------------------------------

def _none_if_nan(value):
    return None if value is None or value != value else float(value)


def _count(value):
    return None if value is None or value != value else int(value)


def judged(attack_table: pd.DataFrame, seeds: pd.DataFrame, jaccards: list[dict], nonsense: pd.DataFrame,
           weights: pd.DataFrame, rules: dict) -> dict:
    """The three verdicts of a task, by the declared rules: whether each attacked circuit survives; whether the
    task circuit is task-specific (None without nonsense controls or a second seed); whether the trained
    weights matter to its kept fraction (None without a weight control, or without a circuit within the bound).
    ``rules``: ``load_attack_rules``, with any overrides of the attack."""
    circuits = attack_table[attack_table["circuit"] == "circuit"]
    seed_jaccards = [j["jaccard"] for j in jaccards]
    nonsense_jaccards = dict(zip(nonsense["kind"], nonsense["jaccard_with_task"])) if len(nonsense) else {}
    task_kept = _count(seeds["at_bound_kept"].iloc[0])
    controls = {c: _count(k) for c, k in zip(weights["control"], weights["at_bound_kept"])} if len(weights) else {}
    return dict(
        survives={r.label: bool(r.survives) for r in circuits.itertuples()},
        attack_steps=max(rules["attack"].checkpoints), bound=rules["faithful"]["bound"],
        task_specific=(specificity(nonsense_jaccards, seed_jaccards, rules["task_specific"]["ratio"])
                       if nonsense_jaccards and seed_jaccards else None),
        nonsense_jaccard=max(nonsense_jaccards.values()) if nonsense_jaccards else None,
        lowest_seed_jaccard=min(seed_jaccards) if seed_jaccards else None,
        task_kept_fraction=_none_if_nan(seeds["at_bound_kept_fraction"].iloc[0]),
        control_kept_fractions=({c: _none_if_nan(f) for c, f in zip(weights["control"], weights["at_bound_kept_fraction"])}
                                if len(weights) else {}),
        weights_matter=(weights_matter(task_kept, controls, rules["weight_controls"]["min_ratio"])
                        if controls and task_kept is not None else None))


def _kl(value: float) -> str:
    """A KL to three decimals; float rounding below zero prints as 0.000, not -0.000."""
    return f"{round(value, 3) + 0.0:.3f}"


def _yes_no(value) -> str:
    return "not tested" if value is None else ("yes" if value else "no")


def verdict_line(summary: dict) -> str:
    """One sentence per task for the results page: does its circuit survive the adversary, is it task-specific."""
    v = summary["verdicts"]
    rows = {r["label"]: r for r in summary["attack_table"] if r["circuit"] == "circuit"}
    survived = "; ".join(f"{r['role']} ({100 * r['kept_fraction']:.1f} % kept): {_yes_no(v['survives'][label])}, "
                         f"largest KL {r['adversarial_kl']:.2f}" for label, r in rows.items())
    line = f"survives an adversary of {v['attack_steps']} steps (bound KL {v['bound']:g}): {survived}"
    specific = f"task-specific: {_yes_no(v['task_specific'])}"
    if v["task_specific"] is not None:
        specific += (f" (Jaccard with a nonsense circuit up to {v['nonsense_jaccard']:.2f}, between seeds from "
                     f"{v['lowest_seed_jaccard']:.2f})")
    return f"{line}; {specific}"


def with_attack_overrides(rules: dict, overrides: dict) -> dict:
    """The declared rules with notebook 07's ``attack`` overrides (fields of ``Attack`` and ``stochastic_draws``):
    a labelled variant (the workshop's shorter attack, the CI sizes), never the declared attack."""
    fields = set(rules["attack"].record()) | {"stochastic_draws"}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"attack={overrides!r}: {unknown} not among the attack's settings {sorted(fields)}")
    overrides = dict(overrides)
    draws = overrides.pop("stochastic_draws", rules["stochastic_draws"])
    settings = {**rules["attack"].record(), **overrides}
    attack = type(rules["attack"])(**{**settings, "checkpoints": tuple(settings["checkpoints"]),
                                      "starts": tuple(settings["starts"])})
    return dict(rules, attack=attack, stochastic_draws=draws)


def overlap_rows(jaccards: list[dict], nonsense: pd.DataFrame) -> pd.DataFrame:
    """The Jaccards the task-specificity rule compares: every pair of seeds, then the task with each nonsense."""
    rows = [dict(name=f"seeds {j['a']} and {j['b']}", pair="seeds", jaccard=j["jaccard"]) for j in jaccards]
    rows += [dict(name=f"task and {r.kind.replace('_', ' ')}", pair="nonsense", jaccard=r.jaccard_with_task)
             for r in nonsense.itertuples()]
    return pd.DataFrame(rows, columns=["name", "pair", "jaccard"])


def controls_title(task: str, verdicts: dict) -> str:
    """The controls figure's point, from the verdicts."""
    specific = {None: "task-specificity not tested", True: "the circuit is task-specific",
                False: "the circuit is NOT task-specific"}[verdicts["task_specific"]]
    weights = {None: "untrained weights not compared", True: "untrained weights need clearly more directions",
               False: "untrained weights need no clearly larger share"}[verdicts["weights_matter"]]
    return f"{task}: {specific}; {weights}"


def findings(summary: dict, fast: bool = False) -> str:
    """Notebook 07's closing "What we found", from its summary."""
    v, bound = summary["verdicts"], summary["verdicts"]["bound"]
    lines = ["## What we found", "", f"**Does {summary['task']}'s circuit hold under attack, and is it about the task?**",
             f"- **Under attack:** {verdict_line(summary)}."]
    for row in summary["attack_table"]:
        who = "its random control" if row["circuit"] == "random" else row["label"]
        lines.append(f"  - {who}: KL {_kl(row['under_rule_kl'])} under the rule, {_kl(row['stochastic_mean_kl'])} on "
                     f"average (largest {_kl(row['stochastic_max_kl'])}) with m ~ U(0, 1), {_kl(row['adversarial_kl'])} "
                     f"at worst under attack.")
    seeds = summary["seeds"]
    kept = ", ".join(f"{100 * s['kept_fraction']:.1f} % (KL {s['kl']:.2f})" for s in seeds)
    lines.append(f"- **Seed spread** ({len(seeds)} seeds, default α): kept {kept}; Jaccard between seeds "
                 + (", ".join(f"{j['jaccard']:.2f}" for j in summary["seed_jaccards"]) or "not measured") + ".")
    for row in summary["nonsense"]:
        at = (f"{100 * row['at_bound_kept_fraction']:.1f} % kept at KL {row['at_bound_kl']:.2f}"
              if row["at_bound_kept_fraction"] is not None else f"no circuit within KL {bound:g}")
        lines.append(f"- **Nonsense ({row['kind'].replace('_', ' ')}):** {at}; Jaccard with the task circuit "
                     f"{row['jaccard_with_task']:.2f}.")
    task_at = v["task_kept_fraction"]
    for row in summary["weight_controls"]:
        at = (f"{100 * row['at_bound_kept_fraction']:.1f} % kept at KL {row['at_bound_kl']:.2f}"
              if row["at_bound_kept_fraction"] is not None else f"no circuit within KL {bound:g}")
        lines.append(f"- **Weights {row['control']}:** {at}, against the trained model's "
                     + (f"{100 * task_at:.1f} %" if task_at is not None else f"none within KL {bound:g}") + ".")
    lines.append(f"- **Do the trained weights matter to the kept fraction?** {_yes_no(v['weights_matter'])}.")
    if fast:
        lines += ["", "*A fast run (the CI sizes): these numbers only show that the notebook runs.*"]
    elif summary.get("attack_variant"):
        lines += ["", f"*The attack is a labelled variant of the declared one ({summary['attack_variant']}).*"]
    return "\n".join(lines)
