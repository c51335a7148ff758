"""Compare each run's summary.json with the same file at another git revision, number by number.

    python tools/compare_summaries.py REV [RUN ...]     # default: every run under figures/

For a refactoring that must not change results: prints, per run, how many numbers are identical, how many
differ only by rounding (by less than half a unit in the last written decimal of the coarser side), how
many NaNs are now written as null, which differ by more (path, old, new), keys present on one side only,
and wall times (compared never). Exits 1 when a
number differs by more than rounding.
"""
import argparse
import decimal
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("seconds", "wall_time")


def rounding_tolerance(a: float, b: float) -> float:
    """Half a unit in the last decimal place of the coarser of the two values as written (0.00087 was rounded
    to 5 decimals, 1.73 to 2); for a written zero, half a unit of 4 decimals, the coarsest rounding a
    summary used for small values."""
    places = [decimal.Decimal(repr(float(v))).as_tuple().exponent for v in (a, b) if v != 0]
    half_unit = 0.5 * 10.0 ** max(places) * (1 + 1e-9) if len(places) == 2 else 5e-5
    return min(half_unit, 5e-3)  # no summary was rounded more coarsely than 2 decimals


def compare(old, new, path="", out=None):
    out = out if out is not None else dict(identical=0, rounding=0, largest_rounding=0.0, nan_as_null=0, different=[], only_old=[], only_new=[],
                                           timing=[])
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
            out["largest_rounding"] = max(out["largest_rounding"], abs(old - new))
        else:
            out["different"].append((path, old, new))
    elif (old is None and new != new) or (new is None and old != old):
        out["nan_as_null"] += 1  # NaN, written as null (valid JSON) on one side
    elif old is None and isinstance(new, float) or new is None and isinstance(old, float):
        out["different"].append((path, old, new))
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
        print(f"{run}: {result['identical']} identical, {result['rounding']} equal up to rounding "
              f"(largest gap {result['largest_rounding']:.2g}), "
              f"{result['nan_as_null']} NaN now written as null, "
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
