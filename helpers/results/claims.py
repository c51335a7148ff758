"""Every claim of both papers, as one row with a verdict in plain words, computed from the run summaries.

The verdict rules are code, read with their bounds from ``data/verdict_rules.toml``, so that a verdict
cannot drift from the numbers it rests on. ``helpers.results.documents`` writes the rows into RESULTS.md and the
README. A claim whose run is missing from the manifest gets the row "not testable here: run … first".
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from helpers.core.feasibility import identities_reach, sparsity_reach

ROOT = Path(__file__).resolve().parents[2]
RULES_FILE = ROOT / "data" / "verdict_rules.toml"

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
PAPER_RULE_ONLY = "holds only under the paper's rule"
UNINFORMATIVE = "uninformative: a control passes too"
DECIDED = "uninformative: decided by"  # the rule's other outcome was out of reach (helpers.core.feasibility)
NOT_TESTABLE = "not testable here"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, PAPER_RULE_ONLY, UNINFORMATIVE, DECIDED, NOT_TESTABLE)

RUNS = {
    "identities": ("01_augmented_matrices-smollm2-135m", "01_augmented_matrices-gemma-3-270m"),
    "ioi": "02_masking-ioi-smollm2-135m", "gender": "02_masking-gender-smollm2-135m",
    "greater_than": "02_masking-greater_than-smollm2-135m", "head": "03_head_case_study-smollm2-135m",
    "receptors": "06_steering-smollm2-135m", "tiled": "04_tiled_svd-gemma-3-270m",
    "coverage": "05_coverage_curves-gemma-3-270m",
}
PAPER_BUDGET_SWEEP = "02_masking-ioi-paper-budget"  # runs.toml: paper 1's recipe at a longer budget (IOI only)
VALIDATION_RUNS = {task: f"07_circuit_validation-{task}-smollm2-135m" for task in ("ioi", "gender", "greater_than")}
TASK_NAMES = {"ioi": "IOI", "gender": "gender pronoun", "greater_than": "greater-than"}
SUBSTITUTE = "our model stands in for the paper's"


@dataclass(frozen=True)
class Claim:
    """One claim of one paper, beside the paper's recipe on our model, ours, the control and the verdict."""
    paper: int
    claim: str
    paper_recipe: str
    ours: str
    control: str
    verdict: str
    caveat: str
    shown_in: str
    _: KW_ONLY
    key: str  # "group/item" or "group": what picks a claim (the README's findings, the summary figures)

    @property
    def group(self) -> str:
        return self.key.split("/")[0]

    @property
    def item(self) -> str:
        """The part of the key after the group ("A1" of "check/A1"); empty for a claim alone in its group."""
        return self.key.partition("/")[2]

    def __post_init__(self):
        if not self.verdict.startswith(VERDICTS):
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")


def load_rules(path: Path = RULES_FILE) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.1f} %"


def table_cell(text: str | None) -> str:
    """A text as one cell of a markdown table: "—" where empty, its pipes escaped."""
    return (text or "—").replace("|", "\\|")


def _notebook(run: str) -> str:
    return f"[{run}](figures/{run}/notebook.ipynb)"


def _missing(paper: int, claim: str, run: str, key: str) -> Claim:
    return Claim(paper, claim, "", "", "", f"{NOT_TESTABLE}: run `python -m helpers.pipeline --only {run}` first",
                 "", "", key=key)


# --- the verdict rules: each a pure function of numbers, tested at its boundaries -------------------------

def identity_verdict(worst_errors: list[float], rules: dict) -> str:
    """Reproduced when every model's worst relative error is below the declared bound (notebook 01 asserts
    the same strict inequality)."""
    return REPRODUCED if max(worst_errors) < rules["identities"]["max_relative_error"] else NOT_REPRODUCED


def sparsity_verdict(ours: dict | None, paper_rule: dict | None, paper_fraction: float, rules: dict) -> str:
    """The paper's sparse circuit: ``ours`` and ``paper_rule`` are the sparsest circuits within the paper's KL
    under our ablation rule and under the paper's (``kept_fraction``, ``kl``, ``random_kl``), or None when
    none reaches it. Reproduced when ours keeps at most ``kept_factor`` times the paper's fraction and its
    same-count random control does not also reach the KL bound; failing that, "holds only under the paper's
    rule" when the circuit trained under the paper's rule does."""
    bound = rules["sparsity"]["paper_kl"]
    limit = rules["sparsity"]["kept_factor"] * paper_fraction

    def meets(point):
        return point is not None and point["kl"] <= bound and point["kept_fraction"] <= limit

    if meets(ours):
        return UNINFORMATIVE if ours["random_kl"] <= bound else REPRODUCED
    if meets(paper_rule):
        return UNINFORMATIVE if paper_rule["random_kl"] <= bound else PAPER_RULE_ONLY
    return NOT_REPRODUCED


