"""Scoring a direction circuit on held-out prompts, with MIB-style faithfulness over directions
(docs/methods.md §1.7).

With m the task metric on the held-out prompts (mean logit difference, or the probability difference for
greater-than), N every direction kept (the full model), ∅ none kept (every direction at its reference under
the circuit's ablation rule) and C_k the k % of directions with the largest scores:

    f(k) = (m(C_k) − m(∅)) / (m(N) − m(∅)),   so f(0) = 0 and f(100 %) = 1 by construction.

CPR is the area under f and CMD the area under |1 − f|, by trapezoids over k ∈ ``PERCENTS``, on two x-axes:

- ``linear``: x = k / 100 from 0 to 1, with the point f(0) = 0 (MIB's choice; the large circuits dominate);
- ``log``: x = log10 k from 0.1 % to 100 %, divided by its three decades (ours: each decade counts alike).

Both are normalised so that a circuit with f = 1 everywhere has CPR 1 and CMD 0. These scores are over
singular directions, not edges: they are not comparable with MIB's leaderboard. The ranking is ``signed``
(largest score first) unless ``absolute`` is asked for; every result says which.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from helpers.singular.masking.circuits import CircuitEvaluator, evaluate_circuit, split_like
from helpers.singular.masking.masks import FixedMasks

EVALUATOR_VERSION = 1
"""Bumped whenever a score of the same circuit on the same prompts would change (metric, ranking, areas)."""
PERCENTS = (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
RANKINGS = ("signed", "absolute")
AXES = ("linear", "log")


def n_at_percent(total: int, percent: float) -> int:
    """Directions in the top ``percent`` % of ``total`` (rounded to the nearest count)."""
    if not 0 <= percent <= 100:
        raise ValueError(f"percent={percent} must lie in [0, 100]")
    return int(round(total * percent / 100))


def top_percent(scores: dict[str, torch.Tensor], percent: float, ranking: str = "signed") -> FixedMasks:
    """Binary masks keeping the top ``percent`` % of directions by score (``signed``: largest first;
    ``absolute``: largest |score| first); ties go to the earlier block and index."""
    if ranking not in RANKINGS:
        raise ValueError(f"ranking={ranking!r} is not one of {RANKINGS}")
    names = list(scores)
    flat = torch.cat([scores[n].reshape(-1).double() for n in names])
    key = flat.abs() if ranking == "absolute" else flat
    keep = flat.new_zeros(flat.numel(), dtype=torch.float32)
    keep[torch.sort(key, descending=True, stable=True).indices[: n_at_percent(flat.numel(), percent)]] = 1.0
    return FixedMasks(split_like(keep, scores))


def random_scores(scores: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """A random ranking of the same directions: scores replaced by a seeded permutation of 0 … n − 1."""
    total = sum(v.numel() for v in scores.values())
    device = next(iter(scores.values())).device
    order = torch.randperm(total, generator=torch.Generator().manual_seed(seed), device="cpu")  # the same on every device
    return split_like(order.double().to(device), scores)


def metric_ends(evaluator: CircuitEvaluator, blocks: dict[str, torch.Tensor]) -> tuple[float, float]:
    """(m(N), m(∅)): the metric with every direction kept and with none, under the evaluator's rule."""
    full = evaluator.evaluate(FixedMasks({n: torch.ones(v.shape, device=v.device) for n, v in blocks.items()}))["metric"]
    empty = evaluator.evaluate(FixedMasks({n: torch.zeros(v.shape, device=v.device) for n, v in blocks.items()}))["metric"]
    if math.isclose(full, empty, rel_tol=0, abs_tol=1e-12):
        raise ValueError(f"the metric is {full} with every direction and {empty} with none: faithfulness "
                         f"(m(C) − m(∅)) / (m(N) − m(∅)) is undefined on these prompts")
    return full, empty


def faithfulness(evaluator: CircuitEvaluator, scores: dict[str, torch.Tensor], ends: tuple[float, float],
                 percents=PERCENTS, ranking: str = "signed") -> pd.DataFrame:
    """f(k) for each k in ``percents``: one held-out evaluation per k (none for 0 and 100 %, which are ∅ and N)."""
    full, empty = ends
    total = sum(v.numel() for v in scores.values())
    rows = []
    for percent in percents:
        n = n_at_percent(total, percent)
        metric = full if n == total else empty if n == 0 else evaluator.evaluate(top_percent(scores, percent, ranking))["metric"]
        rows.append(dict(percent=float(percent), kept=n, metric=metric, faithfulness=(metric - empty) / (full - empty)))
    return pd.DataFrame(rows)


def area(percents, values, axis: str, at_zero: float = 0.0) -> float:
    """Normalised trapezoid area of ``values`` over ``percents`` (the axes: module docstring). On the linear
    axis the curve starts at x = 0 with the value ``at_zero`` (f(0) = 0; |1 − f(0)| = 1)."""
    if axis not in AXES:
        raise ValueError(f"axis={axis!r} is not one of {AXES}")
    p, y = np.asarray(percents, dtype=float), np.asarray(values, dtype=float)
    if axis == "linear":
        x, y = np.concatenate([[0.0], p / 100]), np.concatenate([[at_zero], y])
    else:
        if (p <= 0).any():
            raise ValueError("the log axis needs percents > 0")
        x = np.log10(p)
    return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2) / (x[-1] - x[0]))


