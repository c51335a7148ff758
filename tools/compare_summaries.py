"""Compare each run's summary.json with the same file at another git revision, number by number.

    python tools/compare_summaries.py REV [RUN ...]     # default: every run under figures/
    python tools/compare_summaries.py REV --tolerance data/device_tolerance.toml   # a run on another device

For a refactoring that must not change results: prints, per run, how many numbers are identical, how many
differ only by rounding (by less than half a unit in the last written decimal of the coarser side), how
many NaNs are now written as null, which differ by more (path, old, new), keys present on one side only,
and wall times and the record of where a run computed (``numerics``: device, builds, flags), which are shown
and never compared. Exits 1 when a number differs by more than rounding.

With ``--tolerance FILE`` (for results computed on another device, where rounding alone cannot hold): a
number that differs by more than rounding passes when a rule of FILE covers its run and path and it lies
within the rule's bound; every other number must still agree up to rounding, and every string and
boolean (verdicts, pass marks) exactly. The rules are declared before the comparison they judge.

A summary computed on another model (its ``weights_sha256`` or ``tokenizer_sha256`` changed, where both sides
record them) is not compared number by number: it is reported as another model, and the comparison fails.
"""
import argparse
import decimal
import json
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("seconds", "wall_time")
RECORDS = (".numerics.",)  # where a run computed (device, builds, flags): shown, never compared
MODEL_FINGERPRINTS = ("weights_sha256", "tokenizer_sha256")


def model_change(old: dict, new: dict) -> list[str]:
    """How the model of two summaries differs: each fingerprint both record and that changed."""
    return [f"{key} {old[key][:12]}… → {new[key][:12]}…" for key in MODEL_FINGERPRINTS
            if key in old and key in new and old[key] != new[key]]


def rounding_tolerance(a: float, b: float) -> float:
    """Half a unit in the last decimal place of the coarser of the two values as written (0.00087 was rounded
    to 5 decimals, 1.73 to 2); for a written zero, half a unit of 4 decimals, the coarsest rounding a
    summary used for small values."""
    places = [decimal.Decimal(repr(float(v))).as_tuple().exponent for v in (a, b) if v != 0]
    half_unit = 0.5 * 10.0 ** max(places) * (1 + 1e-9) if len(places) == 2 else 5e-5
    return min(half_unit, 5e-3)  # no summary was rounded more coarsely than 2 decimals


RULE_KEYS = {"name", "runs", "paths", "absolute", "relative", "exempt", "why"}


@dataclass(frozen=True)
class Rule:
    """How far one kind of number may move: its runs and summary paths ("*" matches anything; a list index
    is written [], as in ".check_c[].rho_tile"), and an absolute or relative bound (either suffices).
    ``exempt``: values that name bytes rather than measure anything (a file's sha256), not compared."""

    name: str
    runs: tuple[str, ...]
    paths: tuple[str, ...]
    absolute: float
    relative: float
    why: str
    exempt: bool = False

    def covers(self, run: str, path: str) -> bool:
        return (any(_glob(p).fullmatch(run) for p in self.runs)
                and any(_glob(p).fullmatch(re.sub(r"\[\d+\]", "[]", path)) for p in self.paths))

    def allows(self, old, new) -> bool:
        if self.exempt:
            return True
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (old, new)):
            return False  # a bound admits numbers only: strings and booleans must agree
        gap = abs(old - new)
        return gap <= self.absolute or gap <= self.relative * max(abs(old), abs(new))


def _glob(pattern: str) -> re.Pattern:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")))


def load_tolerances(path: Path) -> list[Rule]:
    """The rules of a tolerance file, each checked: known keys, a reason, and at least one positive bound."""
    with open(path, "rb") as handle:
        entries = tomllib.load(handle).get("rule", [])
    rules = []
    for index, entry in enumerate(entries):
        where = f"{path}: rule {entry.get('name', index)!r}"
        unknown = sorted(set(entry) - RULE_KEYS)
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}; a rule has {sorted(RULE_KEYS)}")
        missing = sorted({"name", "runs", "paths", "why"} - set(entry))
        if missing:
            raise ValueError(f"{where} lacks {missing}")
        absolute, relative = float(entry.get("absolute", 0.0)), float(entry.get("relative", 0.0))
        exempt = entry.get("exempt", False) is True
        if exempt and (absolute or relative):
            raise ValueError(f"{where}: an exempt rule has no bound")
        if not exempt and (absolute < 0 or relative < 0 or absolute == relative == 0):
            raise ValueError(f"{where}: give a positive absolute or relative bound (absolute={absolute}, "
                             f"relative={relative}), or exempt = true")
        rules.append(Rule(entry["name"], tuple(entry["runs"]), tuple(entry["paths"]), absolute, relative,
                          entry["why"], exempt))
    return rules


