"""Reading one attention head through its singular directions on a task (docs/methods.md §1.5).

For OV direction k of head h the coefficient at the answer position i is
a_k = σ_k (c̃·u_k) with c̃ = [1, Σ_j A_ij x_j], so it splits exactly into one term per source position,
A_ij σ_k (x_j·u_k[1:]), plus a constant σ_k u_k[0] (value and output biases). For QK direction k the
(pre-rotation, unscaled) score of key j is σ_k (x̃_i·u_k)(x̃_j·v_k). Grouping those terms by the IOI roles
(BOS, IO, S1, S2, end) says which positions drive a direction; ablating directions one at a time, against
directions of other heads with matched singular values, says which matter.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from helpers.singular.directions.augmented import homogeneous, numerically_zero, ov_factors, qk_factors, svd_of_product
from helpers.singular.masking.circuits import CircuitEvaluator
from helpers.singular.masking.masks import FixedMasks
from helpers.singular.tasks import ioi_positions
from helpers.core.weights import input_hook, layer_weights


def attention_spectra(model) -> dict[str, torch.Tensor]:
    """{"qk": [L, H, d_head], "ov": [L, H, r]} singular values of every head's augmented QK and OV matrices
    (on the CPU, like every weight-side SVD)."""
    out = {"qk": [], "ov": []}
    for layer in range(model.n_layers):
        w = layer_weights(model, layer, device="cpu")
        out["qk"].append(svd_of_product(*qk_factors(w)).S)
        out["ov"].append(svd_of_product(*ov_factors(w)).S)
    return {kind: torch.stack(values) for kind, values in out.items()}


NAME_MOVER = dict(min_io_attention=0.2, io_over_s=2.0, min_attribution=0.0)
"""The criterion a name mover meets, declared before any run. At the answer position (END) the head
attends to the IO name at least ``min_io_attention`` on average and at least ``io_over_s`` times as much
as to the subject's two mentions together (S1 + S2), and its direct logit attribution to IO − S exceeds
``min_attribution``. This is what "moves the IO name to the logits" means in Wang et al."""


def end_attention_by_prompt(model, task) -> dict[str, torch.Tensor]:
    """{role: [n_prompts, n_layers, n_heads]} attention of each prompt's answer position (END) to each IOI
    role's position (on the CPU)."""
    roles = ioi_positions(task)
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(model.n_layers)]
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(task.clean.to(model.device), names_filter=lambda n: n in names)
    rows, answer_pos = torch.arange(len(task), device="cpu"), task.answer_pos.cpu()
    return {role: torch.stack([cache[name].cpu()[rows, :, answer_pos, roles[role]].double() for name in names], 1)
            for role in ("IO", "S1", "S2", "BOS")}


def end_attention(model, task) -> dict[str, torch.Tensor]:
    """{role: [n_layers, n_heads]} mean attention of the answer position to each IOI role's position."""
    return {role: values.mean(0) for role, values in end_attention_by_prompt(model, task).items()}


def meets_name_mover(io: float, s: float, attribution: float, criterion: dict = NAME_MOVER) -> bool:
    """The declared rule (``NAME_MOVER``) on one head's mean END attention to IO and to S1 + S2 and its DLA."""
    return bool(io >= criterion["min_io_attention"] and io >= criterion["io_over_s"] * s
                and attribution > criterion["min_attribution"])


def name_mover_table(attention: dict[str, torch.Tensor], attribution: torch.Tensor, mass: torch.Tensor,
                     criterion: dict = NAME_MOVER) -> pd.DataFrame:
    """Every head with its END → IO and END → S attention, its direct logit attribution to IO − S, its mask
    mass, whether it meets ``criterion`` (``name_mover``) and whether it is a candidate (``candidate``: it
    attends IO more than S1 + S2 and its attribution is positive; see ``candidate_ranking``); sorted by
    attribution, equal attributions in (layer, head) order."""
    n_layers, n_heads = attribution.shape
    rows = []
    for layer in range(n_layers):
        for head in range(n_heads):
            io = float(attention["IO"][layer, head])
            s = float(attention["S1"][layer, head] + attention["S2"][layer, head])
            dla = float(attribution[layer, head])
            rows.append(dict(layer=layer, head=head, attention_io=io, attention_s=s, attribution=dla,
                             mask_mass=float(mass[layer, head]), name_mover=meets_name_mover(io, s, dla, criterion),
                             candidate=bool(io > s and dla > 0)))
    return pd.DataFrame(rows).sort_values("attribution", ascending=False, kind="stable", ignore_index=True)


