"""One 16:9 summary figure per paper, drawn from the run summaries: the numbers a first slide needs."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from helpers.results.claims import PAPER_BUDGET_SWEEP, RUNS, TASK_NAMES, load_rules

SLIDE = (12.8, 7.2)  # inches: 1280 × 720 pixels at 100 dpi
SLIDE_FONT = {"font.size": 16, "axes.titlesize": 20, "axes.labelsize": 16, "xtick.labelsize": 15,
              "ytick.labelsize": 14, "legend.fontsize": 14}
PAPER_1_BARS = ("paper (GPT-2 small)", "paper's recipe, our model", "paper's recipe, longer budget",
                "ours, under the paper's rule", "ours")
WEIGHTS = ("model", "random-init", "permuted")


def paper_1_bars(summaries: dict, rules: dict | None = None) -> dict:
    """Per task, the percent of directions kept by each of ``PAPER_1_BARS`` (None where there is none) and
    the held-out KL each reaches; "ours" is the sparsest circuit within the paper's KL; the longer budget is the
    ``PAPER_BUDGET_SWEEP`` run's (IOI only), with its ``steps``."""
    rules = rules or load_rules()
    out = {}
    for task, name in TASK_NAMES.items():
        summary = summaries.get(RUNS[task]) or {}
        ledger = {row["step"]: row for row in summary.get("ledger") or []}
        point = summary.get("at_paper_kl")
        paper = rules["sparsity"]["paper_kept_fraction"].get(task)
        budget_run = next((s for n, s in summaries.items() if s and n.startswith(PAPER_BUDGET_SWEEP)), None) \
            if task == "ioi" else None
        budget = next((row for row in budget_run["ledger"] if row["step"] == "paper"), None) if budget_run else None
        kept = dict(zip(PAPER_1_BARS, (
            100 * paper if paper else None,
            ledger["paper"]["kept_percent"] if "paper" in ledger else None,
            budget["kept_percent"] if budget else None,
            ledger["hard_concrete"]["kept_percent"] if "hard_concrete" in ledger else None,
            100 * point["kept"] / summary["total_directions"] if point else None)))
        kl = dict(zip(PAPER_1_BARS, (rules["sparsity"]["paper_kl"] if paper else None,
                                      ledger["paper"]["kl"] if "paper" in ledger else None,
                                      budget["kl"] if budget else None,
                                      ledger["hard_concrete"]["kl"] if "hard_concrete" in ledger else None,
                                      point["kl"] if point else None)))
        random_kl = point["random_kl"] if point else None
        out[name] = dict(kept=kept, kl=kl, random_kl=random_kl,
                         budget_steps=budget_run["paper_recipe_run"]["steps"] if budget else None)
    return out


def paper_1_title(bars: dict, verdict: str) -> str:
    """The paper-1 figure's point, from the IOI verdict and our IOI circuit."""
    ours = bars["IOI"]["kept"]["ours"]
    if ours is None:
        return "Paper 1's IOI circuit: no circuit of ours reaches KL 0.21"
    return f"Paper 1's ≈ 9 % IOI circuit: {verdict}; ours keeps {ours:.0f} % within KL 0.21"


def paper_2_title(bars: dict, verdict: str) -> str:
    """The paper-2 figure's point, from its verdict and the released judge's count on random-init weights."""
    released = bars.get("released judge + width search", {})
    if "random-init" not in released:
        return f"Paper 2's 182/182: {verdict}"
    passed, total = released["random-init"]
    return f"Paper 2's 182/182: {verdict}; its judge passes {passed}/{total} random-init site-layers"


def paper_2_bars(summary: dict | None) -> dict:
    """Site-layers passing all checks, by judge (ours; the released one with its width search) and weights."""
    if not summary or not summary.get("paper_judge"):
        return {}
    factors = {row["judge"]: row for row in summary["paper_judge"]["factor_table"]}
    judges = {"our judge": factors["ours"],
              "released judge + width search": factors.get("paper + width search") or factors["paper (all four rules)"]}
    return {judge: {w: (row[w], row[f"{w}_of"]) for w in WEIGHTS if w in row} for judge, row in judges.items()}


