"""Notebook 02's α sweep trained fresh (as the notebook does) against the α path (each heavier α warm-started
from the lighter one's masks, ``helpers.singular.masking.alpha_path``), on one task, with the notebook's declared run.

    python benchmarks/alpha_path.py --task gender [--warm-steps 100 150] [--fresh-seeds 1] [--model smollm2-135m]

The α list and the paper's KL come from notebook 02's parameters cell; the masking run is
``MaskingRun.declared()``, as in the notebook. Fresh trainings load from the mask cache when the notebook has
run (their seconds then read 0; a fresh training costs its steps times the per-step time printed). Warm-started
trainings are always trained (and saved), so their seconds are measured. ``--fresh-seeds`` also trains the
fresh sweep with other training seeds (same prompts): how far two fresh trainings differ, the scale against
which the warm path's differences are read. Prints one comparison table per warm-step count and per seed,
each row judged against ``WARM_TOLERANCE`` (declared in the module before the first comparison), and the
sparsest trained circuit within the paper's KL for each way.
"""
import argparse
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import torch

from helpers.core.models import load_model
from helpers.pipeline.scheduler import declared_parameters
from helpers.singular.masking.alpha_path import WARM_TOLERANCE, path_comparison, warm_alpha_path
from helpers.singular.masking.circuits import CircuitEvaluator, point_at_kl
from helpers.singular.masking.masks import MaskedModel
from helpers.singular.masking.training import MaskingRun, alpha_sweep, masking_prompts

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "02_masking.ipynb"
SHOWN = ["alpha", "start", "steps", "kept_percent_fresh", "kept_percent", "kl_fresh", "kl", "random_kl", "overlap",
         "within"]


def sparsest(table: pd.DataFrame, kl: float) -> str:
    point = point_at_kl(table, kl)
    if point is None:
        return f"none within KL {kl}"
    return f"α {point['alpha']:.3g}: {100 * point['kept_fraction']:.3f} % kept at KL {point['kl']:.4f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--task", default="gender", choices=["ioi", "gender", "greater_than"])
    parser.add_argument("--warm-steps", type=int, nargs="+", default=[100])
    parser.add_argument("--fresh-seeds", type=int, nargs="*", default=[])
    args = parser.parse_args()
    torch.set_num_threads(2)
    declared = declared_parameters(NOTEBOOK)
    alphas, paper_kl = declared["alphas"], declared["paper_kl"]
    run = MaskingRun.declared({}, seed=declared["seed"])
    model = load_model(args.model, processing=declared["processing"])
    masked = MaskedModel(model)
    train, held_out = masking_prompts(model, args.task, run.n_prompts, run.seed)
    rule, config = run.rule(), run.train_config()
    evaluator = CircuitEvaluator(masked, held_out, rule)
    print(f"{args.model}, {args.task}: α {alphas}, {run}")
    print(f"tolerance (declared before the first comparison): {WARM_TOLERANCE}")

    began = time.perf_counter()
    fresh, fresh_masks = alpha_sweep(masked, train, evaluator, rule, config, alphas, progress=False)
    print(f"\nfresh sweep ({config.steps} steps per α; loaded from the cache where the notebook ran): "
          f"{time.perf_counter() - began:.0f} s with evaluation")
    print(f"  sparsest within KL {paper_kl}: {sparsest(fresh, paper_kl)}")

    for warm_steps in args.warm_steps:
        warm, warm_masks = warm_alpha_path(masked, train, evaluator, rule, config, alphas, warm_steps,
                                           progress=False, reuse_warm=False)
        table = path_comparison(fresh, fresh_masks, warm, warm_masks)
        trained = warm[warm["start"] != "fresh"]
        per_step = trained["seconds"].sum() / trained["steps"].sum()
        saved = (config.steps - warm_steps) * len(trained)
        print(f"\nα path, {warm_steps} steps per warm start: {trained['seconds'].sum():.0f} s for "
              f"{int(trained['steps'].sum())} steps ({per_step:.2f} s per step); fresh would train "
              f"{config.steps * len(trained)} steps for these α, {saved} more ≈ {saved * per_step:.0f} s")
        print(table[SHOWN].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"  sparsest within KL {paper_kl}: {sparsest(warm, paper_kl)}; "
              f"every α within tolerance: {bool(table['within'].all())}")

    for seed in args.fresh_seeds:
        other, other_masks = alpha_sweep(masked, train, evaluator, rule, replace(config, seed=seed), alphas,
                                         progress=False)
        table = path_comparison(fresh, fresh_masks, other.assign(start=f"fresh, seed {seed}", steps=config.steps),
                                other_masks)
        print(f"\nfresh sweep with training seed {seed} against seed {config.seed} (same prompts):")
        print(table[SHOWN].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
        print(f"  sparsest within KL {paper_kl}: {sparsest(other, paper_kl)}")


if __name__ == "__main__":
    main()
