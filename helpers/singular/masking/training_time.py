"""How long a masking run's masks took to train, kept beside the cached masks.

``train_masks`` loads masks from the cache when the same training was run before, so timing the call
measures a load, not a training: notebook 02 used to report such masks as trained in 0 s.
``timed_masking_run`` does what ``MaskingRun.run`` does and also says where the masks came from. When it
trained them, it writes the training time beside the cached file, bound to that file's sha256. When it
loads them, it reads the time back. A time whose sha256 does not match the masks is not reported.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from helpers.core.cache import MASKS, atomic_write_json, cache_dir, checksum_path
from helpers.singular.masking.masks import AblationRule, MaskedModel
from helpers.singular.tasks import Task
from helpers.singular.masking.training import MaskingRun, TrainConfig, masking_prompts, train_masks, training_key

TIME_SUFFIX = ".training-time.json"


@dataclass(frozen=True)
class TrainingTime:
    """Where a run's masks came from and how long their training took. ``seconds`` is None only for
    masks loaded from a cache written before training times were kept (or whose time does not match them)."""

    from_cache: bool
    seconds: float | None
    trained_on: str | None  # UTC date of the training
    call_seconds: float  # how long this call took (a load, when from_cache)

    def describe(self) -> str:
        if not self.from_cache:
            return f"masks trained in {self.seconds:.0f} s"
        if self.seconds is None:
            return ("masks loaded from the cache (their training time was not recorded: they were cached "
                    "before training times were kept)")
        return f"masks loaded from the cache (trained in {self.seconds:.0f} s on {self.trained_on})"

    def record(self) -> dict:
        return dict(from_cache=self.from_cache, train_seconds=self.seconds, trained_on=self.trained_on,
                    call_seconds=self.call_seconds)


def mask_cache_path(masked: MaskedModel, task: Task, rule: AblationRule, config: TrainConfig) -> Path:
    """The file ``train_masks`` saves these masks in (tests/unit/test_training_time.py holds the two to the
    same name)."""
    key = training_key(masked.model, task, rule, config, masked.maps)
    return cache_dir(MASKS) / f"{masked.model.name}-{task.name}-{key}.pt"


def time_path(masks_path: Path) -> Path:
    return masks_path.with_name(masks_path.name + TIME_SUFFIX)


def _recorded_sha256(masks_path: Path) -> str | None:
    try:
        return checksum_path(masks_path).read_text().strip()
    except FileNotFoundError:
        return None


def _stamp(path: Path) -> tuple[int, int] | None:
    """(inode, modification time): changes whenever the cache writes the file again (by one rename)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def read_time(masks_path: Path) -> tuple[float, str] | None:
    """(seconds, UTC date) recorded for the masks at ``masks_path``, or None when there is no record, it
    cannot be read, or it was recorded for other bytes than the masks there now."""
    try:
        record = json.loads(time_path(masks_path).read_text())
        seconds, day, sha256 = float(record["seconds"]), str(record["trained_on"]), record["masks_sha256"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return None
    return (seconds, day) if sha256 == _recorded_sha256(masks_path) else None


def write_time(masks_path: Path, seconds: float) -> str:
    """Record ``seconds`` as the training time of the masks at ``masks_path``; returns the UTC date."""
    day = datetime.now(timezone.utc).date().isoformat()
    atomic_write_json(time_path(masks_path), dict(seconds=round(seconds, 1), trained_on=day,
                                                  masks_sha256=_recorded_sha256(masks_path),
                                                  torch_threads=torch.get_num_threads()))
    return day


def timed_masking_run(run: MaskingRun, masked: MaskedModel, task_name: str, progress: bool = True):
    """``run.run(masked, task_name)`` (the same prompts, split and masks), and where the masks came from.
    Returns (train, held_out, masks, history, TrainingTime)."""
    train, held_out = masking_prompts(masked.model, task_name, run.n_prompts, run.seed)
    rule, config = run.rule(), run.train_config()
    path = mask_cache_path(masked, train, rule, config)
    before = _stamp(path)
    start = time.perf_counter()
    masks, history = train_masks(masked, train, rule, config, progress=progress)
    seconds = time.perf_counter() - start
    if before is None or _stamp(path) != before:  # the cache had none, or failed its check: trained now
        return train, held_out, masks, history, TrainingTime(False, seconds, write_time(path, seconds), seconds)
    recorded = read_time(path)
    trained_seconds, day = recorded if recorded else (None, None)
    return train, held_out, masks, history, TrainingTime(True, trained_seconds, day, seconds)