CANDIDATE_RANKING = ("among heads whose END attention to IO exceeds their attention to S1 + S2 and whose DLA to "
                     "IO − S is positive, the largest DLA (equal DLAs: the lower layer, then the lower head)")
"""The case-study head's ranking, declared 2026-12-04 before the rerun that uses it (docs/methods.md §1.5).
It needs no threshold, so a head cannot drop out of it by a hair on one prompt set."""


def by_attribution(table: pd.DataFrame) -> pd.DataFrame:
    """Heads by DLA, largest first; equal DLAs: the lower layer, then the lower head (whatever the table's order)."""
    return table.sort_values(["attribution", "layer", "head"], ascending=[False, True, True], kind="stable",
                             ignore_index=True)


def candidate_ranking(table: pd.DataFrame) -> pd.DataFrame:
    """The candidates of ``name_mover_table`` (``CANDIDATE_RANKING``), best first."""
    return by_attribution(table[table["candidate"]])


def choose_control_head(table: pd.DataFrame, layer: int, head: int) -> tuple[int, int]:
    """The control of a case-study head: among heads that are not name movers and write nothing toward IO − S
    (attribution ≤ 0), the one whose mask mass is closest to the case-study head's; among equally close
    heads (clamped masks give equal masses), the smallest |attribution|, then the lower layer and head."""
    target = float(_head_row(table, layer, head)["mask_mass"])
    pool = table[~table["name_mover"] & (table["attribution"] <= 0)]
    if pool.empty:
        raise ValueError("every head is a name mover or writes toward IO − S: no control head")
    keyed = pool.assign(distance=(pool["mask_mass"] - target).abs(), size=pool["attribution"].abs())
    best = keyed.sort_values(["distance", "size", "layer", "head"], kind="stable").iloc[0]
    return int(best["layer"]), int(best["head"])


MARGIN_RESAMPLES = 2000


def margin_table(attention: dict[str, torch.Tensor], attribution: torch.Tensor, criterion: dict = NAME_MOVER,
                 resamples: int = MARGIN_RESAMPLES, level: float = 0.95, seed: int = 0) -> pd.DataFrame:
    """Every head's name-mover margin on one prompt set: IO / (S1 + S2), the ratio of the mean END attentions
    (``attention`` from ``end_attention_by_prompt``, [n, L, H] per role), with a bootstrap interval over
    prompts (``resamples`` draws of n prompts with replacement, seeded; percentile interval at ``level``),
    beside the attention, the DLA (``attribution`` [L, H], on the same prompts) and whether the declared
    rule is met (``name_mover``, on the means). Rows in (layer, head) order."""
    io, s = attention["IO"], attention["S1"] + attention["S2"]  # [n, L, H]
    n = io.shape[0]
    draws = torch.randint(n, (resamples, n), generator=torch.Generator().manual_seed(seed), device="cpu").to(io.device)
    ratios = io[draws].mean(1) / s[draws].mean(1)  # [resamples, L, H]
    tail = (1 - level) / 2
    low, high = (torch.quantile(ratios, q, dim=0) for q in (tail, 1 - tail))
    io_mean, s_mean = io.mean(0), s.mean(0)
    rows = []
    for layer in range(io.shape[1]):
        for head in range(io.shape[2]):
            i, j, dla = float(io_mean[layer, head]), float(s_mean[layer, head]), float(attribution[layer, head])
            rows.append(dict(layer=layer, head=head, attention_io=i, attention_s=j, margin=i / j,
                             margin_low=float(low[layer, head]), margin_high=float(high[layer, head]), attribution=dla,
                             name_mover=meets_name_mover(i, j, dla, criterion)))
    return pd.DataFrame(rows)


def _head_row(table: pd.DataFrame, layer: int, head: int) -> pd.Series:
    return table[(table["layer"] == layer) & (table["head"] == head)].iloc[0]


