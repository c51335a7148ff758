"""Paper 2's results as tables a reader can scan: a site × layer grid of one number with its pass mark, and
a site × check grid of pass rates with the negative controls' beside them. The raw rows stay in the summary."""
from __future__ import annotations

import pandas as pd

PASS, FAIL, NOT_JUDGED = "✓", "✗", "·"
UNINFORMATIVE_MARK = "⚠"


def _mark(passed) -> str:
    if passed is None or (isinstance(passed, float) and passed != passed):
        return NOT_JUDGED
    return PASS if bool(passed) else FAIL


def marked_grid(frame: pd.DataFrame, value: str, passed: str, digits: int = 3) -> pd.DataFrame:
    """Site × layer: ``value`` rounded to ``digits`` (negative zero shown as zero), followed by ✓ where the
    ``passed`` column is true, ✗ where false and · where the check is not judged. Sites keep their order."""
    sites = list(dict.fromkeys(frame["site"]))
    cells = frame.assign(cell=[f"{round(v, digits) + 0.0:.{digits}f} {_mark(p)}"
                               for v, p in zip(frame[value], frame[passed])])
    return cells.pivot(index="site", columns="layer", values="cell").loc[sites]


def rates_grid(rates: pd.DataFrame, real: str = "model", controls=("random-init", "permuted")) -> pd.DataFrame:
    """Site × check from ``uninformative(pass_rates(...))``: the model's pass rate, then each control's in
    brackets, and ⚠ where a control passes at least as often (the check says nothing there)."""
    present = [c for c in controls if c in rates.columns]
    cells = {}
    for (site, check), row in rates.iterrows():
        if row[real] != row[real]:
            continue
        text = f"{row[real]:.0%} (" + ", ".join(f"{row[c]:.0%}" for c in present) + ")"
        cells[(site, check)] = text + (f" {UNINFORMATIVE_MARK}" if row.get("uninformative", False) else "")
    grid = pd.Series(cells).unstack()
    sites = list(dict.fromkeys(site for site, _ in rates.index))
    checks = list(dict.fromkeys(check for _, check in rates.index))
    return grid.reindex(index=sites, columns=checks).fillna("")
