"""Tasks where no mechanism should be found: the control a circuit method must fail.

Pruning methods have been reported to find small "circuits" for nonsense tasks too. Masks are trained to
keep the full model's answer distribution (KL), which is defined on any prompts, so the same recipe runs
unchanged on:

- ``shuffled``: each prompt's tokens after BOS permuted (one seeded permutation per prompt, applied to its
  clean and its corrupted version alike, so that the corruption still touches the same tokens); the token
  multiset and the length of every prompt are kept;
- ``random_tokens``: prompts of the same lengths made of token ids drawn uniformly from the ids the task's
  prompts use, BOS kept; the corrupted version is an independent draw.

Both keep the task's answer ids, so its metric can be computed, but it means nothing there: only the KL
and the kept fraction are read. Every draw is made on the CPU from the seed.
"""
from __future__ import annotations

import torch

from helpers.singular.tasks import Task

KINDS = ("shuffled", "random_tokens")


def nonsense_task(task: Task, kind: str, seed: int = 0) -> Task:
    """``task``'s prompts made into nonsense of ``kind`` (see the module docstring), on the CPU."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KINDS}")
    generator = torch.Generator().manual_seed(seed)
    clean, corrupted, answer_pos = task.clean.cpu().clone(), task.corrupted.cpu().clone(), task.answer_pos.cpu()
    vocabulary = torch.unique(torch.cat([task.clean.cpu()[i, 1: int(answer_pos[i]) + 1] for i in range(len(task))]))
    for i in range(len(task)):
        length = int(answer_pos[i])  # tokens after BOS, up to and with the answer position
        if kind == "shuffled":
            order = 1 + torch.randperm(length, generator=generator, device="cpu")
            clean[i, 1: length + 1] = task.clean.cpu()[i, order]
            corrupted[i, 1: length + 1] = task.corrupted.cpu()[i, order]
        else:
            for tokens in (clean, corrupted):
                picks = torch.randint(len(vocabulary), (length,), generator=generator, device="cpu")
                tokens[i, 1: length + 1] = vocabulary[picks]
    prompts = [f"{kind} (seed {seed}): " + " ".join(str(t) for t in clean[i, : int(answer_pos[i]) + 1].tolist())
               for i in range(len(task))]
    return Task(f"{task.name}-{kind}", prompts, clean, corrupted, answer_pos.clone(), task.correct.cpu(),
                task.wrong.cpu(), f"{task.metric_name} (meaningless on {kind} prompts)", dict(task.dropped),
                None if task.digit_tokens is None else task.digit_tokens.cpu())
