"""The workshop profile's promise, checked: what its smaller sizes must still show, declared before any
workshop run, and judged on the summaries of a finished one (``check``; the command ``python -m helpers.workshop``).

- **Circuits** (each notebook-02 run of the profile): every circuit of the α sweep has a held-out KL at most
  1 / ``circuit_ratio`` of its same-count random control's, and the heaviest α keeps at most
  ``heaviest_kept`` of the directions (a circuit that keeps nearly everything would beat its control trivially).
- **Receptors** (notebook 06): at the largest steering scale, on both sites (direct path and full forward),
  the receptor intervention flips at least ``flip_percent`` % of the pronouns and at least ``flip_above_random``
  points more than the equal-norm random directions.
- **A circuit breaking** (notebook 07, the attack alone): the adversary takes each attacked circuit's held-out
  KL to at least ``attack_gain`` times its KL under the rule, so that the class sees the curve rise (declared on
  2026-12-05, before any run of notebook 07 at any size).
- **A planted mechanism** (notebook 08, declared on 2026-12-06 before any run of it): mean-ablating the plant's
  ground truth leaves at most the declared share of its gain (``data/planted_mechanisms.toml``, ``[necessary]``)
  while the same-count random set leaves at least the declared share, and the attack holds the circuit that
  leaves out only inert directions. Neither depends on how long the masks trained.
- **Check B** (notebook 04): over the layers the profile runs, the model passes B1 on at least
  ``b1_margin`` more site-layers than each negative control.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from helpers.singular.masking.circuits import beats_random_by
from helpers.pipeline.summaries import SUMMARY_FILE

CRITERIA = dict(circuit_ratio=3.0, heaviest_kept=0.5, flip_percent=50.0, flip_above_random=30.0, b1_margin=2,
                attack_gain=2.0)
"""Declared before the first workshop run (see the module docstring)."""


def _row(criterion: str, run: str, value: float, threshold: str, passed: bool) -> dict:
    return dict(criterion=criterion, run=run, value=value, threshold=threshold, passed=bool(passed))


def circuit_rows(run: str, summary: dict, criteria: dict = CRITERIA) -> list[dict]:
    """Each α of a notebook-02 summary: random KL / circuit KL; and the heaviest α's kept fraction."""
    sweep = sorted(summary["alpha_sweep"], key=lambda r: r["alpha"])
    rows = [_row(f"random KL / circuit KL at α {r['alpha']:.3g}", run, r["random_kl"] / max(r["kl"], 1e-12),
                 f"≥ {criteria['circuit_ratio']}", beats_random_by(r["kl"], r["random_kl"], criteria["circuit_ratio"]))
            for r in sweep]
    heaviest = sweep[-1]
    rows.append(_row(f"kept fraction at the heaviest α {heaviest['alpha']:.3g}", run, heaviest["kept_fraction"],
                     f"≤ {criteria['heaviest_kept']}", heaviest["kept_fraction"] <= criteria["heaviest_kept"]))
    return rows


def receptor_rows(run: str, summary: dict, criteria: dict = CRITERIA) -> list[dict]:
    """Flip rates of notebook 06 at its largest scale, per site: receptors, and receptors − random."""
    rows = []
    for site, rates in summary["flip_rate"].items():
        largest = max(rates["receptors"], key=float)
        receptors, random = rates["receptors"][largest], rates["random"][largest]
        rows.append(_row(f"{site}: % flipped by the receptors at scale {largest}", run, receptors,
                         f"≥ {criteria['flip_percent']}", receptors >= criteria["flip_percent"]))
        rows.append(_row(f"{site}: receptors − random, points, at scale {largest}", run, receptors - random,
                         f"≥ {criteria['flip_above_random']}", receptors - random >= criteria["flip_above_random"]))
    return rows


def b1_passes(summary: dict) -> dict[str, int]:
    """Site-layers passing B1 per sweep label (model and controls), from notebook 04's pass rates."""
    n_layers = len(summary["layers"])
    counts: dict[str, int] = {}
    for key, rates in summary["pass_rates"].items():
        if key.endswith(" B1"):
            for label, rate in rates.items():
                if label != "uninformative":
                    counts[label] = counts.get(label, 0) + round(rate * n_layers)
    return counts


def b1_rows(run: str, summary: dict, criteria: dict = CRITERIA) -> list[dict]:
    counts = b1_passes(summary)
    model = counts.pop("model")
    return [_row(f"B1 site-layers passed, model − {label} ({model} − {n})", run, model - n,
                 f"≥ {criteria['b1_margin']}", model - n >= criteria["b1_margin"]) for label, n in counts.items()]


def attack_rows(run: str, summary: dict, criteria: dict = CRITERIA) -> list[dict]:
    """Each circuit notebook 07 attacked (not its random control): largest KL under attack / KL under the rule."""
    rows = []
    for r in summary["attack_table"]:
        if r["circuit"] == "circuit":
            gain = r["adversarial_kl"] / max(r["under_rule_kl"], 1e-12)
            rows.append(_row(f"{r['label']}: KL under attack / under the rule", run, gain,
                             f"≥ {criteria['attack_gain']}", r["adversarial_kl"] >= criteria["attack_gain"] * r["under_rule_kl"]))
    return rows


def planted_rows(run: str, summary: dict, criteria: dict = CRITERIA) -> list[dict]:
    """Each plant of notebook 08 that drives the task: is it necessary (its declared rule); and does the attack
    hold the circuit that leaves out only inert directions."""
    rows = [_row(f"{r['site']} ×{r['strength']:g}: ablating the plant removes it, a random set does not", run,
                 float(bool(r["necessary"])), "necessary (data/planted_mechanisms.toml)", bool(r["necessary"]))
            for r in summary["plants"] if r["drives_task"]]
    if not rows:
        rows.append(_row("a plant that drives the task", run, float("nan"), "present", False))
    inert = next(r for r in summary["attack_calibration"] if r["circuit"] == "inert")
    rows.append(_row("largest KL under attack, inert directions left out", run, inert["adversarial_kl"],
                     f"≤ {inert['bound']:g}", inert["survives"]))
    return rows


CHECKS = (("02_masking-", circuit_rows), ("06_steering-", receptor_rows), ("07_circuit_validation-", attack_rows),
          ("08_planted_mechanisms-", planted_rows), ("04_tiled_svd-", b1_rows))


def check(figures: str | Path = "figures-workshop", criteria: dict = CRITERIA) -> pd.DataFrame:
    """One row per criterion and run of the workshop profile found under ``figures``; a kind of run the
    profile must hold but that is missing gives a failed row."""
    figures = Path(figures)
    rows = []
    for prefix, rows_of in CHECKS:
        found = sorted(figures.glob(f"{prefix}*/{SUMMARY_FILE}"))
        if not found:
            rows.append(_row(f"a finished {prefix}* run", "-", float("nan"), "present", False))
        for path in found:
            summary = json.loads(path.read_text())
            if summary.get("profile") != "workshop":
                rows.append(_row("summary of a workshop run", path.parent.name, float("nan"), "profile = workshop", False))
                continue
            rows.extend(rows_of(path.parent.name, summary, criteria))
    return pd.DataFrame(rows)
