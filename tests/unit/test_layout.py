"""The house by role: library code lives in the packages, the modules at helpers/'s top level are thin commands,
and no package imports a command."""
import ast
from pathlib import Path

HELPERS = Path(__file__).resolve().parents[2] / "helpers"
COMMANDS = sorted(p.stem for p in HELPERS.glob("*.py") if p.name != "__init__.py")


def imported(path: Path) -> set[str]:
    """Dotted names a module imports, function bodies included."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_the_top_level_holds_only_commands_and_each_is_a_thin_entry_point():
    assert COMMANDS == ["evaluate", "evaluations", "reproduction", "workshop"]
    for path in [*(HELPERS / f"{name}.py" for name in COMMANDS), HELPERS / "pipeline" / "__main__.py"]:
        tree = ast.parse(path.read_text())
        functions = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
        assert functions in ([], ["main"]), f"{path.name} defines {functions}: its work belongs in a package"
        assert 'if __name__ == "__main__":' in path.read_text(), path


def test_no_package_imports_a_command():
    commands = {f"helpers.{name}" for name in COMMANDS} | {"helpers.pipeline.__main__"}
    for path in sorted(HELPERS.glob("*/**/*.py")):
        if path.name == "__main__.py":
            continue
        found = imported(path) & commands
        assert not found, f"{path.relative_to(HELPERS.parent)} imports the command {sorted(found)}"


def test_the_check_sees_a_package_that_imports_a_command(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from helpers.evaluate import main\n")
    assert "helpers.evaluate" in imported(module)


def test_the_readme_module_map_names_every_module():
    """Each module of a package is in README's module map: as ``package.module``, or, for a part of ``singular``,
    in its part's row. ``figures`` is described as a whole (style, each paper's plots, the summary figures)."""
    readme = (HELPERS.parent / "README.md").read_text()
    table = readme[readme.index("| module | one idea |"):]
    table = table[:table.index("\n\n")]
    rows = {row.split(" | ")[0].strip("| *`"): row for row in table.splitlines()[2:]}
    missing = []
    for path in sorted(HELPERS.glob("*/**/*.py")):
        parts = path.relative_to(HELPERS).with_suffix("").parts
        if parts[-1] in ("__init__", "__main__") or parts[0] == "figures":
            continue
        if len(parts) == 3:
            found = f"`{parts[2]}`" in rows.get(f"{parts[0]}.{parts[1]}", "")
        else:
            found = f"`{'.'.join(parts)}`" in table
        if not found:
            missing.append(".".join(parts))
    assert not missing, f"README's module map does not name {missing}"


def test_the_papers_share_only_core_apart_from_the_two_borrowings_the_readme_names():
    """Paper 1 borrows paper 2's weight controls (``tiled.sites.control_model``) and offline text
    (``tiled.corpus``); any other import between ``singular`` and ``tiled`` is a new dependency to decide on."""
    crossings = set()
    for ours, theirs in (("singular", "tiled"), ("tiled", "singular")):
        for path in sorted((HELPERS / ours).rglob("*.py")):
            crossings |= {(path.relative_to(HELPERS).as_posix(), name) for name in imported(path)
                          if name.startswith(f"helpers.{theirs}.") and name.count(".") == 2}
    assert crossings == {("singular/validation/verdicts.py", "helpers.tiled.sites"),
                         ("singular/validation/planted.py", "helpers.tiled.corpus")}
