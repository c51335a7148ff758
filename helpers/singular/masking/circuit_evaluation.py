"""A direction-circuit file scored on fresh held-out prompts of its task (docs/methods.md §1.7): the work of
``python -m helpers.evaluate`` (``evaluate_file``) and the table it prints (``report``).

The file names its model, weights, processing, ablation rule and task; the model is loaded from the registry
(``weights_dir`` for hub models kept in a local folder) and refused if its weights differ. The prompts are
``n_prompts`` new prompts of the task drawn with ``seed`` (default: the training seed + 1), without any
prompt of the run that trained the circuit. Scored: KL, task metric and accuracy with the same-count random
control, the faithfulness f(k) of the circuit's ranking against random rankings, and CPR/CMD on a linear and
a log axis (``helpers.singular.masking.scoring``). ``adversarial`` adds the circuit under attack on the same prompts
(``helpers.singular.validation.adversary``, rules and bound in ``data/circuit_attack.toml``): the KL when the directions
it leaves out take random partial settings, and along an adversary's search for the worst one, and whether
it survives.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from helpers.core.models import load_model
from helpers.singular.masking.circuit_files import check_model, circuit_prompts, load_circuit
from helpers.singular.masking.circuits import CircuitEvaluator
from helpers.singular.masking.masks import MaskedModel
from helpers.singular.validation.adversary import ATTACK_RULES, attacked, load_attack_rules
from helpers.singular.masking.scoring import PERCENTS, FaithfulnessScorer
from helpers.singular.tasks import check_prompt_count, make_task


def fresh_prompts(circuit, model, n_prompts: int, seed: int):
    """``n_prompts`` prompts of the circuit's task from ``seed``, minus every prompt of its own run (training
    and held-out). Returns (task, how many were removed)."""
    check_prompt_count(n_prompts, 1)
    if seed == circuit.metadata["task"]["seed"]:
        raise ValueError(f"seed={seed} is the seed the circuit was trained with: its prompts are not fresh; "
                         f"pass another --seed")
    train, held_out = circuit_prompts(circuit, model)
    used = set(train.prompts) | set(held_out.prompts)
    task = make_task(circuit.metadata["task"]["name"], model, n_prompts, seed=seed)
    keep = [i for i, prompt in enumerate(task.prompts) if prompt not in used]
    if not keep:
        raise ValueError(f"all {n_prompts} prompts from seed {seed} occur in the circuit's own run; pass more --prompts")
    return task.subset(keep), len(task) - len(keep)


def evaluate_file(path: str | Path, n_prompts: int = 96, seed: int | None = None, control_seeds: int = 3,
                  ranking: str = "signed", percents=PERCENTS, weights_dir=None, device: str = "cpu", model=None,
                  adversarial: bool = False, attack_rules: str | Path = ATTACK_RULES) -> dict:
    """The evaluator as a function: the numbers ``python -m helpers.evaluate`` prints, as a dict. ``model``: an
    already loaded model (checked against the file) instead of loading the file's. ``adversarial``: also the
    circuit under attack on the same fresh prompts (``attacked``), by the rules of ``attack_rules``."""
    circuit = load_circuit(path)
    saved = circuit.metadata["model"]
    if model is None:
        model = load_model(saved["model"], processing=saved["processing"], weights_dir=weights_dir, device=device)
    check_model(circuit, model, path)
    seed = circuit.metadata["task"]["seed"] + 1 if seed is None else seed
    prompts, removed = fresh_prompts(circuit, model, n_prompts, seed)
    scorer = FaithfulnessScorer(CircuitEvaluator(MaskedModel(model), prompts, circuit.rule()), control_seeds, percents, ranking)
    result = scorer.score(circuit.fixed(), circuit.scores)
    if adversarial:
        result["attack"] = attacked(scorer.evaluator, circuit.fixed(), load_attack_rules(attack_rules))
    return dict(file=str(path), label=circuit.metadata["label"], model=saved["model"], task=circuit.metadata["task"]["name"],
                ablation_rule=circuit.metadata["ablation_rule"]["name"], kept_rule=circuit.metadata["kept_rule"],
                seed=seed, n_prompts=len(prompts), removed_as_seen=removed, numerics=model.numerics(), **result)


def _four(value: float) -> str:
    """A number to four decimals; float rounding below zero prints as 0.0000, not -0.0000."""
    return f"{round(value, 4) + 0.0:.4f}"


def report(result: dict) -> str:
    """The printed table of one evaluation."""
    c = result["circuit"]
    lines = [
        f"{result['file']}: {result['label']} — {result['model']}, {result['task']}, rule {result['ablation_rule']}",
        f"kept: {c['kept']:,} of {round(c['kept'] / c['kept_fraction']):,} directions ({100 * c['kept_fraction']:.2f} %; "
        f"{result['kept_rule']})",
        f"{result['n_prompts']} fresh prompts (seed {result['seed']}; {result['removed_as_seen']} removed as seen in "
        f"training); evaluator version {result['evaluator_version']}",
        "",
        pd.DataFrame([dict(circuit="circuit", kl=c["kl"], metric=c["metric"], accuracy=c["accuracy"]),
                      dict(circuit="same-count random", kl=c["random_kl"], metric=c["random_metric"],
                           accuracy=c["random_accuracy"]),
                      dict(circuit="full model", kl=0.0, metric=c["full_metric"], accuracy=c["full_accuracy"])]
                     ).to_string(index=False, float_format=_four),
        "",
        f"faithfulness over directions, ranking {result['ranking']} (m(N) = {_four(result['full_metric'])}, "
        f"m(∅) = {_four(result['empty_metric'])}):",
        result["curve"].merge(result["random_curve"][["percent", "faithfulness"]], on="percent", suffixes=("", "_random"))
        .to_string(index=False, float_format=_four),
        "",
        result["areas"].to_string(index=False, float_format=_four),
        "(directions, not edges: not comparable with MIB's leaderboard)",
    ]
    if "attack" in result:
        a = result["attack"]
        lines += ["", f"under attack (m of the left-out directions in [0, 1]; {a['settings']}):",
                  f"KL under the rule {_four(a['under_rule_kl'])}; stochastic (m ~ U(0, 1), {len(a['stochastic']['draws'])} "
                  f"draws) mean {_four(a['stochastic']['mean'])}, max {_four(a['stochastic']['max'])}",
                  a["curve"].to_string(index=False, float_format=_four),
                  f"largest KL found {_four(a['best_kl'])} on the prompts the ascent did not climb on (on those it "
                  f"climbed on: {_four(a['best_kl_in_sample'])}), against the declared bound {a['bound']}: "
                  + ("survives the adversary" if a["survives"] else "does NOT survive the adversary")]
    return "\n".join(lines)
