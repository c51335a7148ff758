"""The runs file (``notebooks/runs.toml``): the declared runs, in order, and the sweeps that expand into runs.

A ``[[runs]]`` entry is one notebook with its parameters. A ``[[sweeps]]`` entry is one notebook over a list
of parameter sets: each set becomes a run of its own, named ``<sweep>-<name><value>…`` after the parameters
it sets, with its own folder, fingerprint and manifest record. Sweeps run only when asked for
(``python -m helpers.pipeline --sweep NAME``), never in the default pipeline: they are what a user sends
to a cluster, not the reference figures.
"""
from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path


class PipelineError(RuntimeError):
    pass


PROFILES = ("full", "workshop", "paper", "paper-models")
"""``full``: the reference run. A run belongs to another profile when it declares a ``[runs.<profile>]``
table (its parameters over the run's own): ``workshop``, the sizes a class can watch in about 15 minutes;
``paper``, paper 1's recipe at its own budget (batch 64, 3,000 steps), meant for a GPU. A profile of
``OWN_RUNS`` has a runs file of its own instead: ``paper-models``, the notebooks on the papers' own models."""

OWN_RUNS = {"paper-models": "paper_models.toml"}
"""Profiles whose runs are declared in a file of their own, beside runs.toml: every run there belongs to the
profile, at its own parameters (and ``--fast`` gives them their notebooks' small sizes, as for ``full``)."""


BY_HAND = Path("..") / "figures-mine"
"""Where a notebook run by hand (in JupyterLab, ``out_dir`` left at None) writes, relative to the notebooks'
folder, the working directory of their kernels: one folder per run, named as the pipeline names it
(``run_name``). So the notebooks that read another's results (03, 06 and 07 read notebook 02's circuits, from
the folder beside their own) read those of your own earlier run, never the reference figures. Git-ignored."""


def run_name(notebook: str, model_name: str, task_name: str | None = None) -> str:
    """A run's name as ``notebooks/runs.toml`` and ``paper_models.toml`` write it: the notebook, its task where
    it has one, the model (``02_masking-ioi-smollm2-135m``)."""
    return "-".join([Path(notebook).stem, *([task_name] if task_name else []), model_name])


def out_folder(out_dir: str | None, notebook: str, model_name: str, task_name: str | None = None) -> str:
    """A notebook's ``out_dir``: the one given (the pipeline gives ``figures/<run name>``), else, run by hand,
    ``BY_HAND/<run name>``."""
    return str(out_dir) if out_dir else str(BY_HAND / run_name(notebook, model_name, task_name))


@dataclass
class Run:
    name: str
    notebook: str
    parameters: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)  # files/folders it reads, relative to runs.toml's folder
    after: list = field(default_factory=list)  # runs whose results it reads (they come earlier in the file)
    workshop: dict | None = None  # parameters over ``parameters`` in the workshop profile; None: not in it
    paper: dict | None = None  # the same for the paper profile
    sweep: str | None = None  # the sweep it comes from; None for a [[runs]] entry
    cost: dict | None = None  # {cpu, gpu, basis}: what a run not yet recorded is expected to cost (paper_models.toml)

    def profile_table(self, profile: str) -> dict | None:
        """The parameters ``profile`` sets over the run's own ({} for ``full``); None: not in that profile."""
        return {} if profile == "full" or profile in OWN_RUNS else getattr(self, profile)

    def effective_parameters(self, fast: bool, out_dir: Path, profile: str = "full") -> dict:
        return {**self.parameters, **(self.profile_table(profile) or {}), "fast": fast,
                "out_dir": str(out_dir.resolve())}


SWEEP_KEYS = ("name", "notebook", "parameters", "parameter_sets", "inputs", "after")