def subfunction_verdict(head_supported: bool, control_supported: bool, sets_meeting_rule: int, rules: dict) -> str:
    """A subfunction of a name mover: testable only on a head that meets the name-mover rule on enough prompt
    sets; then reproduced when the head earns it and the control head does not."""
    if sets_meeting_rule < rules["head_case_study"]["min_sets_meeting_rule"]:
        return f"{NOT_TESTABLE}: no head of this model meets the name-mover rule"
    if not head_supported:
        return NOT_REPRODUCED
    return UNINFORMATIVE if control_supported else REPRODUCED


def receptor_verdict(receptor_percent: float, random_percent: float, rules: dict) -> str:
    """Reproduced when the receptors flip at least the declared share of pronouns and beat the equal-norm random
    directions by the declared margin, both at the declared scale and path."""
    r = rules["receptors"]
    if receptor_percent < r["min_flip_percent"]:
        return NOT_REPRODUCED
    return REPRODUCED if receptor_percent - random_percent >= r["min_above_random"] else UNINFORMATIVE


def tiled_verdict(model_fraction: float, paper_judge_fraction: float | None, control_fraction: float,
                  rules: dict) -> str:
    """Paper 2's "every site-layer passes": reproduced when our judge passes the declared share and no control
    passes as often; "holds only under the paper's rule" when only the released judge does."""
    need = rules["tiled"]["min_pass_fraction"]
    if model_fraction >= need:
        return UNINFORMATIVE if control_fraction >= model_fraction else REPRODUCED
    if paper_judge_fraction is not None and paper_judge_fraction >= need:
        return PAPER_RULE_ONLY
    return NOT_REPRODUCED


@dataclass(frozen=True)
class CheckRates:
    """One sub-check of paper 2 under one judge, over the sites where it is judged."""
    model: float  # the model's pass rate, the mean over sites (each site has the same number of layers)
    controls: dict  # control label → its pass rate
    uninformative_sites: tuple  # sites where a control passes at least as often as the model
    sites: int


def check_rates(pass_rates: dict, check: str) -> CheckRates | None:
    """``pass_rates`` ("site check" → rates by label, and the declared ``uninformative`` flag) for one check."""
    rows = {key.split()[0]: r for key, r in pass_rates.items() if key.split()[1] == check}
    if not rows:
        return None
    controls = [c for c in ("random-init", "permuted") if all(c in r for r in rows.values())]
    return CheckRates(model=sum(r["model"] for r in rows.values()) / len(rows),
                      controls={c: sum(r[c] for r in rows.values()) / len(rows) for c in controls},
                      uninformative_sites=tuple(sorted(s for s, r in rows.items() if r["uninformative"])),
                      sites=len(rows))


def check_verdict(ours: CheckRates | None, paper: CheckRates | None, rules: dict) -> str:
    """One sub-check of paper 2: uninformative when a control passes it as often as the model at the declared
    share of its sites; otherwise reproduced when the model passes it at the declared rate under our judge,
    and "holds only under the paper's rule" when only the released judge's rate (itself informative) does."""
    share, need = rules["tiled"]["uninformative_site_share"], rules["tiled"]["min_pass_fraction"]

    def informative(rates):
        return len(rates.uninformative_sites) < share * rates.sites

    if ours is None:
        return f"{NOT_TESTABLE}: judged at no site"
    if not informative(ours):
        return UNINFORMATIVE
    if ours.model >= need:
        return REPRODUCED
    if paper is not None and informative(paper) and paper.model >= need:
        return PAPER_RULE_ONLY
    return NOT_REPRODUCED


# --- the claims, read from the summaries ------------------------------------------------------------------

