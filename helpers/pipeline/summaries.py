"""Each notebook's summary: its key numbers, machine-readable, written by its last cell beside its figures.

One rounding rule for every notebook (``rounded``), and one conversion of tables, tensors and dataclasses to
JSON (``summary_value``), used by the notebooks and by the evaluator's reports. The
pipeline that runs the notebooks lives in ``helpers.pipeline``; keeping it apart means that a change to the
runner does not make every notebook's result stale (a run's fingerprint covers the helpers modules its
notebook imports).
"""
from __future__ import annotations

from pathlib import Path

from helpers.core.cache import atomic_write_json

SUMMARY_FILE = "summary.json"


def write_summary(out_dir: str | Path, summary: dict, *, device) -> Path:
    """Called by a notebook's last cell: its key numbers, machine-readable, next to its figures, with the
    numerics of the ``device`` the run computed on (``helpers.core.device.numerics``: results depend on it).
    Every value goes through ``summary_value`` (one rounding rule for all notebooks; tables become records)."""
    import torch

    from helpers.core.device import numerics

    path = Path(out_dir) / SUMMARY_FILE
    atomic_write_json(path, summary_value({**summary, "torch_threads": torch.get_num_threads(),
                                           "numerics": numerics(device)}))
    return path


def rounded(value: float) -> float | None:
    """The summaries' rounding: 5 decimals, or 4 significant digits below 10⁻³ (so that α = 1.95e-4 keeps
    its digits); NaN and ±inf become None (JSON has no NaN)."""
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return round(value, 5) if abs(value) >= 1e-3 or value == 0 else float(f"{value:.4g}")


def summary_value(value):
    """A JSON-ready copy: floats ``rounded``, numpy and torch scalars and arrays as Python numbers and
    lists, pandas tables as lists of records (missing values None), dict keys as strings."""
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return rounded(float(value))
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dict):
        return {str(k): summary_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [summary_value(v) for v in value]
    if hasattr(value, "to_dict") and hasattr(value, "columns"):  # a pandas DataFrame
        return [summary_value(row) for row in value.astype(object).to_dict(orient="records")]
    if hasattr(value, "to_dict"):  # a pandas Series: index → value
        return summary_value(value.to_dict())
    if hasattr(value, "tolist"):  # numpy array, torch tensor
        return summary_value(value.tolist())
    if hasattr(value, "__dataclass_fields__"):
        return summary_value(value.__dict__)
    raise TypeError(f"summary value {value!r} of type {type(value).__name__} is not a number, string, list, dict "
                    f"or table; convert it before write_summary")
