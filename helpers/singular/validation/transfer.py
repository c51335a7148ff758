"""Task-specificity by transfer (docs/methods.md §1.8): does a circuit found on nonsense do the task?

An overlap rule judges whole circuits, and most of a circuit's directions keep any text predictable: a circuit
trained on nonsense keeps them too, whether or not the task needs more. Notebook 08 showed it: a planted
mechanism that drives its task sits among tens of thousands of kept directions, and no overlap rule told its
circuit from one found on nonsense that cannot fire it. This rule asks the task instead.

Cut the task's second training seed and each nonsense circuit to the task circuit's count k (each by its own
mask logits, ``binarise_top``) and score every one on the task's held-out prompts, under the task's ablation
rule. The task circuit is *task-specific by transfer* when every nonsense circuit fails the KL bound on the task
and its KL exceeds the second seed's by a paired bootstrap CI above zero: what was found on nonsense does not do
the task, what was found on the task does. Declared in ``data/task_transfer.toml``.

- ``unseen_prompts``: the held-out prompts that no compared circuit trained on;
- ``per_prompt_kl``: a circuit's KL to the full model on each held-out prompt;
- ``excess``: a nonsense circuit's mean excess KL over the second seed's, with its paired bootstrap CI;
- ``transfer_reach``: whether both outcomes were reachable at k (a ``helpers.core.feasibility.Reach``);
- ``transfer_scores``: every number the rule reads, for one task circuit;
- ``specific_by_transfer``: the verdict, at its boundaries in the tests;
- ``transfer_detail`` and ``transfer_words``: the numbers behind a verdict, and the verdict with them, in words.

Notebook 07's use of it (its second seed as the reference, a third seed posed as nonsense) is
``helpers.singular.validation.verdicts.transfer_check``.
"""
from __future__ import annotations

from pathlib import Path

import torch

from helpers.core.declared import load_declared
from helpers.core.feasibility import Reach

TRANSFER_RULES = Path(__file__).resolve().parents[3] / "data" / "task_transfer.toml"
RULE_KEYS = {"task_transfer": {"bootstrap", "confidence", "seed", "why"}}


def load_transfer_rule(path: str | Path = TRANSFER_RULES) -> dict:
    """``[task_transfer]``: the bootstrap's resamples, its confidence and seed, every key present and none unknown."""
    rule = load_declared(path, RULE_KEYS)["task_transfer"]
    if not (isinstance(rule["bootstrap"], int) and rule["bootstrap"] >= 100):
        raise ValueError(f"{path} [task_transfer] bootstrap={rule['bootstrap']!r}: expected a whole number ≥ 100")
    if not 0 < rule["confidence"] < 1:
        raise ValueError(f"{path} [task_transfer] confidence={rule['confidence']!r}: expected a share between 0 and 1")
    return rule


def unseen_prompts(task, *seen) -> tuple[object, int]:
    """``task`` without the prompts any of the ``seen`` tasks holds (a second seed draws its own prompts, which may
    repeat a held-out one), and how many were dropped. Refuses to leave none."""
    trained = {p for other in seen for p in other.prompts}
    keep = [i for i, p in enumerate(task.prompts) if p not in trained]
    if not keep:
        raise ValueError(f"every one of the {len(task)} held-out {task.name} prompts was trained on: draw more prompts")
    return (task if len(keep) == len(task) else task.subset(keep)), len(task) - len(keep)


def per_prompt_kl(evaluator, circuit) -> torch.Tensor:
    """[n] KL(full ‖ circuit) on each of ``evaluator``'s prompts (a ``CircuitEvaluator``: its prompts, rule and
    references), float64 on the CPU; its mean is ``evaluator.evaluate(circuit)["kl"]``."""
    from helpers.singular.masking.references import kl_to_full

    task = evaluator.task
    with torch.no_grad():
        logits = evaluator.masked.masked_final_logits(circuit, evaluator.rule, task.clean, task.answer_pos,
                                                      evaluator.prepared.references)
        return kl_to_full(evaluator.prepared.log_p_full, logits).double().cpu()


