"""One pass over the corpus for every site and layer (docs/methods.md §3): streamed sufficient statistics.

The sampled tokens are split in two halves by sequence (``TokenSample.halves``). The pass runs the fit
half first, then the score half; each sequence is run once, up to its last sampled token, in batches of
sequences of about one length (``pass_batches``).

- **fit half**: per stream a one-pass Nyström sketch of the normalised second moment
  M = mean_t ĥ_t ĥ_tᵀ (ĥ = ΔH/‖ΔH‖; exact when the sketch is as wide as d_out) for the PCA baseline, and the
  effective-path fits: the mean gate activation (``mlp.up``) and the ridge sums XᵀX, XᵀY (``attn.v``).
- between the halves: PCA directions and effective-path mounts are built from those fits;
- **score half**: for every direction set of every stream, f(u) = mean_t (ΔH_t·u)² / (‖ΔH_t‖² + 1e-12) for
  each direction, the span energy mean_t ‖Q_Sᵀ ΔH_t‖²/‖ΔH_t‖², and coverage (B): per token, the least-squares
  fit of ΔH_t on its 8 best-aligned directions, Σ‖residual‖² against Σ‖ΔH_t‖² (solved through the
  normal equations of the 8, in float64: by Cholesky, or by an SVD where the 8 are nearly dependent).

A stream is a site's output (ΔH) or an effective path's: ``mlp.up~eff`` reads act(gate) ⊙ up (the input of
``mlp.down``), ``attn.v~eff`` the o_proj input averaged over the query heads of each KV head. Per-token data
never leave a batch: memory is the statistics plus one batch of activations.

Devices: the statistics accumulate on the model's device; the direction sets are built on the CPU (weight
side, docs/methods.md §0) and each is moved once; the PCA and effective-path fits are built on the CPU from
the fit half's sums, and the few nearly singular systems go to the CPU's SVD-based solver gelsd (CUDA has
none), so that they are solved the same way on every device.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from helpers.core.tokens import right_padded
from helpers.tiled.corpus import TokenSample
from helpers.tiled.sites import Site, site_matrix
from helpers.core.linalg import canonical_signs
from helpers.tiled.tiling import Mounts, TileSpec, gated_up_matrix, ridge_map, weight_sets

EPS = 1e-12
COVERAGE_BEST = 8
CHOLESKY_PIVOT_RATIO = 1e-4  # normal_solve: Cholesky factors less balanced than this go to gelsd
EFFECTIVE = {"mlp.up": "mlp.up~eff", "attn.v": "attn.v~eff"}


@dataclass
class StreamPlan:
    """What to measure for one stream: direction sets for energy/span (A) and for coverage (B)."""

    site: Site
    kind: str  # the site name, or "mlp.up~eff" / "attn.v~eff"
    sets: dict[str, Mounts] = field(default_factory=dict)
    coverage_sets: dict[str, Mounts] = field(default_factory=dict)
    pca_count: int = 0  # PCA directions fitted on the fit half (0: none)
    sketch_width: int = 0
    effective: TileSpec | None = None  # effective streams: how their mounts are built after the fit half
    best: int = COVERAGE_BEST  # coverage: least squares on each token's ``best`` best-aligned directions

    @property
    def name(self) -> str:
        return f"L{self.site.layer} {self.kind}"


class _Stream:
    """Accumulators of one stream."""

    def __init__(self, plan: StreamPlan, d_out: int, seed: int, device="cpu"):
        self.plan, self.d = plan, d_out
        self.tokens = {"fit": 0, "score": 0}
        if plan.pca_count:
            s = min(d_out, max(plan.sketch_width, 4 * plan.pca_count + 16))
            g = torch.randn(d_out, s, generator=torch.Generator().manual_seed(seed), dtype=torch.float64, device="cpu")
            self.omega = torch.linalg.qr(g)[0].to(device)  # drawn and orthonormalised on the CPU, then moved
            self.sketch = torch.zeros(d_out, s, dtype=torch.float64, device=device)
        self.on_device: dict[str, torch.Tensor] = {}  # each set's U on the statistics' device, moved once
        self.energy: dict[str, torch.Tensor] = {}
        self.bases: dict[str, torch.Tensor] = {}
        self.span: dict[str, float] = {}
        self.residual: dict[str, float] = {}
        self.grams: dict[str, torch.Tensor] = {}  # UᵀU of each coverage set
        self.total_sq = 0.0

    def fit(self, h: torch.Tensor) -> None:
        self.tokens["fit"] += len(h)
        if self.plan.pca_count:
            unit = h / (h.norm(dim=-1, keepdim=True) + EPS)
            self.sketch += unit.T @ (unit @ self.omega)

    def pca(self) -> Mounts:
        """Top eigenvectors of the sketched second moment (Nyström, stabilised; Tropp et al. 2017), on the CPU."""
        Y, omega = (self.sketch / max(self.tokens["fit"], 1)).cpu(), self.omega.cpu()
        nu = 1e-10 * float(Y.norm())
        Y_nu = Y + nu * omega
        B = omega.T @ Y_nu
        C = torch.linalg.cholesky(0.5 * (B + B.T))
        F = torch.linalg.solve_triangular(C, Y_nu.T, upper=False).T  # Y_nu C⁻ᵀ
        U, S, _ = torch.linalg.svd(F, full_matrices=False)  # M ≈ U diag(S² − ν) Uᵀ, S descending
        n = self.plan.pca_count
        values = (S[:n] ** 2 - nu).clamp_min(0)
        return Mounts(canonical_signs(U[:, :n]), values, torch.full((len(values),), -1, device="cpu"))

    def _u(self, name: str, mounts: Mounts, device) -> torch.Tensor:
        if name not in self.on_device:
            self.on_device[name] = mounts.U.to(device)
        return self.on_device[name]

    def score(self, h: torch.Tensor) -> None:
        h = h.double()
        self.tokens["score"] += len(h)
        sq = (h * h).sum(-1)
        self.total_sq += float(sq.sum())
        weight = 1.0 / (sq + EPS)
        for name, mounts in self.plan.sets.items():
            U = self._u(name, mounts, h.device)
            projections = h @ U  # [m, n]
            self.energy[name] = self.energy.get(name, 0) + (projections ** 2 * weight[:, None]).sum(0)
            if name not in self.bases:
                self.bases[name] = orthonormal_basis(mounts.U).to(h.device)  # on the CPU, then moved
            Q = self.bases[name]
            self.span[name] = self.span.get(name, 0.0) + float((((h @ Q) ** 2).sum(-1) * weight).sum())
        for name, mounts in self.plan.coverage_sets.items():
            U = self._u(f"coverage/{name}", mounts, h.device)
            if name not in self.grams:
                self.grams[name] = U.double().T @ U.double()
            residuals = best_direction_residuals(h, U, self.plan.best, self.grams[name])
            self.residual[name] = self.residual.get(name, 0.0) + float(residuals.sum())

    def results(self) -> dict:
        n = max(self.tokens["score"], 1)
        return dict(tokens=dict(self.tokens),
                    f={k: (v / n).cpu() for k, v in self.energy.items()},
                    span={k: v / n for k, v in self.span.items()},
                    coverage={k: 1.0 - v / max(self.total_sq, EPS) for k, v in self.residual.items()})


def orthonormal_basis(U: torch.Tensor) -> torch.Tensor:
    """Orthonormal basis of span(U) [d, n] (rank-revealing through the SVD)."""
    Q, S, _ = torch.linalg.svd(U.double(), full_matrices=False)
    return Q[:, : int((S > 1e-9 * S.max()).sum())]


def best_direction_residuals(h: torch.Tensor, U: torch.Tensor, best: int = COVERAGE_BEST,
                             gram: torch.Tensor | None = None) -> torch.Tensor:
    """[m] ‖h_t − D_t c_t‖² for the least-squares fit of each row h_t on its ``best`` directions of U
    [d, n] with the largest |cos| to it (all of them when n ≤ best). Solved in the picked directions'
    coordinates: with p_t = Uᵀh_t and G = UᵀU (``gram``, computed when not given), the fit's normal
    equations are G_PP c = p_P and its residual is ‖h_t‖² − p_Pᵀ c, so no [m, d, best] system is formed.
    Each token's system is solved by ``normal_solve``."""
    h, U = h.double(), U.double()
    gram = U.T @ U if gram is None else gram
    p = h @ U  # [m, n]; U's columns are unit, so |p| ranks them by |cos|
    sq = (h * h).sum(-1)
    if U.shape[1] <= best:
        c = cpu_lstsq(gram, p.T)  # one system for every token
        return sq - (p * c.T).sum(-1)
    picked = p.abs().topk(best, dim=-1).indices  # [m, best]
    b = torch.gather(p, 1, picked)
    return sq - (b * normal_solve(gram[picked[:, :, None], picked[:, None, :]], b)).sum(-1)


