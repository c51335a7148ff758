"""Placement (helpers.pipeline.executors) and the driver's release of runs, with a fake executor: no kernels."""
import concurrent.futures
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers.core.cache import CACHE_ENV
from helpers.pipeline import scheduler
from helpers.pipeline.executors import LocalExecutor, make_executor, slurm_timeout_min
from helpers.pipeline.notebook_job import JobOutcome
from helpers.pipeline.runs import PipelineError
from helpers.pipeline.summaries import SUMMARY_FILE

NOTEBOOK = {"cells": [{"cell_type": "code", "execution_count": None, "id": "p", "metadata": {"tags": ["parameters"]},
                       "outputs": [], "source": 'model_name = "tiny-llama"\nx = 1\nfast = False\nout_dir = "."'}],
            "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


@dataclass
class FakeExecutor:
    """Runs a job by writing its summary into a staging folder, as run_job would; finishes jobs in the order
    ``finish`` gives (latest first by default), so that the driver must not rely on submission order."""

    capacity: int = 2
    threads: int | None = 1
    name: str = "fake"
    newest_first: bool = True

    def __post_init__(self):
        self.log = []

    def submit(self, job, timeout_min=None):
        self.log.append(("submit", job.run))
        Path(job.staging_parent).mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".tmp-{job.run}-", dir=job.staging_parent))
        (staging / SUMMARY_FILE).write_text(json.dumps({"x": job.parameters["x"], "torch_threads": self.threads}))
        future = concurrent.futures.Future()
        future.set_result(JobOutcome(job.run, str(staging), 1.0))
        future.run = job.run
        return future

    def wait_any(self, handles):
        handle = handles[-1] if self.newest_first else handles[0]
        self.log.append(("finish", handle.run))
        return handle

    def outcome(self, handle):
        return handle.result()

    def failure(self, handle, err):
        return str(err)

    def close(self, cancel=False):
        self.log.append(("close",))


def runs(tmp_path: Path, body: str) -> tuple[Path, dict]:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    (folder / "nb.ipynb").write_text(json.dumps(NOTEBOOK))
    (folder / "runs.toml").write_text(body)
    return folder / "runs.toml", dict(figures_dir=tmp_path / "figures", build_dir=tmp_path / "build", log=print)


GRAPH = """
[[runs]]
name = "a"
notebook = "nb.ipynb"
parameters = { x = 1 }
[[runs]]
name = "b"
notebook = "nb.ipynb"
parameters = { x = 2 }
[[runs]]
name = "c"
notebook = "nb.ipynb"
parameters = { x = 3 }
after = ["a"]
[[runs]]
name = "d"
notebook = "nb.ipynb"
parameters = { x = 4 }
after = ["b", "c"]
"""


def test_a_run_starts_only_after_every_run_it_reads_and_the_driver_installs_each_result(tmp_path):
    path, kwargs = runs(tmp_path, GRAPH)
    fake = FakeExecutor(capacity=2)
    manifest = scheduler.run_pipeline(path, executor=fake, **kwargs)
    events = fake.log
    for run, reads in (("c", ["a"]), ("d", ["b", "c"])):
        started = events.index(("submit", run))
        assert all(events.index(("finish", r)) < started for r in reads), events
    assert events[:2] == [("submit", "a"), ("submit", "b")]  # a and b at once: two slots, nothing to wait for
    assert max(sum(1 for e in events[:i] if e[0] == "submit") - sum(1 for e in events[:i] if e[0] == "finish")
               for i in range(len(events))) <= 2  # never more runs at once than the executor's capacity
    assert events[-1] == ("close",)
    assert [r["name"] for r in manifest["runs"]] == ["a", "b", "c", "d"]  # declared order, whatever the finish order
    assert [json.loads((tmp_path / "figures" / n / SUMMARY_FILE).read_text())["x"] for n in "abcd"] == [1, 2, 3, 4]
    assert not list((tmp_path / "figures").glob(".tmp-*"))


