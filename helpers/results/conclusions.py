"""Each notebook's closing "What we found", rendered as markdown from the run's own summary (the dict written
to ``summary.json``), so that it cannot go stale: the question, the answer with its control, the paper's
number and the verdict of ``helpers.results.claims``, and the first caveat."""
from __future__ import annotations

import json
from math import comb
from pathlib import Path

from helpers.results import claims as C
from helpers.pipeline.summaries import SUMMARY_FILE


def read_summary(out_dir: str | Path) -> dict:
    """The summary a notebook has just written, as the manifest will hold it."""
    return json.loads((Path(out_dir) / SUMMARY_FILE).read_text(encoding="utf-8"))


def _size_note(fast: bool) -> str:
    return "\n\n*A fast run (the CI sizes): these numbers only show that the notebook runs.*" if fast else ""


def _claim_lines(claim: C.Claim) -> list[str]:
    lines = [f"- **Ours:** {claim.ours}" + (f"; {claim.control}" if claim.control else "") + "."]
    if claim.paper_recipe:
        lines.append(f"- **The paper's recipe on this model:** {claim.paper_recipe}.")
    lines.append(f"- **Verdict on the paper's claim** ({claim.claim}): **{claim.verdict}**.")
    if claim.caveat:
        lines.append(f"- **Caveat:** {claim.caveat}.")
    return lines


def augmented_matrices(summary: dict, rules: dict | None = None, fast: bool = False) -> str:
    """Notebook 01: do the identities hold, and how many directions stand above the quantization floor."""
    rules = rules or C.load_rules()
    claim = C.identities_claim({summary["model"]: summary}, rules)
    floor = summary["fraction_above_noise_floor"]
    lowest = min(floor, key=lambda kind: (floor[kind], kind))
    lines = ["## What we found", "",
             f"**Do the augmented matrices compute what {summary['model']} computes?**", *_claim_lines(claim), "",
             f"**How many of the {summary['directions']['total']:,} directions are resolved by the quantized weights?**",
             "- Above the noise floor: " + ", ".join(f"{kind} {100 * v:.1f} %" for kind, v in sorted(floor.items()))
             + f"; the fewest for {lowest}. Directions below the floor are not distinguishable from rounding noise."]
    return "\n".join(lines) + _size_note(fast)


def masking(summary: dict, rules: dict | None = None, fast: bool = False) -> str:
    """Notebook 02: which directions the task needs, against the paper's number and recipe."""
    rules = rules or C.load_rules()
    task = summary["task"]
    claim = C.sparsity_claim(task, summary, rules, run="this run")
    sweep = sorted(summary.get("alpha_sweep") or [], key=lambda p: p["alpha"])
    lines = ["## What we found", "",
             f"**How few singular directions keep {C.TASK_NAMES.get(task, task)} on held-out prompts?** "
             f"The sparsest circuit within KL {rules['sparsity']['paper_kl']}, beside a random circuit of the same size:",
             *_claim_lines(claim), "",
             "**Every trained α** (binarised, held-out prompts):", "",
             "| α | kept | held-out KL | same-count random KL |", "|---|---|---|---|"]
    lines += [f"| {p['alpha']:g} | {100 * p['kept_fraction']:.1f} % | {p['kl']:.3f} | {p['random_kl']:.3f} |" for p in sweep]
    return "\n".join(lines) + _size_note(fast)


