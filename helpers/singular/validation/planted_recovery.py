"""Scoring masks against a planted mechanism (docs/methods.md §1.9): the ground truth, recall and AUROC,
necessity, and notebook 08's run over the declared sites and strengths.

The ground truth of a plant (``helpers.singular.validation.planted``) is the planted head's singular directions whose read
and write vectors both put at least a declared energy share in the plant's subspaces. Trained masks recover it
when they keep it at their own cut and rank it above the other directions (AUROC of the mask logits, as
InterpBench scores components). The plant is necessary to the task when mean-ablating only those directions
removes its logit-difference gain and a same-count random set of the head's directions does not. Every rule
is read from ``data/planted_mechanisms.toml``, declared before the first run.
"""
from __future__ import annotations

import gc
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from helpers.core.declared import load_declared
from helpers.core.weights import layer_weights
from helpers.singular.directions.augmented import layer_svds
from helpers.singular.masking.circuits import beats_random_by

if TYPE_CHECKING:
    from helpers.singular.validation.planted import Plant

PLANT_RULES = Path(__file__).resolve().parents[3] / "data" / "planted_mechanisms.toml"
RULE_KEYS = {"plant": {"n_pairs", "pairs_seed", "qk_boost", "ridge", "probe_prompts", "effect_prompts",
                       "negative_texts", "unrelated_texts", "share", "why"},
             "drives_task": {"min_accuracy"}, "recovered": {"min_recall", "min_auroc"},
             "necessary": {"max_remaining", "min_remaining_random", "bootstrap"}, "unplanted": {"circuit_ratio"},
             "attack_calibration": {"inert_relative_sigma"}, "specificity": {"second_seed", "kinds"},
             "specificity_without_triggers": {"kind"},
             "paper2": {"model", "site", "layer", "tile", "token", "strength", "n_tokens", "n_texts"}}
SITE_KEYS = {"name", "layer", "head", "strengths"}
WITHOUT_TRIGGERS = "random_tokens_without_triggers"  # the nonsense that cannot fire the plant (planted_specificity)


def load_plant_rules(path: str | Path = PLANT_RULES) -> dict:
    """The declared plants and rules: every key of every section present and none unknown; each site holds
    exactly name, layer, head and strengths."""
    table = load_declared(path, RULE_KEYS)
    sites = table.get("sites") or []
    if not sites:
        raise ValueError(f"{path}: no [[sites]] declared: declare at least one site (name, layer, head, strengths)")
    for site in sites:
        if set(site) != SITE_KEYS:
            raise ValueError(f"{path}: a [[sites]] entry must hold exactly {sorted(SITE_KEYS)}; got {sorted(site)}")
        if not site["strengths"] or any(s <= 0 for s in site["strengths"]):
            raise ValueError(f"{path}: site {site['name']!r} strengths={site['strengths']}: expected strengths > 0")
    return table


def chosen_sites(rules: dict, subset: dict | None = None) -> list[dict]:
    """The declared sites, or the declared ``subset`` ({site name: [strengths…]}, each one declared) of them."""
    sites = {s["name"]: s for s in rules["sites"]}
    if subset is None:
        return list(sites.values())
    out = []
    for name, strengths in subset.items():
        if name not in sites:
            raise ValueError(f"sites={{{name!r}: …}}: no such declared site; declared: {sorted(sites)}")
        unknown = [s for s in strengths if float(s) not in sites[name]["strengths"]]
        if unknown or not strengths:
            raise ValueError(f"sites={{{name!r}: {strengths}}}: strengths {unknown or strengths} are not among the "
                             f"declared {sites[name]['strengths']} (data/planted_mechanisms.toml): choose from those")
        out.append({**sites[name], "strengths": [float(s) for s in strengths]})
    return out