def _slug(value) -> str:
    """A parameter value as part of a folder name: letters, digits, '.' and '_' only."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return re.sub(r"[^A-Za-z0-9._]+", "_", text).strip("_") or "empty"


def sweep_run_name(sweep: str, parameter_set: dict) -> str:
    """``<sweep>-<name><value>-…`` over the set's parameters, sorted by name: ``ioi-seeds-seed1``."""
    return "-".join([sweep, *(f"{name}{_slug(value)}" for name, value in sorted(parameter_set.items()))])


def expand_sweep(entry: dict, path: Path) -> list[Run]:
    """The runs of one ``[[sweeps]]`` entry: the shared ``parameters`` with each of ``parameter_sets`` over
    them, in the declared order."""
    name = entry.get("name")
    unknown = sorted(set(entry) - set(SWEEP_KEYS))
    if unknown:
        raise PipelineError(f"{path}: sweep {name!r} has unknown keys {unknown}; a sweep has {list(SWEEP_KEYS)}")
    missing = [key for key in ("name", "notebook", "parameter_sets") if key not in entry]
    if missing:
        raise PipelineError(f"{path}: sweep {name!r} lacks {missing}; for example parameter_sets = "
                            "[{ seed = 1 }, { seed = 2 }]")
    sets = entry["parameter_sets"]
    if not isinstance(sets, list) or not sets or not all(isinstance(s, dict) and s for s in sets):
        raise PipelineError(f"{path}: sweep {name!r}: parameter_sets must be a non-empty list of non-empty tables, "
                            f"such as [{{ seed = 1 }}, {{ seed = 2 }}]; got {sets!r}")
    shared = entry.get("parameters", {})
    return [Run(sweep_run_name(name, parameter_set), entry["notebook"], {**shared, **parameter_set},
                list(entry.get("inputs", [])), list(entry.get("after", [])), sweep=name)
            for parameter_set in sets]


def load_runs(path: str | Path) -> list[Run]:
    """The declared runs, in order, then the runs of each sweep; names must be unique, notebooks and inputs
    must exist, and a run may read (``after``) only runs declared before it."""
    path = Path(path)
    with open(path, "rb") as handle:
        table = tomllib.load(handle)
    runs = []
    for entry in table.get("runs", []):
        allowed = set(Run.__dataclass_fields__) - {"sweep"}  # set by a [[sweeps]] entry only
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise PipelineError(f"{path}: run {entry.get('name')!r} has unknown keys {unknown}; a run has {sorted(allowed)}")
        runs.append(Run(**entry))
    for entry in table.get("sweeps", []):
        runs += expand_sweep(entry, path)
    names = [r.name for r in runs]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise PipelineError(f"{path}: run names must be unique (a sweep's runs are named after its parameter sets); "
                            f"repeated: {duplicated}")
    for index, run in enumerate(runs):
        if not (path.parent / run.notebook).exists():
            raise PipelineError(f"{path}: run {run.name!r} names notebook {run.notebook!r}, "
                                f"which is not in {path.parent}")
        for dependency in run.after:
            if dependency not in names[:index]:
                raise PipelineError(f"{path}: run {run.name!r} reads the results of {dependency!r}, which is not a "
                                    f"run declared before it; runs before it are {names[:index]}")
        for profile in PROFILES[1:]:
            table = run.profile_table(profile)
            if table is None:
                continue
            if not isinstance(table, dict):
                raise PipelineError(f"{path}: run {run.name!r}: {profile} must be a table of parameters "
                                    f"([runs.{profile}]), not {table!r}")
            outside = [d for d in run.after if runs[names.index(d)].profile_table(profile) is None]
            if outside:
                raise PipelineError(f"{path}: run {run.name!r} is in the {profile} profile but reads the results "
                                    f"of {outside}, which are not: give them a [runs.{profile}] table too")
        for item in run.inputs:
            if not (path.parent / item).exists():
                raise PipelineError(f"{path}: run {run.name!r} declares input {item!r}, which does not exist "
                                    f"(paths are relative to {path.parent})")
    return runs
