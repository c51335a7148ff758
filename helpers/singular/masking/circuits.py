"""Evaluating binarised masks on held-out prompts: the faithfulness–sparsity curve and its controls.

A circuit is a binarised mask (kept = 1). Two ways to get circuits of many sizes:

- a threshold sweep of one trained set of masks (``faithfulness_curve``: keep the n largest), which
  also switches fully on or off directions the training left partly on;
- an α sweep (``helpers.singular.masking.training.alpha_sweep``): one training per sparsity weight α, each evaluated at its own
  binarisation (logit > 0), the circuit that training found.

Each circuit gets the KL to the full model, the task metric and accuracy of the circuit and of the full
model on held-out prompts, per-component counts, and a control: random masks with the same number of
kept directions in every (layer, kind) block.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import torch

from helpers.singular.masking.references import kl_to_full, prepare
from helpers.singular.masking.masks import AblationRule, DirectionMasks, FixedMasks, MaskedModel
from helpers.singular.tasks import Task, logit_diff, probability_difference, with_first_digit, year_probabilities

PAPER_KL = 0.21


def binarise_top(masks: DirectionMasks, n_keep: int) -> FixedMasks:
    """Keep the ``n_keep`` directions with the largest mask logits; equal logits (directions the loss never
    separates, e.g. the OV directions of zero σ, all pushed alike by the penalty) go to the earlier block and
    index, by a stable sort."""
    names = list(masks.logits)
    flat = torch.cat([masks.logits[n].detach().reshape(-1) for n in names])
    keep = torch.zeros_like(flat)
    keep[torch.sort(flat, descending=True, stable=True).indices[:n_keep]] = 1.0
    return FixedMasks(split_like(keep, {n: masks.logits[n] for n in names}))


def split_like(flat: torch.Tensor, blocks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A flat vector (blocks concatenated in ``blocks``' order) cut back into blocks of the same shapes."""
    out, offset = {}, 0
    for name, block in blocks.items():
        out[name] = flat[offset: offset + block.numel()].reshape(block.shape)
        offset += block.numel()
    return out


def random_like(circuit: FixedMasks, seed: int) -> FixedMasks:
    """The same number of kept directions in every (layer, kind) block, placed at random (drawn on the CPU,
    then moved to the circuit's device: the same control on every device)."""
    generator = torch.Generator().manual_seed(seed)
    values = {}
    for name, v in circuit.blocks.items():
        flat = torch.zeros(v.numel(), device="cpu")
        flat[torch.randperm(v.numel(), generator=generator, device="cpu")[: int(v.sum())]] = 1.0
        values[name] = flat.reshape(v.shape).to(v.device)
    return FixedMasks(values)


def beats_random_by(kl: float, random_kl: float, ratio: float) -> bool:
    """A circuit beats its same-count random control by ``ratio``: the control's held-out KL is at least ``ratio``
    times the circuit's, and above zero (a control that loses nothing cannot be beaten)."""
    return bool(random_kl > 0 and random_kl >= ratio * kl)


def kept_by_kind(circuit: FixedMasks) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, v in circuit.blocks.items():
        kind = name.split("_", 1)[1]
        out[kind] = out.get(kind, 0) + int(v.sum())
    return out


