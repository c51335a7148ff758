"""Paper 2's checks A, B, C (METHODS.md section 2.4) with thresholds read from one file before the run.

- **A** full-write energy lift of each direction set (tile mounts, whole-matrix SVD, column sampling,
  random column partitions, PCA of the writes) over random directions of the same count; span energy and
  mean pairwise |cos| beside it. Rules A1, A2, A4.
- **B** coverage over k ∈ ks: per token, least squares on its 8 best-aligned tile mounts, minus the same
  with random directions; Frobenius weight coverage of the per-tile rank-k approximations. Rule B1.
- **C** causal steer (residual sites): α·u added after the post-sublayer norm at all positions; Spearman ρ
  and top-20 Jaccard between the mean last-token logit change and the lens W_U·((gain ⊙ u)) (the final
  norm's own gain — Gemma's 1 + w — and, through the model's forward pass, its soft-cap), for the strongest
  tile mount and for control directions (random, top whole-SVD direction), bootstrap CIs over the texts,
  and a dose–response over α. Rule C1, judged from ``min_layer`` on.

Verdicts sit beside the raw numbers; ``sweep`` runs everything for one model (or negative control).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from helpers.tiled.corpus import right_padded
from helpers.tiled.statistics import EFFECTIVE, SiteStatistics, StreamPlan
from helpers.tiled.sites import PAPER_WIDTHS, RESIDUAL_SITES, Site, all_sites, site_matrix, steer_hook
from helpers.tiled.tiling import (Mounts, column_sampling, frobenius_coverage, mean_abs_cosine, random_directions,
                            random_partition_svd, tile_svd, whole_svd)
from helpers.core.weights import final_norm

THRESHOLD_KEYS = {
    "A": {"a1_margin", "a1_margin_effective", "a2_tolerance", "a4_margin_residual", "a4_ratio_residual",
          "a4_margin_other", "a4_ratio_other"},
    "B": {"ks", "best_directions", "peak_residual", "peak_other", "peak_effective", "early_within", "last_within"},
    "C": {"alpha", "dose_alphas", "rho", "jaccard", "top", "min_layer", "bootstrap"},
}
DEFAULT_THRESHOLDS = Path(__file__).resolve().parents[2] / "data" / "tiled_svd_thresholds.toml"


def load_thresholds(path: str | Path = DEFAULT_THRESHOLDS) -> dict:
    """Read and validate the thresholds file (every key present, nothing unknown)."""
    path = Path(path)
    with open(path, "rb") as handle:
        table = tomllib.load(handle)
    for section, keys in THRESHOLD_KEYS.items():
        got = set(table.get(section, {}))
        if got != keys:
            raise ValueError(f"{path}: section [{section}] must hold exactly {sorted(keys)}; "
                             f"missing {sorted(keys - got)}, unknown {sorted(got - keys)}")
    return table


# --- plans ------------------------------------------------------------------------------------------------

def build_plans(model, sites: list[Site], thresholds: dict, widths: dict = PAPER_WIDTHS, k: int = 2,
                seed: int = 0, effective: bool = True) -> list[StreamPlan]:
    """Direction sets of every site at matched count n = k × tiles, and its coverage sets; effective-path
    streams for ``mlp.up`` and ``attn.v`` (their mounts are built after the fit half)."""
    ks = thresholds["B"]["ks"]
    plans = []
    for site in sites:
        W = site_matrix(model, site)
        width = widths[site.name]
        tiles = tile_svd(W, width, max(k, *ks))  # every k below is a slice of these
        tile = tiles.per_tile(k)
        n = len(tile)
        sets = dict(tile=tile, whole=whole_svd(W, n), columns=column_sampling(W, n, seed),
                    random=random_directions(W.shape[0], n, seed + 1), random_partition=random_partition_svd(W, width, k, seed))
        coverage = {}
        for kk in ks:
            mounts = tiles.per_tile(kk)
            coverage[f"tile_k{kk}"] = mounts
            coverage[f"random_k{kk}"] = random_directions(W.shape[0], len(mounts), seed + 100 + kk)
        plans.append(StreamPlan(site, site.name, sets, coverage, pca_count=n, best=thresholds["B"]["best_directions"]))
        if effective and site.name in EFFECTIVE and (site.name != "mlp.up" or model.architecture != "gpt2"):
            # mlp.up's effective path weights the up map by the gate: GPT-2's MLP has no gate
            d_eff = model.d_mlp if site.name == "mlp.up" else model.n_kv_heads * model.d_head
            random_cov = {f"random_k{kk}": random_directions(d_eff, len(coverage[f"tile_k{kk}"]), seed + 100 + kk)
                          for kk in ks}
            plans.append(StreamPlan(site, EFFECTIVE[site.name], {"random": random_directions(d_eff, n, seed + 1)},
                                    random_cov, effective=dict(width=width, k=k, seed=seed, coverage_ks=ks),
                                    best=thresholds["B"]["best_directions"]))
    return plans


# --- A ----------------------------------------------------------------------------------------------------

def check_a(stats: SiteStatistics, thresholds: dict) -> pd.DataFrame:
    t = thresholds["A"]
    results = stats.results()
    rows = []
    for plan in stats.plans:
        f = results[plan.name]["f"]
        baseline = float(f["random"].mean())
        lifts = {name: float(v.mean()) - baseline for name, v in f.items() if name != "random"}
        is_effective = plan.effective is not None
        row = dict(layer=plan.site.layer, site=plan.kind, residual=plan.site.residual, effective=is_effective,
                   n=len(plan.sets["tile"]), f_random=baseline, tokens=results[plan.name]["tokens"]["score"],
                   **{f"lift_{name}": v for name, v in lifts.items()},
                   **{f"span_{name}": v for name, v in results[plan.name]["span"].items()},
                   cos_tile=mean_abs_cosine(plan.sets["tile"].U), cos_whole=mean_abs_cosine(plan.sets["whole"].U))
        tile, whole, columns = lifts["tile"], lifts["whole"], lifts["columns"]
        row["A1"] = tile > (t["a1_margin_effective"] if is_effective else t["a1_margin"])
        row["A2"] = tile >= columns - t["a2_tolerance"]
        margin, ratio = ((t["a4_margin_residual"], t["a4_ratio_residual"]) if plan.site.residual
                         else (t["a4_margin_other"], t["a4_ratio_other"]))
        row["A4"] = (tile + margin >= whole) or (whole > 0 and tile / whole >= ratio)
        row["A_pass"] = row["A1"] and row["A2"] and row["A4"]
        rows.append(row)
    return pd.DataFrame(rows)


# --- B ----------------------------------------------------------------------------------------------------

def check_b(stats: SiteStatistics, thresholds: dict, model=None) -> pd.DataFrame:
    """One row per stream: coverage lift at every k, the B1 verdict, and (plain sites, given ``model``)
    Frobenius weight coverage at every k."""
    t = thresholds["B"]
    ks = t["ks"]
    results = stats.results()
    rows = []
    for plan in stats.plans:
        cov = results[plan.name]["coverage"]
        lifts = [cov[f"tile_k{k}"] - cov[f"random_k{k}"] for k in ks]
        peak = max(lifts)
        floor = (t["peak_effective"] if plan.effective is not None
                 else t["peak_residual"] if plan.site.residual else t["peak_other"])
        row = dict(layer=plan.site.layer, site=plan.kind, residual=plan.site.residual,
                   effective=plan.effective is not None, peak=peak,
                   **{f"coverage_k{k}": cov[f"tile_k{k}"] for k in ks},
                   **{f"lift_k{k}": v for k, v in zip(ks, lifts)})
        if model is not None and plan.effective is None:
            W = site_matrix(model, plan.site)
            row.update({f"frobenius_k{k}": frobenius_coverage(plan.coverage_sets[f"tile_k{k}"], W) for k in ks})
        row["B1"] = (peak >= floor and all(v >= peak - t["early_within"] for v in lifts[:2])
                     and lifts[-1] >= peak - t["last_within"])
        rows.append(row)
    return pd.DataFrame(rows)


# --- C ----------------------------------------------------------------------------------------------------

def lens(model, directions: torch.Tensor) -> torch.Tensor:
    """[n, vocab] the logit-lens prediction W_U·(gain ⊙ u) for unit directions [n, d] (LayerNorm models:
    u centred first). The norm's scale is a positive factor per direction: ranks do not depend on it."""
    u = directions.double()
    if model.architecture == "gpt2":
        u = u - u.mean(-1, keepdim=True)
    gain = final_norm(model).gain.double()
    # float32 against the unembedding as stored: a float64 copy of Gemma-2-2B's would be 4.7 GB
    return ((u * gain).float() @ model.hf_model.lm_head.weight.detach().T).double()


