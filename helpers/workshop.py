"""Check a finished workshop run against what its sizes must still show.

    python -m helpers.workshop [--figures figures-workshop]     # after python -m helpers.pipeline --profile workshop

The criteria, declared before any workshop run, are ``helpers.results.workshop_checks``'s.
Exit status 1 when a criterion fails or a run it needs did not finish.
"""
from __future__ import annotations

import argparse
import sys

import pandas as pd

from helpers.results.workshop_checks import check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--figures", default="figures-workshop")
    args = parser.parse_args(argv)
    table = check(args.figures)
    with pd.option_context("display.max_colwidth", 70, "display.width", 200):
        print(table.to_string(index=False))
    failed = int((~table["passed"]).sum())
    print(f"workshop criteria (declared in helpers/results/workshop_checks.py): {len(table) - failed} of {len(table)} met")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
