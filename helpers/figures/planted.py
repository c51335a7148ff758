"""Notebook 08's figure: does masking recover a planted mechanism, strength by strength?"""
from __future__ import annotations


def _where(rows: list[dict], site: str) -> list[dict]:
    return sorted((r for r in rows if r["site"] == site), key=lambda r: r["strength"])


def recovery_title(rows: list[dict]) -> str:
    """The figure's point, from its verdicts: at how many of the strengths where the plant drives the task the
    masks recover it, and at how many ablating it removes it."""
    driving = [r for r in rows if r["drives_task"]]
    if not driving:
        return f"the plant drives the task at none of the {len(rows)} strengths: recovery is not judged"
    found = sum(bool(r["recovered"]) for r in driving)
    needed = sum(bool(r["necessary"]) for r in driving)
    return (f"Masks recover the plant at {found} of the {len(driving)} strengths where it drives the task; "
            f"ablating it removes it at {needed}")


def plot_recovery(rows: list[dict], unplanted: dict, rules: dict, title: str):
    """Three panels against the planted strength (σ of the plant / the head's own largest σ), one line per site:
    the planted model's accuracy (chance and the unplanted model's beside it); the AUROC of the mask logits for
    the ground truth (and for a same-count random set of the head's directions); the share of the plant's gain
    left after mean-ablating the ground truth and the random set, with 95 % CIs."""
    import matplotlib.pyplot as plt

    sites = list(dict.fromkeys(r["site"] for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for i, site in enumerate(sites):
        part, colour = _where(rows, site), f"C{i}"
        label = f"{site} (L{part[0]['layer']}.H{part[0]['head']})"
        x = [r["strength"] for r in part]
        axes[0].errorbar(x, [r["accuracy"] for r in part], yerr=[1.96 * r["accuracy_se"] for r in part], marker="o",
                         color=colour, capsize=3, label=label)
        scored = [r for r in part if r["recovery"]]
        axes[1].plot([r["strength"] for r in scored], [r["recovery"]["auroc"] for r in scored], "-o", color=colour,
                     label=f"{label}: planted")
        axes[1].plot([r["strength"] for r in scored], [r["random_recovery"]["auroc"] for r in scored], ":x",
                     color=colour, label=f"{label}: random set")
        for which, style in (("planted", "-o"), ("random", ":x")):
            have = [r for r in part if r["remaining"][which] and r["remaining"][which]["share"] is not None]
            share = [r["remaining"][which]["share"] for r in have]
            axes[2].errorbar([r["strength"] for r in have], share,
                             yerr=[[s - r["remaining"][which]["low"] for s, r in zip(share, have)],
                                   [r["remaining"][which]["high"] - s for s, r in zip(share, have)]],
                             fmt=style, color=colour, capsize=3, label=f"{label}: {which} set ablated")
    axes[0].axhline(unplanted["chance"], color="grey", ls=":", label="chance")
    axes[0].axhline(unplanted["accuracy"], color="black", ls="--", label="unplanted model")
    axes[0].axhline(rules["drives_task"]["min_accuracy"], color="C3", ls="-.", lw=1, label="drives the task (declared)")
    axes[0].set(ylabel="held-out accuracy among the 8 answers", ylim=(0, 1.02), title="What the plant does")
    axes[1].axhline(rules["recovered"]["min_auroc"], color="C3", ls="-.", lw=1, label="recovered: AUROC ≥ declared")
    axes[1].axhline(0.5, color="grey", ls=":", lw=1)
    axes[1].set(ylabel="AUROC of mask logits vs all directions", ylim=(0, 1.02), title="Does masking rank it first?")
    rule = rules["necessary"]
    axes[2].axhline(rule["max_remaining"], color="C3", ls="-.", lw=1, label="necessary: CI top ≤ declared")
    axes[2].axhline(1.0, color="grey", ls=":", lw=1)
    axes[2].axhline(0.0, color="black", ls="--", lw=1)
    axes[2].set(ylabel="share of the plant's logit-diff gain left", title="Is it what drives the task?")
    strengths = sorted({r["strength"] for r in rows})
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(strengths, [f"{s:g}×" for s in strengths])
        ax.set_xlabel("plant's σ / the head's largest σ")
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
