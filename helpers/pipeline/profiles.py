"""A profile's sizes, chosen from inside Jupyter: ``profile = "workshop"`` in a notebook's parameters cell
takes the parameters that ``notebooks/runs.toml`` declares for that run's ``[runs.workshop]`` table, the
same ones ``python -m helpers.pipeline --profile workshop`` passes. The file is the one place they live."""
from __future__ import annotations

import tomllib
from pathlib import Path

from helpers.pipeline.runs import PROFILES

RUNS_FILE = Path(__file__).resolve().parents[2] / "notebooks" / "runs.toml"


def profile_parameters(notebook: str, profile: str, fast: bool = False, runs_file: Path = RUNS_FILE,
                       **identity) -> dict:
    """The parameters ``profile`` sets for the run of ``notebook`` whose declared parameters agree with
    ``identity`` (e.g. model_name, task_name); {} for "full". Refuses an unknown profile, ``fast`` together
    with a profile (each sets the sizes), and a run that is not in the profile, naming those that are."""
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r}: choose one of {PROFILES}")
    if profile == "full":
        return {}
    if fast:
        raise ValueError(f"fast=True and profile={profile!r} each set the sizes: choose one")
    with open(runs_file, "rb") as f:
        runs = [r for r in tomllib.load(f)["runs"] if r["notebook"] == notebook]
    matching = [r for r in runs if all(r.get("parameters", {}).get(k, v) == v for k, v in identity.items())]
    in_profile = [r for r in matching if profile in r]
    if not in_profile:
        available = [r["name"] for r in runs if profile in r]
        raise ValueError(f"no run of {notebook} with {identity} is in the {profile} profile of {runs_file.name}; "
                         f"runs of this notebook that are: {available or 'none'}")
    return dict(in_profile[0][profile])