def test_a_second_pass_reuses_every_run_and_a_changed_upstream_reruns_its_readers_only(tmp_path):
    path, kwargs = runs(tmp_path, GRAPH)
    scheduler.run_pipeline(path, executor=FakeExecutor(), **kwargs)
    again = FakeExecutor()
    scheduler.run_pipeline(path, executor=again, **kwargs)
    assert [e for e in again.log if e[0] == "submit"] == []
    path.write_text(GRAPH.replace("x = 1 }", "x = 10 }"))
    changed = FakeExecutor()
    scheduler.run_pipeline(path, executor=changed, **kwargs)
    assert [e[1] for e in changed.log if e[0] == "submit"] == ["a", "c", "d"]  # b is untouched


def test_a_failed_run_stops_further_releases_but_its_independent_neighbour_is_recorded(tmp_path):
    path, kwargs = runs(tmp_path, GRAPH)

    class Failing(FakeExecutor):
        def submit(self, job, timeout_min=None):
            handle = super().submit(job, timeout_min)
            if job.run == "a":
                handle = concurrent.futures.Future()
                handle.set_result(JobOutcome("a", None, 1.0, "failed in cell 3: ValueError: no"))
                handle.run = "a"
            return handle

    fake = Failing(capacity=2, newest_first=False)
    with pytest.raises(PipelineError, match="run 'a' failed in cell 3: ValueError: no"):
        scheduler.run_pipeline(path, executor=fake, **kwargs)
    assert ("submit", "c") not in fake.log and ("submit", "d") not in fake.log
    manifest = json.loads((tmp_path / "figures" / "manifest.json").read_text())
    assert [r["name"] for r in manifest["runs"]] == ["b"]  # already running when a failed: finished and recorded


def test_a_result_with_another_thread_count_than_its_fingerprint_is_not_recorded(tmp_path):
    path, kwargs = runs(tmp_path, GRAPH)

    class Liar(FakeExecutor):
        def submit(self, job, timeout_min=None):
            handle = super().submit(job, timeout_min)
            summary = Path(handle.result().staging) / SUMMARY_FILE
            summary.write_text(json.dumps({"x": 0, "torch_threads": 7}))
            return handle

    with pytest.raises(PipelineError, match="ran with 7 torch threads, but its fingerprint assumed 1"):
        scheduler.run_pipeline(path, executor=Liar(capacity=1), only=["b"], **kwargs)
    assert not (tmp_path / "figures" / "b").exists() and not list((tmp_path / "figures").glob(".tmp-*"))


def test_models_are_converted_once_by_the_driver_before_runs_fan_out(tmp_path, monkeypatch):
    from helpers.core import models

    path, kwargs = runs(tmp_path, GRAPH.replace("x = 3 }", 'x = 3, model_name = "gemma-3-270m" }')
                        .replace("x = 1 }", 'x = 1, model_name = "smollm2-135m" }')
                        .replace("x = 2 }", 'x = 2, model_name = "smollm2-135m" }'))
    fake = FakeExecutor(capacity=2)
    monkeypatch.setattr(models, "converted_gguf_folder", lambda spec: fake.log.append(("convert", spec.name)))
    scheduler.run_pipeline(path, executor=fake, **kwargs)
    assert fake.log[:3] == [("convert", "smollm2-135m"), ("convert", "gemma-3-270m"), ("submit", "a")]
    assert sum(e[0] == "convert" for e in fake.log) == 2  # tiny-llama (d, the notebook's default) is not converted
    serial = FakeExecutor(capacity=1)
    monkeypatch.setattr(models, "converted_gguf_folder", lambda spec: serial.log.append(("convert", spec.name)))
    scheduler.run_pipeline(path, executor=serial, force=True, **kwargs)
    assert not [e for e in serial.log if e[0] == "convert"]  # one run at a time converts on first use, as before