def identities_claim(summaries: dict, rules: dict) -> Claim:
    """From the summaries of notebook 01 (run name → summary), one per model. Each also checks the identities on
    GPT-2 small's shapes with random weights and non-zero biases (``biased_control``), and a planted misfold
    that drops every bias row: the verdict can say "no" only where that misfold fails."""
    claim = "Biases fold into augmented QK, OV and MLP matrices exactly (GPT-2 small)"
    runs = [run for run, summary in summaries.items() if summary]
    if not runs:
        return _missing(1, claim, next(iter(summaries)), "identities")
    if any("largest_bias" not in summaries[run] for run in runs):
        return Claim(1, claim, "", "", "", f"{NOT_TESTABLE}: rerun notebook 01 (its summary predates the bias check: "
                     f"`python -m helpers.pipeline --only {' '.join(runs)}`)", "",
                     ", ".join(_notebook(run) for run in runs), key="identities")
    bound = rules["identities"]["max_relative_error"]
    models = {summaries[run]["model"]: summaries[run] for run in runs}
    for summary in list(models.values()):
        control = summary.get("biased_control")
        if control:
            models[control["model"]] = control
    errors = {model: s["worst_identity_error"] for model, s in models.items()}
    reach = identities_reach({model: max(s["largest_bias"].values()) for model, s in models.items()},
                             {model: s["misfolded_ov_error"] for model, s in models.items()}, bound)
    ours = "worst relative error " + ", ".join(f"{e:.1e} ({model})" for model, e in errors.items())
    misfolds = {model: s["misfolded_ov_error"] for model, s in models.items() if max(s["largest_bias"].values()) > 0}
    control = ("bias rows dropped (a planted misfold): " + ", ".join(f"{e:.2f} ({m})" for m, e in misfolds.items())
               + f"; bound {bound:g}") if misfolds else f"bound declared in notebook 01: {bound:g}"
    first = summaries[runs[0]]
    below = 1 - first["fraction_above_noise_floor"]["qk"]
    bias_free = sorted(s["model"] for s in summaries.values() if s and max(s["largest_bias"].values()) == 0)
    caveat = (f"the embedded weights are quantized: {_percent(below)} of {first['model']}'s QK directions lie "
              "below the quantization noise floor")
    if bias_free:
        caveat = (f"{' and '.join(bias_free)} {'have' if len(bias_free) > 1 else 'has'} no bias, so on "
                  f"{'them' if len(bias_free) > 1 else 'it'} the "
                  f"identities test only the bias-free terms; {caveat}")
    return Claim(1, claim, "", ours, control, reach.say(identity_verdict(list(errors.values()), rules)), caveat,
                 ", ".join(_notebook(run) for run in runs), key="identities")


def _paper_rule_point(summary: dict) -> dict | None:
    """Our training under the paper's ablation rule (the ledger's hard-concrete step), as a point."""
    row = next((r for r in summary.get("ledger") or [] if r["step"] == "hard_concrete"), None)
    if row is None:
        return None
    return dict(kept_fraction=row["kept_fraction"], kl=row["kl"], random_kl=row["random_kl"])


def _next_sparser(summary: dict, point: dict) -> dict | None:
    """The α-sweep point that keeps the most directions among those keeping fewer than ``point``: where the
    KL 0.21 frontier lies. Compared by counts (the summary's fractions are rounded), ties by lower KL."""
    sweep = summary.get("alpha_sweep") or []
    by_count = "kept" in point and all("kept" in p for p in sweep)
    size = (lambda p: p["kept"]) if by_count else (lambda p: p["kept_fraction"])
    sparser = [p for p in sweep if size(p) < size(point)]
    return max(sparser, key=lambda p: (size(p), -p["kl"])) if sparser else None


def _pruning_words(summary: dict) -> str | None:
    """Whether the default α's training was still pruning at its last step, from the share of masks it kept
    (above one half) that notebook 02 records at its last step and ``steps`` before (None where the run does not
    record it)."""
    pruning = summary.get("pruning_at_end")
    if not pruning:
        return None
    trend = "still pruning at its last step" if pruning["after"] < pruning["before"] else "no longer pruning"
    return (f"training {trend} (kept share {_percent(pruning['before'])} → {_percent(pruning['after'])} over its last "
            f"{pruning['steps']} steps)")


def _seed_words(validation: dict | None) -> str | None:
    """How far circuits of different training seeds agree, from notebook 07's seed spread (None without it)."""
    jaccards = [j["jaccard"] for j in (validation or {}).get("seed_jaccards") or []]
    if not jaccards:
        return None
    spread = f"{min(jaccards):.2f}" if f"{min(jaccards):.2f}" == f"{max(jaccards):.2f}" else \
        f"{min(jaccards):.2f}–{max(jaccards):.2f}"
    return f"circuits of {len(validation['seeds'])} training seeds overlap by Jaccard {spread} (notebook 07)"