def cpr_cmd(curve: pd.DataFrame) -> dict[str, float]:
    """CPR (area under f) and CMD (area under |1 − f|) on both axes."""
    p, f = curve["percent"], curve["faithfulness"]
    out = {}
    for axis in AXES:
        out[f"cpr_{axis}"] = area(p, f, axis, at_zero=0.0)
        out[f"cmd_{axis}"] = area(p, (1 - f).abs(), axis, at_zero=1.0)
    return out


class FaithfulnessScorer:
    """Scores circuits over the same blocks on one evaluator's prompts. m(N), m(∅) and the random rankings'
    curves do not depend on the circuit, so they are computed once, at the first score."""

    def __init__(self, evaluator: CircuitEvaluator, control_seeds: int = 3, percents=PERCENTS, ranking: str = "signed"):
        if ranking not in RANKINGS:
            raise ValueError(f"ranking={ranking!r} is not one of {RANKINGS}")
        if control_seeds < 1:
            raise ValueError(f"control_seeds={control_seeds}: the random rankings need at least one seed")
        self.evaluator, self.control_seeds, self.percents, self.ranking = evaluator, control_seeds, tuple(percents), ranking
        self._baseline = None

    def _random(self, scores: dict[str, torch.Tensor]):
        shapes = {n: tuple(v.shape) for n, v in scores.items()}
        if self._baseline is None or self._baseline[0] != shapes:
            ends = metric_ends(self.evaluator, scores)
            curves = [faithfulness(self.evaluator, random_scores(scores, seed), ends, self.percents, self.ranking)
                      for seed in range(self.control_seeds)]
            self._baseline = (shapes, ends, curves)
        return self._baseline[1], self._baseline[2]

    def score(self, kept: FixedMasks, scores: dict[str, torch.Tensor]) -> dict:
        """Everything the evaluator reports for one circuit:

        - ``circuit``: KL, metric, accuracy and counts of the kept set, with the same-count random control;
        - ``curve`` / ``random_curve``: f(k) of the circuit's ranking and the mean f(k) of the random rankings;
        - ``areas``: CPR and CMD on both axes, for the circuit's ranking and for the random ones (mean over seeds)."""
        if set(kept.blocks) != set(scores):
            raise ValueError("the kept set and the scores cover different blocks")
        ends, randoms = self._random(scores)
        row = evaluate_circuit(self.evaluator, kept, self.control_seeds)
        curve = faithfulness(self.evaluator, scores, ends, self.percents, self.ranking)
        random_curve = pd.concat(randoms).groupby("percent", as_index=False)[["kept", "metric", "faithfulness"]].mean()
        random_areas = pd.DataFrame([cpr_cmd(c) for c in randoms]).mean().to_dict()
        areas = pd.DataFrame([dict(ranking=f"circuit ({self.ranking})", **cpr_cmd(curve)),
                              dict(ranking=f"random (mean of {self.control_seeds})", **random_areas)])
        return dict(circuit=row, full_metric=ends[0], empty_metric=ends[1], curve=curve, random_curve=random_curve,
                    areas=areas, ranking=self.ranking, percents=list(self.percents), evaluator_version=EVALUATOR_VERSION)


def score_circuits(circuits, scorers: dict) -> dict[str, dict]:
    """``FaithfulnessScorer.score`` of each circuit (``helpers.singular.masking.circuit_files.Circuit``) with the scorer
    of its ablation rule (``scorers``: rule name → scorer); keyed by the circuit's label."""
    results = {}
    for circuit in circuits:
        rule = circuit.metadata["ablation_rule"]["name"]
        if rule not in scorers:
            raise ValueError(f"circuit {circuit.metadata['label']!r} uses the rule {rule!r}; scorers are given for "
                             f"{sorted(scorers)}")
        results[circuit.metadata["label"]] = scorers[rule].score(circuit.fixed(), circuit.scores)
    return results


def faithfulness_table(results: dict[str, dict]) -> pd.DataFrame:
    """One row per circuit: kept %, held-out KL and metric against the same-count random control, and CPR/CMD
    of its ranking against random rankings (both axes)."""
    rows = []
    for label, r in results.items():
        c, (ours, rand) = r["circuit"], r["areas"].to_dict(orient="records")
        rows.append(dict(circuit=label, kept_percent=100 * c["kept_fraction"], kl=c["kl"], random_kl=c["random_kl"],
                         metric=c["metric"], random_metric=c["random_metric"],
                         **{k: ours[k] for k in ours if k != "ranking"},
                         **{f"random_{k}": rand[k] for k in rand if k != "ranking"}))
    return pd.DataFrame(rows)


def faithfulness_curves(results: dict[str, dict]) -> pd.DataFrame:
    """Long table (circuit, percent, faithfulness, random_faithfulness) of every circuit's f(k)."""
    return pd.concat([r["curve"][["percent", "faithfulness"]]
                      .assign(random_faithfulness=r["random_curve"]["faithfulness"].to_numpy(), circuit=label)
                      for label, r in results.items()], ignore_index=True)
