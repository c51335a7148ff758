"""Where the pipeline's runs execute: one after another here (serial), in a pool of local worker processes
(local), or as SLURM jobs through submitit (slurm).

The pipeline (``helpers.pipeline``) decides *what* must run and *when* a run may start (after every run it
reads has finished); an executor only decides *where*. Each takes ``NotebookJob``s and hands back
``JobOutcome``s, and never writes the figures folders or the manifest: the driver does.

Threads and GPUs per run are declared, never oversubscribed. Two 2-thread torch runs on two cores slowed a
mask step from about 1 s to 35 s, so the local pool refuses more threads in all than the machine has cores,
and gives each run one GPU of its own when GPUs are named.
"""
from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import time
from dataclasses import replace
from pathlib import Path

from helpers.pipeline.notebook_job import JobOutcome, NotebookJob, run_job
from helpers.pipeline.runs import PipelineError

EXECUTORS = ("serial", "local", "slurm")
SLURM_DEFAULT_TIMEOUT_MIN = 240  # a run never finished before: a declared default, not a measurement
SLURM_TIMEOUT_MARGIN = 2.0  # a run's last wall time times this, at least SLURM_MINIMUM_TIMEOUT_MIN
SLURM_MINIMUM_TIMEOUT_MIN = 15
SLURM_DEFAULT_THREADS = 4
SUBMITIT_PIN = "submitit==1.5.4"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system reports it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class SerialExecutor:
    """Today's behaviour: each run in turn, in this process (its output echoed when the job asks)."""

    name = "serial"
    capacity = 1

    def __init__(self, threads: int | None = None):
        self.threads = threads

    def submit(self, job: NotebookJob, timeout_min: float | None = None):
        future = concurrent.futures.Future()
        future.set_result(run_job(replace(job, threads=self.threads)))  # an exception propagates from here
        return future

    def wait_any(self, handles: list):
        return handles[0]

    def outcome(self, handle) -> JobOutcome:
        return handle.result()

    def failure(self, handle, err: Exception) -> str:
        return str(err)

    def close(self, cancel: bool = False) -> None:
        pass


