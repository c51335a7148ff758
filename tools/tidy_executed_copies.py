"""Pass every committed executed notebook (figures*/<run>/notebook.ipynb) through the pipeline's readable-copy
filter again, so that copies written before a filter was added lose what it removes (e.g. progress bars
frozen at 0 %) without rerunning their runs. Idempotent: a tidy copy is left as it is.

    python tools/tidy_executed_copies.py [FOLDER ...]      # default: figures
"""
from __future__ import annotations

import sys
from pathlib import Path

from helpers.pipeline.notebook_job import EXECUTED_NOTEBOOK, write_readable_copy


def tidy(folder: Path) -> list[Path]:
    changed = []
    for path in sorted(folder.glob(f"*/{EXECUTED_NOTEBOOK}")):
        before = path.read_text(encoding="utf-8")
        write_readable_copy(path, path, {})
        if path.read_text(encoding="utf-8") != before:
            changed.append(path)
    return changed


if __name__ == "__main__":
    folders = [Path(arg) for arg in sys.argv[1:]] or [Path("figures")]
    for folder in folders:
        for path in tidy(folder):
            print(f"tidied {path}")