def normal_solve(G: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[m, k] a least-squares solution c of G_t c = b_t for each Gram matrix G_t [m, k, k] (symmetric,
    positive semi-definite) and right-hand side b_t [m, k], float64.

    By Cholesky where the factor is well conditioned: its smallest diagonal entry at least
    ``CHOLESKY_PIVOT_RATIO`` times its largest, so that cond(G) is below about 1e8 and bᵀc, which is all the
    coverage residual reads, loses at most k·cond·eps ≈ 1e-7 of itself. Elsewhere (repeated or nearly
    parallel directions, where G is singular or close to it) by the SVD-based solver gelsd, which keeps such
    systems exact; QR with pivoting (gelsy, the default) misjudges the rank of such a G."""
    L, info = torch.linalg.cholesky_ex(G)
    diagonal = torch.diagonal(L, dim1=-2, dim2=-1)
    good = (info == 0) & (diagonal.min(-1).values > CHOLESKY_PIVOT_RATIO * diagonal.max(-1).values)
    if good.all():
        return torch.cholesky_solve(b[..., None], L)[..., 0]
    c = torch.empty_like(b)
    c[good] = torch.cholesky_solve(b[good][..., None], L[good])[..., 0]
    c[~good] = cpu_lstsq(G[~good], b[~good][..., None])[..., 0]
    return c


def cpu_lstsq(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """The least-squares solution of A X = B by the SVD-based LAPACK solver gelsd, on the CPU whatever the
    inputs' device (CUDA offers only gels, which assumes full rank), returned on their device."""
    return torch.linalg.lstsq(A.cpu(), B.cpu(), driver="gelsd").solution.to(B.device)


class SiteStatistics:
    """Plans for every stream, the one pass over a ``TokenSample``, and the results."""

    def __init__(self, model, plans: list[StreamPlan], seed: int = 0):
        self.model, self.plans = model, plans
        self.streams = {p.name: _Stream(p, _stream_width(model, p), seed, model.device) for p in plans}
        self.effective_fits: dict[str, dict] = {}

    # --- hooks ----------------------------------------------------------------------------------------------

    def _hook_names(self) -> set[str]:
        names = set()
        for p in self.plans:
            layer = p.site.layer
            if p.kind == "mlp.up~eff":
                names |= {f"blocks.{layer}.mlp.out.hook_in", f"blocks.{layer}.mlp.gate.hook_out"}
            elif p.kind == "attn.v~eff":
                names |= {f"blocks.{layer}.attn.v.hook_in", f"blocks.{layer}.attn.o.hook_in"}
            else:
                names.add(p.site.output_hook)
        return names

    def _values(self, plan: StreamPlan, got: dict) -> torch.Tensor:
        layer = plan.site.layer
        if plan.kind == "mlp.up~eff":
            return got[f"blocks.{layer}.mlp.out.hook_in"]
        if plan.kind == "attn.v~eff":
            return gqa_average(self.model, got[f"blocks.{layer}.attn.o.hook_in"])
        return got[plan.site.output_hook]

    def run(self, sample: TokenSample, batch: int = 8, progress: bool = True) -> None:
        """The single pass: fit half, then effective/PCA fits, then score half (each sequence once)."""
        halves = sample.halves()
        by_sequence = {**halves["fit"], **halves["score"]}
        names = self._hook_names()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(by_sequence), desc="corpus pass (all sites, all layers)")
        for phase, positions in halves.items():
            if phase == "score":
                self._between_halves()
            for chunk, tokens in pass_tokens(sample, positions, batch):
                got = self._forward(tokens, chunk, by_sequence, names)
                for plan in self.plans:
                    h = self._values(plan, got).double()
                    if phase == "fit":
                        self.streams[plan.name].fit(h)
                        self._fit_effective(plan, got)
                    else:
                        self.streams[plan.name].score(h)
                if bar is not None:
                    bar.update(len(chunk))
        if bar is not None:
            bar.close()

    def _forward(self, tokens, chunk, by_sequence, names) -> dict[str, torch.Tensor]:
        return sampled_values(self.model, tokens, chunk, by_sequence, names)

    def _fit_effective(self, plan: StreamPlan, got: dict) -> None:
        layer, fits = plan.site.layer, self.effective_fits.setdefault(plan.name, {})
        if plan.kind == "mlp.up~eff":
            act = activation(self.model)(got[f"blocks.{layer}.mlp.gate.hook_out"].double())
            fits["gate_sum"] = fits.get("gate_sum", 0) + act.sum(0)
            fits["n"] = fits.get("n", 0) + len(act)
        elif plan.kind == "attn.v~eff":
            x = got[f"blocks.{layer}.attn.v.hook_in"].double()
            y = gqa_average(self.model, got[f"blocks.{layer}.attn.o.hook_in"]).double()
            fits["XtX"] = fits.get("XtX", 0) + x.T @ x
            fits["XtY"] = fits.get("XtY", 0) + x.T @ y

    def _between_halves(self) -> None:
        for plan in self.plans:
            stream = self.streams[plan.name]
            if plan.pca_count:
                plan.sets["pca"] = stream.pca()
            if plan.effective is not None:
                effective_sets(self.model, plan, self.effective_fits.get(plan.name, {}))

    def results(self) -> dict[str, dict]:
        return {name: stream.results() for name, stream in self.streams.items()}