def sparsity_claim(task: str, summary: dict | None, rules: dict, run: str | None = None,
                   validation: dict | None = None) -> Claim:
    """From one summary of notebook 02 on ``task``, and notebook 07's on the same task for the seed spread."""
    run = run or RUNS[task]
    paper_fraction = rules["sparsity"]["paper_kept_fraction"].get(task)
    bound = rules["sparsity"]["paper_kl"]
    claim = (f"≈ {100 * paper_fraction:.2f} % of directions keep {TASK_NAMES[task]} at KL {bound} (GPT-2 small)"
             if paper_fraction else f"A sparse set of directions keeps {TASK_NAMES[task]} (GPT-2 small; no number given)")
    if not summary or not summary.get("ledger"):
        return _missing(1, claim, run, f"sparsity/{task}")
    recipe = summary["ledger"][0]
    budget = summary.get("paper_recipe_run") or {}
    paper_rule = _paper_rule_point(summary)
    recipe_cell = f"{recipe['kept_percent']:.1f} % kept (m ≥ 1e-3) at soft-mask KL {recipe['kl']:.2f}"
    if budget:
        recipe_cell += f" after {budget['steps']} steps of {budget['batch']}"
    if paper_rule:
        recipe_cell += (f"; our training under its rule: {_percent(paper_rule['kept_fraction'])} at KL "
                        f"{paper_rule['kl']:.2f}")
    point = summary.get("at_paper_kl")
    if point:
        fraction = point["kept"] / summary["total_directions"] if "kept" in point else point["kept_fraction"]
        ours = f"{_percent(fraction)} kept at held-out KL {point['kl']:.2f} (α {point['alpha']:g})"
        control = f"same count at random: KL {point['random_kl']:.2f}"
        point = dict(point, kept_fraction=fraction)
    else:
        ours, control = f"no circuit reaches KL {bound}", ""
    if paper_fraction is None:
        verdict = f"{NOT_TESTABLE}: paper 1 gives no number for this task"
    else:
        evaluated = [p["kept_fraction"] for p in (summary.get("curve") or []) + (summary.get("alpha_sweep") or [])
                     + ([paper_rule] if paper_rule else [])]
        reach = sparsity_reach(evaluated, rules["sparsity"]["kept_factor"] * paper_fraction)
        verdict = reach.say(sparsity_verdict(point, paper_rule if paper_rule and paper_rule["kl"] <= bound else None,
                                             paper_fraction, rules))
    nxt = _next_sparser(summary, point) if point else None
    grid = len(summary.get("alpha_sweep") or [])
    caveat = f"a {grid}-point α grid"
    if nxt:
        caveat += f" (next sparser: {_percent(nxt['kept_fraction'])} at KL {nxt['kl']:.2f})"
    elif point:
        caveat += " (no sparser circuit was trained)"
    caveat = "; ".join(part for part in (caveat, _pruning_words(summary), _seed_words(validation)) if part)
    return Claim(1, claim, recipe_cell, ours, control, verdict, caveat, _notebook(run), key=f"sparsity/{task}")


def _head_name(layer_head) -> str:
    return f"L{layer_head[0]}.H{layer_head[1]}"


def _effects_of(directions: str, effects: list[dict]) -> str:
    """Each named direction ("OV 33, QK 6") with its ablation effect and 95 % interval, from notebook 03's table."""
    rows = {(r["kind"], r["direction"]): r for r in effects}
    out = []
    for name in filter(None, (d.strip() for d in directions.split(","))):
        kind, index = name.split()
        row = rows.get((kind.lower(), int(index))) or {}
        out.append(f"{name}: {row['metric_change']:+.4f}, 95 % CI {row['effect_low']:+.4f} to {row['effect_high']:+.4f}"
                   if "effect_low" in row else name)
    return ("; " if any(":" in item for item in out) else ", ").join(out)


