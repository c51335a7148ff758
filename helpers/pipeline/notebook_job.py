"""One run's notebook, executed with papermill into a staging folder: the work an executor places.

``run_job`` is what runs in the driver (the serial executor), in a worker process (the local pool) or on a
cluster node (SLURM): it takes a ``NotebookJob`` and returns a ``JobOutcome``. It never touches the run's
figures folder or the manifest. The driver (``helpers.pipeline``) alone swaps a finished staging folder into
place and records it, so a failed or killed job leaves the previous result whole.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.core.cache import atomic_write_json, atomic_write_text
from helpers.pipeline.summaries import SUMMARY_FILE

EXECUTED_NOTEBOOK = "notebook.ipynb"  # each run's executed notebook, outputs included, beside its figures
WORKSHOP_NOTE = ("Workshop run (`python -m helpers.pipeline --profile workshop`): smaller sizes than the reference "
                 "run, declared in notebooks/runs.toml; `python -m helpers.workshop` says whether the learned circuit "
                 "still beats its random control, the receptors still flip the pronoun and check B still separates "
                 "the model from its controls. Its numbers are not the reference results in figures/.")
PAPER_NOTE = ("Paper-budget run (`python -m helpers.pipeline --profile paper`): paper 1's recipe at its own batch (64) "
              "and 3,000 steps, declared in notebooks/runs.toml, on a GPU. The rest of the notebook runs at the "
              "reference sizes; these numbers are not the reference results in figures/.")
PAPER_MODELS_NOTE = ("Paper-models run (`python -m helpers.pipeline --profile paper-models`): the notebook on one of the "
                     "papers' own models (GPT-2 small, Gemma-2-2B), declared in notebooks/paper_models.toml; its summary "
                     "names the weights it read (their folder and sha256).")
PROFILE_NOTES = {"workshop": WORKSHOP_NOTE, "paper": PAPER_NOTE, "paper-models": PAPER_MODELS_NOTE}
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclass(frozen=True)
class NotebookJob:
    """Everything a job needs, as plain values (it is pickled to a worker or a cluster node)."""

    run: str
    notebook: str  # the source notebook
    executed: str  # papermill's raw executed copy
    parameters: dict  # without out_dir: the job adds its staging folder
    staging_parent: str  # the figures folder: the staging folder is made in it, on the same filesystem
    shown_as: str  # what the staging path reads as in the readable copy: "figures/<run>"
    profile: str = "full"
    kernel: str = "python3"
    stream: bool = False  # echo the notebook's output (the serial executor only)
    threads: int | None = None  # the kernel's thread count; None: the machine's default
    environment: dict = field(default_factory=dict)  # more variables for the kernel (the cache folder, the GPU)


@dataclass(frozen=True)
class JobOutcome:
    run: str
    staging: str | None  # the finished staging folder; None when the notebook failed
    wall_time_s: float
    error: str | None = None  # where and how the notebook failed


@contextlib.contextmanager
def environment_set(variables: dict[str, str]):
    """This process's environment with ``variables`` set, each restored (or removed) afterwards, even after an error."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def job_environment(job: NotebookJob):
    """This process's environment with the job's thread count and variables, for the kernel it starts
    (restored afterwards: the serial executor runs jobs in the driver itself)."""
    variables = dict(job.environment)
    if job.threads is not None:
        variables |= {name: str(job.threads) for name in THREAD_VARIABLES}
    return environment_set(variables)


def run_job(job: NotebookJob) -> JobOutcome:
    """Execute the job's notebook into a new staging folder beside the run's figures folder; return the
    folder (figures, summary, readable copy) or, when a cell fails, where and how. Anything else (an
    interruption, a missing summary) removes the staging folder and raises."""
    import papermill

    notebook, executed = Path(job.notebook), Path(job.executed)
    executed.parent.mkdir(parents=True, exist_ok=True)
    Path(job.staging_parent).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".tmp-{job.run}-", dir=job.staging_parent))
    finished = False
    try:
        start = time.time()
        manager = local_kernel_manager()
        try:
            with job_environment(job):
                papermill.execute_notebook(str(notebook), str(executed),
                                           parameters={**job.parameters, "out_dir": str(staging.resolve())},
                                           kernel_name=job.kernel, cwd=str(notebook.parent), progress_bar=False,
                                           kernel_manager_class=manager,
                                           stdout_file=sys.stdout if job.stream else None,
                                           stderr_file=sys.stderr if job.stream else None)
        except papermill.PapermillExecutionError as err:
            return JobOutcome(job.run, None, time.time() - start,
                              f"failed in {source_cell(notebook, err.cell_index)} (execution count {err.exec_count} "
                              f"in the executed copy): {err.ename}: {err.evalue}\nexecuted copy: {executed}")
        finally:
            if hasattr(manager, "folder"):
                shutil.rmtree(manager.folder, ignore_errors=True)
        wall = time.time() - start
        if not (staging / SUMMARY_FILE).exists():
            raise RuntimeError(f"notebook {notebook.name} finished without writing {SUMMARY_FILE}; "
                               "its last cell must call helpers.pipeline.summaries.write_summary(out_dir, ...)")
        if job.profile != "full":
            mark_profile(staging / SUMMARY_FILE, executed, job.profile)
        write_readable_copy(executed, staging / EXECUTED_NOTEBOOK, {str(staging.resolve()): job.shown_as})
        finished = True
        return JobOutcome(job.run, str(staging), wall)
    finally:
        if not finished:
            shutil.rmtree(staging, ignore_errors=True)


def source_cell(notebook: Path, executed_index: int) -> str:
    """Which cell of the source notebook an index into papermill's executed copy (one cell injected after
    the parameters cell) is."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    params = next((i for i, c in enumerate(cells) if "parameters" in c.get("metadata", {}).get("tags", [])), -1)
    if executed_index == params + 1:
        return "the parameters papermill injected"
    index = executed_index - 1 if executed_index > params else executed_index
    first = next((line for line in "".join(cells[index]["source"]).splitlines() if line.strip()), "")
    return f"cell {index} (counting from 0, markdown included) of {notebook}, which begins {first[:80]!r}"


def local_kernel_manager():
    """The kernel manager for notebook runs: on POSIX, the kernel talks over Unix sockets in a private
    temporary folder instead of TCP on localhost (where each kernel warns that its traffic is unencrypted),
    so that the console shows only what the notebooks print."""
    from jupyter_client.manager import AsyncKernelManager

    if os.name != "posix":
        return AsyncKernelManager

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
    note = PROFILE_NOTES[profile]
    atomic_write_json(summary_file, {"profile": profile, "profile_note": note, **summary})
    notebook = nbformat.read(executed, as_version=4)
    cell = nbformat.v4.new_markdown_cell(f"**{note}**")
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
