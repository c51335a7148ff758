"""Notebook 07's judgement of notebook 02's direction circuits (docs/methods.md §1.8): which circuits are
attacked, the trainings where no mechanism should be found, and the verdicts ``data/circuit_attack.toml``
declares.

- ``attack_targets``: the two circuits of a task, read from notebook 02's summary: the default α, and the
  sparsest trained circuit whose held-out KL is within the bound (one circuit when they are the same);
- ``control_training``: a circuit trained exactly as the task circuit was (the run its file records), on
  other prompts or another model, scored on its own held-out prompts: its binarised circuit against a
  same-count random one, and the fewest top-ranked directions within the bound (bisection);
- ``seed_overlaps``: the Jaccard of the kept sets between every pair of seeds;
- ``specificity`` and ``weights_matter``: the declared rules, at their boundaries in the tests;
- ``transfer_check``: task-specificity by transfer (``helpers.singular.validation.transfer``), the verdict that
  stands (``specificity_key``), with a third seed posed as nonsense.

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
import torch

from helpers.singular.validation.adversary import attacked, nested_attack, smallest_surviving_share, task_specific
from helpers.singular.masking.alpha_path import kept_overlap
from helpers.singular.masking.circuit_files import circuit_label, circuit_path, circuit_prompts, load_circuit
from helpers.singular.masking.circuits import CircuitEvaluator, binarise_top, evaluate_circuit, random_like
from helpers.singular.masking.masks import FixedMasks
from helpers.singular.validation.nonsense import nonsense_task
from helpers.singular.masking.training import train_masks


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
                     progress: bool = True) -> tuple[dict, FixedMasks, object]:
    """Masks trained by ``run`` (a ``MaskingRun``: its rule and training settings, those the task circuit's
    file records) on ``train``, then ``scored_masks`` on ``held_out``. Returns (row, binarised circuit, masks)."""
    masks, history = train_masks(masked, train, run.rule(), run.train_config(), progress=progress)
    row, circuit = scored_masks(masked, masks, held_out, run.rule(), bound, control_seeds, resolution)
    return dict(row, train_kl=float(history["kl"].iloc[-1])), circuit, masks


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


def matched_overlaps(seed_masks: dict, nonsense_masks: dict, k: int) -> list[dict]:
    """Every overlap the matched-size rule reads, each circuit cut to its own ``k`` top-ranked directions (largest
    mask logits first, ``binarise_top``; k: the task circuit's count): every pair of seeds, then the first seed's
    against each nonsense circuit. Each row: the Jaccard, its chance level, and the overlap corrected for chance
    (``helpers.core.feasibility.corrected_overlap``: 0 at chance, 1 for the same set). Empty when the task circuit
    keeps every direction or none: two such sets overlap exactly as chance says, and there is nothing to judge."""
    from helpers.core.feasibility import chance_jaccard, corrected_overlap

    if not 0 < k < next(iter(seed_masks.values())).count():
        return []
    cut = {name: binarise_top(masks, k) for name, masks in
           [*((f"seed {s}", m) for s, m in sorted(seed_masks.items())), *((kind, m) for kind, m in nonsense_masks.items())]}
    first = f"seed {min(seed_masks)}"
    pairs = [("seeds", a, b) for a, b in combinations([n for n in cut if n.startswith("seed ")], 2)]
    pairs += [("nonsense", first, kind) for kind in nonsense_masks]
    rows = []
    for pair, a, b in pairs:
        n = cut[a].count()
        both = int(sum(float((cut[a].blocks[x] * cut[b].blocks[x]).sum()) for x in cut[a].blocks))
        rows.append(dict(pair=pair, a=a, b=b, k=k, n=n, both=both, jaccard=kept_overlap(cut[a], cut[b]),
                         chance_jaccard=chance_jaccard(k, k, n), corrected=corrected_overlap(both, k, k, n)))
    return rows


def transfer_check(masked, train, held_out, ablation, seed_masks: dict, nonsense_masks: dict, k: int,
                   bound: float) -> dict | None:
    """Task-specificity by transfer (``helpers.singular.validation.transfer``, ``data/task_transfer.toml``) on the
    task circuit of ``k`` directions: the second seed (``seed_masks``' second in seed order) is the reference and
    every nonsense kind is judged, on the ``held_out`` prompts without any ``train`` prompt (every seed and every
    nonsense circuit trained on ``train`` or on ``train`` made nonsense). A third seed, where there is one, is
    scored as if it were nonsense (``posed``): the case known to be no, since it was found on the task. Returns
    ``transfer_scores``' record with the verdict over the kinds (``specific``), the posed seed's row and verdict, and
    the reference's name; None without a second seed or a nonsense circuit, or where k keeps every direction or none."""
    from helpers.singular.masking.circuits import CircuitEvaluator
    from helpers.singular.validation.transfer import (load_transfer_rule, specific_by_transfer, transfer_scores,
                                                      unseen_prompts)

    order = sorted(seed_masks)
    if len(order) < 2 or not nonsense_masks:
        return None
    prompts, dropped = unseen_prompts(held_out, train)
    posed = {f"seed {s}": seed_masks[s] for s in order[2:3]}
    clash = sorted(set(posed) & set(nonsense_masks))
    if clash:
        raise ValueError(f"nonsense kinds {clash} collide with the names of the seeds posed as nonsense")
    found = transfer_scores(CircuitEvaluator(masked, prompts, ablation), seed_masks[order[1]],
                            {**nonsense_masks, **posed}, k, bound, load_transfer_rule())
    if found is None:
        return None
    rows = [r for r in found["rows"] if r["kind"] in nonsense_masks]
    posed_row = next((r for r in found["rows"] if r["kind"] in posed), None)
    return dict(found, rows=rows, reference=f"seed {order[1]}", dropped_prompts=dropped,
                specific=specific_by_transfer(rows, bound), posed=posed_row,
                posed_specific=None if posed_row is None else specific_by_transfer([posed_row], bound))


def matched_extremes(matched: list[dict]) -> tuple[float, float]:
    """The two numbers the matched-size rule compares: the lowest chance-corrected overlap between two seeds and
    the highest between the task circuit and a nonsense circuit (rows of ``matched_overlaps``)."""
    seeds = [r["corrected"] for r in matched if r["pair"] == "seeds"]
    nonsense = [r["corrected"] for r in matched if r["pair"] == "nonsense"]
    if not seeds or not nonsense:
        raise ValueError("the matched-size rule needs a pair of seeds and a nonsense circuit")
    return min(seeds), max(nonsense)


def matched_threshold(matched: list[dict], ratio: float) -> float:
    """The matched-size rule's threshold: ``ratio`` times the lowest chance-corrected overlap between two seeds."""
    return ratio * matched_extremes(matched)[0]


def specific_at_matched_size(matched: list[dict], ratio: float) -> bool:
    """The rule declared in ``data/verdict_rules.toml`` ``[task_specific_matched]``: the task circuit is
    task-specific when every nonsense circuit's chance-corrected overlap with it, at matched size, is at most
    ``ratio`` times the lowest chance-corrected overlap between two of its own seeds (``matched_threshold``)."""
    return bool(matched_extremes(matched)[1] <= matched_threshold(matched, ratio))


def matched_rule(path: Path | None = None) -> dict:
    """``[task_specific_matched]`` of ``data/verdict_rules.toml``: the ratio, declared before notebook 07's next run."""
    import tomllib

    path = path or Path(__file__).resolve().parents[3] / "data" / "verdict_rules.toml"
    with open(path, "rb") as f:
        rule = tomllib.load(f)["task_specific_matched"]
    if set(rule) != {"ratio"}:
        raise ValueError(f"{path} [task_specific_matched]: expected the key ratio, found {sorted(rule)}")
    return rule


def weights_matter(task_kept: int | None, control_kept: dict[str, int], min_ratio: float) -> bool:
    """The declared rule (``[weight_controls]``): the trained model's kept share at the bound says something
    about its training when every weight control whose training reached the bound (``control_counts``) needs at
    least ``min_ratio`` times as many directions (counts: the models have the same directions) to stay within
    it. The ratio is taken as the decimal it is declared as, so that a control exactly at it is within. Without
    a task circuit within the bound, or without a control whose training reached it, there is nothing to judge."""
    if task_kept is None:
        raise ValueError("the task has no circuit within the bound: there is no kept fraction to compare")
    if not control_kept:
        raise ValueError("the rule needs at least one weight control whose training reached the bound")
    if any(k is None for k in control_kept.values()):
        raise ValueError(f"control counts {control_kept!r}: a control without a count is one whose training failed; "
                         "leave it out (control_counts)")
    ratio = Fraction(str(min_ratio))
    return all(k * ratio.denominator >= ratio.numerator * task_kept for k in control_kept.values())


def control_counts(weights: pd.DataFrame, bound: float, total: int) -> tuple[dict[str, int], list[str]]:
    """The weight controls that count as evidence, with the fewest top-ranked directions within ``bound``, and
    the names of those whose training failed. A control's training failed when its own binarised circuit's
    held-out KL is above the bound: its ranking then says nothing about how many directions the control needs,
    and "none within the bound" is the training's failure, not the control's need (docs/methods.md §1.8). A
    control whose training reached the bound but whose ranking stays within it only with every direction
    needs all ``total``."""
    counts, failed = {}, []
    for row in weights.itertuples():
        if row.kl != row.kl or row.kl > bound:
            failed.append(row.control)
        else:
            kept = _count(row.at_bound_kept)
            counts[row.control] = total if kept is None else kept
    return counts, failed


def kl_ceiling(log_p_full: torch.Tensor, unembed: torch.Tensor, bias: torch.Tensor, radius: float,
               softcap: float | None = None) -> torch.Tensor:
    """[n] The largest KL(p_full ‖ q) any output of the model can have on each prompt, whatever the ablation:
    the final norm holds the residual it reads at norm ``radius`` at most (√d_model for RMSNorm and LayerNorm,
    its gain folded into ``unembed`` [vocab, d]), so every logit is l = unembed · y + bias with ‖y‖ ≤ radius.
    KL = logsumexp(l) − E_p[l] − H(p) ≤ max_u (l_u − E_p[l]) + log V − H(p), and over every such y,
    max_u (l_u − E_p[l]) = max_u (radius · ‖a_u − E_p[a]‖ + b_u − E_p[b]) (a soft-cap c bounds it by 2c too).
    The y along the maximising row's a_u − E_p[a] comes within log V of the bound. An attack whose KL comes near
    this bound has driven the output as far from the full model's as the model can express: the number
    saturates there, by the model's geometry, not by rounding."""
    log_p = log_p_full.double()
    p = log_p.exp()
    A, b = unembed.double(), bias.double()
    mean_a = p @ A  # [n, d]
    squared = (A * A).sum(1)
    distance = (squared[None, :] - 2 * mean_a @ A.T + (mean_a * mean_a).sum(1, keepdim=True)).clamp_min(0).sqrt()
    gap = (radius * distance + b[None, :] - (p @ b)[:, None]).max(1).values  # [n, V] → [n]
    if softcap:
        gap = gap.clamp_max(2 * softcap)
    entropy = -(p * torch.where(p > 0, log_p, torch.zeros_like(log_p))).sum(-1)
    return gap + math.log(A.shape[0]) - entropy


def model_kl_ceiling(model, log_p_full: torch.Tensor) -> torch.Tensor:
    """``kl_ceiling`` for a loaded model: its unembedding with the final norm folded in
    (``helpers.core.weights.unembedding``), the residual at norm √d_model after the norm."""
    from helpers.core.weights import unembedding

    u = unembedding(model, device="cpu")
    return kl_ceiling(log_p_full.cpu(), u.W_U.T, u.b_U, math.sqrt(model.d_model), model.final_logit_softcap)


# --- notebook 07's sections, one call each ----------------------------------------------------------------

def attack_circuits(masked, targets: list[dict], folder: str | Path, rules: dict, control_seed: int = 0,
                    log=print) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each target's circuit file in ``folder`` (checked against the model) and its same-count random control
    (``random_like``, seed ``control_seed``), attacked by ``rules`` on the circuit's own held-out prompts
    (``helpers.singular.validation.adversary.attacked``). Returns one row per (target, circuit or random) and their curves."""
    rows, curves = [], []
    for target in targets:
        circuit = load_circuit(circuit_path(folder, target["label"]), masked.model)
        _, held_out = circuit_prompts(circuit, masked.model)
        evaluator = CircuitEvaluator(masked, held_out, circuit.rule())
        ceiling = float(model_kl_ceiling(masked.model, evaluator.prepared.log_p_full).mean())
        kept = circuit.fixed()
        for which, masks in (("circuit", kept), ("random", random_like(kept, control_seed))):
            started = time.perf_counter()
            result = attacked(evaluator, masks, rules)
            log(f"{target['label']} ({which}): largest KL {result['best_kl']:.3f} "
                f"({time.perf_counter() - started:.0f} s)")
            rows.append(dict(label=target["label"], role=target["role"], circuit=which, kept=circuit.n_kept(),
                             kept_fraction=circuit.n_kept() / circuit.count(), under_rule_kl=result["under_rule_kl"],
                             stochastic_mean_kl=result["stochastic"]["mean"], stochastic_max_kl=result["stochastic"]["max"],
                             adversarial_kl=result["best_kl"], adversarial_kl_in_sample=result["best_kl_in_sample"],
                             kl_ceiling=ceiling, survives=result["survives"],
                             seconds=time.perf_counter() - started))
            curves.append(result["curve"].assign(label=target["label"], circuit=which))
    return pd.DataFrame(rows), pd.concat(curves, ignore_index=True)


def attack_nested_circuits(masked, masks, held_out, rule, rules: dict, shares=None, log=print) -> pd.DataFrame:
    """``adversary.nested_attack`` on ``held_out`` under ``rule``: the nested circuits of ``masks``' learned
    ranking (the default circuit's mask logits) and their random controls (``shares``: the declared
    ``[nested]`` shares by default; ``[]``: no calibration, an empty table)."""
    if shares is not None and len(shares) == 0:
        return pd.DataFrame(columns=["ranking", "share", "kept", "kept_fraction", "survives"])
    return nested_attack(CircuitEvaluator(masked, held_out, rule), masks, rules, shares, log=log)


def calibration(nested: pd.DataFrame | list[dict] | None) -> dict | None:
    """What the nested attack says of the attack itself: the smallest kept share that holds the bound for the
    learned and for the random ranking (None: not even the largest), whether the learned ranking holds at a
    smaller share than random (``ranking_holds_better``), and whether any nested circuit held at all
    (``survivable``: where none did, every "does not survive" is uninformative). None without a calibration."""
    rows = pd.DataFrame(nested if nested is not None else [])
    if rows.empty:
        return None
    learned, random = smallest_surviving_share(rows, "learned"), smallest_surviving_share(rows, "random")
    return dict(smallest_surviving={"learned": learned, "random": random},
                ranking_holds_better=learned is not None and (random is None or learned < random),
                survivable=learned is not None or random is not None,
                largest_share=float(rows["share"].max()))


def seed_spread(masked, run, task_name: str, first: tuple, n_seeds: int, bound: float, control_seeds: int = 3,
                resolution: float = 0.01, progress: bool = True) -> tuple[pd.DataFrame, dict[int, FixedMasks], dict]:
    """The task circuit at ``n_seeds`` training seeds (``run.seed`` and the next ones; each seed draws its own
    prompts, split, batches and noise), each scored on its own held-out prompts. ``first``: (masks, held-out
    prompts) of ``run.seed``, already trained (notebook 02's). Returns one row per seed, the binarised circuits
    and the masks, by seed."""
    rows, circuits, trained = [], {}, {}
    for seed in range(run.seed, run.seed + n_seeds):
        if seed == run.seed:
            masks, held_out = first
        else:
            _, held_out, masks, _ = replace(run, seed=seed).run(masked, task_name, progress=progress)
        row, circuits[seed] = scored_masks(masked, masks, held_out, run.rule(), bound, control_seeds, resolution)
        trained[seed] = masks
        rows.append(dict(seed=seed, **row))
    return pd.DataFrame(rows), circuits, trained


def nonsense_controls(masked, run, train, held_out, kinds, task_circuit: FixedMasks, bound: float, seed: int = 0,
                      control_seeds: int = 3, resolution: float = 0.01, progress: bool = True) -> tuple[pd.DataFrame, dict]:
    """For each kind of nonsense (``helpers.singular.validation.nonsense``), masks trained by ``run`` on the training prompts
    made nonsense (seed ``seed``) and scored on the held-out ones (seed ``seed + 1``), with the Jaccard of their
    circuit with ``task_circuit``. Returns the table and the masks by kind (``matched_overlaps``)."""
    rows, masks = [], {}
    for kind in kinds:
        row, circuit, masks[kind] = control_training(masked, run, nonsense_task(train, kind, seed),
                                                     nonsense_task(held_out, kind, seed + 1), bound, control_seeds,
                                                     resolution, progress)
        rows.append(dict(kind=kind, jaccard_with_task=kept_overlap(circuit, task_circuit), **row))
    return _table(rows, ["kind", "jaccard_with_task"]), masks


def weight_controls(model_name: str, processing: str, run, train, held_out, controls, bound: float, seed: int = 0,
                    device: str = "cpu", control_seeds: int = 3, resolution: float = 0.01, progress: bool = True) -> pd.DataFrame:
    """For each weight control (``helpers.tiled.sites.control_model``), masks trained by ``run`` on the same
    prompts and scored on the same held-out prompts, against the control model's own output. One control model
    in memory at a time."""
    from helpers.singular.masking.masks import MaskedModel
    from helpers.tiled.sites import control_model

    rows = []
    for control in controls:
        masked = MaskedModel(control_model(model_name, control, processing, seed, device))
        row, _, _ = control_training(masked, run, train, held_out, bound, control_seeds, resolution, progress)
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
           weights: pd.DataFrame, rules: dict, total: int, matched: list[dict] | None = None,
           nested: pd.DataFrame | list[dict] | None = None, transfer: dict | None = None) -> dict:
    """The three verdicts of a task, by the declared rules: whether each attacked circuit survives; whether the
    task circuit is task-specific (None without nonsense controls or a second seed); whether the trained
    weights matter to its kept fraction (None without a weight control whose training reached the bound, or
    without a task circuit within it). Beside each of the last two, whether both of its outcomes were
    reachable at these sizes (``helpers.core.feasibility``; ``total``: the directions of the model). With ``matched``
    (``matched_overlaps``), task-specificity also at matched size and corrected for chance
    (``specific_at_matched_size``), the rule that supersedes the size-blind one. With ``nested``
    (``attack_nested_circuits``), the attack's ``calibration``. With ``transfer`` (``transfer_check``), task-specificity
    by transfer, the rule that supersedes both overlap rules (``specificity_key``).
    ``rules``: ``load_attack_rules``, with any overrides of the attack."""
    from helpers.core.feasibility import matched_specificity_reach, specificity_reach, weights_reach

    circuits = attack_table[attack_table["circuit"] == "circuit"]
    seed_jaccards = [j["jaccard"] for j in jaccards]
    nonsense_jaccards = dict(zip(nonsense["kind"], nonsense["jaccard_with_task"])) if len(nonsense) else {}
    task_kept = _count(seeds["at_bound_kept"].iloc[0])
    bound = rules["faithful"]["bound"]
    controls, failed = control_counts(weights, bound, total) if len(weights) else ({}, [])
    specific = specific_reach = None
    if nonsense_jaccards and seed_jaccards:
        threshold = rules["task_specific"]["ratio"] * min(seed_jaccards)
        specific = specificity(nonsense_jaccards, seed_jaccards, rules["task_specific"]["ratio"])
        specific_reach = specificity_reach(int(seeds["kept"].iloc[0]), {r.kind: int(r.kept) for r in nonsense.itertuples()},
                                           threshold, total)
    at_matched = at_matched_reach = threshold_matched = None
    if matched and any(r["pair"] == "seeds" for r in matched) and any(r["pair"] == "nonsense" for r in matched):
        ratio = matched_rule()["ratio"]
        threshold_matched = matched_threshold(matched, ratio)
        at_matched = specific_at_matched_size(matched, ratio)
        at_matched_reach = matched_specificity_reach(matched[0]["k"], matched[0]["n"], threshold_matched)
    matter = matter_reach = None
    if controls and task_kept is not None:
        matter = weights_matter(task_kept, controls, rules["weight_controls"]["min_ratio"])
        matter_reach = weights_reach(task_kept, total, rules["weight_controls"]["min_ratio"])
    return dict(
        survives={r.label: bool(r.survives) for r in circuits.itertuples()},
        attack_steps=max(rules["attack"].checkpoints), bound=bound, total_directions=total,
        task_specific=specific, task_specific_reach=reach_record(specific_reach),
        task_specific_matched=at_matched, task_specific_matched_reach=reach_record(at_matched_reach),
        matched_threshold=threshold_matched,
        task_specific_transfer=None if transfer is None else transfer["specific"],
        task_specific_transfer_reach=None if transfer is None else transfer["reach"],
        nonsense_jaccard=max(nonsense_jaccards.values()) if nonsense_jaccards else None,
        lowest_seed_jaccard=min(seed_jaccards) if seed_jaccards else None,
        task_kept_fraction=_none_if_nan(seeds["at_bound_kept_fraction"].iloc[0]),
        control_kept_fractions=({c: _none_if_nan(f) for c, f in zip(weights["control"], weights["at_bound_kept_fraction"])}
                                if len(weights) else {}),
        controls_training_failed=failed,
        weights_matter=matter, weights_matter_reach=reach_record(matter_reach),
        attack_calibration=calibration(nested))


def judged_from_summary(summary: dict, rules: dict, total: int | None = None) -> dict:
    """``judged`` again, from the rows a notebook-07 summary holds, under today's rules (``total``: the model's
    directions, where the summary predates recording them)."""
    total = summary.get("total_directions") or total
    if not total:
        raise ValueError("the summary does not record the model's number of directions: pass total")
    weights = pd.DataFrame(summary["weight_controls"], columns=["control", *CONTROL_COLUMNS]) \
        if summary["weight_controls"] else pd.DataFrame(columns=["control", *CONTROL_COLUMNS])
    nonsense = pd.DataFrame(summary["nonsense"]) if summary["nonsense"] else \
        pd.DataFrame(columns=["kind", "jaccard_with_task", *CONTROL_COLUMNS])
    return judged(pd.DataFrame(summary["attack_table"]), pd.DataFrame(summary["seeds"]), summary["seed_jaccards"],
                  nonsense, weights, rules, int(total), summary.get("matched_overlaps"), summary.get("nested_attack"),
                  summary.get("transfer"))


def reach_record(reach) -> dict | None:
    """A ``helpers.core.feasibility.Reach`` as a summary holds it (None stays None)."""
    return None if reach is None else dict(yes=reach.yes, no=reach.no, decided_by=reach.decided_by)


def _kl(value: float) -> str:
    """A KL to three decimals; float rounding below zero prints as 0.000, not -0.000."""
    return f"{round(value, 3) + 0.0:.3f}"


def _share(share: float | None) -> str:
    return "none of the shares attacked" if share is None else f"{100 * share:g} %"


def calibration_words(calibrated: dict) -> str:
    """The nested attack's result in words: the smallest kept share that holds, learned against random."""
    smallest = calibrated["smallest_surviving"]
    verdict = ("the learned ranking holds at a smaller share than random" if calibrated["ranking_holds_better"]
               else "the learned ranking holds at no smaller share than random")
    return (f"the attack calibrated on nested circuits: the smallest kept share that holds the bound is "
            f"{_share(smallest['learned'])} by the learned ranking and {_share(smallest['random'])} at random "
            f"({verdict})")


def _yes_no(value) -> str:
    return "not tested" if value is None else ("yes" if value else "no")


def _said(value, reach: dict | None) -> str:
    """A verdict in words: "not tested", "yes", "no", or "uninformative: decided by …" when its other outcome
    was out of reach at the run's sizes."""
    if value is None:
        return "not tested"
    if reach is not None and not (reach["yes"] and reach["no"]):
        return f"uninformative: decided by {reach['decided_by']}"
    return "yes" if value else "no"


def _weights_words(v: dict, summary: dict) -> str:
    """Whether the weights matter, with each control's kept share and the controls whose training failed."""
    failed = v.get("controls_training_failed") or []
    if v.get("weights_matter") is None and not failed:
        return "not tested"
    shares = [f"{row['control']} {100 * row['at_bound_kept_fraction']:.1f} %" for row in summary["weight_controls"]
              if row["control"] not in failed and row["at_bound_kept_fraction"] is not None]
    said = (_said(v["weights_matter"], v.get("weights_matter_reach")) if v["weights_matter"] is not None
            else "not judged, every control's training failed")
    task = v["task_kept_fraction"]
    detail = [f"kept within the bound: {', '.join(shares)} against the trained model's {100 * task:.1f} %"] \
        if shares and task is not None else []
    if failed:
        detail.append(f"training failed for {' and '.join(failed)}: {'its' if len(failed) == 1 else 'their'} own "
                      "trained circuit is not within the bound")
    return said + (f" ({'; '.join(detail)})" if detail else "")


def verdict_line(summary: dict, verdicts: dict | None = None) -> str:
    """One sentence per task for the results page: does its circuit survive the adversary, is it task-specific,
    do the trained weights matter (``verdicts``: ``judged_from_summary``'s, by default the summary's own)."""
    from helpers.core.feasibility import chance_jaccard

    v = verdicts or summary["verdicts"]
    calibrated = v.get("attack_calibration")
    rows = {r["label"]: r for r in summary["attack_table"] if r["circuit"] == "circuit"}

    def held(label):
        said = _yes_no(v["survives"][label])
        if said == "no" and calibrated and not calibrated["survivable"]:
            return (f"no, uninformative: a circuit keeping the top {_share(calibrated['largest_share'])} of directions "
                    "fails too")
        return said

    survived = "; ".join(f"{r['role']} ({100 * r['kept_fraction']:.1f} % kept): {held(label)}, "
                         f"largest KL {r['adversarial_kl']:.2f}"
                         + (f" of at most {r['kl_ceiling']:.0f} on these prompts" if r.get("kl_ceiling") else "")
                         for label, r in rows.items())
    line = f"survives an adversary of {v['attack_steps']} steps (bound KL {v['bound']:g}): {survived}"
    if calibrated:
        line += f"; {calibration_words(calibrated)}"
    specific = f"task-specific: {_said(v['task_specific'], v.get('task_specific_reach'))}"
    if v.get("task_specific_matched") is not None:
        rows = summary["matched_overlaps"]
        seeds, nonsense = matched_extremes(rows)
        specific = (f"task-specific at matched size: {_said(v['task_specific_matched'], v.get('task_specific_matched_reach'))} "
                    f"(every circuit cut to {rows[0]['k']:,} of {rows[0]['n']:,} directions; overlap beyond chance with a "
                    f"nonsense circuit up to {nonsense:.2f}, between seeds from {seeds:.2f}, threshold "
                    f"{v['matched_threshold']:.2f}); the size-blind Jaccard rule: "
                    f"{_said(v['task_specific'], v.get('task_specific_reach'))}")
    elif v["task_specific"] is not None:
        closest = max(summary["nonsense"], key=lambda r: (r["jaccard_with_task"], r["kind"]))
        chance = (f" (chance at these sizes {chance_jaccard(summary['seeds'][0]['kept'], closest['kept'], v['total_directions']):.2f})"
                  if v.get("total_directions") else "")
        specific += (f"; Jaccard with a nonsense circuit up to {v['nonsense_jaccard']:.2f}{chance}, between seeds from "
                     f"{v['lowest_seed_jaccard']:.2f}")
    if v.get("task_specific_transfer") is not None:
        from helpers.singular.validation.transfer import transfer_detail

        found = summary["transfer"]
        specific = (f"task-specific by transfer: {_said(v['task_specific_transfer'], v.get('task_specific_transfer_reach'))} "
                    f"(the second seed's and each nonsense circuit cut to {found['k']:,} of {found['n']:,} directions and "
                    f"scored on the task: {transfer_detail(found, [r['kind'] for r in found['rows']])}); {specific}")
    return f"{line}; {specific}; the trained weights matter: {_weights_words(v, summary)}"


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


def specificity_key(verdicts: dict) -> str:
    """The task-specificity verdict that stands: by transfer where it was judged (it supersedes both overlap
    rules), else at matched size where that was judged (it supersedes the size-blind rule), else the size-blind one."""
    for key in ("task_specific_transfer", "task_specific_matched"):
        if verdicts.get(key) is not None:
            return key
    return "task_specific"


def transfer_lines(summary: dict) -> list[str]:
    """The closing cell's lines on task-specificity by transfer (``transfer_check``): the verdict over the nonsense
    kinds, and the third seed posed as nonsense, the case known to be no; none where the run did not judge it."""
    from helpers.singular.validation.transfer import transfer_detail

    found = summary.get("transfer")
    if not found:
        return []
    v = summary["verdicts"]
    lines = [f"- **Task-specific by transfer?** {_said(v['task_specific_transfer'], v.get('task_specific_transfer_reach'))}: "
             f"the {found['reference']} circuit and each nonsense circuit cut to {found['k']:,} of {found['n']:,} directions "
             f"and scored on {found['prompts']} held-out task prompts ({transfer_detail(found, [r['kind'] for r in found['rows']])}; "
             f"a random circuit of that size: KL {found['random_kl']:.3f})."]
    if found.get("posed"):
        posed = dict(found, rows=[found["posed"]])
        lines.append(f"  - The case known to be no, {found['posed']['kind']} scored as if it were nonsense: "
                     f"{'specific' if found['posed_specific'] else 'not specific'} "
                     f"({transfer_detail(posed, [found['posed']['kind']])}).")
    return lines


def controls_title(task: str, verdicts: dict) -> str:
    """The controls figure's point, from the verdicts (a verdict its sizes decided says so)."""
    key = specificity_key(verdicts)
    specific = {None: "task-specificity not tested", True: "the circuit is task-specific",
                False: "the circuit is NOT task-specific"}[verdicts[key]]
    if _said(verdicts[key], verdicts.get(key + "_reach")).startswith("uninformative"):
        specific = f"task-specificity decided by {verdicts[key + '_reach']['decided_by'].split(':')[0]}"
    weights = {None: "untrained weights not compared", True: "untrained weights need clearly more directions",
               False: "untrained weights need no clearly larger share"}[verdicts["weights_matter"]]
    if _said(verdicts["weights_matter"], verdicts.get("weights_matter_reach")).startswith("uninformative"):
        weights = "the weights verdict decided by set sizes"
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
                     "at worst under attack"
                     + (f" (in sample {_kl(row['adversarial_kl_in_sample'])})" if row.get("adversarial_kl_in_sample")
                        is not None else "") + ".")
    for row in summary.get("nested_attack") or []:
        how = (f"not attacked: {row['inferred']}" if row.get("inferred") else
               f"largest KL {_kl(row['adversarial_kl'])} (in sample {_kl(row['adversarial_kl_in_sample'])})"
               + (f", stopped at step {int(row['stopped_at'])}" if row.get("stopped_at") is not None else ""))
        lines.append(f"  - top {_share(row['share'])} by the {row['ranking']} ranking ({row['kept']:,} directions): "
                     f"{'holds' if row['survives'] else 'fails'}; {how}.")
    seeds = summary["seeds"]
    kept = ", ".join(f"{100 * s['kept_fraction']:.1f} % (KL {s['kl']:.2f})" for s in seeds)
    lines.append(f"- **Seed spread** ({len(seeds)} seeds, default α): kept {kept}; Jaccard between seeds "
                 + (", ".join(f"{j['jaccard']:.2f}" for j in summary["seed_jaccards"]) or "not measured") + ".")
    for row in summary["nonsense"]:
        at = (f"{100 * row['at_bound_kept_fraction']:.1f} % kept at KL {row['at_bound_kl']:.2f}"
              if row["at_bound_kept_fraction"] is not None else f"no circuit within KL {bound:g}")
        lines.append(f"- **Nonsense ({row['kind'].replace('_', ' ')}):** {at}; Jaccard with the task circuit "
                     f"{row['jaccard_with_task']:.2f}.")
    lines += transfer_lines(summary)
    task_at = v["task_kept_fraction"]
    for row in summary["weight_controls"]:
        at = (f"{100 * row['at_bound_kept_fraction']:.1f} % kept at KL {row['at_bound_kl']:.2f}"
              if row["at_bound_kept_fraction"] is not None else f"no circuit within KL {bound:g}")
        lines.append(f"- **Weights {row['control']}:** {at}, against the trained model's "
                     + (f"{100 * task_at:.1f} %" if task_at is not None else f"none within KL {bound:g}") + ".")
    lines.append(f"- **Do the trained weights matter to the kept fraction?** {_weights_words(v, summary)}.")
    if fast:
        lines += ["", "*A fast run (the CI sizes): these numbers only show that the notebook runs.*"]
    elif summary.get("attack_variant"):
        lines += ["", f"*The attack is a labelled variant of the declared one ({summary['attack_variant']}).*"]
    return "\n".join(lines)
