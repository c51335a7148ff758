"""The pipeline's command: ``python -m helpers.pipeline [--fast | --profile NAME] [--only NAME ...] ...``.

What it does is ``helpers.pipeline.scheduler``'s (its docstring is this command's ``--help``); where the runs
execute is ``helpers.pipeline.executors``'s.
"""
from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from helpers.pipeline import scheduler
from helpers.pipeline.executors import EXECUTORS, make_executor
from helpers.pipeline.runs import PROFILES, PipelineError
from helpers.pipeline.scheduler import PROFILE_FOLDERS, run_pipeline
from helpers.pipeline.yardstick import machine_yardstick


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=scheduler.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fast", action="store_true", help="short runs (CI): fewer layers, prompts and samples")
    parser.add_argument("--profile", default="full", choices=PROFILES,
                        help="workshop: the runs runs.toml gives a [runs.workshop] table, at those sizes, into "
                             "figures-workshop/ (its cost: README); "
                             "paper: paper 1's recipe at batch 64 and 3,000 steps, into figures-paper/ (GPU only); "
                             "paper-models: the notebooks on GPT-2 small and Gemma-2-2B (notebooks/paper_models.toml; "
                             "their weights from the hub or $SVDIRS_WEIGHTS_*), into figures-paper-models/")
    parser.add_argument("--force", action="store_true", help="re-run even runs whose inputs are unchanged")
    parser.add_argument("--no-yardstick", action="store_true",
                        help="record no plain forward pass of this machine with the runs (as with --fast): for runs "
                             "whose times are not kept, as in tests; by default it is measured once per boot")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run only these runs (names from runs.toml)")
    parser.add_argument("--sweep", metavar="NAME", help="run the runs of this [[sweeps]] entry of runs.toml")
    parser.add_argument("--runs", default="notebooks/runs.toml")
    parser.add_argument("--figures", help="output folder (default: figures, or figures-<profile> for another profile)")
    parser.add_argument("--build", help="executed copies and run states (default: build, or build/<profile>)")
    placement = parser.add_argument_group("placement (helpers.pipeline.executors)")
    placement.add_argument("--executor", default="serial", choices=EXECUTORS,
                           help="serial: one run after another here (default); local: a pool of worker processes; "
                                "slurm: one SLURM job per run through submitit")
    placement.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                           help="where the notebooks compute: auto (default) is cuda where a GPU is present, else cpu; "
                                "cuda without a GPU is refused. A result is never reused on another device.")
    placement.add_argument("--threads", type=int, help="torch threads per run (local: cores / workers by default; "
                                                       "slurm: CPUs per job, 4 by default)")
    placement.add_argument("--workers", type=int, help="local: runs at once (default: cores / threads, or one per GPU)")
    placement.add_argument("--gpus", help="local: CUDA device indices to share out, one per running run (e.g. 0,1)")
    placement.add_argument("--slurm-partition", help="slurm: the partition to submit to")
    placement.add_argument("--slurm-gpus-per-run", type=int, default=0, help="slurm: GPUs each job requests")
    placement.add_argument("--slurm-logs", default=None, help="slurm: submitit's folder for job files and logs, on "
                                                               "shared storage (default: <build>/slurm)")
    placement.add_argument("--slurm-cluster", choices=("slurm", "local"), default=None,
                           help="slurm: 'local' runs the same submission as local subprocesses (a dry run)")
    args = parser.parse_args(argv)
    figures, build = PROFILE_FOLDERS[args.profile]
    build = args.build or build
    # `kill` and CI timeouts send SIGTERM: exit through the same clean-up as Ctrl-C (staging folder removed)
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        executor = make_executor(args.executor, workers=args.workers, threads=args.threads, gpus=args.gpus,
                                 log_dir=args.slurm_logs or Path(build) / "slurm", partition=args.slurm_partition,
                                 gpus_per_run=args.slurm_gpus_per_run, cluster=args.slurm_cluster)
        run_pipeline(args.runs, args.figures or figures, build, fast=args.fast, force=args.force,
                     only=args.only, stream=True, profile=args.profile, executor=executor, sweep=args.sweep,
                     device=args.device, yardstick=None if args.fast or args.no_yardstick else machine_yardstick)
    except PipelineError as err:
        print(f"pipeline stopped: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # not when a local executor's worker imports this module under another name
    sys.exit(main())
