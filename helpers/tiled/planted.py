"""Paper 2's planted mechanism (docs/methods.md §2.6): a rank-1 mount written into one column tile of one site, so
that checks A, B and C meet a case where a tile mount is known to carry a mechanism.

The plant reads the tile's most active input direction v (the top eigenvector of Σ_t x_t x_tᵀ of the site's
inputs on the corpus' fit half, restricted to the tile's columns) and writes the unit direction u of a declared
token in the unembedding (the final norm's gain folded in): W ← W + s·u vᵀ, with s the declared strength times
the site matrix's largest singular value. Every other weight stays as it was. Checks A and B score on the
score half, so the direction the plant reads was chosen on other text than the one it is judged on.

- ``tile_input_direction``: v, from one pass over the fit half;
- ``token_direction``: u;
- ``plant_mount``: the surgery, in place, with its record;
- ``planted_row``: checks A1, A2, A4, B1 and C1 at the site-layer, on the unplanted model and then the planted;
- ``declared_row``: that row as ``data/planted_mechanisms.toml``'s ``[paper2]`` declares it (notebook 08).
"""
from __future__ import annotations

import torch

from helpers.tiled.sites import Site, site_matrix, site_module, transposed
from helpers.tiled.statistics import pass_tokens, sampled_values
from helpers.tiled.tiling import tile_bounds


def tile_columns(d_in: int, width: int, tile: int) -> range:
    """The columns of tile ``tile`` at ``width`` (``tiling.tile_bounds``), refused where there is no such tile."""
    bounds = tile_bounds(d_in, width)
    if isinstance(tile, bool) or not isinstance(tile, int) or not 0 <= tile < len(bounds):
        raise ValueError(f"tile={tile!r}: the site has tiles 0 to {len(bounds) - 1} at width {width}")
    return range(*bounds[tile])


def tile_input_direction(model, sample, site: Site, columns: range, batch: int = 16) -> torch.Tensor:
    """[d_in] float64, unit: the direction of the site's inputs on ``columns`` with the largest second moment
    over the sample's fit half (zero outside ``columns``), its sign fixed so that its largest-|·| entry is
    positive."""
    halves = sample.halves()
    fit = halves["fit"]
    moment = torch.zeros(len(columns), len(columns), dtype=torch.float64, device="cpu")
    for chunk, tokens in pass_tokens(sample, fit, batch):
        x = sampled_values(model, tokens, chunk, fit, {site.input_hook})[site.input_hook]
        x = x[:, columns.start: columns.stop].double().cpu()
        moment += x.T @ x
    _, vectors = torch.linalg.eigh(moment)
    top = vectors[:, -1]
    top = top * torch.sign(top[top.abs().argmax()])
    v = torch.zeros(site_matrix(model, site).shape[1], dtype=torch.float64, device="cpu")
    v[columns.start: columns.stop] = top
    return v


def token_direction(model, token: str) -> torch.Tensor:
    """[d_model] float64, unit: the unembedding column of ``token`` (one token of the model's vocabulary), the
    final norm's gain folded in: the residual direction that raises that token's logit most per unit norm."""
    from helpers.core.weights import unembedding

    ids = model.tokenizer.encode(token, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"token={token!r} is {len(ids)} tokens of {model.name}'s vocabulary ({ids}): declare one "
                         "that is a single token")
    raw = unembedding(model, device="cpu")
    column = raw.W_U[:, ids[0]].double()
    if model.processing == "raw":
        column = column * raw.ln_final.gain.double()
    return column / column.norm()


def plant_mount(model, site: Site, v: torch.Tensor, u: torch.Tensor, strength: float) -> dict:
    """W ← W + s·u vᵀ in the site's own weight (the checkpoint's orientation: W [d_out, d_in]), in place, with
    s = ``strength`` × σ₁(W) before the plant. Returns the record: σ₁ before, s, and the columns the plant
    touches."""
    if not strength > 0:
        raise ValueError(f"strength={strength!r}: expected a positive multiple of the site's largest σ")
    W = site_matrix(model, site)
    if v.shape != (W.shape[1],) or u.shape != (W.shape[0],):
        raise ValueError(f"v {tuple(v.shape)} and u {tuple(u.shape)} do not fit W {tuple(W.shape)} of {site}")
    sigma = float(torch.linalg.matrix_norm(W.double(), ord=2))
    scale = strength * sigma
    delta = (scale * torch.outer(u.double(), v.double()))
    module = site_module(model, site)
    with torch.no_grad():
        module.weight += (delta.T if transposed(module) else delta).to(module.weight.dtype).to(module.weight.device)
    touched = v.nonzero().flatten()
    model.__dict__.pop("weights_sha256", None)  # a digest taken before the plant would name the real weights
    return dict(site=site.name, layer=site.layer, strength=strength, sigma_1=sigma, scale=scale,
                columns=[int(touched.min()), int(touched.max()) + 1])


