"""Paper 2's check C, measured: α·u added after the post-sublayer norm at all positions (residual sites);
Spearman ρ and top-k Jaccard between the mean last-token logit change and the lens of u
(``helpers.core.logits.lens``: the final norm's own gain, Gemma's 1 + w, and through the model's forward
pass its soft-cap), for the strongest tile mount and for control directions (random, top whole-SVD
direction), bootstrap CIs over the texts, and a dose–response over α. Judged by ``verdicts.rule_c1``.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from helpers.core.forwards import forwards_replaced
from helpers.core.logits import lens, logits_at
from helpers.core.tokens import right_padded
from helpers.tiled.sites import Site, steer_hook
from helpers.tiled.statistics import StreamPlan
from helpers.tiled.verdicts import rule_c1


def rank_order(x: torch.Tensor) -> torch.Tensor:
    """[..., V] the indices that sort each row of x ascending, as float32, ties in order of position:
    ``torch.sort(x.float(), dim=-1, stable=True).indices``, computed as a stable radix sort. Each float's
    bits become an integer key of the same order (negatives reversed below the non-negatives), and each row
    is sorted by numpy's stable argsort, a radix sort for 16-bit keys, on the key's low half and then its
    high half, rows split over torch's threads. −0.0 ranks as +0.0 (a tie, as in the comparison sort); NaN is
    refused. Off the CPU the device's own stable sort does it (the same order by the same contract)."""
    values = x.detach().float()
    if torch.isnan(values).any():
        raise ValueError("rank_order: the values hold NaN, which has no rank")
    if values.device.type != "cpu":
        return torch.sort(values + 0.0, dim=-1, stable=True).indices  # + 0.0 turns −0.0 into +0.0
    bits = (values + 0.0).contiguous().view(torch.int32)  # + 0.0 turns −0.0 into +0.0
    key = bits ^ ((bits >> 31) | -2 ** 31)  # read as unsigned: negatives' bits flipped, non-negatives' sign set
    flat = key.reshape(-1, key.shape[-1])
    low, high = (flat & 0xFFFF).numpy().astype(np.uint16), ((flat >> 16) & 0xFFFF).numpy().astype(np.uint16)
    order = np.empty(low.shape, dtype=np.int64)

    def sort(rows):
        for row in rows:
            by_low = np.argsort(low[row], kind="stable")
            order[row] = by_low[np.argsort(high[row][by_low], kind="stable")]
    workers = max(1, min(torch.get_num_threads(), len(order)))
    with ThreadPoolExecutor(workers) as pool:  # numpy's sort releases the GIL
        list(pool.map(sort, [range(w, len(order), workers) for w in range(workers)]))
    return torch.from_numpy(order).reshape(values.shape)


def centred_ranks(x: torch.Tensor) -> torch.Tensor:
    """Ranks of x [..., V] along its last axis (``rank_order``: ties broken by position, negligible over a
    vocabulary), centred, unit norm per row."""
    order = rank_order(x)
    positions = torch.arange(x.shape[-1], dtype=torch.float64, device=order.device).expand(order.shape)
    r = torch.empty(order.shape, dtype=torch.float64, device=order.device).scatter_(-1, order, positions)
    r -= r.mean(-1, keepdim=True)
    return r / r.norm(dim=-1, keepdim=True)


def spearman(a: torch.Tensor, b: torch.Tensor | None = None, b_ranks: torch.Tensor | None = None) -> float:
    """Spearman ρ of two vectors; pass ``b_ranks`` (``centred_ranks(b)``) to reuse them."""
    return float(centred_ranks(a) @ (centred_ranks(b) if b_ranks is None else b_ranks))


def spearman_rows(rows: torch.Tensor, b_ranks: torch.Tensor) -> torch.Tensor:
    """[m] Spearman ρ of each row of ``rows`` [m, V] with the vector whose ``centred_ranks`` are ``b_ranks``:
    Σ_k (k − mean rank) b_ranks[order_k] / ‖k − mean rank‖ over each row's sorted order (no rank vector is
    scattered; ``centred_ranks``' ties)."""
    order = rank_order(rows)
    k = torch.arange(rows.shape[-1], dtype=torch.float64, device=order.device)
    k -= k.mean()
    return b_ranks[order] @ (k / k.norm())


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
    return SteerTexts(right_padded(sequences), torch.tensor([len(s) - 1 for s in sequences], device="cpu"))


def last_token_logits(model, texts: SteerTexts, hooks=()) -> torch.Tensor:
    """[n, vocab] logits at each text's last token (soft-capped as the model does), float64."""
    with torch.no_grad():
        return logits_at(model, texts.tokens, texts.last, hooks).double()


