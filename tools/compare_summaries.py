"""Compare each run's summary.json with the same file at another git revision, number by number.

    python tools/compare_summaries.py REV [RUN ...]     # default: every run under figures/

For a refactoring that must not change results: prints, per run, how many numbers are identical, how many
differ only by rounding (either side rounded to 4 or 5 decimals, or to 4 significant digits), which differ
by more (path, old, new), keys present on one side only, and wall times (compared never). Exits 1 when a
number differs by more than rounding.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("seconds", "wall_time")


def rounding_tolerance(a: float, b: float) -> float:
    """Half a unit of the coarsest rounding either side may have had: 4 decimals, or 4 significant digits
    below 10⁻³ (``helpers.pipeline.rounded``)."""
    larger = max(abs(a), abs(b))
    return 5e-4 * larger if larger < 1e-3 else 5e-5


def compare(old, new, path="", out=None):
    out = out if out is not None else dict(identical=0, rounding=0, different=[], only_old=[], only_new=[], timing=[])
    if any(word in path for word in TIMING):
        out["timing"].append((path, old, new))
    elif isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key not in new:
                out["only_old"].append(f"{path}.{key}")
            elif key not in old:
                out["only_new"].append(f"{path}.{key}")
            else:
                compare(old[key], new[key], f"{path}.{key}", out)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new)):
            compare(a, b, f"{path}[{index}]", out)
    elif isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool):
        if old == new:
            out["identical"] += 1
        elif abs(old - new) <= rounding_tolerance(old, new):
            out["rounding"] += 1
        else:
            out["different"].append((path, old, new))
    elif old is None and isinstance(new, float) or new is None and isinstance(old, float):
        out["different"].append((path, old, new))  # NaN written as None on one side only
    elif old == new:
        out["identical"] += 1
    else:
        out["different"].append((path, old, new))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev")
    parser.add_argument("runs", nargs="*")
    args = parser.parse_args()
    runs = args.runs or sorted(p.parent.name for p in (ROOT / "figures").glob("*/summary.json"))
    failed = False
    for run in runs:
        relative = f"figures/{run}/summary.json"
        shown = subprocess.run(["git", "show", f"{args.rev}:{relative}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode:
            print(f"{run}: no {relative} at {args.rev}")
            continue
        result = compare(json.loads(shown.stdout), json.loads((ROOT / relative).read_text()))
        print(f"{run}: {result['identical']} identical, {result['rounding']} equal up to rounding, "
              f"{len(result['different'])} different; keys only at {args.rev}: {result['only_old'] or 'none'}; "
              f"only now: {result['only_new'] or 'none'}")
        for path, old, new in result["different"][:40]:
            print(f"    {path}: {old!r} -> {new!r}")
        for path, old, new in result["timing"]:
            print(f"    (timing) {path}: {old} -> {new}")
        failed |= bool(result["different"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