def centred_ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks of x (one sort; ties broken by order, negligible over a vocabulary), centred, unit norm."""
    order = x.float().argsort()
    r = torch.empty(len(x), dtype=torch.float64)
    r[order] = torch.arange(len(x), dtype=torch.float64)
    r -= r.mean()
    return r / r.norm()


def spearman(a: torch.Tensor, b: torch.Tensor | None = None, b_ranks: torch.Tensor | None = None) -> float:
    """Spearman ρ of two vectors; pass ``b_ranks`` (``centred_ranks(b)``) to reuse them."""
    return float(centred_ranks(a) @ (centred_ranks(b) if b_ranks is None else b_ranks))


def top_jaccard(a: torch.Tensor, b: torch.Tensor, top: int = 20) -> float:
    sa, sb = set(a.topk(top).indices.tolist()), set(b.topk(top).indices.tolist())
    return len(sa & sb) / len(sa | sb)


@dataclass
class SteerTexts:
    tokens: torch.Tensor  # [n, T] right-padded
    last: torch.Tensor  # [n] index of each text's last token


def steer_texts(sample, n_texts: int = 16, max_len: int = 64) -> SteerTexts:
    """The first ``n_texts`` score-half sequences, truncated to ``max_len`` tokens."""
    chosen = sorted(sample.halves()["score"])[:n_texts]
    sequences = [sample.sequences[i][:max_len] for i in chosen]
    return SteerTexts(right_padded(sequences), torch.tensor([len(s) - 1 for s in sequences]))


def last_token_logits(model, texts: SteerTexts, hooks=()) -> torch.Tensor:
    """[n, vocab] logits at each text's last token (soft-capped as the model does)."""
    with torch.no_grad(), model.bridge.hooks(fwd_hooks=list(hooks)):
        hidden = model.body(input_ids=texts.tokens).last_hidden_state
    logits = model.hf_model.lm_head(hidden[torch.arange(len(texts.last)), texts.last]).double()
    cap = getattr(model.config, "final_logit_softcapping", None)
    return cap * torch.tanh(logits / cap) if cap else logits