def subfunction_claims(summary: dict | None, rules: dict, run: str = RUNS["head"]) -> list[Claim]:
    """From the summary of notebook 03: each subfunction with the effect of every direction that earns it."""
    if not summary:
        return [_missing(1, "Head 9.6's subfunctions (GPT-2 small)", run, "subfunction")]
    head, control = _head_name(summary["head"]), _head_name(summary["control_head"])
    meets = summary["meets_name_mover_rule"]
    margins = summary["head_margins"]
    caveat = f"{head} meets the strict name-mover rule on " + "; ".join(
        f"{'the ' if name == 'held-out' else ''}{name} prompts: {'yes' if meets[name] else 'no'} (margin "
        f"{m['margin']:.2f}, 95 % CI {m['margin_low']:.2f}–{m['margin_high']:.2f}, rule ≥ 2)"
        for name, m in margins.items())
    if summary.get("head_ablation_effect"):
        effect = summary["head_ablation_effect"]
        caveat = (f"ablating all of {head} moves the metric by {effect['mean']:+.3f} (95 % CI {effect['low']:+.3f} to "
                  f"{effect['high']:+.3f}); a direction matters when its interval lies beyond "
                  f"{summary['effect_floor']:.4f}; {caveat}")
    claims = []
    for row in summary["subfunction_verdicts"]:
        ours = f"{head}: " + (f"supported ({_effects_of(row['head_directions'], summary.get('ablation_effects') or [])})"
                              if row["head"] else "not supported")
        ctrl = f"control head {control}: " + (
            f"passes ({_effects_of(row['control_directions'], summary.get('control_ablation_effects') or [])})"
            if row["control"] else "does not pass")
        claims.append(Claim(1, f"A name mover's directions carry {row['subfunction']} (GPT-2 small, head 9.6)",
                            "", ours, ctrl,
                            subfunction_verdict(row["head"], row["control"], sum(meets.values()), rules),
                            caveat, _notebook(run), key=f"subfunction/{row['subfunction']}"))
    return claims


def receptor_claim(summary: dict | None, rules: dict, run: str = RUNS["receptors"]) -> Claim:
    """From the summary of notebook 06."""
    claim = "Logit receptors: a few OV directions of late heads decide he vs she; setting them flips the pronoun (GPT-2 small)"
    if not summary:
        return _missing(1, claim, run, "receptors")
    r = rules["receptors"]
    rates = summary["flip_rate"][r["path"]]
    scale = next((key for key in rates["receptors"] if float(key) == r["scale"]), None)
    if scale is None:
        return Claim(1, claim, "", "", "", f"{NOT_TESTABLE}: scale {r['scale']:g} was not run", "", _notebook(run),
                     key="receptors")
    mine, rand = rates["receptors"][scale], rates["random"][scale]
    direct = summary["flip_rate"]["direct"]
    ours = (f"{len(summary['receptors'])} receptors found from data flip {mine:.1f} % of pronouns through the full "
            f"forward, {direct['receptors'][scale]:.1f} % on the direct path, at scale {float(scale):g}")
    control = f"equal-norm random directions: {rand:.1f} % and {direct['random'][scale]:.1f} %"
    share = 1 / math.sqrt(summary["d_model"])
    caveat = (f"a weak control: a random direction in d = {summary['d_model']} puts about {_percent(share)} of its "
              "norm along any fixed direction")
    return Claim(1, claim, "", ours, control, receptor_verdict(mine, rand, rules), caveat, _notebook(run),
                 key="receptors")


def _factor_rows(summary: dict) -> dict:
    return {row["judge"]: row for row in summary["paper_judge"]["factor_table"]}


def tiled_claim(summary: dict | None, rules: dict, run: str = RUNS["tiled"]) -> Claim:
    """From the summary of notebook 04."""
    claim = "Tile-SVD mounts pass checks A, B and C at every site-layer: 182/182 (Gemma-2-2B)"
    if not summary or not summary.get("paper_judge"):
        return _missing(2, claim, run, "mounts")
    factors = _factor_rows(summary)
    paper = factors.get("paper + width search") or factors["paper (all four rules)"]
    ours = factors["ours"]
    controls = [label for label in ("random-init", "permuted") if label in ours]

    def fraction(row, label):
        return row[label] / row[label + "_of"]

    def count(row, label):
        return f"{row[label]}/{row[label + '_of']}"

    verdict = tiled_verdict(fraction(ours, "model"), fraction(paper, "model"),
                            max(fraction(ours, c) for c in controls), rules)
    control = "; ".join(f"{c}: {count(ours, c)} (ours), {count(paper, c)} (paper's judge)" for c in controls)
    worst = max(controls, key=lambda c: fraction(paper, c))
    caveat = f"the released judge also passes {count(paper, worst)} site-layers of {worst} weights"
    return Claim(2, claim, f"{count(paper, 'model')} pass ({paper['judge']})", f"{count(ours, 'model')} pass",
                 control, verdict, caveat, _notebook(run), key="mounts")


