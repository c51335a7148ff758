"""A static check of ``helpers/`` for the CPU assumptions that break a GPU run (docs/methods.md §0), so that
CPU-only CI catches them: every tensor factory states its device; ``.numpy()`` reads a CPU tensor; cached
files load onto the CPU; sorts that pick reported numbers are stable; the CPU-only solver gelsd is reached
through the one helper that routes to the CPU; token tensors handed to the model are moved to its device."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

HELPERS = Path(__file__).resolve().parents[2] / "helpers"
FACTORIES = {"zeros", "ones", "full", "empty", "arange", "tensor", "eye", "rand", "randn", "randint", "randperm",
             "linspace", "as_tensor"}
NUMPY_ON_CPU = {  # (file, function): why its .numpy() only ever sees a CPU tensor
    ("core/models.py", "weights_sha256"): "the tensor is copied to the CPU two lines above",
    ("tiled/steer.py", "rank_order"): "the radix path; tensors on another device return through torch.sort first",
}
GELSD_HELPER = ("tiled/statistics.py", "cpu_lstsq")


def _functions(tree: ast.AST):
    """(function name, node) for every node, the function being the innermost def around it."""
    def walk(node, name):
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else name
            yield inner, child
            yield from walk(child, inner)
    yield from walk(tree, "<module>")


def _receiver_chain(node: ast.AST) -> list[str]:
    """Names of the method calls and attributes a value was made through: ``x.detach().cpu()`` → [cpu, detach]."""
    names = []
    while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        node = node.func if isinstance(node, ast.Call) else node.value
    return names


def _is_moved(node: ast.AST) -> bool:
    """``tokens.to(...)``: the argument is moved where the call needs it."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to"


def violations(source: str, relative: str) -> list[str]:
    found = []
    for function, node in _functions(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr, keywords = node.func.attr, {k.arg for k in node.keywords}
        where = f"{relative}:{node.lineno} ({function})"
        on_torch = isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
        if on_torch and attr in FACTORIES and "device" not in keywords:
            found.append(f"{where}: torch.{attr}(...) without device= (use the model's or the input's device, or "
                         f"device=\"cpu\" for what is built on the CPU on purpose)")
        if attr == "numpy" and "cpu" not in _receiver_chain(node.func.value)[:3] \
                and (relative, function) not in NUMPY_ON_CPU:
            found.append(f"{where}: .numpy() of a tensor that may be on a GPU; call .cpu() first")
        if on_torch and attr == "load" and "map_location" not in keywords:
            found.append(f"{where}: torch.load without map_location (a file saved on a GPU would not load on a CPU)")
        if attr in ("sort", "argsort") and not keywords & {"stable", "kind", "key"}:
            found.append(f"{where}: .{attr}() without stable=True (equal keys would be ordered differently on "
                         f"another device)")
        if any(k.arg == "driver" and isinstance(k.value, ast.Constant) and k.value.value == "gelsd"
               for k in node.keywords) and (relative, function) != GELSD_HELPER:
            found.append(f"{where}: driver='gelsd' exists on the CPU only; call {GELSD_HELPER[1]}")
        if attr == "run_with_cache" and node.args and not _is_moved(node.args[0]):
            found.append(f"{where}: run_with_cache with a token tensor not moved to the model's device "
                         f"(the bridge moves only strings)")
        if attr == "body" and any(k.arg == "input_ids" and not _is_moved(k.value) for k in node.keywords):
            found.append(f"{where}: body(input_ids=...) with a token tensor not moved to the model's device")
    return found


def test_helpers_have_no_device_assumptions():
    found = []
    for path in sorted(HELPERS.rglob("*.py")):
        found += violations(path.read_text(), str(path.relative_to(HELPERS)))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("line, rule", [
    ("x = torch.zeros(3)", "without device="),
    ("x = torch.randperm(5, generator=g)", "without device="),
    ("x = t.numpy()", ".numpy()"),
    ("x = t.detach().numpy()", ".numpy()"),
    ("x = torch.load(path)", "map_location"),
    ("x = t.argsort(descending=True)", "stable=True"),
    ("x = torch.linalg.lstsq(a, b, driver='gelsd')", "gelsd"),
    ("_, cache = model.bridge.run_with_cache(tokens)", "run_with_cache"),
    ("model.body(input_ids=tokens)", "body(input_ids"),
])
def test_each_rule_fails_on_its_violation(line, rule):
    found = violations(f"def f():\n    {line}\n", "example.py")
    assert len(found) == 1 and rule in found[0], found


@pytest.mark.parametrize("line", [
    "x = torch.zeros(3, device=t.device)",
    "x = torch.randperm(5, generator=g, device='cpu')",
    "x = t.cpu().numpy()",
    "x = t.detach().cpu().numpy()",
    "x = torch.load(path, map_location='cpu')",
    "x = t.argsort(descending=True, stable=True)",
    "x = np.argsort(a, kind='stable')",
    "rows.sort(key=len)",
    "_, cache = model.bridge.run_with_cache(tokens.to(model.device))",
    "model.body(input_ids=tokens.to(device))",
    "x = t.new_zeros(3)",
])
def test_the_device_aware_forms_pass(line):
    assert violations(f"def f():\n    {line}\n", "example.py") == []