def steered_change(model, site: Site, u: torch.Tensor, alpha: float, texts: SteerTexts, base: torch.Tensor) -> torch.Tensor:
    """[n, vocab] change of last-token logits when α·u is added after the site's post-sublayer norm at
    every position."""
    vector = (alpha * u).float()

    def add(value, hook):
        return value + vector.to(value.dtype)
    return last_token_logits(model, texts, [(steer_hook(model, site), add)]) - base


def bootstrap_rho(change: torch.Tensor, prediction: torch.Tensor, n_boot: int, seed: int) -> tuple[float, float]:
    """95 % interval of ρ(mean over resampled texts of the change, prediction)."""
    generator = torch.Generator().manual_seed(seed)
    ranks = centred_ranks(prediction)
    values = [spearman(change[torch.randint(len(change), (len(change),), generator=generator)].mean(0), b_ranks=ranks)
              for _ in range(n_boot)]
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def rule_c1(rho: float, jaccard: float, layer: int, thresholds: dict) -> bool | None:
    """C1: the steer follows the lens (ρ ≥ threshold, or top-k Jaccard ≥ threshold); None below ``min_layer``
    (not judged)."""
    t = thresholds["C"]
    if layer < t["min_layer"]:
        return None
    return bool(rho >= t["rho"] or jaccard >= t["jaccard"])


