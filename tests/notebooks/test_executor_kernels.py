"""The executors with real notebook kernels: a job writes only its staging folder; the local pool and the
SLURM path (submitit's local cluster: the same submission code, jobs as local processes) give the serial
summaries, run independent runs at once and respect ``after``; a job killed midway leaves the old figures
whole and the manifest consistent."""
import json
from pathlib import Path

import nbformat
import pytest

from helpers.pipeline.executors import LocalExecutor, SerialExecutor, SlurmExecutor
from helpers.pipeline.notebook_job import NotebookJob, run_job
from helpers.pipeline.scheduler import run_pipeline
from helpers.pipeline.runs import PipelineError
from helpers.pipeline.summaries import SUMMARY_FILE

TIMES = ("started", "ended", "pid", "torch_threads")  # what differs between placements, by design


def notebook(folder: Path) -> Path:
    """Parameters x, wait and die; records when it ran, in which process and with how many threads."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell("x = 1\nwait = 0.0\ndie = False\nfast = False\nout_dir = '.'")
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params,
                nbformat.v4.new_code_cell("import os, time\nimport matplotlib.pyplot as plt\nimport torch\n"
                                          "from helpers.figures.style import save_figure\n"
                                          "from helpers.pipeline.summaries import write_summary\nstarted = time.time()\n"
                                          "print(f'tiny notebook x={x} running')"),
                nbformat.v4.new_code_cell("if die:  # as if the job were killed: its process goes, mid-run\n"
                                          "    os.kill(os.getppid(), 9)\n    os._exit(1)\ntime.sleep(wait)"),
                nbformat.v4.new_code_cell("save_figure(plt.figure(), out_dir, 'a')\n"
                                          "write_summary(out_dir, {'x': x, 'started': started, 'ended': time.time(), "
                                          "'pid': os.getpid()}, device='cpu')")]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / "tiny.ipynb")
    return folder / "tiny.ipynb"


RUNS = """
[[runs]]
name = "a"
notebook = "tiny.ipynb"
parameters = {{ x = 1, wait = {wait}, die = {die} }}
[[runs]]
name = "b"
notebook = "tiny.ipynb"
parameters = {{ x = 2, wait = {wait} }}
[[runs]]
name = "c"
notebook = "tiny.ipynb"
parameters = {{ x = 3 }}
after = ["a"]
"""


def runs_file(tmp_path: Path, wait: float = 0.0, die: bool = False) -> Path:
    notebook(tmp_path / "notebooks")
    path = tmp_path / "notebooks" / "runs.toml"
    path.write_text(RUNS.format(wait=wait, die=str(die).lower()))
    return path


def summaries(figures: Path) -> dict:
    return {run: json.loads((figures / run / SUMMARY_FILE).read_text()) for run in "abc"}


def without_times(summary: dict) -> dict:
    """The summary without its times and thread counts (the executor sets its own: checked apart)."""
    kept = {k: v for k, v in summary.items() if k not in TIMES}
    return {**kept, "numerics": {k: v for k, v in kept["numerics"].items() if k != "threads"}}


def assert_placed_like_serial(tmp_path: Path, executor) -> dict:
    """Serial, then ``executor``: the same summaries; a and b overlapped; c started after a ended."""
    path = runs_file(tmp_path, wait=4.0)
    run_pipeline(path, tmp_path / "serial", tmp_path / "build-serial", log=print, executor=SerialExecutor())
    manifest = run_pipeline(path, tmp_path / "placed", tmp_path / "build-placed", log=print, executor=executor)
    serial, placed = summaries(tmp_path / "serial"), summaries(tmp_path / "placed")
    assert {r: without_times(s) for r, s in placed.items()} == {r: without_times(s) for r, s in serial.items()}
    a, b, c = placed["a"], placed["b"], placed["c"]
    assert a["started"] < b["ended"] and b["started"] < a["ended"], "a and b did not run at the same time"
    assert c["started"] >= a["ended"], "c read a's results before a had finished"
    assert {s["torch_threads"] for s in placed.values()} == {1}  # the thread count the executor declared
    assert [r["name"] for r in manifest["runs"]] == ["a", "b", "c"]
    assert all(r["torch_threads"] == 1 for r in manifest["runs"])
    assert not list((tmp_path / "placed").glob(".tmp-*"))
    return manifest


def test_a_job_writes_its_staging_folder_and_nothing_else(tmp_path):
    path = notebook(tmp_path / "notebooks")
    figures = tmp_path / "figures"
    (figures / "t").mkdir(parents=True)
    (figures / "t" / "old.png").write_bytes(b"old")
    (figures / "manifest.json").write_text('{"runs": ["old"]}')
    job = NotebookJob("t", str(path), str(tmp_path / "build" / "t.ipynb"), {"x": 5}, str(figures), "figures/t")
    outcome = run_job(job)
    staging = Path(outcome.staging)
    assert outcome.error is None and staging.parent == figures and staging.name.startswith(".tmp-t-")
    assert sorted(p.name for p in staging.iterdir()) == ["a.png", "notebook.ipynb", SUMMARY_FILE]
    assert json.loads((staging / SUMMARY_FILE).read_text())["x"] == 5
    assert str(staging) not in (staging / "notebook.ipynb").read_text()  # the readable copy names figures/t
    assert (figures / "manifest.json").read_text() == '{"runs": ["old"]}'  # the driver's alone
    assert sorted(p.name for p in (figures / "t").iterdir()) == ["old.png"]


def test_the_local_pool_of_two_one_thread_workers_gives_the_serial_summaries(tmp_path):
    assert_placed_like_serial(tmp_path, LocalExecutor(workers=2, threads=1, cores=2))


def test_the_slurm_path_through_submitit_gives_the_serial_summaries_and_keeps_each_jobs_log(tmp_path, submitit_importable):
    executor = SlurmExecutor(tmp_path / "logs", threads=1, cluster="local", poll_s=0.2)
    assert_placed_like_serial(tmp_path, executor)
    logs = "".join(p.read_text() for p in (tmp_path / "logs").rglob("*_log.out"))
    assert "tiny notebook x=1 running" in logs and "tiny notebook x=3 running" in logs  # each run's output
    assert not list(tmp_path.rglob(".shared-storage-probe-*"))  # the storage probe cleans up


def killed_midway(tmp_path: Path, executor) -> str:
    """Run a, b, c; then rerun with a killed midway: return the error, after checking what is left."""
    path = runs_file(tmp_path)
    figures, build = tmp_path / "figures", tmp_path / "build"
    run_pipeline(path, figures, build, log=print, executor=SerialExecutor())
    before = {p.relative_to(figures): p.read_bytes() for p in (figures / "a").rglob("*")}
    path.write_text(RUNS.format(wait=0.0, die="true"))
    with pytest.raises(PipelineError) as raised:
        run_pipeline(path, figures, build, log=print, executor=executor)
    assert {p.relative_to(figures): p.read_bytes() for p in (figures / "a").rglob("*")} == before  # whole
    manifest = json.loads((figures / "manifest.json").read_text())
    assert [r["name"] for r in manifest["runs"]] == ["b", "c"]  # a is no longer listed as current
    assert not list(figures.glob(".tmp-*"))
    return str(raised.value)


def test_a_job_killed_midway_in_the_local_pool_leaves_the_old_figures_whole(tmp_path):
    error = killed_midway(tmp_path, LocalExecutor(workers=1, threads=1, cores=2))
    assert "run 'a' did not finish: its worker process died" in error


def test_a_slurm_job_killed_midway_names_its_logs_and_leaves_the_old_figures_whole(tmp_path, submitit_importable):
    error = killed_midway(tmp_path, SlurmExecutor(tmp_path / "logs", threads=1, cluster="local", poll_s=0.2))
    assert "run 'a' did not finish: SLURM job" in error and "ended without a result" in error and "_log.err" in error


def test_an_interrupted_local_pool_stops_its_workers_and_keeps_nothing_of_their_runs(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    path = runs_file(tmp_path, wait=120.0)
    figures = tmp_path / "figures"
    command = [sys.executable, "-m", "helpers.pipeline", "--runs", str(path), "--figures", str(figures),
               "--build", str(tmp_path / "build"), "--executor", "local", "--workers", "2", "--threads", "1",
               "--only", "a", "b", "--no-yardstick"]  # nothing timed is kept
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 120
    while time.time() < deadline and len(list(figures.glob(".tmp-*"))) < 2:
        time.sleep(0.2)
    time.sleep(5)  # both kernels are in their 120 s wait now
    start = time.time()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)
    assert process.returncode != 0 and time.time() - start < 30  # it did not wait for the runs to end
    assert not list(figures.glob(".tmp-*")) and not (figures / "a").exists() and not (figures / "b").exists()
