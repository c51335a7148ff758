"""Where a run's wall time went: each code cell's duration, from papermill's executed copy.

    python tools/cell_times.py [RUN ...] [--build build] [--top 8]     # default: every run under build/notebooks/

The pipeline keeps papermill's raw executed copy of each run in ``build/notebooks/<run>.ipynb`` (git-ignored);
papermill writes each cell's start, end and duration into it. The readable copy beside the figures drops them
(they change from one identical run to the next). Prints, per run, its total, then its slowest code cells with
their share and first source line. Measure here before choosing what to speed up.
"""
import argparse
import json
import sys
from pathlib import Path


def cell_times(notebook: Path) -> list[dict]:
    """[{index, seconds, first_line}] of every executed code cell, in order (index counts markdown cells too)."""
    cells = json.loads(notebook.read_text())["cells"]
    rows = []
    for index, cell in enumerate(cells):
        duration = cell.get("metadata", {}).get("papermill", {}).get("duration")
        if cell["cell_type"] != "code" or duration is None:
            continue
        source = "".join(cell["source"]).splitlines()
        first = next((line.strip() for line in source if line.strip() and not line.lstrip().startswith("#")), "")
        rows.append(dict(index=index, seconds=float(duration), first_line=first))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="*", help="run names (default: every executed copy under BUILD/notebooks)")
    parser.add_argument("--build", default="build")
    parser.add_argument("--top", type=int, default=8, help="slowest cells shown per run")
    args = parser.parse_args(argv)
    folder = Path(args.build) / "notebooks"
    paths = [folder / f"{run}.ipynb" for run in args.runs] or sorted(folder.glob("*.ipynb"))
    missing = [str(p) for p in paths if not p.exists()]
    if missing or not paths:
        print(f"no executed copy at {missing or folder}: run the pipeline first (python -m helpers.pipeline --only RUN)",
              file=sys.stderr)
        return 1
    for path in paths:
        rows = cell_times(path)
        total = sum(r["seconds"] for r in rows)
        print(f"{path.stem}: {total:.0f} s in {len(rows)} code cells")
        for r in sorted(rows, key=lambda r: -r["seconds"])[: args.top]:
            share = 100 * r["seconds"] / total if total else 0.0
            print(f"  cell {r['index']:>2}  {r['seconds']:8.1f} s  {share:5.1f} %  {r['first_line'][:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
