"""The figures of paper 2's notebooks (04, 05), in the shared style."""
from __future__ import annotations

import textwrap

TITLE_CHARACTERS_PER_INCH = 9  # at the 13-point titles below, a line this long fits the figure's width

STRATEGY_LABELS = {"tile": "tile SVD", "whole": "whole-matrix SVD", "columns": "column sampling",
                   "random_partition": "random column partition", "pca": "PCA of writes (data-aware)"}


STRATEGY_STYLES = {"tile": dict(ls="-", marker="o", lw=2.4, color="C0"),
                   "random_partition": dict(ls="--", marker="s", lw=1.6, color="C3", mfc="none"),
                   "whole": dict(ls=":", marker="^", lw=1.6, color="C2"),
                   "columns": dict(ls="-.", marker="v", lw=1.4, color="C4"),
                   "pca": dict(ls="-", marker=".", lw=1.0, color="0.55")}


def _site_layers(a):
    """The rows of check A's table that are site-layers: every stream but the effective paths."""
    return a[~a["effective"].astype(bool)] if "effective" in a.columns else a


def lift_finding(a, controls: dict | None = None) -> str:
    """The point of the lift figure, from its numbers: how far tile mounts lie from random column partitions,
    and on how many site-layers a control's tile lift reaches the model's (the effective-path streams, a second
    view of two sites, are not site-layers of their own and are left out)."""
    a = _site_layers(a)
    both = a[["lift_tile", "lift_random_partition"]].dropna()
    text = (f"tile SVD and random column partitions lift the write energy alike (mean |difference| "
            f"{(both['lift_tile'] - both['lift_random_partition']).abs().mean():.4f})")
    for i, (label, frame) in enumerate((controls or {}).items()):
        merged = a.merge(_site_layers(frame), on=["site", "layer"], suffixes=("", "_control"))
        reach = int((merged["lift_tile_control"] >= merged["lift_tile"]).sum())
        text += (f"; {label} weights reach the model's tile lift at {reach} of {len(merged)} site-layers" if i == 0
                 else f", {label} weights at {reach} of {len(merged)}")
    return text


def _title_and_layer_ticks(fig, axes, title: str) -> None:
    """The figure's title wrapped to its width (so a long finding does not widen the saved figure and shrink
    the panels), and whole-number layer ticks on every panel."""
    from matplotlib.ticker import MaxNLocator

    for ax in axes:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(textwrap.fill(title, int(fig.get_figwidth() * TITLE_CHARACTERS_PER_INCH), break_on_hyphens=False),
                 fontsize=13)


def plot_lift_vs_depth(a, title: str, controls: dict | None = None):
    """Full-write energy lift over random directions vs layer, one panel per site on a shared y-axis, one
    line style per strategy; ``controls`` (label → the same table on control weights) adds their tile lift
    as thin grey lines."""
    import matplotlib.pyplot as plt

    sites = list(dict.fromkeys(a["site"]))
    cols = 3
    rows = -(-len(sites) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(13, 3.0 * rows + 0.8), squeeze=False, sharex=True, sharey=True)
    for ax, site in zip(axes.flat, sites):
        part = a[a["site"] == site].sort_values("layer")
        for strategy, label in STRATEGY_LABELS.items():
            column = f"lift_{strategy}"
            if column in part and part[column].notna().any():
                ax.plot(part["layer"], part[column], ms=4, label=label, **STRATEGY_STYLES[strategy])
        for (name, frame), ls in zip((controls or {}).items(), ("-", "--")):
            other = frame[frame["site"] == site].sort_values("layer")
            ax.plot(other["layer"], other["lift_tile"], ls=ls, color="0.3", lw=0.9, label=f"tile SVD, {name} weights")
        ax.axhline(0, color="black", lw=0.6)
        ax.set_title(site, fontsize=12)
    for ax in axes.flat[len(sites):]:
        ax.axis("off")
    for ax in axes[:, 0]:
        ax.set_ylabel("lift over random u")
    for col in range(cols):
        filled = [r for r in range(rows) if r * cols + col < len(sites)]
        if filled:
            axes[filled[-1], col].set_xlabel("layer")
            axes[filled[-1], col].xaxis.set_tick_params(labelbottom=True)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=4, fontsize=11)
    _title_and_layer_ticks(fig, axes.flat, title)
    fig.tight_layout()
    return fig


