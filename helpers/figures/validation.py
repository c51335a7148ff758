"""Notebook 07's figures: circuits under attack, and the controls where no mechanism should be found."""
from __future__ import annotations

import pandas as pd


def attack_title(task: str, table: pd.DataFrame, steps: int, bound: float) -> str:
    """The attack figure's point, from its numbers: how many circuits hold the bound, and whether any random
    control does."""
    circuits, randoms = table[table["circuit"] == "circuit"], table[table["circuit"] == "random"]
    held = int(circuits["survives"].sum())
    controls = "none of their random controls does" if not randoms["survives"].any() else "a random control does too"
    return f"{task}: {held} of {len(circuits)} circuits hold KL ≤ {bound:g} under a {steps}-step attack; {controls}"


def plot_attack(table: pd.DataFrame, curves: pd.DataFrame, bound: float, title: str):
    """Held-out KL along the adversary's ascent, one panel per attacked circuit: the circuit (colour) and its
    same-count random control (grey), from the rule's setting (solid) and a random one (dashed), with the
    stochastic partial ablation's mean and largest KL at step 0 and the declared bound."""
    import matplotlib.pyplot as plt

    labels = list(dict.fromkeys(table["label"]))
    fig, axes = plt.subplots(1, len(labels), figsize=(5.5 * len(labels), 3.6), squeeze=False)
    for ax, label in zip(axes[0], labels):
        for which, colour in (("circuit", "C0"), ("random", "grey")):
            for start, style in (("rule", "-"), ("random", "--")):
                part = curves[(curves["label"] == label) & (curves["circuit"] == which) & (curves["start"] == start)]
                if len(part):
                    ax.plot(part["step"], part["kl"], style, marker="o", ms=3, color=colour,
                            label=f"{'circuit' if which == 'circuit' else 'random control'}, from m = "
                                  f"{'0 (the rule)' if start == 'rule' else 'U(0, 1)'}")
            row = table[(table["label"] == label) & (table["circuit"] == which)].iloc[0]
            ax.errorbar([0], [row["stochastic_mean_kl"]], yerr=[[0], [row["stochastic_max_kl"] - row["stochastic_mean_kl"]]],
                        fmt="D", color=colour, ms=5, capsize=3, alpha=0.7,
                        label=f"{'circuit' if which == 'circuit' else 'random control'}: m ~ U(0, 1), mean and largest")
        ax.axhline(bound, color="C3", ls=":", label=f"declared bound, KL {bound:g}")
        role = table[table["label"] == label]["role"].iloc[0]
        kept = table[table["label"] == label]["kept_fraction"].iloc[0]
        ax.set(title=f"{role}\n{100 * kept:.1f} % of directions kept", xlabel="ascent steps",
               ylabel="held-out KL (nats)", ylim=(0, None))
        ax.set_yscale("symlog", linthresh=0.05)
        top = ax.get_ylim()[1]
        ax.set_yticks([t for t in (0, 0.1, 1, 10, 100, 1000) if t <= top])  # one per decade: none collide
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_locator(plt.NullLocator())
        ax.set_xticks(sorted(curves["step"].unique()))  # the checkpoints, where the KL was measured
    handles, names = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=3)
    fig.suptitle(title, y=1.04)
    fig.tight_layout()
    return fig


def control_rows(seeds: pd.DataFrame, nonsense: pd.DataFrame, weights: pd.DataFrame) -> pd.DataFrame:
    """One row per trained circuit of the controls figure, in reading order: the task at each seed, each kind of
    nonsense, each weight control; with its kept % and KL at the bound (NaN where none is within it)."""
    parts = [pd.DataFrame(dict(name=[f"task, seed {s}" for s in seeds["seed"]], group="task", **_at_bound(seeds)))]
    if len(nonsense):
        parts.append(pd.DataFrame(dict(name=[f"nonsense: {k.replace('_', ' ')}" for k in nonsense["kind"]],
                                       group="nonsense prompts", **_at_bound(nonsense))))
    if len(weights):
        parts.append(pd.DataFrame(dict(name=[f"weights: {c}" for c in weights["control"]], group="untrained weights",
                                       **_at_bound(weights))))
    return pd.concat(parts, ignore_index=True)


def _at_bound(table: pd.DataFrame) -> dict:
    return dict(kept_percent=100 * table["at_bound_kept_fraction"].astype(float), kl=table["at_bound_kl"].astype(float))


def plot_controls(rows: pd.DataFrame, jaccards: pd.DataFrame, bound: float, title: str):
    """Left: % of directions the sparsest circuit within the bound keeps, for the task and its controls (a cross
    where none is within it). Right: Jaccard of kept sets, between seeds and between the task and nonsense."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.45 * max(len(rows), len(jaccards)) + 1.6),
                                      gridspec_kw=dict(width_ratios=[3, 2]))
    colours = {"task": "C0", "nonsense prompts": "C1", "untrained weights": "C2"}
    y = range(len(rows))
    left.barh(list(y), rows["kept_percent"].fillna(0), color=[colours[g] for g in rows["group"]])
    for i, row in rows.iterrows():
        text = f"none within KL {bound:g}" if pd.isna(row["kept_percent"]) else f"{row['kept_percent']:.1f} %, KL {row['kl']:.2f}"
        left.annotate(text, (0 if pd.isna(row["kept_percent"]) else row["kept_percent"], i), xytext=(3, 0),
                      textcoords="offset points", va="center", fontsize=8)
    left.set(yticks=list(y), yticklabels=rows["name"], xlim=(0, 115), xlabel=f"% of directions kept within KL {bound:g}")
    left.invert_yaxis()
    yj = range(len(jaccards))
    right.barh(list(yj), jaccards["jaccard"], color=["C0" if p == "seeds" else "C1" for p in jaccards["pair"]])
    for i, value in enumerate(jaccards["jaccard"]):
        right.annotate(f"{value:.2f}", (value, i), xytext=(3, 0), textcoords="offset points", va="center", fontsize=8)
    right.set(yticks=list(yj), yticklabels=jaccards["name"], xlim=(0, 1.1), xlabel="Jaccard of kept directions")
    if not len(jaccards):
        right.text(0.5, 0.5, "no overlaps measured\n(one seed, no nonsense prompts)", ha="center", va="center",
                   transform=right.transAxes, fontsize=9)
    right.invert_yaxis()
    fig.suptitle(title, y=1.02)
    fig.tight_layout()
    return fig
