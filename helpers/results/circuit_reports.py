"""Every committed circuit file scored with the pinned evaluator, the reports kept next to the figures: the
work of ``python -m helpers.evaluations`` (``score_committed``).

Every circuit file that a run's summary lists under ``circuit_files`` gets two reports:
``figures/evaluations/<run>/<label>.json`` (the numbers of ``helpers.singular.masking.circuit_evaluation``, the circuit file's sha256,
and the settings they were scored with) and ``<label>.txt`` (the evaluator's printed table). A report is
reused only if the circuit's sha256, the evaluator's settings, its source code and the installed packages
all match. Then ``figures/evaluations/table.md`` lists one line per circuit. ``--check`` writes nothing:
it names every report that is missing or stale and exits 1 if there is one. ``--adversarial``: every report
must also hold the circuit under the declared attack (``python -m helpers.evaluate --adversarial``); a report
that holds it stays current without the option. A circuit file with the same bytes as one whose report is
current gets that report's numbers under its own name, unscored again: a report depends on nothing else.

The evaluator's own defaults are used: 96 fresh prompts from the training seed + 1, three random controls,
and the signed ranking.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from helpers.core.cache import atomic_write_json, atomic_write_text, sha256_file
from helpers.pipeline.fingerprints import PACKAGE_ROOT, environment_record, module_sources
from helpers.pipeline.summaries import SUMMARY_FILE, summary_value

ATTACK_RULES = None  # the rules of --adversarial; None: the declared file (helpers.singular.validation.adversary.ATTACK_RULES)

REPORTS = "evaluations"
SETTINGS = dict(n_prompts=96, seed=None, control_seeds=3, ranking="signed")  # evaluate_file's defaults


def committed_circuits(figures: Path) -> list[tuple[str, Path, str]]:
    """(run, circuit file, sha256 the run recorded) for every circuit file a summary lists, in run order."""
    found = []
    for summary_file in sorted(figures.glob(f"*/{SUMMARY_FILE}")):
        run = summary_file.parent
        for record in json.loads(summary_file.read_text()).get("circuit_files") or []:
            found.append((run.name, run / "circuits" / record["file"], record["sha256"]))
    return found


def evaluator_sources() -> list[Path]:
    """The evaluator's source (helpers/singular/masking/circuit_evaluation.py) and every helpers module it imports."""
    return module_sources({"helpers.singular.masking.circuit_evaluation"})


def settings(adversarial: bool = False) -> dict:
    """The evaluator's settings, with ``adversarial`` (the attack of ``data/circuit_attack.toml``) only when on:
    a report without the attack keeps the digest it always had."""
    return {**SETTINGS, "adversarial": True} if adversarial else dict(SETTINGS)


def attack_rules_file() -> Path:
    """The rules ``--adversarial`` attacks by (read here, not at import: the model stack loads only for work)."""
    from helpers.singular.validation.adversary import ATTACK_RULES as DECLARED

    return Path(ATTACK_RULES or DECLARED)


def evaluator_inputs(device: str = "cpu", adversarial: bool = False) -> bytes:
    """What every report depends on besides its circuit: the settings, the evaluator's code, the packages,
    the thread count and the device's numerics (``device``, resolved), and with the attack its declared rules.
    Read once per command, not once per circuit."""
    parts = [json.dumps(settings(adversarial), sort_keys=True).encode()]
    for source in evaluator_sources():
        parts += [str(source.relative_to(PACKAGE_ROOT)).encode(), source.read_bytes()]
    parts.append(json.dumps(environment_record(device=device), sort_keys=True).encode())
    if adversarial:
        parts.append(attack_rules_file().read_bytes())
    return b"".join(parts)


def inputs_digest(circuit_sha256: str, evaluator: bytes) -> str:
    """One digest of what a report depends on: the circuit's bytes and ``evaluator_inputs()``."""
    return hashlib.sha256(circuit_sha256.encode() + evaluator).hexdigest()


def report_path(figures: Path, run: str, circuit: Path) -> Path:
    return figures / REPORTS / run / f"{circuit.stem}.json"


def report_state(figures: Path, run: str, circuit: Path, recorded_sha256: str, evaluators: dict[bool, bytes],
                 adversarial: bool = False) -> tuple[str, str]:
    """(state, why) of one circuit's report. States: "current"; "unscored" or "stale" (scoring it again
    fixes it); "circuit changed" (the circuit file is gone or is not the one its run recorded: rerun the run).
    ``evaluators``: ``evaluator_inputs`` without and with the attack (False, True). A report with the attack
    is current for either request, one without it only when the attack is not asked for."""
    if not circuit.exists():
        return "circuit changed", f"{circuit} is listed in {run}'s summary but is not there; rerun {run}"
    sha = sha256_file(circuit)
    if sha != recorded_sha256:
        return "circuit changed", (f"{circuit} is not the file {run} recorded (sha256 {sha[:12]}…, summary "
                                   f"{recorded_sha256[:12]}…); rerun {run}")
    path = report_path(figures, run, circuit)
    if not path.exists():
        return "unscored", f"no report {path}"
    saved = json.loads(path.read_text())
    attacked = bool((saved.get("settings") or {}).get("adversarial"))
    if adversarial and not attacked:
        return "unscored", f"{path} holds no attack"
    if saved.get("circuit_sha256") != sha:
        return "stale", f"{path} scored another version of {circuit.name}"
    if saved.get("inputs_digest") != inputs_digest(sha, evaluators[attacked]):
        return "stale", f"{path}: the evaluator's code, settings or packages changed since it was written"
    return "current", ""