def energy_share(vectors: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """[r] the share of each unit column of ``vectors`` [m, r] that lies in span(``basis`` [m', k]); where
    m = m' + 1 the first row (the augmented bias coordinate) is outside the basis."""
    V = vectors.double()
    if V.shape[0] == basis.shape[0] + 1:
        V = V[1:]
    return ((basis.double().T @ V) ** 2).sum(0) / (vectors.double() ** 2).sum(0)


def planted_directions(model, plant: Plant, share: float = 0.5) -> dict[str, list[int]]:
    """The planted head's singular directions of the planted model (``model``) whose read and write vectors
    both put at least ``share`` of their energy in the plant's subspaces: {"ov": [k…], "qk": [k…]}, by
    index in the head's SVD (the masks' order)."""
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share={share}: expected a fraction in (0, 1]")
    svds = layer_svds(layer_weights(model, plant.spec.layer, device="cpu"))
    h = plant.spec.head
    out = {}
    for kind, read, write in (("ov", plant.ov_read, plant.ov_write), ("qk", plant.qk_query, plant.qk_key)):
        svd = svds[kind]
        live = svd.S[h] > svd.S[h].max() * 1e-6
        both = (energy_share(svd.U[h], read) >= share) & (energy_share(svd.V[h], write) >= share) & live
        out[kind] = [int(k) for k in torch.nonzero(both).flatten()]
    return out


def block_offsets(blocks: dict[str, torch.Tensor]) -> dict[str, int]:
    """Where each block starts in the blocks' flat concatenation (their order)."""
    out, offset = {}, 0
    for name, block in blocks.items():
        out[name] = offset
        offset += block.numel()
    return out


def flat_indices(blocks: dict[str, torch.Tensor], layer: int, head: int, directions: dict[str, list[int]]) -> list[int]:
    """Flat indices (blocks concatenated in order) of one head's directions {"ov": [k…], "qk": [k…]}."""
    offsets = block_offsets(blocks)
    out = []
    for kind, ks in directions.items():
        block = blocks[f"{layer}_{kind}"]
        out += [offsets[f"{layer}_{kind}"] + head * block.shape[-1] + k for k in ks]
    return sorted(out)


def mid_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks in descending order, ties sharing the mean of their ranks."""
    order = np.argsort(-values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    sorted_values = values[order]
    start = 0
    while start < len(values):
        stop = start
        while stop + 1 < len(values) and sorted_values[stop + 1] == sorted_values[start]:
            stop += 1
        ranks[order[start:stop + 1]] = (start + stop) / 2 + 1
        start = stop + 1
    return ranks


def auroc(scores: np.ndarray, positive: np.ndarray) -> float:
    """P(score of a random positive > score of a random negative), ties counting one half (Mann–Whitney)."""
    scores, positive = np.asarray(scores, dtype=np.float64), np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"AUROC needs positives and negatives; got {n_pos} and {n_neg}")
    ascending = len(scores) + 1 - mid_ranks(scores)
    return float((ascending[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def recovery(logits: dict[str, torch.Tensor], truth: list[int]) -> dict:
    """How trained masks (their logits, blocks in order) score the planted directions (flat indices):
    recall at the masks' own cut (logit > 0), each planted direction's rank among all (1 = largest logit,
    ties mid-ranked), and the AUROC of the logits for planted against all others."""
    if not truth:
        raise ValueError("no planted direction to score: the plant left none above the declared energy share")
    flat = torch.cat([v.detach().reshape(-1).double().cpu() for v in logits.values()]).cpu().numpy()
    positive = np.zeros(len(flat), dtype=bool)
    positive[truth] = True
    ranks = mid_ranks(flat)[positive]
    return dict(n_planted=len(truth), recall=float((flat[positive] > 0).mean()), kept=int((flat > 0).sum()),
                total=len(flat), worst_rank=float(ranks.max()), median_rank=float(np.median(ranks)),
                auroc=auroc(flat, positive))


def kept_by_kind(logits: dict[str, torch.Tensor], layer: int, head: int, truth: dict[str, list[int]]) -> dict[str, dict]:
    """Per kind of the ground truth ("ov", "qk"): how many of its directions the masks keep at their own cut
    (logit > 0), of how many, and their logits."""
    out = {}
    for kind, ks in truth.items():
        values = logits[f"{layer}_{kind}"][head, ks].double() if ks else torch.zeros(0, dtype=torch.float64, device="cpu")
        out[kind] = dict(kept=int((values > 0).sum()), of=len(ks), logits=values.tolist())
    return out


def random_directions(blocks: dict[str, torch.Tensor], layer: int, head: int, truth: dict[str, list[int]],
                      seed: int = 0) -> dict[str, list[int]]:
    """As many directions of each kind as ``truth`` holds, drawn at random (``seed``) from the same head's
    other directions: the same-count random set that necessity and recovery are compared with."""
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for kind, ks in truth.items():
        width = blocks[f"{layer}_{kind}"].shape[-1]
        others = torch.tensor([k for k in range(width) if k not in ks], device="cpu")
        if len(others) < len(ks):
            raise ValueError(f"L{layer}.H{head} {kind}: {len(ks)} planted directions but only {len(others)} others to draw "
                             f"a same-count random set from: plant fewer pairs (n_pairs) or into a wider head")
        out[kind] = sorted(others[torch.randperm(len(others), generator=generator, device="cpu")[: len(ks)]].tolist())
    return out


def ablation_masks(blocks: dict[str, torch.Tensor], layer: int, head: int, off: dict[str, list[int]]) -> dict[str, torch.Tensor]:
    """Mask values with one head's directions ``off`` ({"ov": [k…], "qk": [k…]}) at 0 and every other at 1."""
    values = {name: torch.ones_like(b) for name, b in blocks.items()}
    for kind, ks in off.items():
        values[f"{layer}_{kind}"][head, ks] = 0.0
    return values


def remaining_share(ablated: torch.Tensor, planted: torch.Tensor, unplanted: torch.Tensor, n_boot: int = 2000,
                    seed: int = 0) -> dict:
    """The share of the plant's gain that an ablation leaves: (mean ablated − mean unplanted) / (mean planted −
    mean unplanted) of a per-prompt metric on the same prompts, with a 95 % CI from a paired bootstrap over
    prompts (percentile). 1: the ablation changed nothing; 0: it brought the metric back to the unplanted
    model's. None where the plant adds nothing (its gain is not positive)."""
    a, p, u = (torch.as_tensor(x, dtype=torch.float64, device="cpu") for x in (ablated, planted, unplanted))
    if not a.shape == p.shape == u.shape or a.ndim != 1:
        raise ValueError(f"per-prompt metrics of the same prompts expected; got shapes {a.shape}, {p.shape}, {u.shape}")
    gain = float((p - u).mean())
    if gain <= 0:
        return dict(share=None, low=None, high=None, gain=gain)
    rows = torch.randint(len(a), (n_boot, len(a)), generator=torch.Generator().manual_seed(seed), device="cpu")
    boot = (a[rows] - u[rows]).mean(1) / (p[rows] - u[rows]).mean(1)
    low, high = torch.quantile(boot, torch.tensor([0.025, 0.975], dtype=torch.float64, device="cpu")).tolist()
    return dict(share=float((a - u).mean()) / gain, low=low, high=high, gain=gain)


def metric_per_prompt(masked, task, rule, values: dict[str, torch.Tensor] | None = None) -> torch.Tensor:
    """[n] the logit difference of ``task`` with the masks ``values`` applied under ``rule`` (None: the model
    itself), on the CPU."""
    from helpers.singular.masking.masks import FixedMasks
    from helpers.singular.masking.references import prepare
    from helpers.singular.tasks import logit_diff

    task = task.to(masked.model.device)
    with torch.no_grad():
        if values is None:
            logits = masked.final_logits(task.clean, task.answer_pos)
        else:
            references = prepare(masked, task, rule).references
            logits = masked.masked_final_logits(FixedMasks(values), rule, task.clean, task.answer_pos, references)
    return logit_diff(logits, task).double().cpu()


# --- verdicts ------------------------------------------------------------------------------------------------

def drives_task(accuracy: float, rules: dict) -> bool:
    """The plant drives the task: held-out accuracy at least the declared minimum."""
    return accuracy >= rules["drives_task"]["min_accuracy"]


def recovered(scores: dict | None, rules: dict) -> bool | None:
    """The masks recover the plant: recall and AUROC at least the declared minima (None: no ground truth)."""
    if scores is None:
        return None
    return scores["recall"] >= rules["recovered"]["min_recall"] and scores["auroc"] >= rules["recovered"]["min_auroc"]


def necessary(planted: dict | None, random: dict | None, rules: dict) -> bool | None:
    """Ablating the plant removes its gain (the CI's upper end at most ``max_remaining``) and the same-count random
    set does not (its CI's lower end at least ``min_remaining_random``). None where either share is undefined."""
    if planted is None or random is None or planted["share"] is None or random["share"] is None:
        return None
    rule = rules["necessary"]
    return planted["high"] <= rule["max_remaining"] and random["low"] >= rule["min_remaining_random"]


def beats_random(kl: float, random_kl: float, rules: dict) -> bool:
    """A circuit beats its random control: the random control's held-out KL is at least ``circuit_ratio`` times
    the circuit's."""
    return beats_random_by(kl, random_kl, rules["unplanted"]["circuit_ratio"])


# --- notebook 08's run ---------------------------------------------------------------------------------------

def prompt_sets(model, rules: dict, n_masking: int, seed: int = 0, fast: bool = False) -> dict:
    """The pairs and the disjoint prompt sets of one run: probes, effects, masking (split half/half into the
    masks' training and held-out prompts, as notebook 02 splits), and the unrelated texts (the probes' negatives,
    the plant's KL measured on others)."""
    from helpers.singular.validation.planted import draw_pairs, planted_sets, unrelated_tokens

    plant = rules["plant"]
    scale = 4 if fast else 1
    pairs = draw_pairs(model.tokenizer, plant["n_pairs"], plant["pairs_seed"])
    sets = planted_sets(model, pairs, dict(probe=plant["probe_prompts"] // scale, effects=plant["effect_prompts"] // scale,
                                           masking=n_masking), seed)
    train, held_out = sets["masking"].task.split(0.5, seed=seed)
    unrelated_n = max(plant["unrelated_texts"] // scale, 2)
    return dict(pairs=pairs, probe=sets["probe"], effects=sets["effects"], train=train, held_out=held_out,
                unrelated=unrelated_tokens(model, n=unrelated_n),
                negatives=unrelated_tokens(model, n=max(plant["negative_texts"] // scale, 2), skip=unrelated_n))


def judged_masks(masked, masks, sets: dict, run, control_seeds: int) -> dict:
    """The trained masks' circuit on the held-out prompts (``evaluate_circuit``: kept share, KL, its random
    control's KL) and the logit difference it keeps."""
    from helpers.singular.masking.circuits import CircuitEvaluator, evaluate_circuit
    from helpers.singular.masking.masks import FixedMasks

    evaluator = CircuitEvaluator(masked, sets["held_out"], run.rule())
    row = evaluate_circuit(evaluator, FixedMasks.binarised(masks), control_seeds)
    return {k: row[k] for k in ("kept", "kept_fraction", "kl", "random_kl", "metric", "full_metric", "random_metric")}


def declared_overlaps(matched: list[dict]) -> list[dict]:
    """The matched-size rows ``[specificity]`` judges: every pair of seeds and the declared kinds of nonsense."""
    return [r for r in matched if r["b"] != WITHOUT_TRIGGERS]


def trigger_free_overlaps(matched: list[dict]) -> list[dict]:
    """The matched-size rows ``[specificity_without_triggers]`` judges: every pair of seeds and the nonsense
    without the plant's triggers."""
    return [r for r in matched if r["pair"] == "seeds" or r["b"] == WITHOUT_TRIGGERS]


def transfer_rows(found: dict, without_triggers: bool) -> list[dict]:
    """One side of a plant's task-specificity by transfer (``planted_specificity``'s ``transfer``): the row of the
    nonsense without the plant's triggers, or the rows of the declared kinds, which hold them."""
    return [r for r in found["rows"] if (r["kind"] == WITHOUT_TRIGGERS) == without_triggers]


def planted_specificity(masked, masks, sets: dict, run, rules: dict, k: int, progress: bool = True) -> dict:
    """Notebook 07's task-specificity at matched size on a planted circuit (``[specificity]``): a second training
    seed on its own draw of planted prompts and, per declared kind, masks trained on the training prompts made
    nonsense; every circuit cut to ``k`` (the planted circuit's count) by its own mask logits and the overlaps
    corrected for chance (``matched_overlaps``). Returns those rows, 07's declared ratio, the threshold
    (``matched_threshold``), the verdict against the declared kinds (``specific_at_matched_size``; None when the
    circuit keeps every direction or none), whether both outcomes were reachable at these sizes, the share of each
    nonsense's prompts that hold a trigger (``trigger_share``), ``without_triggers``: the same rule against
    random tokens that leave the plant's triggers out (``[specificity_without_triggers]``), the case known to be
    yes, with its verdict and overlap, and ``transfer``: the same circuits judged by task-specificity by transfer
    (``helpers.singular.validation.transfer``, ``data/task_transfer.toml``) on the held-out prompts no compared
    circuit trained on, against the declared kinds (``specific``) and against the nonsense without the triggers
    (``specific_without_triggers``)."""
    from dataclasses import replace

    from helpers.core.feasibility import matched_specificity_reach
    from helpers.singular.masking.circuits import CircuitEvaluator
    from helpers.singular.masking.training import train_masks
    from helpers.singular.validation.adversary import load_attack_rules
    from helpers.singular.validation.nonsense import holding_share, nonsense_task
    from helpers.singular.validation.planted import planted_task
    from helpers.singular.validation.transfer import (load_transfer_rule, specific_by_transfer, transfer_scores,
                                                      unseen_prompts)
    from helpers.singular.validation.verdicts import (matched_overlaps, matched_rule, matched_threshold, reach_record,
                                                      specific_at_matched_size)

    declared, ratio = rules["specificity"], matched_rule()["ratio"]
    other = replace(run, seed=run.seed + declared["second_seed"])
    other_train, _ = planted_task(masked.model, sets["pairs"], run.n_prompts, other.seed).task.split(0.5, seed=other.seed)
    seed_masks = {run.seed: masks,
                  other.seed: train_masks(masked, other_train, other.rule(), other.train_config(), progress=progress)[0]}
    triggers = tuple(sets["pairs"].trigger_ids)
    tasks = {kind: nonsense_task(sets["train"], kind, run.seed) for kind in declared["kinds"]}
    tasks[WITHOUT_TRIGGERS] = nonsense_task(sets["train"], rules["specificity_without_triggers"]["kind"], run.seed,
                                            exclude=triggers)
    nonsense = {kind: train_masks(masked, task, run.rule(), run.train_config(), progress=progress)[0]
                for kind, task in tasks.items()}
    share = {kind: holding_share(task, triggers) for kind, task in tasks.items()}
    matched = matched_overlaps(seed_masks, nonsense, k)
    if not matched:
        return dict(matched=[], ratio=ratio, threshold=None, specific=None, reach=None, trigger_share=share,
                    without_triggers=None, transfer=None)
    threshold = matched_threshold(matched, ratio)
    free = trigger_free_overlaps(matched)
    held_out, dropped = unseen_prompts(sets["held_out"], sets["train"], other_train)
    bound = load_attack_rules()["faithful"]["bound"]
    transfer = transfer_scores(CircuitEvaluator(masked, held_out, run.rule()), seed_masks[other.seed], nonsense, k,
                               bound, load_transfer_rule())
    transfer.update(dropped_prompts=dropped, specific=specific_by_transfer(transfer_rows(transfer, False), bound),
                    specific_without_triggers=specific_by_transfer(transfer_rows(transfer, True), bound))
    return dict(matched=matched, ratio=ratio, threshold=threshold,
                specific=specific_at_matched_size(declared_overlaps(matched), ratio),
                reach=reach_record(matched_specificity_reach(k, matched[0]["n"], threshold)), trigger_share=share,
                without_triggers=dict(kind=WITHOUT_TRIGGERS, specific=specific_at_matched_size(free, ratio),
                                      corrected=next(r["corrected"] for r in free if r["pair"] == "nonsense")),
                transfer=transfer)


def plant_and_recover(base, site: dict, strength: float, sets: dict, run, rules: dict, unplanted_metric: torch.Tensor,
                      control_seeds: int = 3, progress: bool = True, paper_rule_run=None,
                      specificity: bool = False) -> tuple[dict, dict]:
    """One declared plant, start to end: design it on the unplanted ``base`` (its probes on the probe prompts), write
    it into a fresh copy, measure what it does (accuracy, attention, KL on unrelated text), find its ground
    truth, train notebook 02's masks (``run``) on the planted task, and score them: recall, ranks and AUROC
    (beside a same-count random set of the head's directions scored the same way), the circuit against its
    random control, and necessity (mean-ablating the ground truth, and the random set). With ``paper_rule_run``
    (our training under paper 1's ablation rule, as notebook 02's ledger runs it), its masks' recall and AUROC
    too (``paper_rule``). With ``specificity``, notebook 07's task-specificity rule on its circuit
    (``planted_specificity``). Returns (the row, the trained masks' logits)."""
    from helpers.singular.masking.masks import AblationRule, MaskedModel
    from helpers.singular.validation.planted import PlantSpec, design_plant, plant_effects, planted_model
    from helpers.singular.masking.training import train_masks

    plant_rules = rules["plant"]
    spec = PlantSpec(site["layer"], site["head"], float(strength), qk_boost=plant_rules["qk_boost"],
                     n_pairs=plant_rules["n_pairs"], ridge=plant_rules["ridge"], seed=plant_rules["pairs_seed"])
    plant = design_plant(base, spec, sets["probe"], sets["negatives"])
    model = planted_model(base.name, plant, base.processing, base.device)
    effects = plant_effects(model, base, sets["effects"], spec, sets["unrelated"])
    truth = planted_directions(model, plant, plant_rules["share"])
    masked = MaskedModel(model)
    masks, history = train_masks(masked, sets["train"], run.rule(), run.train_config(), progress=progress)
    logits = {name: p.detach().cpu() for name, p in masks.logits.items()}
    found = sum(len(v) for v in truth.values())
    decoy = random_directions(logits, spec.layer, spec.head, truth, seed=plant_rules["pairs_seed"])
    scores = recovery(logits, flat_indices(logits, spec.layer, spec.head, truth)) if found else None
    decoy_scores = recovery(logits, flat_indices(logits, spec.layer, spec.head, decoy)) if found else None
    by_kind = kept_by_kind(logits, spec.layer, spec.head, truth)
    circuit = judged_masks(masked, masks, sets, run, control_seeds)
    mean = AblationRule.uniform("mean", "all")
    planted_metric = metric_per_prompt(masked, sets["held_out"], mean)
    n_boot = rules["necessary"]["bootstrap"]
    remaining = {label: remaining_share(metric_per_prompt(masked, sets["held_out"], mean,
                                                          ablation_masks(logits, spec.layer, spec.head, off)),
                                        planted_metric, unplanted_metric, n_boot, seed=plant_rules["pairs_seed"])
                 for label, off in (("planted", truth), ("random", decoy))} if found else {"planted": None, "random": None}
    paper_rule = None
    if paper_rule_run is not None and found:
        rule_masks, rule_history = train_masks(masked, sets["train"], paper_rule_run.rule(),
                                               paper_rule_run.train_config(), progress=progress)
        rule_logits = {name: p.detach().cpu() for name, p in rule_masks.logits.items()}
        rule_scores = recovery(rule_logits, flat_indices(rule_logits, spec.layer, spec.head, truth))
        paper_rule = dict(run=paper_rule_run, recovery=rule_scores, recovered=recovered(rule_scores, rules),
                          kept_by_kind=kept_by_kind(rule_logits, spec.layer, spec.head, truth),
                          train_kl=float(rule_history["kl"].iloc[-1]))
    specific = planted_specificity(masked, masks, sets, run, rules, circuit["kept"], progress) if specificity else None
    row = dict(site=site["name"], layer=spec.layer, head=spec.head, strength=spec.ov_strength, model=model.name,
               sigma_ov=plant.sigma_ov, head_sigma_ov=plant.head_sigma_ov, sigma_qk_ratio=plant.sigma_qk / plant.head_sigma_qk,
               **{k: v for k, v in effects.items() if k not in ("ov_strength", "qk_boost")},
               truth=truth, n_truth=found, random_set=decoy, recovery=scores, random_recovery=decoy_scores,
               kept_by_kind=by_kind,
               circuit=circuit, train_kl=float(history["kl"].iloc[-1]), remaining=remaining,
               drives_task=drives_task(effects["accuracy"], rules), recovered=recovered(scores, rules),
               necessary=necessary(remaining["planted"], remaining["random"], rules),
               circuit_beats_random=beats_random(circuit["kl"], circuit["random_kl"], rules), paper_rule=paper_rule,
               specificity=specific)
    del masked, model
    gc.collect()
    return row, logits


def unplanted_control(base, sets: dict, run, rules: dict, control_seeds: int = 3, progress: bool = True) -> dict:
    """The negative control: the unplanted model on the same prompts, at chance by construction. Its accuracy
    and logit difference, and the same recipe's circuit against its random control."""
    from helpers.singular.masking.masks import MaskedModel
    from helpers.singular.validation.planted import PlantSpec, plant_effects
    from helpers.singular.masking.training import train_masks

    plant_rules = rules["plant"]
    spec = PlantSpec(0, 0, 0.0, qk_boost=0.0, n_pairs=plant_rules["n_pairs"])
    effects = plant_effects(base, base, sets["effects"], spec, sets["unrelated"])
    masked = MaskedModel(base)
    masks, history = train_masks(masked, sets["train"], run.rule(), run.train_config(), progress=progress)
    circuit = judged_masks(masked, masks, sets, run, control_seeds)
    return dict(model=base.name, accuracy=effects["accuracy"], accuracy_se=effects["accuracy_se"],
                logit_diff=effects["logit_diff"], logit_diff_se=effects["logit_diff_se"], chance=effects["chance"],
                circuit=circuit, train_kl=float(history["kl"].iloc[-1]),
                circuit_beats_random=beats_random(circuit["kl"], circuit["random_kl"], rules))


def recover_plants(base, sites: list[dict], sets: dict, run, rules: dict, control_seeds: int = 3,
                   progress: bool = True, paper_rule_run=None) -> tuple[list[dict], dict]:
    """Every declared plant (``plant_and_recover``, sites in order, strengths ascending) and the unplanted control
    on the same prompts; at each site's strongest plant also notebook 07's task-specificity rule and, with
    ``paper_rule_run``, masks trained under paper 1's ablation rule. Each plant's masks are cached by
    ``train_masks``, so an interrupted run resumes at the first plant not yet trained. Returns (one row per plant, the control)."""
    import time

    from helpers.singular.masking.masks import AblationRule, MaskedModel

    unplanted_metric = metric_per_prompt(MaskedModel(base), sets["held_out"], AblationRule.uniform("mean", "all"))
    rows, total, start = [], sum(len(s["strengths"]) for s in sites), time.time()
    for site in sites:
        for strength in sorted(site["strengths"]):
            strongest = strength == max(site["strengths"])
            row, _ = plant_and_recover(base, site, strength, sets, run, rules, unplanted_metric, control_seeds, progress,
                                       paper_rule_run if strongest else None, specificity=strongest)
            rows.append(row)
            print(f"[{len(rows)}/{total}] {site['name']} L{site['layer']}.H{site['head']} ×{strength:g}: accuracy "
                  f"{row['accuracy']:.2f}, recall {row['recovery']['recall'] if row['recovery'] else float('nan'):.2f}, "
                  f"AUROC {row['recovery']['auroc'] if row['recovery'] else float('nan'):.3f} "
                  f"({time.time() - start:.0f} s)", flush=True)
    control = unplanted_control(base, sets, run, rules, control_seeds, progress)
    return rows, control


# --- what notebook 08 found ------------------------------------------------------------------------------------

def kept_over(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """Per kind ("ov", "qk"), over ``rows`` (plants), the ground-truth directions kept and their number."""
    return {kind: (sum(r["kept_by_kind"][kind]["kept"] for r in rows), sum(r["kept_by_kind"][kind]["of"] for r in rows))
            for kind in ("ov", "qk")}


def share_text(share: dict | None) -> str:
    """A remaining share with its 95 % CI, or why there is none."""
    if share is None:
        return "no ground truth"
    if share["share"] is None:
        return "not defined: the plant adds no logit difference"
    return f"{share['share']:.2f} ({share['low']:.2f} to {share['high']:.2f})"


def _nats(kl: float) -> str:
    """A KL in nats to three decimals, float rounding below zero shown as 0."""
    return f"{max(kl, 0.0):.3f}"


def _kinds_text(kept: dict) -> str:
    return ", ".join(f"{kept[kind]['kept']} of {kept[kind]['of']}" for kind in ("ov", "qk"))


def _verdict(value: bool | None, yes: str, no: str) -> str:
    return "not judged" if value is None else (yes if value else no)


def attack_lines(summary: dict) -> list[str]:
    """The adversary's positive control in words (``helpers.singular.validation.attack_calibration``), if the run made it."""
    rows = {r["circuit"]: r for r in summary.get("attack_calibration") or []}
    if not rows:
        return []
    inert, random, verdict = rows["inert"], rows["random"], summary["attack_verdict"]
    return [f"- **The adversary's positive control**: leaving out only the {inert['left_out']} inert directions (σ ≈ 0), "
            f"the largest KL it finds is {_nats(inert['adversarial_kl'])} (bound {inert['bound']:g}): the attack "
            f"{'can say yes' if verdict['says_yes'] else 'breaks even a circuit known to hold'}. The same count left out "
            f"at random: {_nats(random['adversarial_kl'])}, "
            f"{'broken, so it tells the two apart' if verdict['tells_apart'] else 'so at this count it does not tell them apart'}."]


CHECKS = ("A1", "A2", "A4", "B1", "C1")


def checks_words(checks: dict) -> str:
    """Paper 2's checks at one site-layer in words: "A1 yes, …, C1 not judged"."""
    return ", ".join(f"{c} {_verdict(checks[c], 'yes', 'no')}" for c in CHECKS)


def specificity_words(row: dict) -> str | None:
    """Notebook 07's task-specificity rule on one plant's circuit, in words ("middle ×8: specific (…)"): against the
    declared kinds of nonsense, how often their prompts hold a trigger, and against nonsense without the triggers;
    None where the rule was not run at that plant."""
    from helpers.singular.validation.verdicts import matched_extremes

    found = row.get("specificity")
    if found is None:
        return None
    where = f"{row['site']} ×{row['strength']:g}"
    if found["specific"] is None:
        return f"{where}: not judged (the circuit keeps every direction or none)"
    seeds, nonsense = matched_extremes(declared_overlaps(found["matched"]))
    k, n = found["matched"][0]["k"], found["matched"][0]["n"]
    decided = (found["reach"] or {}).get("decided_by")
    held = ", ".join(f"{kind.replace('_', ' ')} {100 * share:.0f} %" for kind, share in
                     (found.get("trigger_share") or {}).items() if kind != WITHOUT_TRIGGERS)
    free = found.get("without_triggers")
    return (f"{where}: {_verdict(found['specific'], 'specific', 'not specific')} (top {k:,} of {n:,}; beyond chance, "
            f"nonsense {nonsense:.2f} against seeds {seeds:.2f}, threshold {found['threshold']:.2f}"
            + (f"; uninformative: decided by {decided}" if decided else "")
            + (f"; prompts holding a trigger: {held}" if held else "") + ")"
            + (f"; against random tokens without the triggers: {_verdict(free['specific'], 'specific', 'not specific')}"
               f" ({free['corrected']:.2f})" if free else ""))


def _plants_line(rows: list[dict], words, head: str) -> list[str]:
    """One closing-cell line: ``head``, then ``words`` of each plant that has some (None: the rule did not run there)."""
    said = [w for r in rows if (w := words(r))]
    return [head + "; ".join(said) + "."] if said else []


def specificity_lines(rows: list[dict]) -> list[str]:
    """The closing cell's line on notebook 07's task-specificity rule at the plants that ran it."""
    return _plants_line(rows, specificity_words,
                        "- **Notebook 07's task-specificity rule on the planted circuits** (every circuit cut to the "
                        "planted circuit's count, overlaps corrected for chance, a second seed on its own prompts; the "
                        "case known to be yes is the nonsense without the plant's triggers, since the plant fires on a "
                        "trigger wherever it stands): ")


def transfer_case_words(row: dict) -> str | None:
    """Task-specificity by transfer (``helpers.singular.validation.transfer``) on one plant's circuit, in words:
    against the declared kinds of nonsense (they hold the plant's triggers) and against random tokens without them
    (the case known to be yes); None where the rule was not run there."""
    from helpers.singular.validation.transfer import transfer_words

    found = (row.get("specificity") or {}).get("transfer")
    if found is None:
        return None
    declared = [r["kind"] for r in transfer_rows(found, False)]
    return (f"{row['site']} ×{row['strength']:g} (top {found['k']:,} of {found['n']:,}, {found['prompts']} held-out "
            f"prompts): against nonsense holding the triggers {transfer_words(found, declared, found['specific'])}; "
            f"against random tokens without the triggers "
            f"{transfer_words(found, [WITHOUT_TRIGGERS], found['specific_without_triggers'])}")


def transfer_lines(rows: list[dict]) -> list[str]:
    """The closing cell's line on task-specificity by transfer at the plants that ran it."""
    return _plants_line(rows, transfer_case_words,
                        "- **Task-specificity by transfer on the planted circuits** (the second seed's and each nonsense "
                        "circuit cut to the planted circuit's count and scored on the planted task; specific when every "
                        "nonsense circuit fails the KL bound there, beyond the second seed's KL by a CI above zero): ")


def paper_rule_lines(rows: list[dict], rules: dict) -> list[str]:
    """The closing cell's line on our training under paper 1's ablation rule, at the plants that ran it."""
    ruled = [r for r in rows if r.get("paper_rule")]
    if not ruled:
        return []
    each = "; ".join(f"{r['site']} ×{r['strength']:g}: recall {r['paper_rule']['recovery']['recall']:.2f}, AUROC "
                     f"{r['paper_rule']['recovery']['auroc']:.2f} (our rule: {r['recovery']['recall']:.2f}, "
                     f"{r['recovery']['auroc']:.2f})" for r in ruled)
    found = sum(bool(r["paper_rule"]["recovered"]) for r in ruled)
    return [f"- **Under paper 1's ablation rule** (our training, at each site's strongest plant), masking recovers "
            f"the plant at {found} of {len(ruled)} by the same rule (recall ≥ {rules['recovered']['min_recall']:g}, "
            f"AUROC ≥ {rules['recovered']['min_auroc']:g}): {each}."]


def paper2_lines(summary: dict) -> list[str]:
    """The closing cell's line on paper 2's planted mount (none where the run skipped it)."""
    row = summary.get("paper2_planted")
    if not row:
        return []
    plant, before, after = row["plant"], row["unplanted"], row["planted"]
    return [f"- **Paper 2's checks on a planted mount** ({plant['site']} L{plant['layer']}, tile {plant['tile']}, "
            f"writing {plant['token']!r} at {plant['strength']:g}× the site's largest σ, {plant['model']}): planted "
            f"{checks_words(after)}; the same site-layer unplanted {checks_words(before)}. Tile lift "
            f"{before['lift_tile']:.3f} → {after['lift_tile']:.3f}; coverage peak {before['coverage_peak']:.3f} → "
            f"{after['coverage_peak']:.3f}."]


def findings(summary: dict, fast: bool = False) -> str:
    """Notebook 08's closing cell, from its summary: the unplanted model at chance, each plant's effect and
    verdicts, and the negative control."""
    rows, unplanted, rules = summary["plants"], summary["unplanted"], summary["rules"]
    out = ["## What this notebook found", ""]
    if fast:
        out += ["*Fast run (CI sizes): the numbers below are not meaningful.*", ""]
    near = abs(unplanted["accuracy"] - unplanted["chance"]) <= 2 * unplanted["accuracy_se"]
    out += [f"- **The unplanted model is {'within two standard errors of chance' if near else 'not at chance'}** on the "
            f"planted task: accuracy {unplanted['accuracy']:.3f} "
            f"± {unplanted['accuracy_se']:.3f} among {rules['plant']['n_pairs']} answers (chance {unplanted['chance']:.3f}), "
            f"logit difference {unplanted['logit_diff']:.2f} ± {unplanted['logit_diff_se']:.2f}."]
    driving = [r for r in rows if r["drives_task"]]
    found = [r for r in driving if r["recovered"]]
    needed = [r for r in driving if r["necessary"]]
    out += [f"- The plant drives the task (accuracy ≥ {rules['drives_task']['min_accuracy']:g}) at {len(driving)} of "
            f"{len(rows)} declared strengths. There, **masking recovers it at {len(found)}** (recall ≥ "
            f"{rules['recovered']['min_recall']:g} and AUROC ≥ {rules['recovered']['min_auroc']:g}), and **ablating "
            f"it removes it at {len(needed)}** while a same-count random set of the head's directions does not."]
    if driving:
        kinds = kept_over(driving)
        out.append(f"- By kind, over those plants, the masks keep {kinds['ov'][0]} of the {kinds['ov'][1]} ground-truth OV "
                   f"directions and {kinds['qk'][0]} of the {kinds['qk'][1]} QK directions.")
    weak = [r for r in rows if not r["drives_task"] and r["recovered"]]
    if weak:
        where = ", ".join(f"{r['site']} ×{r['strength']:g}" for r in weak)
        out.append(f"- Where the plant does not drive the task, masking still recovers it at {len(weak)} strengths "
                   f"({where}).")
    circuit = unplanted["circuit"]
    out += [f"- **Negative control**: the same recipe on the unplanted model keeps {100 * circuit['kept_fraction']:.1f} % "
            f"of the directions at held-out KL {_nats(circuit['kl'])}, against {_nats(circuit['random_kl'])} for its random "
            f"control: it {'beats' if unplanted['circuit_beats_random'] else 'does not beat'} it by the declared "
            f"{rules['unplanted']['circuit_ratio']:g}×.", *paper_rule_lines(rows, rules), *specificity_lines(rows), *transfer_lines(rows),
            *attack_lines(summary),
            *paper2_lines(summary), "",
            "| site | strength | accuracy | ground truth kept (OV, QK) | recall | AUROC (random set) | median rank | "
            "gain left: planted ablated | random ablated | circuit kept | recovered | necessary |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rec, rnd = r["recovery"], r["random_recovery"]
        out.append(
            f"| {r['site']} L{r['layer']}.H{r['head']} | {r['strength']:g}× | {r['accuracy']:.2f} | "
            f"{_kinds_text(r['kept_by_kind'])} | {rec['recall']:.2f} | "
            f"{rec['auroc']:.3f} ({rnd['auroc']:.3f}) | {rec['median_rank']:.0f} of {rec['total']} | "
            if rec else f"| {r['site']} L{r['layer']}.H{r['head']} | {r['strength']:g}× | {r['accuracy']:.2f} | 0 | – | – | – | ")
        out[-1] += (f"{share_text(r['remaining']['planted'])} | {share_text(r['remaining']['random'])} | "
                    f"{100 * r['circuit']['kept_fraction']:.1f} % | "
                    f"{_verdict(r['recovered'], 'yes', 'no') if r['drives_task'] else 'not judged (weak plant)'} | "
                    f"{_verdict(r['necessary'], 'yes', 'no')} |")
    return "\n".join(out) + "\n"
