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


def table_number(value: float) -> str:
    """How a notebook's tables print a float: 4 significant digits, thousands grouped from 10⁴ on, whole
    numbers without ".0", and never a negative zero."""
    value = value + 0.0  # -0.0 → 0.0
    if value == 0:
        return "0"
    if abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def use_style() -> None:
    """Apply the shared style: seaborn's colour palette on top of matplotlib defaults, and ``table_number``
    for every float pandas displays."""
    import pandas as pd
    import seaborn as sns

    sns.set_palette("colorblind")
    matplotlib.rcParams.update(STYLE)
    pd.set_option("display.float_format", table_number)


def save_figure(fig, out_dir: str | Path, name: str) -> Path:
    """Save ``fig`` as ``<out_dir>/<name>.png`` with fixed metadata, so a re-run writes identical bytes;
    through a temporary file and one rename, so an interrupted save never leaves half a PNG."""
    path = Path(out_dir) / f"{name}.png"
    with atomic_file(path, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", bbox_inches="tight", metadata={"Software": None, "Creation Time": None})
    return path