def test_the_sweep_option_runs_one_sweep_and_only_it(tmp_path):
    path, kwargs = runs(tmp_path, GRAPH + '[[sweeps]]\nname = "s"\nnotebook = "nb.ipynb"\n'
                                          'parameter_sets = [{ x = 5 }, { x = 6 }]\n')
    fake = FakeExecutor()
    manifest = scheduler.run_pipeline(path, executor=fake, sweep="s", **kwargs)
    assert sorted(e[1] for e in fake.log if e[0] == "submit") == ["s-x5", "s-x6"]
    assert [r["name"] for r in manifest["runs"]] == ["s-x5", "s-x6"]
    default = FakeExecutor()
    scheduler.run_pipeline(path, executor=default, **kwargs)
    assert sorted(e[1] for e in default.log if e[0] == "submit") == ["a", "b", "c", "d"]
    with pytest.raises(PipelineError, match=r"no such sweep; its sweeps are \['s'\]"):
        scheduler.run_pipeline(path, executor=FakeExecutor(), sweep="t", **kwargs)


def test_the_local_pool_refuses_more_threads_than_cores_and_says_what_fits():
    with pytest.raises(PipelineError, match=r"--workers 2 × --threads 2 = 4 threads on 2 cores.*--workers 1 with --threads 2"):
        LocalExecutor(workers=2, threads=2, cores=2)
    pool = LocalExecutor(workers=2, cores=2)
    assert (pool.workers, pool.threads, pool.capacity) == (2, 1, 2)  # threads follow from the workers
    pool.close()
    pool = LocalExecutor(cores=2)
    assert (pool.workers, pool.threads) == (1, 2)  # by default one run with every core
    pool.close()
    with pytest.raises(PipelineError, match="at most 1 workers"):
        LocalExecutor(workers=2, threads=1, gpus=["0"], cores=2)


def test_each_running_run_gets_a_gpu_of_its_own_and_returns_it(monkeypatch):
    pool = LocalExecutor(threads=1, gpus=["0", "1"], cores=4)
    seen = []
    monkeypatch.setattr(pool.pool, "submit", lambda fn, job: seen.append(job.environment["CUDA_VISIBLE_DEVICES"])
                        or concurrent.futures.Future())
    first, second = pool.submit(job("a")), pool.submit(job("b"))
    assert seen == ["0", "1"] and pool.free_gpus == []
    first.set_result(None)
    assert pool.wait_any([first, second]) is first and pool.free_gpus == ["0"]
    pool.submit(job("c"))
    assert seen == ["0", "1", "0"]
    second.cancel()
    pool.pool.shutdown()


def job(run):
    from helpers.pipeline.notebook_job import NotebookJob

    return NotebookJob(run, "nb.ipynb", "out.ipynb", {}, ".", f"figures/{run}")


@pytest.mark.parametrize("arguments, message", [
    (dict(name="dask"), "not one of"),
    (dict(name="serial", workers=2), "--workers and --gpus place runs in the local pool"),
    (dict(name="slurm", gpus="0"), "--slurm-gpus-per-run"),
    (dict(name="local", partition="gpu"), "need --executor slurm"),
    (dict(name="local", threads=0), "--threads 0: must be at least 1"),
])
def test_executor_options_that_do_not_fit_are_refused(arguments, message):
    with pytest.raises(PipelineError, match=message):
        make_executor(**arguments)


def test_slurm_time_limits_come_from_the_last_wall_time_with_a_margin():
    assert slurm_timeout_min(None) == 240  # never finished: the declared default
    assert slurm_timeout_min(60.0) == 15  # the minimum
    assert slurm_timeout_min(1560.0) == 52  # 26 min × 2
    assert slurm_timeout_min(1561.0) == 53  # rounded up, never down