def twin_report(figures: Path, circuits: list[tuple[str, Path, str]], run: str, circuit: Path, sha: str,
                evaluators: dict[bool, bytes], adversarial: bool = False) -> Path | None:
    """The current report of another committed circuit file with ``circuit``'s bytes (``sha``, as
    ``report_state`` verified it), or None. A report depends only on the circuit's bytes and
    ``evaluator_inputs`` (``inputs_digest``): the file's path is a label, so the twin's numbers are this file's."""
    for other_run, other, recorded in circuits:
        if (other_run, other) != (run, circuit) and recorded == sha and \
                report_state(figures, other_run, other, recorded, evaluators, adversarial)[0] == "current":
            return report_path(figures, other_run, other)
    return None


def copy_twin_report(twin: Path, figures: Path, run: str, circuit: Path) -> Path:
    """Write ``twin``'s report (json and printed table) as ``circuit``'s, naming ``circuit`` as the file scored
    and the twin's file under ``same_bytes_as``."""
    saved = json.loads(twin.read_text())
    twin_file, text = saved["file"], twin.with_suffix(".txt").read_text()
    if not text.startswith(f"{twin_file}: "):
        raise ValueError(f"{twin.with_suffix('.txt')} does not open with its circuit {twin_file}; score "
                         f"{circuit} itself (python -m helpers.evaluations --only {circuit.stem})")
    path = report_path(figures, run, circuit)
    atomic_write_text(path.with_suffix(".txt"), str(circuit) + text[len(twin_file):])
    atomic_write_json(path, {**saved, "file": str(circuit), "same_bytes_as": twin_file})
    return path


def markdown(rows: list[dict]) -> str:
    """A Markdown table of equal-keyed rows."""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return "\n".join(lines + ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]) + "\n"


TASK_ORDER = ("ioi", "gender", "greater_than")  # the table's order: paper 1's headline task first


