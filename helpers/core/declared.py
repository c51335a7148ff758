"""Files of rules declared before a run (thresholds, the attack, verdict rules): read them strictly.

A declared file is TOML whose sections each hold exactly the keys the code expects. A missing key is not
given a default and an unknown (mistyped) key is not ignored: either is refused with an error that names the
file, the section and the keys, so that a run is never judged by a rule other than the one written down.
"""
from __future__ import annotations

import tomllib
from pathlib import Path


def load_declared(path: str | Path, sections: dict[str, set[str]]) -> dict:
    """The TOML file at ``path``, after checking that each of ``sections`` holds exactly its keys (other
    sections are returned unchecked)."""
    path = Path(path)
    with open(path, "rb") as handle:
        table = tomllib.load(handle)
    for section, keys in sections.items():
        got = set(table.get(section, {}))
        if got != set(keys):
            raise ValueError(f"{path}: section [{section}] must hold exactly {sorted(keys)}; missing "
                             f"{sorted(set(keys) - got)}, unknown {sorted(got - set(keys))}: fix the file")
    return table