def task_metric(task: Task, final_logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(metric [n], correct [n] bool) from answer-position logits. Greater-than on a digit tokenizer uses
    the first step only here (each first digit's probability spread evenly over its ten years);
    ``CircuitEvaluator.two_digit`` gives the exact two-digit metric of a circuit."""
    if task.name == "greater_than":
        probs = torch.softmax(final_logits.double(), -1)
        if len(task.digit_tokens) == 100:
            year_probs = probs[:, task.digit_tokens]
        else:  # first digit only: spread each first digit's mass over its ten years
            year_probs = probs[:, task.digit_tokens].repeat_interleave(10, dim=1) / 10
        metric = probability_difference(year_probs, task)
        return metric, metric > 0
    diff = logit_diff(final_logits, task)
    return diff, diff > 0


def content_key(circuit) -> str | None:
    """A digest of a ``FixedMasks``' every block (name, shape, dtype, values); None for masks that can change
    (``DirectionMasks``)."""
    if not isinstance(circuit, FixedMasks):
        return None
    digest = hashlib.sha256()
    for name in sorted(circuit.blocks):
        block = circuit.blocks[name].detach().contiguous()
        digest.update(f"{name}:{tuple(block.shape)}:{block.dtype}:".encode())
        digest.update(block.cpu().numpy().tobytes())
    return digest.hexdigest()


class CircuitEvaluator:
    """Held-out evaluation of many binarised circuits; the full model and references computed once.

    A notebook evaluates some circuits more than once (a trained circuit in the α sweep and again when its
    file is scored; the random controls of the same kept set; the full model). Results are kept by the
    circuit's ``content_key``, so a circuit with the same values on these prompts is run once."""

    def __init__(self, masked: MaskedModel, task: Task, rule: AblationRule):
        task = task.to(masked.model.device)
        self.masked, self.task, self.rule = masked, task, rule
        self.prepared = prepare(masked, task, rule)
        # log-softmax shifts each row by a constant: logit differences and probabilities are unchanged
        self.full_metric, self.full_correct = task_metric(task, self.prepared.log_p_full)
        self._results: dict[str, dict] = {}

    def _logits(self, circuit, task: Task, references) -> torch.Tensor:
        with torch.no_grad():
            return self.masked.masked_final_logits(circuit, self.rule, task.clean, task.answer_pos, references)

    def evaluate(self, circuit) -> dict:
        key = content_key(circuit)
        if key is not None and key in self._results:
            return dict(self._results[key])
        logits = self._logits(circuit, self.task, self.prepared.references)
        metric, correct = task_metric(self.task, logits)
        result = dict(kl=float(kl_to_full(self.prepared.log_p_full, logits).mean()), metric=float(metric.mean()),
                      accuracy=float(correct.double().mean()), full_metric=float(self.full_metric.mean()),
                      full_accuracy=float(self.full_correct.double().mean()))
        if key is not None:
            self._results[key] = dict(result)
        return result

    def two_digit(self, circuits: list) -> list[dict]:
        """Greater-than: the exact metric Σ_{y>YY} p(y) − Σ_{y≤YY} p(y) over two-digit years, for each
        circuit and for the full model. On a digit tokenizer p(y) = p(d1) p(d2 | d1): the prompts, then the
        prompts with each first digit appended (its corrupted reference: the corruption with the same
        digit), one appended digit at a time so only one set of references is held."""
        if self.task.name != "greater_than":
            raise ValueError(f"two_digit is the greater-than metric; this evaluator holds {self.task.name!r} prompts")
        first = [self._logits(c, self.task, self.prepared.references) for c in circuits]
        second, full_second = [[] for _ in circuits], []
        if len(self.task.digit_tokens) == 10:
            for digit in range(10):
                task = with_first_digit(self.task, digit)
                prepared = prepare(self.masked, task, self.rule)
                for logits, circuit in zip(second, circuits):
                    logits.append(self._logits(circuit, task, prepared.references))
                full_second.append(prepared.log_p_full)
                del prepared

        def metric(first_logits, second_logits):
            probs = year_probabilities(lambda d: first_logits if d is None else second_logits[d], self.task)
            return probability_difference(probs, self.task)

        full = metric(self.prepared.log_p_full, full_second)
        rows = []
        for first_logits, second_logits in zip(first, second):
            m = metric(first_logits, second_logits)
            rows.append(dict(metric=float(m.mean()), accuracy=float((m > 0).double().mean()),
                             full_metric=float(full.mean()), full_accuracy=float((full > 0).double().mean())))
        return rows


def evaluate_circuit(evaluator: CircuitEvaluator, circuit: FixedMasks, control_seeds: int = 3, scored=None) -> dict:
    """One binarised circuit on the held-out prompts: KL, metric, accuracy, counts per kind, and the mean
    of ``control_seeds`` random circuits with the same number of kept directions in every block.
    ``scored``: masks scored in the circuit's place (the soft masks it binarises, say); the circuit still
    gives the counts and the controls."""
    total = circuit.count()
    n_keep = int(sum(float(v.sum()) for v in circuit.blocks.values()))
    row = dict(kept=n_keep, kept_fraction=n_keep / total, **evaluator.evaluate(circuit if scored is None else scored),
               **{f"kept_{k}": v for k, v in kept_by_kind(circuit).items()})
    controls = [evaluator.evaluate(random_like(circuit, seed)) for seed in range(control_seeds)]
    row.update(random_kl=float(np.mean([c["kl"] for c in controls])),
               random_metric=float(np.mean([c["metric"] for c in controls])),
               random_accuracy=float(np.mean([c["accuracy"] for c in controls])))
    return row


def faithfulness_curve(evaluator: CircuitEvaluator, masks: DirectionMasks, n_points: int = 12,
                       control_seeds: int = 3, progress: bool = True) -> pd.DataFrame:
    """Binarised circuits keeping geometrically spaced numbers of directions (largest masks first),
    each with its random-placement control."""
    total = masks.count()
    counts = sorted({int(round(k)) for k in np.geomspace(max(total // 2000, 1), total, n_points)})
    iterator = counts
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(counts, desc="faithfulness curve")
    return pd.DataFrame([evaluate_circuit(evaluator, binarise_top(masks, n_keep), control_seeds)
                         for n_keep in iterator])


def all_points(curve: pd.DataFrame, sweep: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """The threshold curve of the masks trained at ``alpha`` and the α sweep's trained circuits, in one
    table with a ``source`` column ("threshold" or "trained") and the α of each point."""
    return pd.concat([curve.assign(source="threshold", alpha=float(alpha)), sweep.assign(source="trained")],
                     ignore_index=True)


def circuit_of(point: dict, masks: DirectionMasks, trained: dict) -> FixedMasks:
    """The binarised circuit behind one row of ``all_points``."""
    if point["source"] == "trained":
        return FixedMasks.binarised(trained[point["alpha"]])
    return binarise_top(masks, int(point["kept"]))


def point_at_kl(curve: pd.DataFrame, kl: float = PAPER_KL) -> dict | None:
    """The sparsest evaluated circuit (of a curve or an α sweep) with held-out KL ≤ ``kl``; None if none
    reaches it. Keeping every direction is the full model, not a circuit: it never counts."""
    ok = curve[(curve["kl"] <= kl) & (curve["kept_fraction"] < 1)]
    return None if ok.empty else ok.sort_values(["kept", "kl"], kind="stable").iloc[0].to_dict()  # equal counts: lower KL


def per_head(values_of, n_layers: int) -> torch.Tensor:
    """[n_layers, n_heads] Σ over a head's QK and OV directions of ``values_of(layer, kind)`` [H, r], on the
    CPU (for figures and tables)."""
    return torch.stack([values_of(layer, "qk").sum(-1) + values_of(layer, "ov").sum(-1)
                        for layer in range(n_layers)]).cpu()


def kept_per_head(circuit: FixedMasks, n_layers: int) -> torch.Tensor:
    """[n_layers, n_heads] kept QK + OV directions of each head in a binarised circuit."""
    return per_head(circuit.values, n_layers)


def mask_mass_per_head(masks: DirectionMasks) -> torch.Tensor:
    """[n_layers, n_heads] Σ m over each head's QK and OV directions (soft masks)."""
    with torch.no_grad():
        return per_head(masks.values, masks.n_layers)


def kept_mlp_per_layer(circuit: FixedMasks, n_layers: int) -> torch.Tensor:
    """[n_layers] kept MLP directions (in and out) per layer."""
    kinds = ("mlp_up", "mlp_gate", "mlp_out")
    return torch.tensor([sum(float(circuit.blocks[f"{layer}_{k}"].sum()) for k in kinds
                             if f"{layer}_{k}" in circuit.blocks) for layer in range(n_layers)], device="cpu")


def circuit_for_heatmaps(points: pd.DataFrame, kl: float = PAPER_KL) -> tuple[dict, str]:
    """The circuit notebook 02 draws per head: the sparsest with held-out KL ≤ ``kl`` (``point_at_kl``);
    when none reaches it, the circuit of lowest KL among those that keep less than everything. Returns
    (its row of ``all_points``, why it was chosen)."""
    point = point_at_kl(points, kl)
    if point is not None:
        return point, f"sparsest circuit with held-out KL ≤ {kl}"
    partial = points[points["kept_fraction"] < 1]
    if partial.empty:
        raise ValueError("every evaluated circuit keeps all directions: there is no circuit to draw")
    return partial.sort_values("kl", kind="stable").iloc[0].to_dict(), f"no circuit reaches KL ≤ {kl}: the one of lowest KL"


def boxed_mass(mass, heads) -> tuple[float, float]:
    """(mean mask mass of the given heads, mean over all other heads); NaN for the first when none given."""
    mass = torch.as_tensor(mass, dtype=torch.float64, device="cpu")
    boxed = torch.zeros(mass.shape, dtype=torch.bool, device="cpu")
    for layer, head in heads:
        boxed[layer, head] = True
    inside = float(mass[boxed].mean()) if boxed.any() else float("nan")
    return inside, float(mass[~boxed].mean())