def check_c(model, plans: list[StreamPlan], texts: SteerTexts, thresholds: dict, seed: int = 0,
            progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(verdicts per residual site, dose–response rows). Directions per site: the tile mount with the
    largest σ, a random unit direction, and the top whole-matrix SVD direction."""
    t = thresholds["C"]
    base = last_token_logits(model, texts)
    residual = [p for p in plans if p.site.residual and p.effective is None]
    if progress:
        from tqdm.auto import tqdm

        residual = tqdm(residual, desc="check C (steering)")
    rows, dose = [], []
    for plan in residual:
        tile = plan.sets["tile"]
        directions = {"tile": tile.U[:, int(tile.S.argmax())], "random": plan.sets["random"].U[:, 0],
                      "whole": plan.sets["whole"].U[:, 0]}
        predictions = lens(model, torch.stack(list(directions.values())))
        row = dict(layer=plan.site.layer, site=plan.kind)
        for (name, u), prediction in zip(directions.items(), predictions):
            change = steered_change(model, plan.site, u, t["alpha"], texts, base)
            mean = change.mean(0)
            row[f"rho_{name}"] = spearman(mean, prediction)
            row[f"rho_{name}_low"], row[f"rho_{name}_high"] = bootstrap_rho(change, prediction, t["bootstrap"], seed)
            row[f"jaccard_{name}"] = top_jaccard(mean, prediction, t["top"])
        tile_ranks = centred_ranks(predictions[0])
        for alpha in t["dose_alphas"]:
            change = steered_change(model, plan.site, directions["tile"], alpha, texts, base).mean(0)
            dose.append(dict(layer=plan.site.layer, site=plan.kind, alpha=alpha, rho=spearman(change, b_ranks=tile_ranks),
                             jaccard=top_jaccard(change, predictions[0], t["top"]), size=float(change.norm())))
        row["C1"] = rule_c1(row["rho_tile"], row["jaccard_tile"], plan.site.layer, thresholds)
        rows.append(row)
    return pd.DataFrame(rows), pd.DataFrame(dose)


# --- the sweep --------------------------------------------------------------------------------------------

@dataclass
class Sweep:
    a: pd.DataFrame
    b: pd.DataFrame
    c: pd.DataFrame
    dose: pd.DataFrame
    record: dict

    def verdicts(self) -> pd.DataFrame:
        """Site × layer: A, B1, C1 and the overall pass (C only where judged)."""
        plain = self.a[~self.a["effective"]][["layer", "site", "A1", "A2", "A4", "A_pass"]]
        out = plain.merge(self.b[["layer", "site", "B1"]], on=["layer", "site"], how="left")
        if not self.c.empty:
            out = out.merge(self.c[["layer", "site", "C1"]], on=["layer", "site"], how="left")
        else:
            out["C1"] = None
        c_ok = out["C1"].map(lambda v: True if v is None or v != v else bool(v))
        out["pass"] = out["A_pass"] & out["B1"] & c_ok
        return out

    def pass_counts(self) -> dict:
        v = self.verdicts()
        return {site: dict(passed=int(g["pass"].sum()), total=len(g)) for site, g in v.groupby("site", sort=False)}


def sweep(model, sample, thresholds: dict, layers=None, sites=None, n_texts: int = 16, seed: int = 0,
          batch: int = 16, progress: bool = True, label: str = "model") -> Sweep:
    """All sites × layers × A, B, C for one model: one corpus pass, then the steering runs."""
    chosen = all_sites(model, layers, sites) if sites else all_sites(model, layers)
    plans = build_plans(model, chosen, thresholds, seed=seed)
    stats = SiteStatistics(model, plans, seed=seed)
    stats.run(sample, batch=batch, progress=progress)
    a, b = check_a(stats, thresholds), check_b(stats, thresholds, model)
    if any(s.name in RESIDUAL_SITES for s in chosen):
        c, dose = check_c(model, plans, steer_texts(sample, n_texts), thresholds, seed, progress)
    else:
        c, dose = pd.DataFrame(), pd.DataFrame()
    record = dict(label=label, sample=sample.record(), thresholds=thresholds, seed=seed,
                  layers=sorted({s.layer for s in chosen}), sites=sorted({s.name for s in chosen}))
    return Sweep(a, b, c, dose, record)



# --- negative controls and coverage curves ----------------------------------------------------------------

CHECKS = ("A1", "A2", "A4", "B1", "C1")


CONTROLS = ("random-init", "permuted")


def control_model(name: str, control: str, seed: int = 0, device: str = "cpu"):
    """A negative control of a registry model: every weight re-drawn (``random-init``) or each site's
    input columns permuted (``permuted``); loaded fresh, so the real model is untouched."""
    from helpers.core.models import load_model
    from helpers.tiled.sites import permute_site_columns, randomise_weights

    if control not in CONTROLS:
        raise ValueError(f"control={control!r} is not one of {CONTROLS}")
    model = load_model(name, processing="raw", device=device)
    (randomise_weights if control == "random-init" else permute_site_columns)(model, seed)
    return model


def pass_rates(sweeps: dict[str, Sweep]) -> pd.DataFrame:
    """Fraction of judged site-layers passing each check, per site and model/control (columns: labels)."""
    rows = []
    for label, result in sweeps.items():
        v = result.verdicts()
        for site, group in v.groupby("site", sort=False):
            for check in (*CHECKS, "pass"):
                judged = group[check].dropna() if check == "C1" else group[check]
                judged = judged[judged.map(lambda x: x is not None)]
                if len(judged):
                    rows.append(dict(site=site, check=check, label=label, rate=float(judged.astype(bool).mean()),
                                     judged=len(judged)))
    table = pd.DataFrame(rows).pivot_table(index=["site", "check"], columns="label", values="rate", sort=False)
    return table


def uninformative(rates: pd.DataFrame, real: str = "model", controls=("random-init", "permuted")) -> pd.DataFrame:
    """Checks that some negative control passes at least as often as the real model (and at all)."""
    present = [c for c in controls if c in rates.columns]
    flags = pd.Series(False, index=rates.index)
    for control in present:
        flags |= (rates[control] >= rates[real]) & (rates[control] > 0)
    return rates.assign(uninformative=flags)


def coverage_sweep(model, sample, layers, widths=(64, 128, 256, 512, 1024), ks=(1, 2, 4, 8, 16), k_width: int = 2,
                   seed: int = 0, batch: int = 16, progress: bool = True) -> pd.DataFrame:
    """Coverage (B) of tile mounts vs k at the paper's widths and vs tile width at ``k_width``, against
    random column partitions of the same widths and random directions of the same count; Frobenius weight
    coverage beside each. One corpus pass for all of it. One row per (layer, site, variable, value)."""
    plans, meta = [], []
    for site in all_sites(model, layers):
        W = site_matrix(model, site)
        coverage, entries = {}, []
        for k in ks:
            entries.append(("k", k, PAPER_WIDTHS[site.name], k))
        for w in sorted({w for w in widths if w < W.shape[1]} | {W.shape[1]}):  # d_in: the whole matrix as one tile
            entries.append(("width", w, w, k_width))
        by_width = {}
        for variable, value, width, k in entries:
            key = f"{variable}{value}"
            if width not in by_width:
                by_width[width] = tile_svd(W, width, max(max(ks), k_width))
            tile = by_width[width].per_tile(k)
            coverage[f"tile_{key}"] = tile
            coverage[f"partition_{key}"] = random_partition_svd(W, width, k, seed)
            coverage[f"random_{key}"] = random_directions(W.shape[0], len(tile), seed + 7)
            meta.append(dict(layer=site.layer, site=site.name, variable=variable, value=value, width=width, k=k,
                             directions=len(tile), frobenius=frobenius_coverage(tile, W)))
        plans.append(StreamPlan(site, site.name, {"random": random_directions(W.shape[0], 1, seed)}, coverage))
    stats = SiteStatistics(model, plans, seed=seed)
    stats.run(sample, batch=batch, progress=progress)
    results = stats.results()
    rows = []
    for m in meta:
        cov = results[f"L{m['layer']} {m['site']}"]["coverage"]
        key = f"{m['variable']}{m['value']}"
        rows.append(dict(**m, tile=cov[f"tile_{key}"], partition=cov[f"partition_{key}"], random=cov[f"random_{key}"]))
    return pd.DataFrame(rows)