def tiled(summary: dict, rules: dict | None = None, fast: bool = False) -> str:
    """Notebook 04: how many site-layers pass, and which checks random or permuted weights pass as often."""
    rules = rules or C.load_rules()
    overall = C.tiled_claim(summary, rules, run="this run")
    checks = C.check_claims(summary, None, rules, run="this run")
    lines = ["## What we found", "",
             "**Do tile-SVD mounts pass checks A, B and C at every site-layer, and only on trained weights?**",
             *_claim_lines(overall), "", "**Check by check**, against the negative controls:", "",
             "| check | model | controls | verdict |", "|---|---|---|---|"]
    for claim in checks:
        name = f"Check {claim.item}"
        lines.append(f"| {name} | {claim.ours} | {claim.control} | {claim.verdict} |")
    informative = [f"Check {c.item}" for c in checks if not c.verdict.startswith(C.UNINFORMATIVE)]
    lines += ["", f"Only {', '.join(informative) if informative else 'none of the checks'} separate"
              f"{'s' if len(informative) == 1 else ''} the trained model from its controls; a check that random "
              "weights pass as often says nothing about what training put in the weights."]
    return "\n".join(lines) + _size_note(fast)


CONTIGUITY_SHARE = 0.1
"""Tiles' contiguity "hardly matters" when their lead over random column partitions is below this share of
their lead over random directions."""


def contiguity_reading(random_gap: float, partition_gap: float) -> str:
    if abs(partition_gap) < CONTIGUITY_SHARE * abs(random_gap):
        return (f"The coverage comes from the SVD of column blocks: the tiles' lead over random partitions is less "
                f"than {CONTIGUITY_SHARE:.0%} of their lead over random directions, so contiguity hardly matters.")
    return ("Contiguous tiles cover more than random partitions by at least "
            f"{CONTIGUITY_SHARE:.0%} of their lead over random directions: contiguity matters.")


def coverage(summary: dict, fast: bool = False) -> str:
    """Notebook 05: coverage of tile mounts against random directions and random column partitions."""
    random_gap, partition_gap = summary["mean_tile_minus_random"], summary["mean_tile_minus_partition"]
    lines = ["## What we found", "",
             "**Do tile mounts cover the activations better than their baselines?**",
             f"- Against random directions: mean coverage higher by {random_gap:.3f}.",
             f"- Against random column partitions of the same widths (SVD of scattered columns instead of contiguous "
             f"tiles): mean coverage higher by {partition_gap:.4f}.",
             "- " + contiguity_reading(random_gap, partition_gap)]
    return "\n".join(lines) + _size_note(fast)


def chance_of_at_least(kept: int, n: int, base: float) -> float:
    """P(at least ``kept`` of ``n`` directions kept) if each were kept independently with probability ``base``."""
    return sum(comb(n, k) * base ** k * (1 - base) ** (n - k) for k in range(kept, n + 1))


def steering(summary: dict, rules: dict | None = None, fast: bool = False) -> str:
    """Notebook 06: do the receptors flip the pronoun, and are they in the gender circuit beyond chance."""
    rules = rules or C.load_rules()
    claim = C.receptor_claim(summary, rules, run="this run")
    n, kept = len(summary["receptors"]), summary["receptors_in_circuit"]
    base = summary["circuit_ov_kept_fraction"]
    lines = ["## What we found", "", "**Do a few OV directions decide he vs she?**", *_claim_lines(claim), "",
             f"**Are the receptors in the gender circuit?** {kept} of {n} are kept by "
             f"`{summary['circuit_file']['label']}`, which keeps {100 * base:.1f} % of all OV directions: "
             f"{kept} or more of {n} by chance alone would happen with probability "
             f"{chance_of_at_least(kept, n, base):.2g} (independent draws at that rate)."]
    return "\n".join(lines) + _size_note(fast)


def head_case_study(summary: dict, rules: dict | None = None, fast: bool = False) -> str:
    """Notebook 03, after its own findings: each subfunction's verdict on the paper's claim about head 9.6."""
    rules = rules or C.load_rules()
    claims = C.subfunction_claims(summary, rules, run="this run")
    lines = ["### Against the paper", "",
             "Paper 1 reads these subfunctions in GPT-2 small's name mover 9.6. Here, with the control head beside it:", ""]
    lines += [f"- {c.item}: {c.ours}; {c.control}. **{c.verdict}**."
              for c in claims]
    if claims and claims[0].caveat:
        lines += ["", f"Caveat: {claims[0].caveat}."]
    return "\n".join(lines) + _size_note(fast)
