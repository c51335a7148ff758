"""Modules computed by another function for a while: one place that replaces an instance's ``forward``.

Masks compute MLP maps from their factors (``helpers.singular.masking.masks``) and check C's steered forwards skip
the blocks before the steered layer (``helpers.tiled.steer``); both swap a module's ``forward`` for the
length of a ``with`` block. The replacement is set in the instance's own ``__dict__``, ahead of its
class's method: TransformerLens' bridge components pass attribute writes through to the module they wrap,
so ``module.forward = f`` would land on another object. On leaving, even through an exception, each module
gets back what it had: its class's forward, or the instance forward it already carried.
"""
from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def forwards_replaced(replacements: dict):
    """Inside the block, each module (key) computes its forward with the function given for it (value)."""
    previous = [(module, vars(module).get("forward")) for module in replacements]
    for module, forward in replacements.items():
        vars(module)["forward"] = forward
    try:
        yield
    finally:
        for module, own in previous:
            if own is None:
                del vars(module)["forward"]  # the class's own forward again
            else:
                vars(module)["forward"] = own
