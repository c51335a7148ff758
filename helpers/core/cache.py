"""Where cached artefacts live, and how they are written so an interrupted run never leaves a corrupt one."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Iterator

CACHE_ENV = "SVDIRS_CACHE"
MASKS = "masks"
"""The cache's folder of trained masks (``helpers.singular.masking``), one file per training."""


def cache_dir(*parts: str) -> Path:
    """The cache folder (``$SVDIRS_CACHE`` or ``~/.cache/singular-directions``), created on demand."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "singular-directions")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``target`` in one rename.

    If the block raises (or the process dies), ``target`` is untouched and the partial folder is
    removed (or, after a crash, left under a ``.tmp-`` name that is never read)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{target.name}-", dir=target.parent))
    try:
        yield tmp
        replace_dir(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def replace_dir(finished: Path, target: Path) -> None:
    """Put the folder ``finished`` in the place of ``target`` (whose old contents go): the last step of
    ``atomic_dir``, and of the pipeline installing a run's staging folder."""
    if target.exists():
        shutil.rmtree(target)
    os.replace(finished, target)


@contextlib.contextmanager
def atomic_file(path: Path, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary sibling path to write; on success it replaces ``path`` in one rename, on failure
    it is removed and ``path`` is untouched. ``suffix`` keeps an extension that a writer reads."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and one rename."""
    with atomic_file(path) as tmp:
        tmp.write_text(text)


def atomic_write_json(path: Path, obj) -> None:
    """Write ``obj`` as sorted, indented JSON, atomically (deterministic bytes for equal objects)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def sha256_file(path: Path, block: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()


class DamagedCacheWarning(RuntimeWarning):
    """A cached file failed its sha256 check (or has none) and is being recomputed."""


class CacheError(RuntimeError):
    """A cached file cannot be read even though it passed its check."""


def checksum_path(path: Path) -> Path:
    return Path(path).with_name(Path(path).name + ".sha256")


def record_checksum(path: Path) -> str:
    """Write ``<path>.sha256`` (the file's sha256, written atomically) and return the digest."""
    digest = sha256_file(path)
    atomic_write_text(checksum_path(path), digest + "\n")
    return digest


def verify_checksum(path: Path, what: str = "cached file") -> str | None:
    """The file's sha256 when it matches the one recorded beside it; else None, after a warning that names
    the path and why (no record: written by an older version or interrupted; a different digest: damaged).
    A missing file is None without a warning."""
    path = Path(path)
    if not path.exists():
        return None
    record = checksum_path(path)
    actual = sha256_file(path)
    if not record.exists():
        why = f"has no recorded sha256 ({record.name} is missing: written by an older version, or interrupted)"
    else:
        expected = record.read_text().strip()
        if expected == actual:
            return actual
        why = (f"is damaged: its sha256 is {actual[:16]}…, but {expected[:16]}… was recorded when it was written "
               f"({path.stat().st_size:,} bytes now)")
    warnings.warn(f"{what} {path} {why}; it is not used, and is being recomputed", DamagedCacheWarning,
                  stacklevel=3)
    return None


def save_verified(obj, path: Path) -> str:
    """``torch.save`` through a temporary file and one rename, then record its sha256 beside it. Tensors are
    saved from the CPU (``on_cpu``), so that what a GPU computed loads on a machine without one."""
    import torch

    checksum_path(path).unlink(missing_ok=True)
    with atomic_file(path) as tmp:
        torch.save(on_cpu(obj), tmp)
    return record_checksum(path)


def on_cpu(obj):
    """``obj`` with every tensor in it (through dicts, lists and tuples) on the CPU; CPU tensors are the
    same objects, so what is saved from a CPU run does not change by a byte."""
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.cpu()
    if isinstance(obj, dict):
        return type(obj)((k, on_cpu(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
        return type(obj)(on_cpu(v) for v in obj)
    return obj


def load_verified(path: Path, what: str = "cached file"):
    """The object saved by ``save_verified`` at ``path``, or None when there is none or it fails its check
    (then the caller recomputes it; a warning names the path)."""
    import torch

    if verify_checksum(path, what) is None:
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=False)  # the caller moves what it needs
    except Exception as err:  # noqa: BLE001 — any failure to read a verified file means the same thing
        raise CacheError(f"{what} {path} passed its sha256 check but cannot be read ({type(err).__name__}: {err}); "
                         f"delete it (and {checksum_path(path).name}) to recompute it") from err
