"""Tasks where no mechanism should be found: the control a circuit method must fail.

Pruning methods have been reported to find small "circuits" for nonsense tasks too. Masks are trained to
keep the full model's answer distribution (KL), which is defined on any prompts, so the same recipe runs
unchanged on:

- ``shuffled``: each prompt's tokens after BOS permuted (one seeded permutation per prompt, applied to its
  clean and its corrupted version alike, so that the corruption still touches the same tokens); the token
  multiset and the length of every prompt are kept;
- ``random_tokens``: prompts of the same lengths made of token ids drawn uniformly from the ids the task's
  prompts use, BOS kept; the corrupted version redraws the tokens at the positions where the task's own
  corrupted prompt differs from its clean one, and only there, so that the corruption is as large as the
  task's (an independent draw at every position would make nearly every direction differ between clean and
  corrupted, and the kept share would measure the size of the corruption, not the absence of a task).
  With ``exclude``, the ids drawn from leave those out: a mechanism triggered by a token (a planted one,
  notebook 08) then meets nonsense that cannot trigger it (``holding_share`` measures how often the other
  kinds do).

Both keep the task's answer ids, so its metric can be computed, but it means nothing there: only the KL
and the kept fraction are read. Every draw is made on the CPU from the seed.
"""
from __future__ import annotations

import torch

from helpers.singular.tasks import Task

KINDS = ("shuffled", "random_tokens")


def nonsense_task(task: Task, kind: str, seed: int = 0, exclude: tuple[int, ...] = ()) -> Task:
    """``task``'s prompts made into nonsense of ``kind`` (see the module docstring), on the CPU; random tokens
    drawn from the task's ids without ``exclude``."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {KINDS}")
    if exclude and kind != "random_tokens":
        raise ValueError(f"exclude={list(exclude)} with kind={kind!r}: only random tokens draw ids, so only they "
                         "can leave ids out; pass exclude=() for shuffled prompts")
    generator = torch.Generator().manual_seed(seed)
    clean, corrupted, answer_pos = task.clean.cpu().clone(), task.corrupted.cpu().clone(), task.answer_pos.cpu()
    vocabulary = torch.unique(torch.cat([task.clean.cpu()[i, 1: int(answer_pos[i]) + 1] for i in range(len(task))]))
    vocabulary = vocabulary[~torch.isin(vocabulary, torch.tensor(exclude, dtype=vocabulary.dtype, device="cpu"))]
    if kind == "random_tokens" and len(vocabulary) < 2:
        raise ValueError(f"the task's prompts use {len(vocabulary)} token id(s) outside exclude={list(exclude)}: "
                         "random tokens need at least two to corrupt a position")
    for i in range(len(task)):
        length = int(answer_pos[i])  # tokens after BOS, up to and with the answer position
        if kind == "shuffled":
            order = 1 + torch.randperm(length, generator=generator, device="cpu")
            clean[i, 1: length + 1] = task.clean.cpu()[i, order]
            corrupted[i, 1: length + 1] = task.corrupted.cpu()[i, order]
        else:
            changed = (task.clean.cpu()[i, 1: length + 1] != task.corrupted.cpu()[i, 1: length + 1]).nonzero().squeeze(1) + 1
            clean[i, 1: length + 1] = vocabulary[torch.randint(len(vocabulary), (length,), generator=generator, device="cpu")]
            corrupted[i, : length + 1] = clean[i, : length + 1]
            for position in changed.tolist():  # another id than the clean one at each position the task changes
                offset = int(torch.randint(len(vocabulary) - 1, (1,), generator=generator, device="cpu")) + 1
                here = int((vocabulary == clean[i, position]).nonzero()[0, 0])
                corrupted[i, position] = vocabulary[(here + offset) % len(vocabulary)]
    label = kind + (f" without {len(exclude)} ids" if exclude else "")
    prompts = [f"{label} (seed {seed}): " + " ".join(str(t) for t in clean[i, : int(answer_pos[i]) + 1].tolist())
               for i in range(len(task))]
    return Task(f"{task.name}-{label.replace(' ', '-')}", prompts, clean, corrupted, answer_pos.clone(), task.correct.cpu(),
                task.wrong.cpu(), f"{task.metric_name} (meaningless on {kind} prompts)", dict(task.dropped),
                None if task.digit_tokens is None else task.digit_tokens.cpu())


def holding_share(task: Task, ids: tuple[int, ...]) -> float:
    """The share of ``task``'s clean prompts that hold at least one of ``ids`` after BOS, up to and with the answer
    position."""
    if not ids:
        raise ValueError("ids=(): name at least one token id to look for")
    wanted = torch.tensor(ids, device="cpu")
    held = [bool(torch.isin(task.clean.cpu()[i, 1: int(task.answer_pos[i]) + 1], wanted).any()) for i in range(len(task))]
    return sum(held) / len(held)
