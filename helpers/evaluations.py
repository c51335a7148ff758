"""Score every committed circuit file with the pinned evaluator and keep the reports next to the figures.

    python -m helpers.evaluations [--figures figures] [--runs RUN ...] [--only LABEL ...] [--check] [--adversarial]
                                  [--device auto]

What is scored, when a report is reused and what ``table.md`` holds is ``helpers.results.circuit_reports``'s.
Exit status 1 when a report is still missing or stale, 2 on bad input.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from helpers.core.device import DeviceUnavailableError, configure, resolve_device
from helpers.results.circuit_reports import score_committed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.evaluations", description=__doc__.split("\n\n")[0])
    parser.add_argument("--figures", default="figures", help="the figures folder (default figures)")
    parser.add_argument("--runs", nargs="+", default=None,
                        help="the runs whose circuits to score (default all; a label recurs across runs)")
    parser.add_argument("--only", nargs="+", default=None, help="circuit labels to score (default all)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a report is missing or stale")
    parser.add_argument("--adversarial", action="store_true",
                        help="reports must also hold the circuit under attack (data/circuit_attack.toml): those "
                             "without it are scored again, with it (minutes per circuit on a CPU)")
    parser.add_argument("--device", default="auto", help="auto (default: cuda where a GPU is present, else cpu), cpu "
                                                         "or cuda; a report is current only for the device it was "
                                                         "scored on")
    args = parser.parse_args(argv)
    try:
        device = resolve_device(args.device)
    except (DeviceUnavailableError, ValueError) as err:
        print(f"error: --device {args.device}: {err}", file=sys.stderr)
        return 2
    configure(device)
    try:
        problems = score_committed(Path(args.figures), device, args.only, args.check, args.adversarial,
                                   log=lambda line: print(line, flush=True), runs=args.runs)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for why in problems:
        print(f"not current: {why}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