def steer_finding(c, min_layer: int, rho_threshold: float) -> str:
    """The point of the check-C figure: how often a random direction's ρ beats the strongest tile mount's,
    and how many of the judged site-layers every direction (tile, whole-SVD, random) clears the C1 threshold."""
    judged = c[c["layer"] >= min_layer]
    clear = int((judged[["rho_tile", "rho_whole", "rho_random"]].min(axis=1) >= rho_threshold).sum())
    return (f"a random direction has a higher ρ than the strongest tile mount at {int((c['rho_random'] > c['rho_tile']).sum())} "
            f"of {len(c)} site-layers; from layer {min_layer}, every direction clears ρ = {rho_threshold:g} at "
            f"{clear} of {len(judged)}")


def plot_steer_vs_depth(c, min_layer: int, rho_threshold: float, title: str):
    """Check C: Spearman ρ(Δ logits, lens) vs layer with 95 % bootstrap intervals, mount vs controls."""
    import matplotlib.pyplot as plt

    sites = list(dict.fromkeys(c["site"]))
    fig, axes = plt.subplots(1, len(sites), figsize=(6.4 * len(sites), 4.2), squeeze=False, sharey=True)
    for ax, site in zip(axes[0], sites):
        part = c[c["site"] == site].sort_values("layer")
        for name, label, colour in (("tile", "strongest tile mount", "C0"), ("whole", "top whole-SVD direction", "C2"),
                                    ("random", "random direction", "C3")):
            ax.plot(part["layer"], part[f"rho_{name}"], marker="o", ms=4, color=colour, label=label)
            ax.fill_between(part["layer"], part[f"rho_{name}_low"], part[f"rho_{name}_high"], color=colour, alpha=0.15)
        ax.axhline(rho_threshold, color="grey", ls=":", label=f"C1 threshold ρ = {rho_threshold:g}")
        ax.axvline(min_layer - 0.5, color="grey", lw=0.8)
        ax.text(min_layer - 0.3, 0.98, f"C1 judged from layer {min_layer} →", transform=ax.get_xaxis_transform(),
                va="top", fontsize=10, color="0.3")
        ax.set_title(site, fontsize=12)
        ax.set_xlabel("layer")
    axes[0][0].set_ylabel("Spearman ρ(Δ logits, lens)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=4, fontsize=11)
    _title_and_layer_ticks(fig, axes[0], title)
    fig.tight_layout()
    return fig


def plot_coverage_curves(table, variable: str, value_label: str):
    """Coverage of tile mounts, random partitions and random directions vs ``variable`` ("k" or "width"),
    one panel per site, one colour per layer; Frobenius weight coverage dashed."""
    import matplotlib.pyplot as plt

    part = table[table["variable"] == variable]
    sites = list(dict.fromkeys(part["site"]))
    layers = sorted(set(part["layer"]))
    cmap = plt.get_cmap("viridis")
    cols = 4
    rows = -(-len(sites) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False)
    for ax, site in zip(axes.flat, sites):
        for i, layer in enumerate(layers):
            g = part[(part["site"] == site) & (part["layer"] == layer)].sort_values("value")
            color = cmap(i / max(len(layers) - 1, 1))
            ax.plot(g["value"], g["tile"], "o-", color=color, ms=3, label=f"L{layer} tiles")
            ax.plot(g["value"], g["partition"], "s:", color=color, ms=3, label=f"L{layer} random partition")
            ax.plot(g["value"], g["random"], "x", color=color, ms=3, label=f"L{layer} random directions")
            ax.plot(g["value"], g["frobenius"], "--", color=color, lw=0.8, label=f"L{layer} Frobenius (weights)")
        ax.set(xscale="log", title=site, xlabel=value_label, ylim=(0, 1.02))
    for ax in axes.flat[len(sites):]:
        ax.axis("off")
    axes[0][0].set_ylabel("coverage")
    axes[0][0].legend(fontsize=5)
    return fig