def checks_at(model, sample, site: Site, thresholds: dict, n_texts: int, seed: int, batch: int) -> dict:
    """Checks A1, A2, A4, B1 and C1 (ours) at one site-layer, with the lifts, the coverage peak and the steer's ρ
    behind them."""
    from helpers.tiled.sweep import sweep

    result = sweep(model, sample, thresholds, layers=[site.layer], sites=[site.name], n_texts=n_texts, seed=seed,
                   batch=batch, progress=False, released=False, effective=False)
    row = result.verdicts().iloc[0].to_dict()
    a = result.a[~result.a["effective"]].iloc[0]
    b = result.b.iloc[0]
    ks = thresholds["B"]["ks"]
    out = {check: None if row[check] is None else bool(row[check]) for check in ("A1", "A2", "A4", "B1", "C1")}
    out.update(lift_tile=float(a["lift_tile"]), lift_whole=float(a["lift_whole"]),
               lift_columns=float(a["lift_columns"]), coverage_peak=max(float(b[f"lift_k{k}"]) for k in ks))
    if len(result.c):
        out["rho_tile"] = float(result.c["rho_tile"].iloc[0])
    return out


def planted_row(model, sample, thresholds: dict, plant: dict, n_texts: int, seed: int = 0, batch: int = 16,
                log=print) -> dict:
    """Paper 2's planted row: the checks at ``plant``'s site-layer on the model as loaded, then the same after
    ``plant_mount`` (the model is changed in place: load it afresh for anything else). ``plant``: the declared
    site, layer, tile, token and strength."""
    from helpers.tiled.sites import PAPER_WIDTHS

    site = Site(plant["layer"], plant["site"])
    columns = tile_columns(site_matrix(model, site).shape[1], PAPER_WIDTHS[site.name], plant["tile"])
    unplanted = checks_at(model, sample, site, thresholds, n_texts, seed, batch)
    log(f"unplanted {site}: " + ", ".join(f"{c} {unplanted[c]}" for c in ("A1", "A2", "A4", "B1", "C1")))
    v = tile_input_direction(model, sample, site, columns, batch)
    record = plant_mount(model, site, v, token_direction(model, plant["token"]), plant["strength"])
    planted = checks_at(model, sample, site, thresholds, n_texts, seed, batch)
    log(f"planted {site}: " + ", ".join(f"{c} {planted[c]}" for c in ("A1", "A2", "A4", "B1", "C1")))
    return dict(plant=dict(plant, **record), unplanted=unplanted, planted=planted)


def declared_row(plant: dict, device: str = "cpu", fast: bool = False, batch: int = 16, log=print) -> dict:
    """``planted_row`` as ``data/planted_mechanisms.toml``'s ``[paper2]`` declares it: its model loaded afresh
    (raw, as notebook 04 reads it), notebook 04's corpus and thresholds; ``fast``: 256 tokens and 2 texts, for
    CI. The record names the corpus sample."""
    from helpers.core.models import load_model
    from helpers.tiled.corpus import sample_tokens
    from helpers.tiled.thresholds import load_thresholds

    model = load_model(plant["model"], processing="raw", device=device)
    n_tokens, max_tokens, n_texts = (256, 32, 2) if fast else (plant["n_tokens"], 256, plant["n_texts"])
    sample = sample_tokens(model.tokenizer, "python-docs", n_tokens=n_tokens, max_tokens=max_tokens,
                           tokenizer_name=plant["model"])
    unplanted = model.record()  # before the plant changes the weights
    row = planted_row(model, sample, load_thresholds(), plant, n_texts, batch=batch, log=log)
    return dict(row, model=unplanted, sample=sample.record(), n_texts=n_texts)
