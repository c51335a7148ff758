"""Cost of one mask-training step vs a plain forward+backward of the same model on the same batch.

    python benchmarks/mask_training.py [--model smollm2-135m] [--batch 32] [--repeats 5]
                                       [--parametrisation hard_concrete|sigmoid] [--rule corrupted@all|paper]
                                       [--maps factored hooks]

"plain": the model's own forward at all positions (logits everywhere) and a backward of the answer-position
cross-entropy into all its weights. "mask step": ``helpers.singular.masking.training.training_step``, the step ``train_masks``
runs (masked forward through hooks, logits at the answer positions only, KL + α Σ m, backward into the mask
logits, gradient clipping, AdamW step). ``--rule paper`` is paper 1's mixed rule (OV and MLP masked at the answer
position only), the rule of two of notebook 02's five trainings per task. ``--maps`` times the step once per way
of computing masked MLP maps (``MaskedModel(factored_mlp=...)``: "factored", the default, or "hooks"), in one run.
Prints median seconds over ``repeats`` after one warm-up, and the ratio.
"""
import argparse
import statistics
import time

import torch

from helpers.singular.masking.references import prepare
from helpers.singular.masking.training import TrainConfig, training_step
from helpers.singular.masking.masks import AblationRule, DirectionMasks, MaskedModel
from helpers.core.models import load_model
from helpers.singular.tasks import ioi_task


def timed(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--parametrisation", default="hard_concrete", choices=["hard_concrete", "sigmoid"])
    parser.add_argument("--rule", default="corrupted@all", choices=["corrupted@all", "paper"])
    parser.add_argument("--maps", nargs="+", default=["factored"], choices=["factored", "hooks"])
    args = parser.parse_args()
    torch.set_num_threads(2)
    model = load_model(args.model)
    task = ioi_task(model, args.batch, seed=0)
    rows = torch.arange(args.batch)

    def plain():
        for p in model.hf_model.parameters():
            p.requires_grad_(True)
        logits = model.bridge(task.clean)[rows, task.answer_pos]
        torch.nn.functional.cross_entropy(logits, task.correct).backward()
        model.hf_model.zero_grad(set_to_none=True)
        for p in model.hf_model.parameters():
            p.requires_grad_(False)

    rule = AblationRule.paper() if args.rule == "paper" else AblationRule.uniform("corrupted")
    config = TrainConfig(batch=args.batch, parametrisation=args.parametrisation)
    print(f"model {args.model}, batch {args.batch} IOI prompts x {task.clean.shape[1]} tokens, 2 threads, "
          f"{args.parametrisation} masks, rule {rule.name}")
    plain_s = timed(plain, args.repeats)
    print(f"plain forward+backward: {plain_s:.3f} s")
    for maps in args.maps:
        masked = MaskedModel(model, factored_mlp=maps == "factored")
        prepared = prepare(masked, task, rule)
        masks = DirectionMasks(model, parametrisation=args.parametrisation)
        masks.train()  # hard-concrete: stochastic gates, as in training
        optimiser = torch.optim.AdamW(masks.parameters(), lr=config.lr, weight_decay=0.0)

        def mask_step():  # the training loop's own step (clipping included), on the whole batch
            training_step(masked, masks, rule, task, prepared, rows, optimiser, config)

        step_s = timed(mask_step, args.repeats)
        print(f"mask training step, {maps:8s} MLP maps: {step_s:.3f} s   ratio {step_s / plain_s:.2f}")


if __name__ == "__main__":
    main()
