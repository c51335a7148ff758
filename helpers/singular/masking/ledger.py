"""Paper 1's reproduction ledger: the released recipe beside ours on the same held-out prompts, with the
gap between them taken one factor at a time (docs/methods.md §1.6).

The rows, each changing one factor from the row above:

1. ``paper``: the released recipe (sigmoid masks, the mixed ablation rule), evaluated as the released
   code does it: the soft masks stay on, a direction is kept when m ≥ 1e-3, and the KL is the
   soft-masked model's;
2. ``binarised``: the same masks, kept directions at 1 and all others at 0;
3. ``hard_concrete``: masks trained with hard-concrete gates and our optimiser settings, still under the
   paper's rule, evaluated at their own binarisation (logit > 0);
4. ``ours``: the same training under our rule (corrupted prompt at every position, for every kind):
   notebook 02's run.

Every row is scored on the held-out prompts and has a control: binary random masks keeping the same
number of directions in every (layer, kind) block, under that row's rule.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from helpers.singular.masking.circuits import CircuitEvaluator, evaluate_circuit
from helpers.singular.masking.masks import DirectionMasks, FixedMasks

PAPER_KEPT = 1e-3
"""Paper 1 counts a direction as kept ("active") when its mask m = sigmoid(logit) is at least this."""

STEPS = (
    ("paper", "the paper's recipe as released: soft masks, kept = m ≥ 1e-3"),
    ("binarised", "the same masks binarised (kept = m ≥ 1e-3)"),
    ("hard_concrete", "hard-concrete training, our optimiser settings, still the paper's rule"),
    ("ours", "our rule (corrupted prompt at all positions): notebook 02's run"),
)


def relative_sparsity(kept: int, total: int) -> float:
    """Paper 1's "relative sparsity": 1 − kept / (all directions of the augmented matrices)."""
    if not 0 <= kept <= total or total <= 0:
        raise ValueError(f"kept={kept} directions out of total={total}: need 0 ≤ kept ≤ total and total > 0")
    return 1.0 - kept / total


def ledger_row(evaluator: CircuitEvaluator, kept: FixedMasks, control_seeds: int = 3, scored=None) -> dict:
    """``evaluate_circuit`` of the binary circuit ``kept`` (or of the masks ``scored`` in its place, soft
    say) under the evaluator's rule, with the rule's name, kept % and relative sparsity."""
    row = evaluate_circuit(evaluator, kept, control_seeds, scored=scored)
    return dict(rule=evaluator.rule.name, **row, kept_percent=100.0 * row["kept_fraction"],
                relative_sparsity=relative_sparsity(row["kept"], kept.count()))


def factor_table(paper_evaluator: CircuitEvaluator, our_evaluator: CircuitEvaluator, paper_masks: DirectionMasks,
                 hard_concrete_paper_masks: DirectionMasks, our_masks: DirectionMasks,
                 control_seeds: int = 3) -> pd.DataFrame:
    """The four rows of the ledger (``STEPS``), in order. The two evaluators hold the same held-out prompts,
    under the paper's rule and under ours."""
    if paper_evaluator.task.prompts != our_evaluator.task.prompts:
        raise ValueError("the two evaluators hold different prompts: every row must be scored on the same held-out set")
    paper_kept = FixedMasks.at_least(paper_masks, PAPER_KEPT)
    rows = [
        ledger_row(paper_evaluator, paper_kept, control_seeds, scored=FixedMasks.soft(paper_masks)),
        ledger_row(paper_evaluator, paper_kept, control_seeds),
        ledger_row(paper_evaluator, FixedMasks.binarised(hard_concrete_paper_masks), control_seeds),
        ledger_row(our_evaluator, FixedMasks.binarised(our_masks), control_seeds),
    ]
    table = pd.DataFrame(rows)
    table.insert(0, "step", [name for name, _ in STEPS])
    table.insert(1, "change", [change for _, change in STEPS])
    return table


def largest_move(table: pd.DataFrame, column: str = "kept_percent") -> dict:
    """The step of the ledger that moves ``column`` the most from the row before it:
    {step, change, before, after, delta}; step and change are None when no step moves it."""
    values = table[column].to_numpy(dtype=float)
    if len(values) < 2:
        raise ValueError(f"a ledger of {len(values)} row(s) has no step to compare")
    deltas = np.diff(values)
    i = int(np.argmax(np.abs(deltas)))
    moved = bool(deltas[i] != 0)
    return dict(step=str(table["step"].iloc[i + 1]) if moved else None,
                change=str(table["change"].iloc[i + 1]) if moved else None,
                before=float(values[i]), after=float(values[i + 1]), delta=float(deltas[i]))
