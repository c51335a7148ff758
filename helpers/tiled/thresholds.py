"""Paper 2's thresholds: one file (``data/tiled_svd_thresholds.toml``), read and validated before any run.

Every key of checks A, B, C must be present and none unknown, so that a mistyped threshold is refused
rather than silently defaulted; every summary records the table it was judged by.
"""
from __future__ import annotations

from pathlib import Path

from helpers.core.declared import load_declared

THRESHOLD_KEYS = {
    "A": {"a1_margin", "a1_margin_effective", "a2_tolerance", "a4_margin_residual", "a4_ratio_residual",
          "a4_margin_other", "a4_ratio_other"},
    "B": {"ks", "best_directions", "peak_residual", "peak_other", "peak_effective", "early_within", "last_within"},
    "C": {"alpha", "dose_alphas", "rho", "jaccard", "top", "min_layer", "bootstrap"},
}
DEFAULT_THRESHOLDS = Path(__file__).resolve().parents[2] / "data" / "tiled_svd_thresholds.toml"


def load_thresholds(path: str | Path = DEFAULT_THRESHOLDS) -> dict:
    """Read and validate the thresholds file (every key present, nothing unknown)."""
    return load_declared(path, THRESHOLD_KEYS)