def excess(kl: torch.Tensor, reference_kl: torch.Tensor, n_boot: int, confidence: float, seed: int) -> dict:
    """The mean of ``kl`` − ``reference_kl`` over the same prompts, with its ``confidence`` CI from a paired
    bootstrap over prompts (percentile; ``n_boot`` resamples, the generator seeded by ``seed``)."""
    a, b = (torch.as_tensor(x, dtype=torch.float64, device="cpu") for x in (kl, reference_kl))
    if a.shape != b.shape or a.ndim != 1 or not len(a):
        raise ValueError(f"per-prompt KLs of the same prompts expected; got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    diff = a - b
    rows = torch.randint(len(diff), (n_boot, len(diff)), generator=torch.Generator().manual_seed(seed), device="cpu")
    tail = (1 - confidence) / 2
    low, high = torch.quantile(diff[rows].mean(1), torch.tensor([tail, 1 - tail], dtype=torch.float64, device="cpu")).tolist()
    return dict(excess=float(diff.mean()), excess_low=low, excess_high=high)


def transfer_reach(k: int, n: int, random_kl: float, reference_kl: float, bound: float) -> Reach:
    """Whether the rule could say either thing at a cut of ``k`` of ``n`` directions. "Yes" needs a circuit of k
    that fails the bound on the task, "no" one that holds it; the evidence is a random circuit of k (``random_kl``)
    and the second seed's circuit cut to k (``reference_kl``), each scored on the task's held-out prompts."""
    fails = random_kl > bound or reference_kl > bound
    holds = random_kl <= bound or reference_kl <= bound
    if not fails:
        return Reach(False, True, f"set sizes: circuits of {k:,} of {n:,} directions hold the bound {bound:g} on the "
                                  f"task whichever they keep (a random one: KL {random_kl:.3f}; the second seed's: "
                                  f"{reference_kl:.3f})")
    if not holds:
        return Reach(True, False, f"the cut: circuits of {k:,} of {n:,} directions fail the bound {bound:g} on the task "
                                  f"even when trained on it (the second seed's: KL {reference_kl:.3f}; a random one: "
                                  f"{random_kl:.3f})")
    return Reach(True, True)


def specific_by_transfer(rows: list[dict], bound: float) -> bool:
    """The rule declared in ``data/task_transfer.toml``: task-specific when every nonsense circuit (``rows``, one
    per kind) fails the bound on the task (KL above ``bound``; at the bound it holds) and its excess KL over the
    second seed's circuit has a CI whose lower end is above zero."""
    if not rows:
        raise ValueError("task-specificity by transfer needs at least one nonsense circuit")
    return all(r["kl"] > bound and r["excess_low"] > 0 for r in rows)


def transfer_scores(evaluator, reference_masks, nonsense_masks: dict, k: int, bound: float, rule: dict) -> dict | None:
    """What the rule reads for one task circuit of ``k`` directions: the second seed's masks (``reference_masks``) and each
    kind's nonsense masks (``nonsense_masks``, {kind: masks}), each cut to its own top k, and a random circuit of k
    (the second seed's counts per block, ``random_like``), scored on ``evaluator``'s held-out prompts. Returns k,
    n, the bound, the prompt count, the reference's and the random circuit's KL, one row per kind (its KL, whether it
    fails the bound, its excess over the reference with the CI) and whether both outcomes were reachable; the
    caller judges the kinds it declares (``specific_by_transfer``). None when k keeps every direction or none
    (nothing to cut)."""
    from helpers.singular.masking.circuits import binarise_top, random_like
    from helpers.singular.validation.verdicts import reach_record

    n = reference_masks.count()
    if not 0 < k < n:
        return None
    reference = binarise_top(reference_masks, k)
    reference_kl = per_prompt_kl(evaluator, reference)
    random_kl = float(per_prompt_kl(evaluator, random_like(reference, rule["seed"])).mean())
    rows = []
    for kind, masks in nonsense_masks.items():
        kl = per_prompt_kl(evaluator, binarise_top(masks, k))
        rows.append(dict(kind=kind, kl=float(kl.mean()), fails_bound=bool(float(kl.mean()) > bound),
                         **excess(kl, reference_kl, rule["bootstrap"], rule["confidence"], rule["seed"])))
    reach = transfer_reach(k, n, random_kl, float(reference_kl.mean()), bound)
    return dict(k=k, n=n, bound=bound, prompts=len(reference_kl), reference_kl=float(reference_kl.mean()),
                random_kl=random_kl, rows=rows, reach=reach_record(reach))


def transfer_detail(found: dict, kinds: list[str]) -> str:
    """The numbers behind the verdict on the nonsense ``kinds`` of ``transfer_scores``' ``found``: "random tokens: KL
    2.314 on the task, +2.271 [+2.105, +2.440] beyond the second seed's 0.043; bound 0.21", with "uninformative:
    decided by …" where one outcome was out of reach."""
    rows = [r for r in found["rows"] if r["kind"] in kinds]
    if not rows:
        raise ValueError(f"kinds={kinds!r}: none among the scored kinds {[r['kind'] for r in found['rows']]}")
    said = "; ".join(f"{r['kind'].replace('_', ' ')}: KL {r['kl']:.3f} on the task, {r['excess']:+.3f} "
                     f"[{r['excess_low']:+.3f}, {r['excess_high']:+.3f}] beyond the second seed's "
                     f"{found['reference_kl']:.3f}" for r in rows)
    decided = (found.get("reach") or {}).get("decided_by")
    return f"{said}; bound {found['bound']:g}" + (f"; uninformative: decided by {decided}" if decided else "")


def transfer_words(found: dict, kinds: list[str], specific: bool) -> str:
    """The rule's verdict on the nonsense ``kinds`` of ``transfer_scores``'s ``found``, in words: "specific
    (random tokens: KL 2.314 on the task, +2.271 [+2.105, +2.440] beyond the second seed's 0.043; bound 0.21)"
    (``transfer_detail``)."""
    return f"{'specific' if specific else 'not specific'} ({transfer_detail(found, kinds)})"
