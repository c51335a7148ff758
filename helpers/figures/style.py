"""One figure style for every notebook, and one way to save figures reproducibly."""
from __future__ import annotations

from pathlib import Path

import matplotlib

from helpers.core.cache import atomic_file

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
    """Save ``fig`` as ``<out_dir>/<name>.png`` with fixed metadata, so a re-run writes identical bytes;
    through a temporary file and one rename, so an interrupted save never leaves half a PNG."""
    path = Path(out_dir) / f"{name}.png"
    with atomic_file(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight", metadata={"Software": None, "Creation Time": None})
    return path