class LocalExecutor:
    """A pool of ``workers`` processes on this machine, each run's kernel with ``threads`` threads, and
    with one of ``gpus`` (CUDA device indices) of its own when they are given."""

    name = "local"

    def __init__(self, workers: int | None = None, threads: int | None = None, gpus: list[str] | None = None,
                 cores: int | None = None):
        cores = cores or usable_cores()
        self.gpus = list(gpus or [])
        if workers is None:
            workers = len(self.gpus) if self.gpus else max(1, cores // (threads or cores))
        if threads is None:
            threads = max(1, cores // workers)
        for name, value in (("--workers", workers), ("--threads", threads)):
            if not isinstance(value, int) or value < 1:
                raise PipelineError(f"{name} {value!r}: must be a whole number of at least 1")
        if workers * threads > cores:
            raise PipelineError(
                f"--workers {workers} × --threads {threads} = {workers * threads} threads on {cores} cores: runs that "
                f"share cores slow each other badly (two 2-thread runs on 2 cores took a mask step from about 1 s to "
                f"35 s). Use --workers {max(1, cores // threads)} with --threads {threads}, or fewer threads per run.")
        if self.gpus and workers > len(self.gpus):
            raise PipelineError(f"--workers {workers} with --gpus {','.join(self.gpus)}: each run gets a GPU of its "
                                f"own, so at most {len(self.gpus)} workers")
        self.workers, self.threads, self.capacity = workers, threads, workers
        self.pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
        self.free_gpus = list(self.gpus)
        self.gpu_of = {}

    def submit(self, job: NotebookJob, timeout_min: float | None = None):
        environment = dict(job.environment)
        gpu = None
        if self.gpus:
            gpu = self.free_gpus.pop(0)  # the driver never submits more jobs than the pool has workers
            environment["CUDA_VISIBLE_DEVICES"] = gpu
        future = self.pool.submit(run_job, replace(job, threads=self.threads, environment=environment, stream=False))
        self.gpu_of[future] = gpu
        return future

    def wait_any(self, handles: list):
        done, _ = concurrent.futures.wait(handles, return_when=concurrent.futures.FIRST_COMPLETED)
        handle = next(h for h in handles if h in done)  # the first in submission order: deterministic logs
        gpu = self.gpu_of.pop(handle, None)
        if gpu is not None:
            self.free_gpus.append(gpu)
        return handle

    def outcome(self, handle) -> JobOutcome:
        return handle.result()

    def failure(self, handle, err: Exception) -> str:
        if isinstance(err, concurrent.futures.process.BrokenProcessPool):
            return "its worker process died (killed, or out of memory), and with it the pool's other runs"
        return str(err)

    def close(self, cancel: bool = False) -> None:
        """Stop the pool; ``cancel`` (the pipeline was interrupted): stop its workers now, mid-run. Their
        kernels notice that their parent is gone and exit."""
        processes = list((getattr(self.pool, "_processes", None) or {}).values())
        self.pool.shutdown(wait=not cancel, cancel_futures=True)
        if cancel:
            for process in processes:
                process.terminate()
            for process in processes:
                process.join(timeout=10)


def submitit_module():
    """submitit, or an error that says how to install it (it is needed only by ``--executor slurm``)."""
    try:
        import submitit
    except ImportError:
        raise PipelineError(f"--executor slurm needs submitit: pip install {SUBMITIT_PIN} (into the environment "
                            "the jobs use, on storage the compute nodes share)") from None
    return submitit


def probe_shared_storage(tokens: dict[str, str]) -> dict[str, str]:
    """Run on a node: what it reads at each token file the driver wrote (path → text, or why not)."""
    seen = {}
    for path in tokens:
        try:
            seen[path] = Path(path).read_text()
        except OSError as err:
            seen[path] = f"cannot read it: {err}"
    return seen


class SlurmExecutor:
    """Each run as one SLURM job through submitit, with ``threads`` CPUs and ``gpus_per_run`` GPUs, and a
    time limit from the run's last wall time (``timeout_min`` per submission). ``cluster``: "slurm", or
    "local" to run the same submission code as subprocesses of this machine (the tests; a dry run)."""

    name = "slurm"
    capacity = 10_000  # the cluster's scheduler queues them

    def __init__(self, log_dir: str | Path, threads: int | None = None, gpus_per_run: int = 0,
                 partition: str | None = None, cluster: str | None = None, poll_s: float = 5.0):
        submitit = submitit_module()
        self.log_dir = Path(log_dir)
        self.threads = threads or SLURM_DEFAULT_THREADS
        self.gpus_per_run, self.partition, self.poll_s = gpus_per_run, partition, poll_s
        self.executor = submitit.AutoExecutor(folder=self.log_dir / "%j", cluster=cluster)
        self.failed_job_errors = (submitit.core.utils.UncompletedJobError,)
        self.submitted = []

    def check_shared_storage(self, folders: list[Path]) -> None:
        """Refuse to start unless a job sees what the driver wrote in each folder (the cache, the figures'
        staging, the build folder): jobs write there, and the driver reads what they wrote."""
        tokens = {}
        stamp = f"{os.getpid()}-{time.time_ns()}"
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f".shared-storage-probe-{stamp}"
            path.write_text(stamp)
            tokens[str(path.resolve())] = stamp
        try:
            self.executor.update_parameters(name="svdirs-storage-probe", timeout_min=5, cpus_per_task=1)
            seen = self.executor.submit(probe_shared_storage, tokens).result()
        except self.failed_job_errors as err:
            raise PipelineError(f"the storage probe job failed, so runs cannot be placed on this cluster: {err}") from None
        finally:
            for path in tokens:
                Path(path).unlink(missing_ok=True)
        unshared = [path for path, stamp_read in seen.items() if stamp_read != tokens[path]]
        if unshared:
            raise PipelineError(
                "these folders are not shared with the compute nodes (a job did not see the file the driver wrote): "
                + "; ".join(f"{Path(p).parent} ({seen[p]})" for p in unshared)
                + ". Put the cache ($SVDIRS_CACHE), --figures and --build on storage the nodes share.")

    def submit(self, job: NotebookJob, timeout_min: float | None = None):
        parameters = dict(name=f"svdirs-{job.run}", timeout_min=int(timeout_min or SLURM_DEFAULT_TIMEOUT_MIN),
                          cpus_per_task=self.threads, gpus_per_node=self.gpus_per_run)
        if self.partition:
            parameters["slurm_partition"] = self.partition
        self.executor.update_parameters(**parameters)
        handle = self.executor.submit(run_job, replace(job, threads=self.threads, stream=True))  # into the job's log
        self.submitted.append(handle)
        return handle

    def wait_any(self, handles: list):
        while True:
            for handle in handles:
                if handle.done():
                    return handle
            time.sleep(self.poll_s)

    def outcome(self, handle) -> JobOutcome:
        return handle.result()

    def failure(self, handle, err: Exception) -> str:
        if isinstance(err, self.failed_job_errors):
            last = str(err).strip().splitlines()[-1:] or [""]
            return (f"SLURM job {handle.job_id} ended without a result ({last[0][:300]}); its logs: "
                    f"{handle.paths.stdout} and {handle.paths.stderr}")
        return str(err)

    def close(self, cancel: bool = False) -> None:
        """``cancel`` (the pipeline was interrupted): cancel the jobs still queued or running, whose results
        nobody would install."""
        if cancel:
            for handle in self.submitted:
                if not handle.done():
                    handle.cancel(check=False)


def slurm_timeout_min(last_wall_time_s: float | None) -> int:
    """A run's time limit: its last wall time × the margin (at least the minimum), or the declared default
    for a run never finished before."""
    if not last_wall_time_s:
        return SLURM_DEFAULT_TIMEOUT_MIN
    return max(SLURM_MINIMUM_TIMEOUT_MIN, int(-(-last_wall_time_s * SLURM_TIMEOUT_MARGIN // 60)))


def make_executor(name: str, workers: int | None = None, threads: int | None = None, gpus: str | None = None,
                  log_dir: str | Path = "build/slurm", partition: str | None = None, gpus_per_run: int = 0,
                  cluster: str | None = None):
    """The executor the command line names, with its options checked."""
    if name not in EXECUTORS:
        raise PipelineError(f"--executor {name!r} is not one of {EXECUTORS}")
    gpu_list = [g.strip() for g in gpus.split(",") if g.strip()] if gpus else []
    if name != "local" and (workers is not None or gpu_list):
        raise PipelineError(f"--workers and --gpus place runs in the local pool; with --executor {name} leave them out"
                            + (" (the SLURM options are --slurm-gpus-per-run and --slurm-partition)" if name == "slurm" else ""))
    if name != "slurm" and (partition or gpus_per_run or cluster):
        raise PipelineError("--slurm-* options need --executor slurm")
    if threads is not None and threads < 1:
        raise PipelineError(f"--threads {threads}: must be at least 1")
    if name == "serial":
        return SerialExecutor(threads)
    if name == "local":
        return LocalExecutor(workers, threads, gpu_list)
    return SlurmExecutor(log_dir, threads, gpus_per_run, partition, cluster)
