"""What a run's result depends on, as one digest: the pipeline reuses a run only when its fingerprint is unchanged.

The digest covers the notebook and its parameters, the source of every ``helpers`` module the notebook imports
(transitively: ``helper_modules``), the files of ``data/`` those modules name (``data_files``: the declared rules
and thresholds they read), the files it declares or names in a parameter, the installed packages, the
thread count and the device's numerics (``environment_record``), and the results of the runs it reads. The
circuit evaluator's reports (``helpers.results.circuit_reports``) use the same module walk and environment.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import os
import platform
import re
from pathlib import Path

from helpers.core.cache import sha256_file
from helpers.pipeline.runs import Run

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # the helpers package folder
INJECTED = ("fast", "out_dir", "device")  # parameters the pipeline gives each run (device: where it declares one)


def notebook_code(notebook: Path) -> list[str]:
    """The source of each code cell, IPython magics and shell lines blanked."""
    cells = json.loads(Path(notebook).read_text())["cells"]
    return ["\n".join("" if line.lstrip().startswith(("%", "!")) else line
                      for line in "".join(cell["source"]).splitlines())
            for cell in cells if cell["cell_type"] == "code"]


def _imported_helpers(source: str) -> set[str]:
    """Dotted names of ``helpers`` modules a piece of source imports (anywhere, function bodies too)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # notebook syntax ast cannot read: fall back to the import lines
        found = set(re.findall(r"^\s*(?:from|import)\s+(helpers(?:\.\w+)*)", source, flags=re.M))
        return found | {f"{name}.{member}" for name, members in
                        re.findall(r"^\s*from\s+(helpers(?:\.\w+)*)\s+import\s+([\w ,]+)", source, flags=re.M)
                        for member in re.findall(r"\w+", members)}
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names if alias.name.split(".")[0] == "helpers"}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "helpers":
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}  # a submodule, if it is one
    return names


def _module_file(name: str, root: Path) -> Path | None:
    relative = Path(*name.split(".")[1:])
    for candidate in (root / relative.with_suffix(".py") if relative.parts else None, root / relative / "__init__.py"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


def module_sources(names: set[str], root: Path = PACKAGE_ROOT) -> list[Path]:
    """Source files of the ``helpers`` modules ``names`` (dotted), of every one they import, in turn, and of the
    packages above each (importing helpers.a.b runs helpers/__init__.py and helpers/a/__init__.py first)."""
    pending = set(names)
    seen: set[Path] = set()
    while pending:
        path = _module_file(pending.pop(), root)
        if path is None or path in seen:
            continue
        seen.add(path)
        pending |= _imported_helpers(path.read_text())
    for path in list(seen):
        for package in path.relative_to(root).parents:
            if (root / package / "__init__.py").is_file():
                seen.add(root / package / "__init__.py")
    return sorted(seen)


def helper_modules(notebook: Path, root: Path = PACKAGE_ROOT) -> list[Path]:
    """Source files of every ``helpers`` module the notebook imports, and of every one those import, in turn."""
    return module_sources(set().union(*(_imported_helpers(code) for code in notebook_code(notebook))), root)


def data_files(texts: list[bytes], data: Path) -> list[Path]:
    """The files of the ``data`` folder whose names appear in these module sources (``texts``). A module reads its
    declared rules or thresholds by name (``ROOT / "data" / "verdict_rules.toml"``), so a run whose modules name a
    file depends on it, whether or not its run declares it; a name in a docstring counts too, which can only make
    reuse rarer."""
    if not data.is_dir():
        return []
    return sorted(path for path in data.iterdir()
                  if path.is_file() and any(path.name.encode() in text for text in texts))


def _hash_path(digest, path: Path) -> None:
    """A file's name and bytes, or a folder's every file (sorted, by relative name)."""
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode())
        digest.update(sha256_file(file).encode())


def parameter_paths(params: dict, base: Path) -> list[Path]:
    """Parameter values that name an existing file or folder (relative to the notebook's folder): a local
    corpus, a thresholds file. Their contents are inputs of the run."""
    found = []
    for name, value in sorted(params.items()):
        if name in INJECTED or not isinstance(value, str) or not value or len(value) > 4096:
            continue
        path = (base / value) if not os.path.isabs(value) else Path(value)
        if path.exists():
            found.append(path)
    return found


def environment_record(threads: int | None = None, device: str = "cpu", where: str | None = None) -> dict:
    """Everything outside the repository that changes numbers: Python, every installed package, the torch
    thread count a run has (``threads``, when an executor sets it; else this process's), and the numerics of
    the resolved ``device`` (``helpers.core.device.numerics``: the GPU, the torch and CUDA builds, the
    precision flags), so that a result is never reused on another device. ``where``: the device is on
    other machines (SLURM nodes), which name it instead of this machine's record."""
    import torch

    from helpers.core.device import numerics

    packages = sorted(f"{d.metadata['Name']}=={d.version}" for d in importlib.metadata.distributions()
                      if d.metadata["Name"] and d.metadata["Name"] != "helpers")
    if threads is None:
        threads = torch.get_num_threads()
    record = {k: v for k, v in numerics(device).items() if k != "threads"} if where is None else \
        dict(device=device, on=where)
    return dict(python=platform.python_version(), packages=packages, torch_threads=threads, numerics=record)


def fingerprint(run: Run, notebook: Path, params: dict, runs_file: Path, dependencies: dict[str, str],
                environment: dict, root: Path = PACKAGE_ROOT) -> str:
    """One digest of everything the run's result depends on (see the module docstring); ``root`` is the
    ``helpers`` package folder."""
    digest = hashlib.sha256()
    digest.update(notebook.read_bytes())
    digest.update(json.dumps({k: v for k, v in params.items() if k != "out_dir"}, sort_keys=True).encode())
    sources = {source: source.read_bytes() for source in helper_modules(notebook, root)}
    for source, text in sources.items():
        digest.update(str(source.relative_to(root)).encode())
        digest.update(text)
    for item in sorted({*(runs_file.parent / i for i in run.inputs), *parameter_paths(params, notebook.parent),
                        *data_files(list(sources.values()), root.parent / "data")}):
        _hash_path(digest, item)
    digest.update(json.dumps(environment, sort_keys=True).encode())
    digest.update(json.dumps({name: dependencies.get(name, "never finished") for name in run.after}).encode())
    return digest.hexdigest()