def steered_change(model, site: Site, u: torch.Tensor, alpha: float, texts: SteerTexts, base: torch.Tensor) -> torch.Tensor:
    """[n, vocab] change of last-token logits when α·u is added after the site's post-sublayer norm at
    every position."""
    vector = (alpha * u).float()

    def add(value, hook):
        return value + vector.to(value.device, value.dtype)
    return last_token_logits(model, texts, [(steer_hook(model, site), add)]) - base


def steer_batches(last: torch.Tensor, m: int, max_tokens: int) -> list[list[tuple[int, int]]]:
    """The (direction, text) rows of ``m`` directions steered over texts whose last tokens are at ``last``,
    in forwards of at most ``max_tokens`` padded tokens (a row longer than that alone). Rows go in order of
    their text's last token (then text, then direction), and each forward runs its texts only up to the
    longest last token among them: the model is causal, so the later tokens change nothing at the last one,
    and a forward holds texts of about one length and little padding."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens!r}: expected an integer ≥ 1")
    texts = sorted(range(len(last)), key=lambda i: (int(last[i]), i))
    batches, batch = [], []
    for i in texts:
        for d in range(m):
            if batch and (len(batch) + 1) * (int(last[i]) + 1) > max_tokens:
                batches.append(batch)
                batch = []
            batch.append((d, i))
    return batches + [batch] if batch else batches


class Steering:
    """Steered forwards over fixed texts, started at the steered layer from the unsteered residual stream.

    One unsteered forward at construction gives the base logits and caches the input of every block.
    ``changes`` then runs the blocks from the steered layer on: the earlier blocks are bypassed, the one just
    before returning the cached input of the steered layer. The directions of one call share forwards of at
    most ``max_tokens`` padded tokens, each text cut after its last token (``steer_batches``)."""

    def __init__(self, model, texts: SteerTexts, max_tokens: int = 2048):
        steer_batches(texts.last, 1, max_tokens)  # refuses a bad budget here, not at the first steer
        self.model, self.texts, self.max_tokens = model, texts, max_tokens
        self.blocks = [model.block(layer) for layer in range(model.n_layers)]
        inputs, kinds = {}, set()

        def keep(layer):
            def hook(module, args, kwargs):
                inputs[layer] = (args[0] if args else kwargs["hidden_states"]).detach()
            return hook

        def kind(module, args, kwargs, output):
            kinds.add(type(output))
        handles = [b.register_forward_pre_hook(keep(i), with_kwargs=True) for i, b in enumerate(self.blocks)]
        handles += [b.register_forward_hook(kind, with_kwargs=True) for b in self.blocks]
        try:
            self.base = last_token_logits(model, texts)
        finally:
            for handle in handles:
                handle.remove()
        if kinds != {torch.Tensor}:
            raise TypeError(f"{model.name}'s blocks return {sorted(k.__name__ for k in kinds)}, not a tensor: "
                            f"starting a forward from the cached residual stream needs blocks that return their "
                            f"hidden states (transformers ≥ 5)")
        self.inputs = inputs

    def _started_at(self, layer: int, hidden: torch.Tensor):
        """A context in which the blocks before ``layer`` are bypassed, and the one just before it returns
        ``hidden``."""
        def bypass(*args, **kwargs):
            return args[0] if args else kwargs["hidden_states"]

        def cached(*args, **kwargs):
            return hidden
        return forwards_replaced({self.blocks[i]: cached if i == layer - 1 else bypass for i in range(layer)})

    def changes(self, site: Site, vectors: torch.Tensor, n_texts: int | None = None) -> torch.Tensor:
        """[m, n, vocab] change of the last-token logits of the first ``n_texts`` texts (all by default) when
        each row of ``vectors`` [m, d_model] is added after the site's post-sublayer norm at every position."""
        n = len(self.texts.last) if n_texts is None else n_texts
        if not 1 <= n <= len(self.texts.last):
            raise ValueError(f"n_texts={n_texts}: the steering texts are {len(self.texts.last)}")
        device = self.model.device
        last, base = self.texts.last[:n], self.base[:n]
        start, hook = self.inputs[site.layer], steer_hook(self.model, site)
        vectors = vectors.float().to(device)
        out = torch.empty(len(vectors), n, base.shape[1], dtype=torch.float64, device=device)
        for batch in steer_batches(last, len(vectors), self.max_tokens):
            d, i = (torch.tensor(index, device="cpu") for index in zip(*batch))  # the texts' own indices: CPU
            length = int(last[i].max()) + 1
            d_at, i_at = d.to(device), i.to(device)
            rows = vectors[d_at][:, None, :]

            def add(value, hook):
                return value + rows.to(value.dtype)
            with torch.no_grad(), self._started_at(site.layer, start[i_at, :length]):
                logits = logits_at(self.model, self.texts.tokens[i, :length], last[i], [(hook, add)]).double()
            out[d_at, i_at] = logits - base[i_at]
        return out


