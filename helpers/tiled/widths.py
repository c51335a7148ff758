"""Tile widths: paper 2's literal numbers, or the same widths in the paper's units, which transfer across
models.

The paper's widths are Gemma-2-2B's (d_model 2304, d_mlp 9216, d_head 256). Its ``attn.o`` width of 512 is
two heads. On SmolLM2 (d_head 64, 576 input columns) the same literal 512 is eight heads, in tiles of 512
and 64. ``"paper_units"`` keeps the paper's meaning instead. ``attn.o``'s tiles hold whole heads: 512 / 256
= 2 heads, so 2 · d_head columns. Every other map keeps the paper's fraction of its input columns:
``attn.q`` 128 / 2304 of d_model, ``mlp.down`` 512 / 9216 of d_mlp, and so on, rounded to the nearest
column, at least one. Every summary records the choice and the widths it gave.
"""
from __future__ import annotations

from helpers.tiled.sites import SEARCH_WIDTHS

GEMMA_2_2B = dict(d_model=2304, d_mlp=9216, d_head=256)
"""The dimensions the paper's widths were chosen for."""
WIDTH_CHOICES = ("paper", "paper_units")


def site_inputs(dims: dict) -> dict[str, int]:
    """The number of input columns of each site's matrix (``attn.o`` is counted in heads' columns apart)."""
    return {"attn.q": dims["d_model"], "attn.k": dims["d_model"], "attn.v": dims["d_model"],
            "mlp.gate": dims["d_model"], "mlp.up": dims["d_model"], "mlp.down": dims["d_mlp"]}


def scaled(width: int, name: str, dims: dict) -> int:
    """One of the paper's widths in its units, for a model of dimensions ``dims``."""
    if name == "attn.o":
        heads = width / GEMMA_2_2B["d_head"]
        return max(1, round(heads * dims["d_head"]))
    return max(1, round(width / site_inputs(GEMMA_2_2B)[name] * site_inputs(dims)[name]))


def model_dims(model) -> dict:
    return dict(d_model=model.d_model, d_mlp=model.d_mlp, d_head=model.d_head)


def tile_widths(model, choice: str = "paper") -> dict[str, int]:
    """The first width of every site under ``choice`` ("paper": the literal numbers)."""
    return {name: widths[0] for name, widths in search_widths(model, choice).items()}


def search_widths(model, choice: str = "paper") -> dict[str, tuple[int, ...]]:
    """The widths the released runner tries, in order, per site, under ``choice`` (repeats dropped)."""
    if choice not in WIDTH_CHOICES:
        raise ValueError(f"widths={choice!r} is not one of {WIDTH_CHOICES}")
    if choice == "paper":
        return dict(SEARCH_WIDTHS)
    dims = model_dims(model)
    return {name: tuple(dict.fromkeys(scaled(w, name, dims) for w in widths)) for name, widths in SEARCH_WIDTHS.items()}
