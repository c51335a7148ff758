"""RESULTS.md's section "On the papers' own models": every claim on GPT-2 small (paper 1) and Gemma-2-2B
(paper 2), from ``figures-paper-models/`` (``make figures PROFILE=paper-models``), under the same verdict rules
and controls as the embedded models' table. Until that folder holds runs on real weights, the section says
what command fills it, what it needs and what each run is expected to cost (``notebooks/paper_models.toml``).

Runs on stand-in weights (``helpers.core.stand_ins``: random, at the real shapes, for tests) are never shown.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from helpers.results.claims import RUNS, VALIDATION_RUNS, Claim, all_claims, on_models, table_cell
from helpers.core.folder_checks import weights_env
from helpers.core.models import MODELS, STAND_IN_WORDS
from helpers.pipeline.runs import OWN_RUNS, Run, load_runs

FOLDER = "figures-paper-models"
PROFILE = "paper-models"
PAPER_MODELS = ("gpt2-small", "gemma-2-2b")  # paper 1's, paper 2's
PAPER_MODEL_RUNS = on_models(RUNS, *PAPER_MODELS)
PAPER_MODEL_VALIDATION_RUNS = on_models(VALIDATION_RUNS, *PAPER_MODELS)


def declared_runs(root: Path) -> list[Run]:
    return load_runs(root / "notebooks" / OWN_RUNS[PROFILE])


def real_summaries(manifest: dict) -> tuple[dict, list[str]]:
    """(run name → summary of the runs on real weights, names of the runs on stand-in weights, left out)."""
    real, stand_ins = {}, []
    for run in manifest.get("runs", []):
        summary = run.get("summary") or {}
        if STAND_IN_WORDS in str(summary.get("weights_source", "")):
            stand_ins.append(run["name"])
        else:
            real[run["name"]] = summary
    return real, stand_ins


def retargeted(claim: Claim) -> Claim:
    """A claim whose links and commands point at the paper-models profile's folder and command."""
    return replace(claim, shown_in=claim.shown_in.replace("](figures/", f"]({FOLDER}/"),
                   verdict=claim.verdict.replace("helpers.pipeline --only", f"helpers.pipeline --profile {PROFILE} --only"))


def paper_model_claims(summaries: dict, rules: dict | None = None) -> list[Claim]:
    return [retargeted(c) for c in all_claims(summaries, rules, PAPER_MODEL_RUNS, PAPER_MODEL_VALIDATION_RUNS)]


def how_to_run(root: Path) -> list[str]:
    """What the profile needs and what each run is expected to cost."""
    needs = []
    for name in PAPER_MODELS:
        spec = MODELS[name]
        variable = weights_env(name)
        access = f"; {spec.access}" if spec.access else ""
        needs.append(f"- `{name}`: the hub's `{spec.hf_id}`{access}; or a local folder named by `{variable}`.")
    out = ["`make figures PROFILE=paper-models` (or `python -m helpers.pipeline --profile paper-models`) runs the "
           "notebooks on the papers' own models into `figures-paper-models/`, on the GPU where there is one; "
           "`python -m helpers.reproduction` then fills this section. It needs their weights, and refuses before "
           "the first run without them, saying how to get them:", "", *needs, "",
           "| run | CPU (2 cores) | GPU | how the cost was found |", "|---|---|---|---|"]
    for run in declared_runs(root):
        cost = run.cost or {}
        cells = [table_cell(cost.get(key)) for key in ("cpu", "gpu", "basis")]
        out.append(f"| {run.name} | {' | '.join(cells)} |")
    return out


def section(root: Path) -> str:
    """The section's markdown (without its heading)."""
    manifest_file = root / FOLDER / "manifest.json"
    manifest = json.loads(manifest_file.read_text(encoding="utf-8")) if manifest_file.exists() else {}
    summaries, stand_ins = real_summaries(manifest)
    left_out = (f"Runs on stand-in weights (random, for tests) are left out: {', '.join(stand_ins)}."
                if stand_ins else "")
    if not summaries:
        out = ["No run on the papers' own models is recorded yet: their weights do not reach the machines these "
               "results were made on. Every notebook of the profile has run on stand-ins for them (random weights "
               "at their real shapes, `helpers.core.stand_ins`) in the tests, so the command below is known to "
               "run; the numbers are not.", "", *how_to_run(root)]
        return "\n".join(out + (["", left_out] if left_out else [])) + "\n"
    claims = paper_model_claims(summaries)
    out = ["Every claim on the paper's own model, from `figures-paper-models/manifest.json`, under the same rules and "
           "controls as the tables above; the claim column holds the paper's own number.", "",
           "| Paper | Claim | Paper's recipe or judge | Ours | Control | Verdict | First caveat | Shown in |",
           "|---|---|---|---|---|---|---|---|"]
    out += [f"| {c.paper} | {table_cell(c.claim)} | {table_cell(c.paper_recipe)} | {table_cell(c.ours)} | "
            f"{table_cell(c.control)} | **{table_cell(c.verdict)}** | {table_cell(c.caveat)} | {table_cell(c.shown_in)} |"
            for c in claims]
    return "\n".join(out + (["", left_out] if left_out else [])) + "\n"