CHECKS = {
    "A1": "Check A1: tile mounts lift the write energy above random directions",
    "A2": "Check A2: tile mounts lift it at least as much as column sampling",
    "A4": "Check A4: tile mounts lift it nearly as much as the whole-matrix SVD",
    "B1": "Check B1: a few mount directions cover the activations, saturating at k = 1–2",
    "C1": "Check C1: steering along a mount moves the logits its lens predicts (from layer 6)",
}


def _rates_cell(rates: CheckRates | None) -> str:
    if rates is None:
        return "not judged"
    cell = f"passes at {_percent(rates.model)} of site-layers"
    return cell + (f"; a control as often at {len(rates.uninformative_sites)} of {rates.sites} sites"
                   if rates.uninformative_sites else "")


def check_claims(summary: dict | None, coverage: dict | None, rules: dict, run: str = RUNS["tiled"]) -> list[Claim]:
    """From the summaries of notebook 04 and (for B1's caveat) notebook 05."""
    if not summary:
        return [_missing(2, CHECKS[c] + " (Gemma-2-2B)", run, f"check/{c}") for c in CHECKS]
    c_rows = summary.get("check_c") or []
    random_wins = sum(row["rho_random"] > row["rho_tile"] for row in c_rows)
    substitute = (f"{summary['model']} ({summary['n_layers']} layers) stands in for Gemma-2-2B (26); "
                  "the weights' shape alone may set these lifts" if summary["model"] != "gemma-2-2b" else
                  "the weights' shape alone may set these lifts")
    caveats = {
        "A1": substitute, "A2": substitute, "A4": substitute,
        "B1": (f"random column partitions cover as much as the tiles (mean difference "
               f"{coverage['mean_tile_minus_partition']:.4f}, notebook 05)" if coverage else substitute),
        "C1": f"a random direction reaches a higher ρ than the strongest tile mount in {random_wins} of {len(c_rows)} site-layers",
    }
    paper_rates = (summary.get("paper_judge") or {}).get("pass_rates") or {}
    claims = []
    for check, text in CHECKS.items():
        ours, paper = check_rates(summary["pass_rates"], check), check_rates(paper_rates, check)
        control = ("; ".join(f"{c} {_percent(v)}" for c, v in ours.controls.items()) if ours else "")
        claims.append(Claim(2, f"{text} (Gemma-2-2B)", f"released judge: {_rates_cell(paper)}", _rates_cell(ours),
                            control, check_verdict(ours, paper, rules), caveats[check], _notebook(run),
                            key=f"check/{check}"))
    return claims


def on_models(runs, paper_1: str, paper_2: str):
    """``RUNS`` or ``VALIDATION_RUNS`` with their models replaced: the same runs on ``paper_1``'s and
    ``paper_2``'s models (the paper-models profile's: gpt2-small, gemma-2-2b)."""
    def renamed(run: str) -> str:
        return run.replace("smollm2-135m", paper_1).replace("gemma-3-270m", paper_2)
    return {key: tuple(map(renamed, v)) if isinstance(v, tuple) else renamed(v) for key, v in runs.items()}


def all_claims(summaries: dict, rules: dict | None = None, runs: dict = RUNS,
               validation_runs: dict = VALIDATION_RUNS) -> list[Claim]:
    """Every claim, paper 1 then paper 2, from ``summaries`` (run name → summary dict) of ``runs`` (by default
    the embedded models' runs; ``on_models`` names the same runs on the papers' own models)."""
    rules = rules or load_rules()
    return [identities_claim({run: summaries.get(run) for run in runs["identities"]}, rules),
            *(sparsity_claim(task, summaries.get(runs[task]), rules, run=runs[task],
                             validation=summaries.get(validation_runs[task])) for task in TASK_NAMES),
            *subfunction_claims(summaries.get(runs["head"]), rules, run=runs["head"]),
            receptor_claim(summaries.get(runs["receptors"]), rules, run=runs["receptors"]),
            tiled_claim(summaries.get(runs["tiled"]), rules, run=runs["tiled"]),
            *check_claims(summaries.get(runs["tiled"]), summaries.get(runs["coverage"]), rules, run=runs["tiled"])]