def test_slurm_refuses_to_start_on_folders_the_nodes_do_not_share(tmp_path, submitit_importable):
    from helpers.pipeline.executors import SlurmExecutor

    executor = SlurmExecutor(tmp_path / "logs", cluster="local")

    class NodesSeeOtherDisks:
        def update_parameters(self, **parameters):
            pass

        def submit(self, function, tokens):
            seen = concurrent.futures.Future()
            seen.set_result({path: "cannot read it: [Errno 2] No such file or directory" for path in tokens})
            return seen

    executor.executor = NodesSeeOtherDisks()
    with pytest.raises(PipelineError, match=r"not shared with the compute nodes.*cache \(cannot read it.*\$SVDIRS_CACHE"):
        executor.check_shared_storage([tmp_path / "cache", tmp_path / "figures"])
    assert not list(tmp_path.rglob(".shared-storage-probe-*"))


def test_the_machine_yardstick_is_taken_once_before_the_first_run_and_recorded_with_every_run_it_executes(tmp_path):
    path, kwargs = runs(tmp_path, GRAPH)
    calls = []

    def yardstick(threads, log):
        calls.append(threads)
        return {"plain_pass_s": 50.0, "threads": threads, "cpu": "x", "measured_on": "2026-12-07"}

    manifest = scheduler.run_pipeline(path, executor=FakeExecutor(), yardstick=yardstick, device="cpu", **kwargs)
    assert calls == [1] and {r["yardstick"]["plain_pass_s"] for r in manifest["runs"]} == {50.0}
    scheduler.run_pipeline(path, executor=FakeExecutor(), yardstick=yardstick, device="cpu", **kwargs)
    assert calls == [1]  # every run reused: nothing measured
    path.write_text(GRAPH.replace("x = 2 }", "x = 20 }"))
    manifest = scheduler.run_pipeline(path, executor=FakeExecutor(), device="cpu", **kwargs)  # none given: none recorded
    assert {r["name"]: r["yardstick"] is None for r in manifest["runs"]} == {"a": False, "b": True, "c": False,
                                                                             "d": True}


@dataclass
class TrainingExecutor(FakeExecutor):
    """One run at a time; run x writes x - 1 mask files into the cache, as that many trainings would (x = 1
    loads all it needs)."""

    capacity: int = 1

    def submit(self, job, timeout_min=None):
        masks = Path(job.environment[CACHE_ENV]) / "masks"
        masks.mkdir(parents=True, exist_ok=True)
        for i in range(job.parameters["x"] - 1):
            (masks / f"model-task-{job.run}-{i}.pt").write_bytes(b"masks")
        return super().submit(job, timeout_min)


def test_each_run_records_how_many_masks_it_trained_and_none_when_runs_share_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    masks = tmp_path / "cache" / "masks"
    masks.mkdir(parents=True)
    (masks / "model-task-old.pt").write_bytes(b"trained before")  # loaded, not written: no run's training
    path, kwargs = runs(tmp_path, GRAPH)
    manifest = scheduler.run_pipeline(path, executor=TrainingExecutor(), **kwargs)
    assert {r["name"]: r["masks_trained"] for r in manifest["runs"]} == {"a": 0, "b": 1, "c": 2, "d": 3}
    manifest = scheduler.run_pipeline(path, executor=TrainingExecutor(capacity=2), force=True, **kwargs)
    assert {r["masks_trained"] for r in manifest["runs"]} == {None}  # two at once: nobody's files


def test_a_mask_file_written_again_counts_as_trained():
    before = {"a.pt": (1, 10), "b.pt": (2, 20)}
    assert scheduler.masks_trained(before, dict(before)) == 0
    assert scheduler.masks_trained(before, {**before, "a.pt": (3, 10)}) == 1  # replaced by a rename: new inode
    assert scheduler.masks_trained(before, {**before, "b.pt": (2, 21)}) == 1  # rewritten in place
    assert scheduler.masks_trained(before, {**before, "c.pt": (4, 30)}) == 1
    assert scheduler.masks_trained(None, before) is None
