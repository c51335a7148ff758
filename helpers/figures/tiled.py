"""The figures of paper 2's notebooks (04, 05), in the shared style."""
from __future__ import annotations

STRATEGY_LABELS = {"tile": "tile SVD", "whole": "whole-matrix SVD", "columns": "column sampling",
                   "random_partition": "random column partition", "pca": "PCA of writes (data-aware)"}


def plot_lift_vs_depth(a):
    """Full-write energy lift over random directions vs layer, one panel per site, one line per strategy."""
    import matplotlib.pyplot as plt

    sites = list(dict.fromkeys(a["site"]))
    cols = 4
    rows = -(-len(sites) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), squeeze=False, sharex=True)
    for ax, site in zip(axes.flat, sites):
        part = a[a["site"] == site].sort_values("layer")
        for strategy, label in STRATEGY_LABELS.items():
            column = f"lift_{strategy}"
            if column in part and part[column].notna().any():
                ax.plot(part["layer"], part[column], marker=".", label=label)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_title(site)
    for ax in axes.flat[len(sites):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("layer")
    axes[0][0].set_ylabel("lift of f(u) over random u")
    axes[0][0].legend(fontsize=6)
    return fig


def plot_steer_vs_depth(c, min_layer: int, rho_threshold: float):
    """Check C: Spearman ρ(Δ logits, lens) vs layer with 95 % bootstrap intervals, mount vs controls."""
    import matplotlib.pyplot as plt

    sites = list(dict.fromkeys(c["site"]))
    fig, axes = plt.subplots(1, len(sites), figsize=(4.2 * len(sites), 3), squeeze=False, sharey=True)
    for ax, site in zip(axes[0], sites):
        part = c[c["site"] == site].sort_values("layer")
        for name, label in (("tile", "strongest tile mount"), ("whole", "top whole-SVD direction"),
                            ("random", "random direction")):
            ax.plot(part["layer"], part[f"rho_{name}"], marker=".", label=label)
            ax.fill_between(part["layer"], part[f"rho_{name}_low"], part[f"rho_{name}_high"], alpha=0.2)
        ax.axhline(rho_threshold, color="grey", ls=":", label=f"C1 threshold ρ = {rho_threshold}")
        ax.axvline(min_layer - 0.5, color="grey", lw=0.6)
        ax.set(title=site, xlabel="layer")
    axes[0][0].set_ylabel("Spearman ρ(Δ logits, lens)")
    axes[0][0].legend(fontsize=6)
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
