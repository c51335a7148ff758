"""One figure style for every notebook, and one way to save figures reproducibly."""
from __future__ import annotations

from pathlib import Path

import matplotlib

STYLE = {
    "figure.dpi": 110, "savefig.dpi": 150, "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
    "legend.frameon": False, "svg.hashsalt": "singular-directions",
}


def use_style() -> None:
    """Apply the shared style (seaborn's colour palette on top of matplotlib defaults)."""
    import seaborn as sns

    sns.set_palette("colorblind")
    matplotlib.rcParams.update(STYLE)


def save_figure(fig, out_dir: str | Path, name: str) -> Path:
    """Save ``fig`` as ``<out_dir>/<name>.png`` with fixed metadata, so a re-run writes identical bytes."""
    path = Path(out_dir) / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, bbox_inches="tight", metadata={"Software": None, "Creation Time": None})
    return path


KIND_TITLES = {"qk": "QK (per head)", "ov": "OV (per head)", "mlp_gate": "MLP in: gate", "mlp_up": "MLP in: up",
               "mlp_out": "MLP out"}


def plot_spectra(spectra, floors=None):
    """One panel per matrix kind: singular values vs index for every layer (and head), coloured by layer;
    the quantization noise floor of each measured layer as a dashed line in the layer's colour.
    Numerically zero σ (``null``: the bias row of a model without biases) are left out."""
    import matplotlib.pyplot as plt

    kinds = [k for k in KIND_TITLES if k in set(spectra["kind"])]
    n_layers = int(spectra["layer"].max()) + 1
    cmap = plt.get_cmap("viridis")
    fig, axes = plt.subplots(1, len(kinds), figsize=(3.2 * len(kinds), 3.0), squeeze=False)
    for ax, kind in zip(axes[0], kinds):
        part = spectra[(spectra["kind"] == kind) & ~spectra["null"]]
        for (layer, head), group in part.groupby(["layer", "head"]):
            ax.plot(group["index"], group["sigma"], color=cmap(layer / max(n_layers - 1, 1)), lw=0.6,
                    alpha=0.5 if head >= 0 else 0.9)
        if floors is not None:
            for layer, group in floors[floors["kind"] == kind].groupby("layer"):
                ax.axhline(group["floor"].median(), color=cmap(layer / max(n_layers - 1, 1)), ls="--", lw=0.8)
        ax.set_yscale("log")
        ax.set_title(KIND_TITLES[kind])
        ax.set_xlabel("direction index k")
    axes[0][0].set_ylabel("singular value σ_k")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, n_layers - 1))
    fig.colorbar(sm, ax=axes[0].tolist(), label="layer", fraction=0.02)
    return fig