def sampled_values(model, tokens, chunk, by_sequence, names) -> dict[str, torch.Tensor]:
    """One forward of ``tokens`` (the sequences ``chunk``): each hook of ``names`` at the sampled positions
    (``by_sequence``: sequence → positions), [positions, width], in chunk order."""
    device = model.device
    rows = torch.cat([torch.full((len(by_sequence[i]),), r, device="cpu") for r, i in enumerate(chunk)]).to(device)
    cols = torch.cat([torch.tensor(by_sequence[i], device="cpu") for i in chunk]).to(device)
    got = {}

    def grab(value, hook):
        got[hook.name] = value[rows, cols].reshape(len(rows), -1).detach()
        return value
    with torch.no_grad(), model.bridge.hooks(fwd_hooks=[(n, grab) for n in names]):
        model.body(input_ids=tokens.to(device))
    return got


def pass_batches(positions: dict[int, list[int]], batch: int) -> list[list[int]]:
    """The sequences of one half (sequence → sampled positions) in batches of ``batch``, ordered by their last
    sampled position (then by index). The pass runs each sequence only up to that position, so that a batch
    holds sequences of about one length and little padding: the model is causal, and every statistic is a
    sum over tokens, so neither the cut nor the order changes a value beyond float rounding. On the
    16,384-token sample of gemma-3-270m this runs 47,486 padded tokens instead of 117,582."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch={batch!r}: expected an integer ≥ 1")
    order = sorted(positions, key=lambda sequence: (max(positions[sequence]), sequence))
    return [order[start: start + batch] for start in range(0, len(order), batch)]


def pass_tokens(sample: TokenSample, positions: dict[int, list[int]], batch: int):
    """Yield (sequences, tokens [len(sequences), T]) for each batch of ``pass_batches``: each sequence cut
    after its last sampled position (causal: the later tokens change nothing there), right-padded."""
    for chunk in pass_batches(positions, batch):
        yield chunk, right_padded([sample.sequences[i][: max(positions[i]) + 1] for i in chunk])


def gqa_average(model, o_input: torch.Tensor) -> torch.Tensor:
    """[m, H·dh] o_proj input → [m, G·dh]: the mean over the query heads that share each KV head."""
    H, G, dh = model.n_heads, model.n_kv_heads, model.d_head
    return o_input.reshape(len(o_input), G, H // G, dh).mean(2).reshape(len(o_input), G * dh)


def activation(model):
    from transformers.activations import ACT2FN

    return ACT2FN[getattr(model.config, "hidden_activation", None) or model.config.hidden_act]


def effective_matrix(model, plan: StreamPlan, fits: dict) -> torch.Tensor:
    """The effective-path matrix of ``plan`` from its fit-half statistics (on the CPU, like every weight-side
    matrix)."""
    if plan.kind == "mlp.up~eff":
        if not fits:
            raise ValueError(f"{plan.name}: no fit-half tokens to estimate the mean gate activation")
        return gated_up_matrix(site_matrix(model, plan.site), (fits["gate_sum"] / fits["n"]).cpu())
    if not fits:
        raise ValueError(f"{plan.name}: no fit-half tokens for the ridge map")
    return ridge_map(fits["XtX"].cpu(), fits["XtY"].cpu())


def effective_sets(model, plan: StreamPlan, fits: dict) -> None:
    """Add an effective stream's weight-based sets, built from its effective matrix after the fit half with
    the same tiling rules as the plain site: tile, whole-matrix SVD, column sampling, and the tile mounts
    at every coverage k."""
    sets, coverage = weight_sets(effective_matrix(model, plan, fits), plan.effective)
    plan.sets.update(sets)
    plan.coverage_sets.update(coverage)


def _stream_width(model, plan: StreamPlan) -> int:
    if plan.kind == "attn.v~eff":
        return model.n_kv_heads * model.d_head
    if plan.kind == "mlp.up~eff":
        return model.d_mlp
    return site_matrix(model, plan.site).shape[0]

