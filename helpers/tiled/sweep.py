"""Paper 2's sweep: every site × layer × check for one model, its negative controls (random
initialisation, permuted columns) through the same pipeline, pass rates, the checks a control passes as
often as the real model, and the coverage curves of notebook 05.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import torch

from helpers.tiled.judges import OUR_JUDGE, PAPER_JUDGE, released_c, verdicts
from helpers.tiled.plans import TRIAL, build_plans, trial_kind
from helpers.tiled.sites import CONTROLS, PAPER_WIDTHS, RESIDUAL_SITES, all_sites, control_model, site_matrix
from helpers.tiled.statistics import SiteStatistics, StreamPlan
from helpers.tiled.steer import Steering, check_c, steer_texts
from helpers.tiled.tiling import Mounts, frobenius_coverage, random_directions, random_partition_svd, tile_svd
from helpers.tiled.verdicts import check_a, check_b


@dataclass
class Sweep:
    a: pd.DataFrame
    b: pd.DataFrame
    c: pd.DataFrame
    dose: pd.DataFrame
    record: dict
    c_released: pd.DataFrame | None = None  # the steer measurements of the released code's C rules
    search: pd.DataFrame | None = None  # the released runner's width search under its judge (``width_search``)

    def verdicts(self, judge=OUR_JUDGE) -> pd.DataFrame:
        """Site × layer: A, B1, C1 and the overall pass (C only where judged), under ``judge``
        (``helpers.tiled.judges``: ours by default)."""
        return verdicts(self, judge)

    def pass_counts(self, judge=OUR_JUDGE, searched: bool = False) -> dict:
        """{site: {passed, total}} under ``judge``, or (``searched``) after the released width search."""
        if searched and self.search is None:
            raise ValueError(f"sweep {self.record.get('label')!r} ran no width search (sweep(..., search=...))")
        v = self.search if searched else self.verdicts(judge)
        return {site: dict(passed=int(g["pass"].astype(bool).sum()), total=len(g))
                for site, g in v.groupby("site", sort=False)}


def sweep(model, sample, thresholds: dict, layers=None, sites=None, n_texts: int = 16, seed: int = 0,
          batch: int = 16, progress: bool = True, label: str = "model", released: bool = True,
          widths: dict = PAPER_WIDTHS, effective: bool = True, search: dict | None = None) -> Sweep:
    """All sites × layers × A, B, C for one model: one corpus pass, then the steering runs (with
    ``released``, also those of the released code's check C, for ``judges.PAPER_JUDGE``). ``widths``: the
    tile width of each site (``helpers.tiled.widths``); ``effective``: also the effective-path streams;
    ``search`` (site → widths in order, ``widths.search_widths``): then also the released runner's width
    search, under the released judge (``width_search``)."""
    chosen = all_sites(model, layers, sites) if sites else all_sites(model, layers)
    trial_widths = None
    if search is not None:
        for name in {s.name for s in chosen}:
            if search[name][0] != widths[name]:
                raise ValueError(f"search[{name!r}] starts at {search[name][0]}, but the sweep's width is "
                                 f"{widths[name]}: the search's first trial is the sweep itself")
        trial_widths = {name: tuple(search[name][1:]) for name in search}
    plans = build_plans(model, chosen, thresholds, widths=widths, seed=seed, effective=effective,
                        trial_widths=trial_widths)
    stats = SiteStatistics(model, plans, seed=seed)
    stats.run(sample, batch=batch, progress=progress)
    a, b = check_a(stats, thresholds), check_b(stats, thresholds, model)
    trial_a, trial_b = a[a["site"].str.contains(TRIAL, regex=False)], b[b["site"].str.contains(TRIAL, regex=False)]
    a, b = a.drop(trial_a.index).reset_index(drop=True), b.drop(trial_b.index).reset_index(drop=True)
    c_released = None
    if any(s.name in RESIDUAL_SITES for s in chosen):
        texts = steer_texts(sample, n_texts)
        steering, tile_changes = Steering(model, texts), {}
        c, dose = check_c(model, plans, texts, thresholds, seed, progress, steering, tile_changes)
        if released:
            c_released = released_c(model, plans, stats.results(), texts, thresholds, progress, steering, tile_changes)
    else:
        c, dose = pd.DataFrame(), pd.DataFrame()
    record = dict(label=label, sample=sample.record(), thresholds=thresholds, seed=seed,
                  layers=sorted({s.layer for s in chosen}), sites=sorted({s.name for s in chosen}),
                  widths={s.name: widths[s.name] for s in chosen})
    result = Sweep(a, b, c, dose, record, c_released)
    if search is not None:
        result.search = width_search(result, trial_a, trial_b, search)
    return result


def _checks_passed(row) -> int:
    """Checks a verdict row passes; C1 counts as passed where it is not judged (None)."""
    c1 = row["C1"]
    return sum(bool(row[c]) for c in ("A1", "A2", "A4", "B1")) + int(c1 is None or c1 != c1 or bool(c1))


def width_search(first: Sweep, trial_a: pd.DataFrame, trial_b: pd.DataFrame, search: dict,
                 judge=PAPER_JUDGE) -> pd.DataFrame:
    """The released runner's search, on trial streams measured in the sweep's own corpus pass
    (``plans.trial_kind``): a site-layer that fails under ``judge`` at its first width is judged at its next
    width (``search``: site → widths in order), until a trial passes; when none does, the trial with the
    most checks passed is kept (the last among equals). Measuring every trial in one pass changes no
    choice: a trial is only looked at when the ones before it failed. Returns the verdicts with the
    ``width`` kept and the number of ``trials`` judged. The effective-path pools the released runner also
    tried are not searched. Trial sites are never residual, so check C does not enter."""
    best = first.verdicts(judge)
    best["width"] = [first.record["widths"][site] for site in best["site"]]
    best["trials"] = 1
    for trial in range(1, max(len(w) for w in search.values())):
        todo = best[~best["pass"].astype(bool) & best["site"].map(lambda site: len(search[site]) > trial)]
        if todo.empty:
            break
        kinds = {site: trial_kind(site, search[site][trial]) for site in set(todo["site"])}
        pick = lambda t: t[t["site"].isin(kinds.values())].assign(  # noqa: E731
            site=lambda f: f["site"].str.split(TRIAL, regex=False).str[0])
        measured = Sweep(pick(trial_a), pick(trial_b), pd.DataFrame(), pd.DataFrame(), first.record)
        tried = measured.verdicts(judge).set_index(["layer", "site"])
        for index in todo.index:
            key = (best.at[index, "layer"], best.at[index, "site"])
            new = tried.loc[key]
            best.at[index, "trials"] = trial + 1
            if bool(new["pass"]) or _checks_passed(new) >= _checks_passed(best.loc[index]):
                for column in ("A1", "A2", "A4", "A_pass", "B1", "C1", "pass"):
                    best.at[index, column] = new[column]
                best.at[index, "width"] = search[key[1]][trial]
    return best


# --- negative controls and coverage curves ----------------------------------------------------------------

CHECKS = ("A1", "A2", "A4", "B1", "C1")


def control_sweeps(name: str, controls, sample, thresholds: dict, layers=None, n_texts: int = 16, seed: int = 0,
                   device: str = "cpu", progress: bool = True, widths: dict = PAPER_WIDTHS,
                   search: dict | None = None) -> tuple[dict[str, Sweep], dict[str, float]]:
    """The same sweep on each negative control of registry model ``name`` (loaded fresh, one at a time, so
    only one copy is held). Returns ({control: Sweep}, {control: seconds})."""
    import time

    unknown = [c for c in controls if c not in CONTROLS]
    if unknown:
        raise ValueError(f"controls={list(controls)!r}: {unknown} not among {CONTROLS}")
    sweeps, seconds = {}, {}
    for control in controls:
        start = time.time()
        model = control_model(name, control, seed=seed, device=device)
        sweeps[control] = sweep(model, sample, thresholds, layers=layers, n_texts=n_texts, seed=seed,
                                progress=progress, label=control, widths=widths, search=search)
        seconds[control] = time.time() - start
        del model
    return sweeps, seconds


def pass_counts_table(sweeps: dict[str, Sweep], judge=OUR_JUDGE, searched: bool = False) -> pd.DataFrame:
    """Site × label: "passed/total" of every sweep (real model and controls side by side), under ``judge``
    or (``searched``) after the released width search."""
    return pd.DataFrame({label: {site: f"{c['passed']}/{c['total']}"
                                 for site, c in result.pass_counts(judge, searched).items()}
                         for label, result in sweeps.items()})


def pass_rates(sweeps: dict[str, Sweep], judge=OUR_JUDGE) -> pd.DataFrame:
    """Fraction of judged site-layers passing each check, per site and model/control (columns: labels)."""
    rows = []
    for label, result in sweeps.items():
        v = result.verdicts(judge)
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


def coverage_sets(W: torch.Tensor, paper_width: int, widths, ks, k_width: int, seed: int
                  ) -> tuple[dict[str, Mounts], list[dict]]:
    """One site's direction sets for ``coverage_sweep``: tile mounts at ``paper_width`` for every k of ``ks``
    ("k<k>") and at every width below d_in, and d_in itself (the whole matrix as one tile), for ``k_width``
    ("width<w>"); each beside a random column partition of the same widths and k, and as many random
    directions. The tile and the partition SVDs are computed once per width, at the largest k. Returns the sets
    by name (tile_<key>, partition_<key>, random_<key>) and one entry per key (variable, value, width, k,
    directions, frobenius)."""
    entries = [("k", k, paper_width, k) for k in ks]
    entries += [("width", w, w, k_width) for w in sorted({w for w in widths if w < W.shape[1]} | {W.shape[1]})]
    largest_k = max((*ks, k_width))
    tiles, partitions, coverage, meta = {}, {}, {}, []
    for variable, value, width, k in entries:
        if width not in tiles:
            tiles[width] = tile_svd(W, width, largest_k)
            partitions[width] = random_partition_svd(W, width, largest_k, seed)
        key = f"{variable}{value}"
        tile = tiles[width].per_tile(k)
        coverage[f"tile_{key}"] = tile
        coverage[f"partition_{key}"] = partitions[width].per_tile(k)
        coverage[f"random_{key}"] = random_directions(W.shape[0], len(tile), seed + 7)
        meta.append(dict(variable=variable, value=value, width=width, k=k, directions=len(tile),
                         frobenius=frobenius_coverage(tile, W)))
    return coverage, meta


def coverage_sweep(model, sample, layers, widths=(64, 128, 256, 512, 1024), ks=(1, 2, 4, 8, 16), k_width: int = 2,
                   seed: int = 0, batch: int = 16, progress: bool = True) -> pd.DataFrame:
    """Coverage (B) of tile mounts vs k at the paper's widths and vs tile width at ``k_width``, against
    random column partitions of the same widths and random directions of the same count; Frobenius weight
    coverage beside each. One corpus pass for all of it. One row per (layer, site, variable, value)."""
    plans, meta = [], []
    for site in all_sites(model, layers):
        W = site_matrix(model, site)
        coverage, entries = coverage_sets(W, PAPER_WIDTHS[site.name], widths, ks, k_width, seed)
        meta += [dict(layer=site.layer, site=site.name, **entry) for entry in entries]
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


def trials_needed(sweeps: dict[str, Sweep]) -> pd.DataFrame:
    """One row per outcome ("passed at trial t", t = 1 at the paper's width, or "failed after every
    trial"), one column per label: how many site-layers had it after the released width search."""
    rows = {}
    for label, result in sweeps.items():
        if result.search is None:
            raise ValueError(f"sweep {label!r} ran no width search (sweep(..., search=...))")
        s = result.search
        counts = s[s["pass"].astype(bool)].groupby("trials").size()
        rows[label] = {**{f"passed at trial {t}": int(n) for t, n in counts.items()},
                       "failed after every trial": int((~s["pass"].astype(bool)).sum())}
    return pd.DataFrame(rows).fillna(0).astype(int).rename_axis("outcome").reset_index()