def grouped_bars(ax, groups: list[str], series: tuple[str, ...], bar, width: float, fontsize: float) -> None:
    """Side-by-side bars: one per series in each group, centred on the group's tick, each series in its own
    colour and legend entry. ``bar(series, group)`` gives (height, the text above the bar); a height of None
    draws no bar, only the text (if any) at the foot of the slot."""
    x = np.arange(len(groups))
    offsets = (np.arange(len(series)) - (len(series) - 1) / 2) * width
    labelled = set()
    for i, name in enumerate(series):
        for j, group in enumerate(groups):
            height, text = bar(name, group)
            xpos = x[j] + offsets[i]
            if height is None:
                if text:
                    ax.text(xpos, 2, text, ha="center", fontsize=11, color="0.4")
                continue
            ax.bar(xpos, height, width, color=f"C{i}", label=None if name in labelled else name)
            labelled.add(name)
            ax.text(xpos, height + 1.5, text, ha="center", va="bottom", fontsize=fontsize)
    ax.set_xticks(x, groups)


def plot_paper_1(bars: dict, title: str):
    def bar(label, task):
        kept, kl = bars[task]["kept"][label], bars[task]["kl"][label]
        if kept is None:
            return None, {PAPER_1_BARS[0]: "none\nreported", PAPER_1_BARS[2]: ""}.get(label, "not run")
        text = f"{kept:.0f} %\nKL {kl:.2f}"
        if label == "paper's recipe, longer budget":
            text += f"\n{bars[task]['budget_steps']:,} steps"
        if label == "ours" and bars[task]["random_kl"] is not None:
            text += f"\nrandom:\nKL {bars[task]['random_kl']:.2f}"
        return kept, text

    with plt.rc_context(SLIDE_FONT):
        fig, ax = plt.subplots(figsize=SLIDE)
        grouped_bars(ax, list(bars), PAPER_1_BARS, bar, width=0.16, fontsize=10)
        ax.set_ylim(0, 118)
        ax.set_ylabel("% of singular directions kept")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncols=3, fontsize=13)
        ax.set_title(title)
        fig.text(0.01, -0.09, "Above each bar: its held-out KL (the paper's recipe: its soft-mask KL, kept = m ≥ 1e-3); "
                 "above ours, a same-count random circuit's.\nOur model: SmolLM2-135M. The paper's recipe at a longer "
                 "budget ran on IOI only.", fontsize=12, color="0.3")
        return fig


def plot_paper_2(bars: dict, title: str):
    def bar(weights, judge):
        if weights not in bars[judge]:
            return None, ""
        passed, total = bars[judge][weights]
        return passed, f"{passed}/{total}"

    judges = list(bars)
    totals = [total for judge in judges for _, total in bars[judge].values()]
    with plt.rc_context(SLIDE_FONT):
        fig, ax = plt.subplots(figsize=SLIDE)
        grouped_bars(ax, judges, WEIGHTS, bar, width=0.26, fontsize=14)
        if totals:
            total = totals[-1]
            ax.axhline(total, color="0.3", ls="--", lw=1.5)
            ax.text(len(judges) - 1 + 0.45, total - 2, "paper: every site-layer passes", ha="right", va="top",
                    fontsize=13)
            ax.set_ylim(0, total * 1.08)
        ax.set_ylabel("site-layers passing checks A, B and C")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncols=3, title="weights", title_fontsize=13)
        ax.set_title(title)
        fig.text(0.01, -0.06, "Gemma-3-270M: 7 linear maps × 18 layers = 126 site-layers "
                 "(the paper: Gemma-2-2B, 182).", fontsize=12, color="0.3")
        return fig
