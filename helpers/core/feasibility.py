"""Whether a verdict rule could have come out either way at a run's own sizes.

A rule whose outcome is fixed by the sizes of the sets it compares says nothing about the data. Each
function here takes what a rule reads, except the one number the rule tests, and returns a ``Reach``: was
the rule's "yes" reachable, was its "no", and, where one was not, what decided it. Where a verdict's
``Reach`` is not ``informative``, ``helpers.results.claims`` and notebook 07 print it as
"uninformative: decided by <reason>" instead of its yes or no.

- ``jaccard_range`` and ``chance_jaccard``: the Jaccard two sets of given sizes among ``n`` can have, and its
  expectation when both are placed at random (the hypergeometric E|A ∩ B| = |A||B|/n);
- ``specificity_reach``: notebook 07's task-specificity rule (a nonsense circuit's Jaccard with the task
  circuit at most a threshold);
- ``corrected_overlap`` and ``matched_specificity_reach``: the same question at matched size (every circuit
  cut to the task circuit's count), judged by overlap beyond chance;
- ``weights_reach``: its weight-control rule (every control needs at least ``min_ratio`` times the task's
  directions to stay within the bound);
- ``sparsity_reach``: paper 1's sparse-circuit rule (a circuit within the KL bound that keeps at most a
  limit);
- ``identities_reach``: the bias-folding identities, which cannot fail through a bias on a model that has
  none.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Reach:
    """Which outcomes of a rule were reachable; ``decided_by`` says why one was not (empty when both were)."""
    yes: bool
    no: bool
    decided_by: str = ""

    def __post_init__(self):
        if not (self.yes or self.no):
            raise ValueError("a rule must reach at least one outcome")
        if self.informative == bool(self.decided_by):
            raise ValueError(f"decided_by={self.decided_by!r}: give a reason exactly when an outcome is unreachable")

    @property
    def informative(self) -> bool:
        return self.yes and self.no

    def say(self, outcome: str) -> str:
        """``outcome`` when both were reachable, else "uninformative: decided by …" (the outcome it was bound to)."""
        return outcome if self.informative else f"uninformative: decided by {self.decided_by}"


def _sizes(a: int, b: int, n: int) -> None:
    for name, value in (("a", a), ("b", b), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}={value!r}: expected a whole number of directions")
    if n < 1 or not (0 <= a <= n and 0 <= b <= n):
        raise ValueError(f"sets of {a} and {b} among n={n}: expected 0 ≤ sizes ≤ n and n ≥ 1")


def _jaccard(both: int, a: int, b: int) -> Fraction:
    either = a + b - both
    return Fraction(both, either) if either else Fraction(1)  # two empty sets are equal (alpha_path.kept_overlap)


def jaccard_range(a: int, b: int, n: int) -> tuple[Fraction, Fraction]:
    """The lowest and highest Jaccard of two sets of ``a`` and ``b`` among ``n``: they share at least
    a + b − n and at most min(a, b) members, and the Jaccard |A ∩ B| / (a + b − |A ∩ B|) rises with the
    shared count."""
    _sizes(a, b, n)
    return _jaccard(max(0, a + b - n), a, b), _jaccard(min(a, b), a, b)


def chance_jaccard(a: int, b: int, n: int) -> float:
    """The Jaccard at the expected overlap of two sets placed at random: E|A ∩ B| = ab / n."""
    _sizes(a, b, n)
    both = a * b / n
    either = a + b - both
    return both / either if either else 1.0


def corrected_overlap(both: int, a: int, b: int, n: int) -> float:
    """The overlap of two sets of ``a`` and ``b`` among ``n`` that share ``both``, corrected for chance: 0 at the
    overlap random placement gives on average (ab / n), 1 when the smaller set lies inside the larger,
    negative below chance. Sets of the same size compare like with like; at a + b > n the lowest value
    reachable is above −1 (``corrected_range``)."""
    _sizes(a, b, n)
    if not 0 <= both <= min(a, b) or both < a + b - n:
        raise ValueError(f"both={both}: two sets of {a} and {b} among n={n} share between {max(0, a + b - n)} and "
                         f"{min(a, b)}")
    expected = a * b / n
    room = min(a, b) - expected
    if room <= 0:
        raise ValueError(f"sets of {a} and {b} among n={n}: one holds every direction or none, so no overlap differs "
                         "from chance")
    return (both - expected) / room


def corrected_range(a: int, b: int, n: int) -> tuple[float, float]:
    """The lowest and highest ``corrected_overlap`` two sets of these sizes can have."""
    return corrected_overlap(max(0, a + b - n), a, b, n), corrected_overlap(min(a, b), a, b, n)


def matched_specificity_reach(k: int, n: int, threshold: float) -> Reach:
    """Task-specificity at matched size (every circuit cut to its ``k`` top-ranked directions): "yes" when the
    nonsense circuit's chance-corrected overlap with the task circuit is at most ``threshold`` (the ratio times
    the lowest such overlap between seeds). "Yes" was reachable when the lowest overlap two sets of k can
    have is within it, "no" when the highest is above it."""
    low, high = corrected_range(k, k, n)
    if low > threshold:
        return Reach(False, True, f"set sizes: two sets of {k:,} among {n:,} overlap by at least {low:.2f} beyond "
                                  f"chance, above the rule's {threshold:.2f}")
    if high <= threshold:
        return Reach(True, False, f"the threshold: the rule's {threshold:.2f} is at or above the highest overlap "
                                  "two sets can have")
    return Reach(True, True)


def specificity_reach(task_kept: int, nonsense_kept: dict[str, int], threshold: float, n: int) -> Reach:
    """Task-specificity: "yes" when every nonsense circuit's Jaccard with the task circuit is at most
    ``threshold`` (notebook 07: the ratio times the lowest Jaccard between two seeds). "Yes" was reachable
    when every nonsense circuit's lowest possible Jaccard at its size is within the threshold; "no" when
    some nonsense circuit's highest possible one is above it."""
    if not nonsense_kept:
        raise ValueError("task-specificity needs at least one nonsense circuit")
    ranges = {kind: jaccard_range(task_kept, kept, n) for kind, kept in nonsense_kept.items()}
    bound = Fraction(str(threshold))
    above = sorted(kind for kind, (low, _) in ranges.items() if low > bound)
    yes, no = not above, any(high > bound for _, high in ranges.values())
    if not yes:
        kind = above[0]
        why = (f"set sizes: the nonsense circuit ({kind.replace('_', ' ')}, {nonsense_kept[kind]:,} directions) and the "
               f"task's ({task_kept:,}) among {n:,} overlap by a Jaccard of at least {float(ranges[kind][0]):.2f}, above "
               f"the rule's {threshold:.2f}")
    elif not no:
        why = (f"set sizes: no nonsense circuit of these sizes can overlap the task's {task_kept:,} directions "
               f"by more than the rule's {threshold:.2f}")
    else:
        why = ""
    return Reach(yes, no, why)