def fixed(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, never a negative zero."""
    return f"{round(value, digits) + 0.0:.{digits}f}"


def wilson(successes: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion (it stays inside [0, 1], also at 0 or n successes)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _task_rank(report: dict) -> tuple:
    task = report.get("task") or report["label"].split("-")[0]
    return (TASK_ORDER.index(task) if task in TASK_ORDER else len(TASK_ORDER), task)


def _attack_cell(attack: dict | None) -> str:
    if not attack:
        return "not attacked"
    steps = max(attack["settings"]["checkpoints"])
    return f"{'survives' if attack['survives'] else 'breaks'} {steps} steps ({fixed(attack['best_kl'], 3)})"


def table(reports: list[dict], not_current: list[str] = ()) -> str:
    """One Markdown line per circuit, IOI first: kept share (from the counts, not the rounded fraction), KL
    against the same-count random control, accuracy with its 95 % interval over the prompts, and CPR/CMD
    against random rankings on both axes."""
    rows = []
    labels = [r["label"] for r in reports]
    for r in sorted(reports, key=_task_rank):  # stable: each task's circuits keep their order
        areas = {a["ranking"].split(" ")[0]: a for a in r["areas"]}
        c = r["circuit"]
        total = next(point["kept"] for point in r["curve"] if point["percent"] == 100)  # C_100 keeps every direction
        low, high = wilson(round(c["accuracy"] * r["n_prompts"]), r["n_prompts"])
        rows.append({
            "circuit": r["label"] if labels.count(r["label"]) == 1 else f"{r['label']} ({Path(r['file']).parent.parent.name})",
            "kept %": f"{100 * c['kept'] / total:.1f}", "prompts": r["n_prompts"],
            "KL (random)": f"{fixed(c['kl'], 3)} ({fixed(c['random_kl'], 3)})",
            "accuracy [95 % CI] (random)": f"{fixed(c['accuracy'], 2)} [{fixed(low, 2)}–{fixed(high, 2)}] "
                                           f"({fixed(c['random_accuracy'], 2)})",
            **{f"{name} {axis} (random)": f"{fixed(areas['circuit'][key], 3)} ({fixed(areas['random'][key], 3)})"
               for name, axis, key in (("CPR", "linear", "cpr_linear"), ("CPR", "log", "cpr_log"),
                                       ("CMD", "linear", "cmd_linear"), ("CMD", "log", "cmd_log"))},
            "under attack (largest KL)": _attack_cell(r.get("attack")),
        })
    header = ("Written by `python -m helpers.evaluations`: each committed circuit file scored by `python -m "
              "helpers.evaluate` on fresh prompts (seed = training seed + 1, the run's own prompts removed), "
              "ranking signed. Faithfulness is over directions, not edges: not comparable with MIB's leaderboard. "
              "CPR is the area under f(k), the share of the full model's metric that the top k directions of "
              "the ranking recover; it exceeds 1 when some of those partial circuits beat the full model on the "
              "metric. A circuit that keeps 100 % has KL 0 and its random control is the full model too: its "
              "row says nothing about sparsity. Under attack: the largest held-out KL an adversary found by "
              "setting the directions the circuit leaves out (`--adversarial`, data/circuit_attack.toml), against "
              "the declared bound. RESULTS.md names each task's headline circuit.\n\n")
    missing = "".join(f"\nNot current, so not listed: {why}\n" for why in not_current)
    return header + markdown(rows) + missing


def score_committed(figures: Path, device: str, only: list[str] | None = None, check: bool = False,
                    adversarial: bool = False, log=print, runs: list[str] | None = None) -> list[str]:
    """Score every circuit file the summaries under ``figures`` list whose report is not current (only those
    labelled ``only``, and only those of the runs ``runs``, when given: a label such as ``ioi-paper-recipe``
    recurs in several runs), reuse the current ones, and write ``table.md`` from the current reports of every run.
    ``check``: write nothing. ``device``: resolved and configured already. Returns why each report that is
    still not current is not; a ValueError names an unknown label or run, or a folder without circuits."""
    from helpers.core.models import load_model  # the model stack loads only when there is work
    from helpers.singular.masking.circuit_evaluation import evaluate_file, report
    from helpers.singular.masking.circuit_files import load_circuit

    circuits = committed_circuits(figures)
    if runs:
        known = {run for run, _, _ in circuits}
        if set(runs) - known:
            raise ValueError(f"--runs {sorted(set(runs) - known)}: no such run with circuits; runs with circuits are "
                             f"{sorted(known)}")
    labels = {c.stem for run, c, _ in circuits if not runs or run in runs}
    if only and set(only) - labels:
        raise ValueError(f"--only {sorted(set(only) - labels)}: no such circuit; circuits are {sorted(labels)}")
    if not circuits:
        raise ValueError(f"no summary under {figures} lists circuit files")
    problems, current, models = [], [], {}
    evaluators = {mode: evaluator_inputs(device, mode) for mode in (False, True)}
    for index, (run, circuit, recorded) in enumerate(circuits, 1):
        state, why = report_state(figures, run, circuit, recorded, evaluators, adversarial)
        step = f"[{index}/{len(circuits)}] {circuit.stem}"
        if state == "current":
            log(f"{step}: current, reused")
        elif check or state == "circuit changed" or (only and circuit.stem not in only) or (runs and run not in runs):
            problems.append(why)
            log(f"{step}: {state}: {why}")
            continue
        elif (twin := twin_report(figures, circuits, run, circuit, recorded, evaluators, adversarial)) is not None:
            path = copy_twin_report(twin, figures, run, circuit)
            log(f"{step}: {state} ({why}); the same bytes as the circuit of {twin}, which is current: wrote {path} "
                f"from it")
        else:
            log(f"{step}: {state} ({why}); scoring")
            start = time.time()
            saved = load_circuit(circuit).metadata["model"]
            key = (saved["model"], json.dumps(saved["processing"], sort_keys=True))
            if key not in models:  # one load per model; evaluate_file checks it against each file
                models[key] = load_model(saved["model"], processing=saved["processing"], device=device)
            result = evaluate_file(circuit, SETTINGS["n_prompts"], SETTINGS["seed"], SETTINGS["control_seeds"],
                                   SETTINGS["ranking"], model=models[key], adversarial=adversarial,
                                   attack_rules=attack_rules_file())
            path, sha = report_path(figures, run, circuit), recorded  # report_state verified the file against it
            atomic_write_text(path.with_suffix(".txt"), report(result) + "\n")
            atomic_write_json(path, {**summary_value(result), "circuit_sha256": sha,
                                     "inputs_digest": inputs_digest(sha, evaluators[adversarial]),
                                     "settings": settings(adversarial),
                                     "wall_time_s": round(time.time() - start, 1)})
            log(f"{step}: wrote {path} in {time.time() - start:.0f} s")
        current.append(json.loads(report_path(figures, run, circuit).read_text()))
    if not check and current:  # only current reports: a stale number never reaches the table
        atomic_write_text(figures / REPORTS / "table.md", table(current, problems))
    return problems