def specificity(head: list[dict], control: list[dict]) -> pd.DataFrame:
    """Each subfunction verdict of the case-study head beside its control head's (``subfunction_evidence``):
    supported only when the head passes and the control fails; "not specific" when both pass."""
    rows = []
    for mine, theirs in zip(head, control):
        if mine["subfunction"] != theirs["subfunction"]:
            raise ValueError(f"verdicts out of order: {mine['subfunction']!r} vs {theirs['subfunction']!r}")
        verdict = ("not supported" if not mine["supported"] else
                   "not specific (the control head passes too)" if theirs["supported"] else "supported")
        rows.append(dict(subfunction=mine["subfunction"], head=mine["supported"], control=theirs["supported"],
                         verdict=verdict, head_directions=", ".join(mine["directions"]),
                         control_directions=", ".join(theirs["directions"])))
    return pd.DataFrame(rows)


class HeadReading:
    """What drives each singular direction of one head at the answer position of every prompt (computed on
    the CPU from the model's activations: a reading, not a forward pass)."""

    def __init__(self, model, tokens: torch.Tensor, answer_pos: torch.Tensor, layer: int, head: int):
        w = layer_weights(model, layer, device="cpu")
        self.layer, self.head = layer, head
        ov = svd_of_product(*ov_factors(w))[head]
        qk = svd_of_product(*qk_factors(w))[head]
        self.ov_S, self.qk_S = ov.S, qk.S
        self.ov_V = ov.V  # [d, r] write directions
        self.ov_null = numerically_zero(ov.S)
        names = [input_hook(model, layer, "attn"), f"blocks.{layer}.attn.hook_pattern"]
        with torch.no_grad():
            _, cache = model.bridge.run_with_cache(tokens.to(model.device), names_filter=names)
        tokens, answer_pos = tokens.cpu(), answer_pos.cpu()
        rows = torch.arange(tokens.shape[0], device="cpu")
        x = cache[names[0]].cpu().double()  # [n, T, d]
        weights = cache[names[1]].cpu()[rows, head, answer_pos].double()  # [n, T] attention of the answer position
        self.attention = weights
        self.ov_bias = ov.S * ov.U[0]  # [r]
        self.ov_sources = weights[..., None] * (x @ ov.U[1:]) * ov.S  # [n, T, r]
        x_h = homogeneous(x)
        query = x_h[rows, answer_pos] @ qk.U  # [n, r]
        self.qk_keys = qk.S * query[:, None, :] * (x_h @ qk.V)  # [n, T, r]
        self.valid = torch.arange(tokens.shape[1], device="cpu")[None] <= answer_pos[:, None]
        self.tokens = tokens

    @property
    def ov_coefficients(self) -> torch.Tensor:
        """[n, r] a_k at the answer position (sources + bias)."""
        return self.ov_sources.sum(1) + self.ov_bias

    def written_contrast(self, contrast: torch.Tensor) -> torch.Tensor:
        """[n, r] what each OV direction writes onto a per-prompt logit contrast [n, d] (e.g. w_IO − w_S from
        ``helpers.singular.heads.receptors.contrast_vector``) through the direct path: a_k (v_k · contrast)."""
        return self.ov_coefficients * (contrast.double() @ self.ov_V)


def by_role(values: torch.Tensor, positions: dict[str, torch.Tensor], valid: torch.Tensor, other: str = "sum") -> pd.DataFrame:
    """Mean over prompts of ``values`` [n, T, r] at each role's position, one row per direction; the
    remaining valid positions as "other", summed (additive terms) or averaged (scores)."""
    rows = torch.arange(values.shape[0], device=values.device)
    columns, rest = {}, valid.clone().double()
    for role, pos in positions.items():
        columns[role] = values[rows, pos].mean(0)
        rest[rows, pos] = 0.0
    weighted = (values * rest[..., None]).sum(1)
    if other == "mean":
        weighted = weighted / rest.sum(1, keepdim=True).clamp_min(1)
    columns["other"] = weighted.mean(0)
    frame = pd.DataFrame({k: v.cpu().numpy() for k, v in columns.items()})
    frame.index.name = "direction"
    return frame


def top_source_tokens(tokenizer, reading: HeadReading, direction: int, k: int = 5) -> list[str]:
    """The tokens whose positions contribute most (summed over prompts, by |·|) to an OV direction's coefficient."""
    contributions = reading.ov_sources[..., direction] * reading.valid
    totals: dict[int, float] = {}
    for token, value in zip(reading.tokens.reshape(-1).tolist(), contributions.reshape(-1).tolist()):
        totals[token] = totals.get(token, 0.0) + value
    best = sorted(totals, key=lambda t: -abs(totals[t]))[:k]
    return [f"{tokenizer.decode([t])!r}:{totals[t] / reading.tokens.shape[0]:+.2f}" for t in best]


