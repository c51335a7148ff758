"""The pipeline: what runs, where, and its records. ``python -m helpers.pipeline`` is its command (``__main__``).

- ``runs``: the runs files (``notebooks/runs.toml``, ``notebooks/paper_models.toml``), their profiles and sweeps,
  and where a run writes (``out_folder``; by hand: ``figures-mine/``);
- ``profiles``: a profile's sizes, chosen from inside a notebook;
- ``fingerprints``: what a run's result depends on, as one digest;
- ``scheduler``: what must run and when (reuse, order, the manifest);
- ``executors``: where runs execute (serial, a local pool, SLURM);
- ``notebook_job``: one run's notebook, executed with papermill into a staging folder;
- ``summaries``: each run's ``summary.json``, written by its notebook's last cell.

Nothing is imported here, so that a notebook importing ``helpers.pipeline.runs`` loads only what it names.
"""