def tolerance_of(rules: list[Rule], run: str):
    """The callback ``compare`` asks about a number beyond rounding: the name of the first rule that covers
    it and allows the gap, or None."""
    def within(path: str, old: float, new: float) -> str | None:
        rule = next((r for r in rules if r.covers(run, path)), None)
        return rule.name if rule is not None and rule.allows(old, new) else None
    return within


def compare(old, new, path="", out=None, within=None):
    """Every number of ``old`` against ``new`` (see the module docstring); ``within(path, old, new)`` names the
    tolerance that admits a number beyond rounding, or None."""
    out = out if out is not None else dict(identical=0, rounding=0, largest_rounding=0.0, nan_as_null=0, different=[], only_old=[], only_new=[],
                                           timing=[], records=[], tolerated={})
    if any(word in path for word in TIMING):
        out["timing"].append((path, old, new))
    elif isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key not in new:
                out["only_old"].append(f"{path}.{key}")
            elif key not in old:
                out["only_new"].append(f"{path}.{key}")
            else:
                compare(old[key], new[key], f"{path}.{key}", out, within)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new)):
            compare(a, b, f"{path}[{index}]", out, within)
    elif path.startswith(RECORDS):
        if old != new:
            out["records"].append((path, old, new))
    elif isinstance(old, (int, float)) and isinstance(new, (int, float)) and not isinstance(old, bool):
        if old == new:
            out["identical"] += 1
        elif abs(old - new) <= rounding_tolerance(old, new):
            out["rounding"] += 1
            out["largest_rounding"] = max(out["largest_rounding"], abs(old - new))
        elif within is not None and (rule := within(path, old, new)) is not None:
            out["tolerated"][rule] = out["tolerated"].get(rule, 0) + 1
        else:
            out["different"].append((path, old, new))
    elif (old is None and new != new) or (new is None and old != old):
        out["nan_as_null"] += 1  # NaN, written as null (valid JSON) on one side
    elif old is None and isinstance(new, float) or new is None and isinstance(old, float):
        out["different"].append((path, old, new))
    elif old == new:
        out["identical"] += 1
    elif within is not None and (rule := within(path, old, new)) is not None:
        out["tolerated"][rule] = out["tolerated"].get(rule, 0) + 1  # an exempt identifier
    else:
        out["different"].append((path, old, new))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev")
    parser.add_argument("runs", nargs="*")
    parser.add_argument("--tolerance", type=Path, help="a tolerance file, such as data/device_tolerance.toml")
    args = parser.parse_args()
    rules = load_tolerances(args.tolerance) if args.tolerance else None
    runs = args.runs or sorted(p.parent.name for p in (ROOT / "figures").glob("*/summary.json"))
    failed = False
    for run in runs:
        relative = f"figures/{run}/summary.json"
        shown = subprocess.run(["git", "show", f"{args.rev}:{relative}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode:
            print(f"{run}: no {relative} at {args.rev}")
            continue
        old, new = json.loads(shown.stdout), json.loads((ROOT / relative).read_text())
        if changed := model_change(old, new):
            print(f"{run}: another model ({'; '.join(changed)}): its numbers are not compared")
            failed = True
            continue
        result = compare(old, new, within=tolerance_of(rules, run) if rules is not None else None)
        print(f"{run}: {result['identical']} identical, {result['rounding']} equal up to rounding "
              f"(largest gap {result['largest_rounding']:.2g}), "
              f"{result['nan_as_null']} NaN now written as null, "
              f"{len(result['different'])} different; keys only at {args.rev}: {result['only_old'] or 'none'}; "
              f"only now: {result['only_new'] or 'none'}")
        if rules is not None:
            print(f"    within the declared tolerance: {sum(result['tolerated'].values())} "
                  f"({', '.join(f'{name} {count}' for name, count in sorted(result['tolerated'].items())) or 'none needed'})")
        for path, old, new in result["different"][:40]:
            print(f"    {path}: {old!r} -> {new!r}")
        for path, old, new in result["timing"]:
            print(f"    (timing) {path}: {old} -> {new}")
        for path, old, new in result["records"]:
            print(f"    (where computed) {path}: {old} -> {new}")
        failed |= bool(result["different"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