def steering_of(model, texts: SteerTexts, steering: Steering | None) -> Steering:
    """``steering`` if it was made for this model and these texts (refused otherwise), else a new one."""
    if steering is None:
        return Steering(model, texts)
    if steering.model is not model or steering.texts is not texts:
        raise ValueError("the Steering passed was made for another model or other texts: its cached residual "
                         "stream and base logits would be theirs; make it with Steering(model, texts)")
    return steering


def bootstrap_rho(change: torch.Tensor, prediction: torch.Tensor, n_boot: int, seed: int) -> tuple[float, float]:
    """95 % interval of ρ(mean over resampled texts of the change [n, vocab], prediction). Each resample's mean
    is its draw counts times the change; the ``n_boot`` means are ranked in one batch."""
    generator = torch.Generator().manual_seed(seed)
    n = len(change)
    draws = torch.stack([torch.randint(n, (n,), generator=generator, device="cpu") for _ in range(n_boot)])
    counts = torch.zeros(n_boot, n, dtype=torch.float64, device="cpu").scatter_add_(
        1, draws, torch.ones(draws.shape, dtype=torch.float64, device="cpu"))  # drawn on the CPU: the same resamples everywhere
    values = spearman_rows(counts.to(change.device) @ change.double() / n, centred_ranks(prediction)).tolist()
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def check_c(model, plans: list[StreamPlan], texts: SteerTexts, thresholds: dict, seed: int = 0,
            progress: bool = True, steering: Steering | None = None,
            tile_changes: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(verdicts per residual site, dose–response rows). Directions per site: the tile mount with the
    largest σ, a random unit direction, and the top whole-matrix SVD direction. ``steering``: a
    ``Steering`` of these texts to share (one is made otherwise); ``tile_changes``, when given, receives
    each site's mean change under its tile mount at α (``judges.released_c`` reads it)."""
    t = thresholds["C"]
    steering = steering_of(model, texts, steering)
    residual = [p for p in plans if p.site.residual and p.effective is None]
    if progress:
        from tqdm.auto import tqdm

        residual = tqdm(residual, desc="check C (steering)")
    rows, dose = [], []
    for plan in residual:
        tile = plan.sets["tile"]
        directions = {"tile": tile.U[:, int(tile.S.argmax())], "random": plan.sets["random"].U[:, 0],
                      "whole": plan.sets["whole"].U[:, 0]}
        # the norm's scale is a positive factor per direction: ranks do not depend on it
        predictions = lens(model, torch.stack(list(directions.values())), float64=False)
        others = [alpha for alpha in dict.fromkeys(t["dose_alphas"]) if alpha != t["alpha"]]
        steered = steering.changes(plan.site, torch.stack([t["alpha"] * u for u in directions.values()]
                                                          + [alpha * directions["tile"] for alpha in others]))
        tile_at = {t["alpha"]: steered[0], **dict(zip(others, steered[len(directions):]))}
        row = dict(layer=plan.site.layer, site=plan.kind)
        for name, change, prediction in zip(directions, steered, predictions):
            mean = change.mean(0)
            row[f"rho_{name}"] = spearman(mean, prediction)
            row[f"rho_{name}_low"], row[f"rho_{name}_high"] = bootstrap_rho(change, prediction, t["bootstrap"], seed)
            row[f"jaccard_{name}"] = top_jaccard(mean, prediction, t["top"])
        if tile_changes is not None:
            tile_changes[plan.name] = steered[0].mean(0)
        tile_ranks = centred_ranks(predictions[0])
        for alpha in t["dose_alphas"]:
            change = tile_at[alpha].mean(0)
            dose.append(dict(layer=plan.site.layer, site=plan.kind, alpha=alpha, rho=spearman(change, b_ranks=tile_ranks),
                             jaccard=top_jaccard(change, predictions[0], t["top"]), size=float(change.norm())))
        row["C1"] = rule_c1(row["rho_tile"], row["jaccard_tile"], plan.site.layer, thresholds)
        rows.append(row)
    return pd.DataFrame(rows), pd.DataFrame(dose)
