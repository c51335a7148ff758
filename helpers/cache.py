"""Where cached artefacts live, and how they are written so an interrupted run never leaves a corrupt one."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

CACHE_ENV = "SVDIRS_CACHE"


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
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_json(path: Path, obj) -> None:
    """Write ``obj`` as sorted, indented JSON, atomically (deterministic bytes for equal objects)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def sha256_file(path: Path, block: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(block):
            digest.update(chunk)
    return digest.hexdigest()