def _matched_controls(spectra: torch.Tensor, layer: int, head: int, direction: int, n: int, pool: int,
                      generator: torch.Generator) -> list[tuple[int, int, int]]:
    """``n`` directions of other heads, drawn at random among the ``pool`` whose singular values are closest
    (in log) to that of (layer, head, direction); numerically null directions excluded."""
    S = spectra.double()
    target = torch.log(S[layer, head, direction])
    distance = (torch.log(S.clamp_min(1e-300)) - target).abs()
    distance[layer, head] = float("inf")
    distance[S <= S.amax((-1,), keepdim=True) * 1e-9] = float("inf")
    flat = distance.reshape(-1)
    nearest = torch.sort(flat, stable=True).indices[:pool]  # equal distances: the earlier (layer, head, direction)
    nearest = nearest[torch.isfinite(flat[nearest])]
    picked = nearest[torch.randperm(len(nearest), generator=generator, device="cpu").to(nearest.device)[:n]]
    L, H, R = S.shape
    return [(int(i) // (H * R), (int(i) // R) % H, int(i) % R) for i in picked]


def _without(model_masks: FixedMasks, kind: str, entries) -> FixedMasks:
    blocks = {name: value.clone() for name, value in model_masks.blocks.items()}
    for layer, head, direction in entries:
        blocks[f"{layer}_{kind}"][head, direction] = 0.0
    return FixedMasks(blocks)


EFFECT_RULE = dict(share_of_head=0.1, level=0.95)
"""Declared on 2026-12-06, before notebook 03's next run: a direction *matters* only when it moves the metric
beyond all of its σ-matched controls and the ``level`` bootstrap interval of its effect lies wholly beyond
``share_of_head`` times the head's own ablation effect (all of its directions at once), and, for the studied
head, beyond the control head's largest single-direction effect. An effect a tenth of the head's is the least
a subfunction the head carries should move."""


def _ablated(evaluator: CircuitEvaluator, circuit: FixedMasks) -> tuple[torch.Tensor, float, float]:
    """One masked forward on the evaluator's held-out prompts: the metric of each prompt [n] (float64, CPU), and
    the mean metric and mean KL exactly as ``CircuitEvaluator.evaluate`` computes them."""
    from helpers.singular.masking.circuits import task_metric
    from helpers.singular.masking.references import kl_to_full

    with torch.no_grad():
        logits = evaluator.masked.masked_final_logits(circuit, evaluator.rule, evaluator.task.clean,
                                                      evaluator.task.answer_pos, evaluator.prepared.references)
    metric = task_metric(evaluator.task, logits)[0]
    return (metric.double().cpu(), float(metric.mean()),
            float(kl_to_full(evaluator.prepared.log_p_full, logits).mean()))


def per_prompt_metric(evaluator: CircuitEvaluator, circuit: FixedMasks) -> torch.Tensor:
    """[n] The task metric of each held-out prompt with ``circuit`` under the evaluator's rule (on the CPU)."""
    return _ablated(evaluator, circuit)[0]


def mean_interval(values: torch.Tensor, resamples: int = MARGIN_RESAMPLES, level: float = 0.95,
                  seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of ``values`` [n] over prompts: a percentile bootstrap interval at ``level`` of the mean
    (``resamples`` draws of n prompts with replacement, seeded, drawn on the CPU)."""
    n = values.shape[0]
    draws = torch.randint(n, (resamples, n), generator=torch.Generator().manual_seed(seed), device="cpu")
    means = values.double().cpu()[draws].mean(1)
    tail = (1 - level) / 2
    return float(values.double().mean()), float(torch.quantile(means, tail)), float(torch.quantile(means, 1 - tail))


def head_ablation_effect(evaluator: CircuitEvaluator, model, layer: int, head: int, seed: int = 0) -> dict:
    """The change in the held-out metric when every QK and OV direction of the head is ablated at once (under
    the evaluator's rule), with its bootstrap interval over prompts: the scale a single direction's effect is
    measured against (``EFFECT_RULE``)."""
    ones = FixedMasks.ones(model)
    blocks = {name: value.clone() for name, value in ones.blocks.items()}
    for kind in ("qk", "ov"):
        blocks[f"{layer}_{kind}"][head] = 0.0
    change = per_prompt_metric(evaluator, FixedMasks(blocks)) - per_prompt_metric(evaluator, ones)
    mean, low, high = mean_interval(change, level=EFFECT_RULE["level"], seed=seed)
    return dict(mean=mean, low=low, high=high)


def ablation_effects(evaluator: CircuitEvaluator, model, spectra: dict[str, torch.Tensor], layer: int, head: int,
                     directions: dict[str, list[int]], n_controls: int = 4, seed: int = 0,
                     progress: bool = True) -> pd.DataFrame:
    """Change in the task metric (held-out, under the evaluator's ablation rule) when one direction of the
    head is ablated, with its bootstrap interval over prompts (``effect_low``, ``effect_high``), and when
    instead one of ``n_controls`` σ-matched directions of other heads is."""
    generator = torch.Generator().manual_seed(seed)
    ones = FixedMasks.ones(model)
    base = evaluator.evaluate(ones)
    base_prompts = per_prompt_metric(evaluator, ones)
    jobs = [(kind, k) for kind, ks in directions.items() for k in ks]
    if progress:
        from tqdm.auto import tqdm

        jobs = tqdm(jobs, desc=f"ablating directions of L{layer}.H{head}")
    rows = []
    for kind, k in jobs:
        prompts, metric, kl = _ablated(evaluator, _without(ones, kind, [(layer, head, k)]))  # one forward for all three
        _, low, high = mean_interval(prompts - base_prompts, level=EFFECT_RULE["level"], seed=seed)
        controls = [evaluator.evaluate(_without(ones, kind, [c]))["metric"] - base["metric"]
                    for c in _matched_controls(spectra[kind], layer, head, k, n_controls, 8 * n_controls, generator)]
        rows.append(dict(kind=kind, direction=k, sigma=float(spectra[kind][layer, head, k]),
                         metric_change=metric - base["metric"], effect_low=low, effect_high=high,
                         kl=kl, control_mean=float(np.mean(controls)),
                         control_max_abs=float(np.max(np.abs(controls))),
                         beyond_controls=abs(metric - base["metric"]) > float(np.max(np.abs(controls)))))
    return pd.DataFrame(rows)


def effect_floor(head_effect: float, other_largest: float = 0.0, rule: dict = EFFECT_RULE) -> float:
    """The smallest |effect| a direction's interval must lie beyond (``EFFECT_RULE``)."""
    return max(rule["share_of_head"] * abs(head_effect), abs(other_largest))


def with_effect_sizes(effects: pd.DataFrame, floor: float) -> pd.DataFrame:
    """``effects`` with ``large_enough`` (the interval lies wholly beyond ±``floor``, strictly) and ``matters``
    (large enough, and beyond its σ-matched controls)."""
    large = (effects["effect_low"] > floor) | (effects["effect_high"] < -floor)
    return effects.assign(large_enough=large, matters=large & effects["beyond_controls"])


def dominant_role(row: pd.Series, roles=("BOS", "IO", "S1", "S2", "end", "other")) -> str:
    return max(roles, key=lambda r: abs(row[r]))


def subfunction_evidence(ov_roles: pd.DataFrame, qk_roles: pd.DataFrame, effects: pd.DataFrame) -> list[dict]:
    """Which of the paper's subfunctions the data support, by criteria declared here (not tuned):

    - entity separation: an OV direction whose IO contribution and its S1+S2 contribution differ by more
      than half of its mean |coefficient|, and which matters;
    - salience: a QK direction that scores the IO key above both S keys, and which matters;
    - sequence initialisation: a direction (OV or QK) whose largest term is BOS, and which matters.

    A direction matters by ``effects["matters"]`` (``with_effect_sizes``: beyond its σ-matched controls and
    large enough), or, for a table without it, by ``beyond_controls`` alone."""
    flag = "matters" if "matters" in effects else "beyond_controls"
    matters = {(r.kind, r.direction) for r in effects.itertuples() if getattr(r, flag)}
    scale = ov_roles.abs().sum(1)
    entity = [k for k, r in ov_roles.iterrows()
              if ("ov", k) in matters and abs(r["IO"] - (r["S1"] + r["S2"])) > 0.5 * scale[k]]
    salience = [k for k, r in qk_roles.iterrows() if ("qk", k) in matters and r["IO"] > max(r["S1"], r["S2"])]
    initialisation = [f"{kind.upper()} {k}" for kind, roles in (("ov", ov_roles), ("qk", qk_roles))
                      for k, r in roles.iterrows() if (kind, k) in matters and dominant_role(r) == "BOS"]
    found = [("entity separation (IO vs S)", [f"OV {k}" for k in entity]),
             ("salience (attends IO over S)", [f"QK {k}" for k in salience]),
             ("sequence initialisation (BOS)", initialisation)]
    return [dict(subfunction=name, supported=bool(ds), directions=ds) for name, ds in found]


PAPER_HEAD = (9, 6)
"""Paper 1's case-study head of GPT-2 small: name mover 9.6 (Wang et al.)."""


def margins_of(tables: dict[str, pd.DataFrame], heads: dict[str, tuple[int, int]]) -> pd.DataFrame:
    """The rows of ``margin_table`` for ``heads`` ({label: (layer, head)}) on each prompt set (``tables``:
    {set name: margin table}), one row per (set, head), labelled."""
    rows = []
    for name, table in tables.items():
        for label, (layer, head) in heads.items():
            rows.append(dict(prompt_set=name, label=label, **_head_row(table, layer, head).to_dict()))
    return pd.DataFrame(rows)


def resolve_case_study_head(model, given, table: pd.DataFrame) -> tuple[int, int, str]:
    """(layer, head, why) of the case study: ``given`` ("layer.head") when set; else paper 1's 9.6 for
    GPT-2 small; else the top of ``candidate_ranking`` on ``table`` (from ``name_mover_table``); when no head
    is a candidate, the head of largest attribution to IO − S, and ``why`` says so. A given head is checked
    against the model's shape."""
    if given is not None:
        try:
            layer, head = (int(v) for v in str(given).split("."))
        except ValueError:
            raise ValueError(f"head={given!r} is not 'layer.head' (e.g. '9.6')") from None
        if not (0 <= layer < model.n_layers and 0 <= head < model.n_heads):
            raise ValueError(f"head={given!r}: {model.name} has layers 0–{model.n_layers - 1} and heads "
                             f"0–{model.n_heads - 1}")
        return layer, head, f"given as a parameter ({given})"
    if model.name == "gpt2-small":
        return (*PAPER_HEAD, "paper 1's head 9.6 (a name mover in Wang et al.)")
    ranked = candidate_ranking(table)
    if not ranked.empty:
        best = ranked.iloc[0]
        return int(best["layer"]), int(best["head"]), f"the top candidate: {CANDIDATE_RANKING}"
    best = by_attribution(table).iloc[0]
    return (int(best["layer"]), int(best["head"]),
            "NO head attends IO over S with a positive attribution to IO − S: this is the head of largest direct "
            "logit attribution to IO − S, not a name-mover candidate")


def is_name_mover(table: pd.DataFrame, layer: int, head: int) -> bool:
    return bool(_head_row(table, layer, head)["name_mover"])


def head_evidence(model, evaluator: CircuitEvaluator, spectra: dict, masks, task, layer: int, head: int,
                  n_directions: int, n_controls: int, seed: int = 0, progress: bool = True) -> dict:
    """The case-study pipeline for one head on ``task`` (the evaluator's held-out prompts): its reading, the
    directions studied (``choose_directions`` on its mask logits), their terms by IOI role, one-at-a-time
    ablations against σ-matched controls with their intervals, and the head's own ablation effect. The
    subfunction verdicts come after, from both heads (``judged_subfunctions``)."""
    m_ov, m_qk = masks.values(layer, "ov")[head].detach().cpu(), masks.values(layer, "qk")[head].detach().cpu()
    logit_ov, logit_qk = (masks.logits[f"{layer}_{kind}"][head].detach().cpu() for kind in ("ov", "qk"))
    reading = HeadReading(model, task.clean, task.answer_pos, layer, head)
    chosen = choose_directions(logit_ov, logit_qk, reading.ov_null, reading.ov_S, reading.qk_S, n_directions)
    roles = ioi_positions(task)
    ov_roles = by_role(reading.ov_sources, roles, reading.valid).loc[chosen["ov"]]
    qk_roles = by_role(reading.qk_keys, roles, reading.valid, other="mean").loc[chosen["qk"]]
    effects = ablation_effects(evaluator, model, spectra, layer, head, chosen, n_controls=n_controls, seed=seed,
                               progress=progress)
    return dict(layer=layer, head=head, m_ov=m_ov, m_qk=m_qk, logit_ov=logit_ov, logit_qk=logit_qk, reading=reading,
                chosen=chosen,
                ov_roles=ov_roles.assign(bias=reading.ov_bias[chosen["ov"]].cpu().numpy()), qk_roles=qk_roles,
                attention=by_role(reading.attention[..., None], roles, reading.valid).iloc[0],
                effects=effects, head_effect=head_ablation_effect(evaluator, model, layer, head, seed))


def judged_subfunctions(study: dict, control: dict, rule: dict = EFFECT_RULE) -> tuple[dict, dict, pd.DataFrame]:
    """Both heads' evidence (``head_evidence``) judged by ``EFFECT_RULE``: each head's effects with
    ``large_enough`` and ``matters`` against its own floor (the studied head's also beyond the control head's
    largest single-direction effect), its subfunctions (``subfunction_evidence``), and the verdicts beside the
    control head's (``specificity``). Returns the two updated evidence dicts and the verdicts."""
    floors = {"study": effect_floor(study["head_effect"]["mean"], control["effects"]["metric_change"].abs().max(), rule),
              "control": effect_floor(control["head_effect"]["mean"], 0.0, rule)}
    judged = {}
    for name, evidence in (("study", study), ("control", control)):
        effects = with_effect_sizes(evidence["effects"], floors[name])
        judged[name] = dict(evidence, effects=effects, effect_floor=floors[name],
                            evidence=subfunction_evidence(evidence["ov_roles"].drop(columns="bias"), evidence["qk_roles"],
                                                          effects))
    return judged["study"], judged["control"], specificity(judged["study"]["evidence"], judged["control"]["evidence"])


def choose_directions(ov_logits: torch.Tensor, qk_logits: torch.Tensor, ov_null: torch.Tensor, ov_sigma: torch.Tensor,
                      qk_sigma: torch.Tensor, n: int) -> dict[str, list[int]]:
    """The head's directions studied: per kind the ``n`` of largest mask logit, then largest σ, then lowest
    index (a stable sort on each key, so the order never depends on how a sort breaks ties); OV directions
    with a numerically zero σ excluded (they write nothing). Logits, not mask values: hard-concrete masks
    clamp most kept directions to exactly 1.0."""
    def ranked(logits: torch.Tensor, sigma: torch.Tensor, usable: torch.Tensor) -> list[int]:
        by_sigma = usable[torch.sort(sigma[usable].double(), descending=True, stable=True).indices]
        by_logit = by_sigma[torch.sort(logits[by_sigma].double(), descending=True, stable=True).indices]
        return by_logit[:n].tolist()

    return {"ov": ranked(ov_logits, ov_sigma, (~ov_null).nonzero().flatten()),
            "qk": ranked(qk_logits, qk_sigma, torch.arange(len(qk_logits), device=qk_logits.device))}


def direction_table(model, reading: HeadReading, chosen: dict[str, list[int]], ov_masks: torch.Tensor,
                    qk_masks: torch.Tensor, ov_logits: torch.Tensor, qk_logits: torch.Tensor, ov_roles: pd.DataFrame,
                    qk_roles: pd.DataFrame, written: torch.Tensor, k: int = 5) -> pd.DataFrame:
    """One row per chosen direction: σ, mask, mask logit, and what drives it (its dominant role); for OV also its
    mean coefficient, the IO − S logits it writes (``written`` [r]), its top source tokens and the tokens it
    promotes and suppresses as written (the lens of v_k times the sign of its mean coefficient)."""
    from helpers.singular.directions.readout import top_tokens

    rows = []
    for index in chosen["ov"]:
        coefficient = float(reading.ov_coefficients[:, index].mean())
        writes = top_tokens(model, reading.ov_V[:, index] * (1 if coefficient >= 0 else -1), k)
        rows.append(dict(kind="ov", direction=index, sigma=float(reading.ov_S[index]), mask=float(ov_masks[index]),
                         logit=float(ov_logits[index]), coefficient=coefficient, writes_io_minus_s=float(written[index]),
                         driven_by=dominant_role(ov_roles.loc[index]),
                         source_tokens=" ".join(top_source_tokens(model.tokenizer, reading, index, 3)),
                         promotes=" | ".join(writes["promotes"]), suppresses=" | ".join(writes["suppresses"])))
    for index in chosen["qk"]:
        rows.append(dict(kind="qk", direction=index, sigma=float(reading.qk_S[index]), mask=float(qk_masks[index]),
                         logit=float(qk_logits[index]), driven_by=dominant_role(qk_roles.loc[index])))
    return pd.DataFrame(rows)