def weights_reach(task_kept: int, n: int, min_ratio: float) -> Reach:
    """Weights matter: "yes" when every weight control needs at least ``min_ratio`` times the task's count to
    stay within the bound. A control can need at most all ``n`` directions, so "yes" was reachable only while
    ``min_ratio`` × ``task_kept`` ≤ n (the ratio as the decimal it is declared as); "no" whenever the task
    needs any direction."""
    _sizes(task_kept, 0, n)
    ratio = Fraction(str(min_ratio))
    yes, no = ratio * task_kept <= n, task_kept > 0
    why = ""
    if not yes:
        why = (f"set sizes: the task keeps {100 * task_kept / n:.1f} % of the directions, and no control can keep "
               f"{float(ratio):g} times that")
    elif not no:
        why = "set sizes: the task needs no direction, so every control needs at least as many"
    return Reach(yes, no, why)


def sparsity_reach(evaluated_fractions: list[float], limit: float) -> Reach:
    """Paper 1's sparse circuit: "yes" needs a circuit within the KL bound that keeps at most ``limit`` of the
    directions. It was reachable only when some evaluated circuit (a threshold curve's point or a trained
    one) is at most that size; "no" always is (a circuit's KL can exceed the bound)."""
    if not evaluated_fractions:
        raise ValueError("no circuit was evaluated: nothing could reach the claim")
    smallest = min(evaluated_fractions)
    if smallest <= limit:
        return Reach(True, True)
    return Reach(False, True, f"the circuits evaluated: the smallest keeps {100 * smallest:.1f} %, above the "
                              f"{100 * limit:.2f} % the rule allows")


def identities_reach(largest_bias: dict[str, float], misfolded_error: dict[str, float], bound: float) -> Reach:
    """The bias-folding identities on some models (name → the largest |bias| entry its augmented matrices fold
    in; name → the OV identity's error with the bias rows dropped, a planted misfold): they can say "no" to a
    misfolded bias only on a model with a non-zero bias where that misfold's error reaches ``bound``."""
    if not largest_bias:
        raise ValueError("no model: nothing was checked")
    if not any(value > 0 for value in largest_bias.values()):
        return Reach(True, False, f"bias-free models: {' and '.join(sorted(largest_bias))} have no bias, so every "
                                  "bias term is zero on both sides of the identities")
    if not any(largest_bias[m] > 0 and misfolded_error.get(m, 0.0) >= bound for m in largest_bias):
        return Reach(True, False, f"a misfold the bound does not catch: dropping every bias row leaves the error "
                                  f"below {bound:g}")
    return Reach(True, True)
