"""The one-pass statistics against a direct per-site computation, and the A/B quantities on constructed
cases with known answers."""
import pytest
import torch

from helpers.tiled.plans import build_plans
from helpers.tiled.thresholds import load_thresholds
from helpers.tiled.corpus import sample_tokens
from helpers.core.models import gpt2_tokenizer
from helpers.tiled.statistics import (SiteStatistics, StreamPlan, _Stream, activation, best_direction_residuals, pass_batches,
                                     effective_matrix, gqa_average, normal_solve, orthonormal_basis)
from helpers.tiled.sites import Site, all_sites
from helpers.tiled.tiling import Mounts, random_directions, ridge_map, top_eigenvectors
from tests.conftest import cached_model


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    import os

    old = os.environ.get("SVDIRS_CACHE")
    os.environ["SVDIRS_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    try:
        return sample_tokens(gpt2_tokenizer(), n_tokens=120, seed=0, max_tokens=16, tokenizer_name="gpt2")
    finally:
        if old is None:
            del os.environ["SVDIRS_CACHE"]
        else:
            os.environ["SVDIRS_CACHE"] = old


def direct_values(model, sample, half, hook_names):
    """Oracle: run each sequence of one half on its own and gather the hooks at its sampled positions."""
    got = {name: [] for name in hook_names}
    for seq, positions in sorted(sample.halves()[half].items()):
        with torch.no_grad():
            _, cache = model.bridge.run_with_cache(sample.sequences[seq][None], names_filter=list(hook_names))
        for name in hook_names:
            got[name].append(cache[name][0, positions].reshape(len(positions), -1).double())
    return {name: torch.cat(v) for name, v in got.items()}


def direct_coverage(h, U, best=8):
    resid = 0.0
    for row in h:
        cos = (U.T @ row).abs()
        idx = cos.argsort(descending=True)[:best] if U.shape[1] > best else torch.arange(U.shape[1])
        D = U[:, idx]
        c = torch.linalg.pinv(D) @ row
        resid += float(((row - D @ c) ** 2).sum())
    return 1 - resid / float((h ** 2).sum())


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-gpt2"])
def test_one_pass_statistics_equal_a_direct_per_site_computation(name, sample):
    model = cached_model(name, "raw")
    thresholds = load_thresholds()
    plans = build_plans(model, all_sites(model, layers=[1]), thresholds, widths={s: 16 for s in
                        ("attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.up", "mlp.down")})
    for plan in plans:
        plan.sketch_width = 10_000  # as wide as d_out: the sketch is exact
    stats = SiteStatistics(model, plans)
    stats.run(sample, batch=5, progress=False)
    results = stats.results()
    plain = [p for p in plans if p.effective is None]
    score = direct_values(model, sample, "score", {p.site.output_hook for p in plain})
    fit = direct_values(model, sample, "fit", {p.site.output_hook for p in plain})
    for plan in plain:
        h = score[plan.site.output_hook]
        weight = 1 / ((h ** 2).sum(-1) + 1e-12)
        r = results[plan.name]
        assert r["tokens"]["score"] == len(h) and r["tokens"]["fit"] == len(fit[plan.site.output_hook])
        for set_name, mounts in plan.sets.items():
            f = ((h @ mounts.U) ** 2 * weight[:, None]).mean(0)
            torch.testing.assert_close(r["f"][set_name], f, rtol=1e-6, atol=1e-9)
            Q = orthonormal_basis(mounts.U)
            assert r["span"][set_name] == pytest.approx(float((((h @ Q) ** 2).sum(-1) * weight).mean()), rel=1e-6)
        for set_name in ("tile_k2", "random_k16"):  # fewer and more than 8 directions
            mounts = plan.coverage_sets[set_name]
            assert r["coverage"][set_name] == pytest.approx(direct_coverage(h, mounts.U.double()), rel=1e-6, abs=1e-9)
        g = fit[plan.site.output_hook]
        unit = g / g.norm(dim=-1, keepdim=True)
        exact = top_eigenvectors(unit.T @ unit / len(unit), plan.pca_count)
        torch.testing.assert_close((plan.sets["pca"].U.T @ exact.U).abs().diagonal(),
                                   torch.ones(plan.pca_count, dtype=torch.float64), rtol=0, atol=1e-6)


def test_pass_batches_group_sequences_by_their_last_sampled_position():
    positions = {0: [3, 40], 1: [2], 2: [7, 9], 3: [38], 4: [1, 2], 5: [8]}
    assert pass_batches(positions, 2) == [[1, 4], [5, 2], [3, 0]]
    assert pass_batches(positions, 4) == [[1, 4, 5, 2], [3, 0]]
    assert sorted(s for chunk in pass_batches(positions, 1) for s in chunk) == sorted(positions)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="batch="):
            pass_batches(positions, bad)


def test_the_corpus_pass_runs_each_sequence_up_to_its_last_sampled_token(sample):
    model = cached_model("tiny-gpt2", "raw")
    plans = build_plans(model, [Site(0, "attn.o")], load_thresholds(), k=2)
    stats, lengths = SiteStatistics(model, plans), []
    handle = model.body.register_forward_pre_hook(lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]),
                                                  with_kwargs=True)
    try:
        stats.run(sample, batch=4, progress=False)
    finally:
        handle.remove()
    expected = [max(max(positions[s]) for s in chunk) + 1
                for positions in sample.halves().values() for chunk in pass_batches(positions, 4)]
    assert lengths == expected
    assert sum(lengths) < sum(max(len(sample.sequences[s]) for s in chunk)
                              for positions in sample.halves().values() for chunk in pass_batches(positions, 4))


def test_effective_path_fits_use_the_fit_half_only(sample):
    model = cached_model("tiny-gemma3", "raw")
    plans = [p for p in build_plans(model, [Site(0, "mlp.up"), Site(0, "attn.v")], load_thresholds(), k=2)
             if p.effective is not None]
    stats = SiteStatistics(model, plans)
    stats.run(sample, batch=4, progress=False)
    hooks = {"blocks.0.mlp.gate.hook_out", "blocks.0.attn.v.hook_in", "blocks.0.attn.o.hook_in", "blocks.0.mlp.out.hook_in"}
    fit = direct_values(model, sample, "fit", hooks)
    score = direct_values(model, sample, "score", hooks)
    up, v = plans
    gbar = activation(model)(fit["blocks.0.mlp.gate.hook_out"]).mean(0)
    from helpers.tiled.sites import site_matrix

    torch.testing.assert_close(effective_matrix(model, up, stats.effective_fits[up.name]),
                               gbar.clamp_min(0)[:, None] * site_matrix(model, Site(0, "mlp.up")).double())
    x, y = fit["blocks.0.attn.v.hook_in"], gqa_average(model, fit["blocks.0.attn.o.hook_in"])
    torch.testing.assert_close(effective_matrix(model, v, stats.effective_fits[v.name]), ridge_map(x.T @ x, x.T @ y))
    # scored on the other half, on the effective output (act(gate) ⊙ up = the input of mlp.down)
    h = score["blocks.0.mlp.out.hook_in"]
    f = ((h @ up.sets["tile"].U) ** 2 / (h ** 2).sum(-1, keepdim=True)).mean(0)
    torch.testing.assert_close(stats.results()[up.name]["f"]["tile"], f, rtol=1e-6, atol=1e-9)


def test_energy_of_writes_along_one_axis():
    """ΔH_t = c_t e_0: f(e_0) = 1, f(e_1) = 0, span of {e_0, e_1} = 1; random unit u: E f = 1/d."""
    d = 16
    plan = StreamPlan(Site(0, "attn.o"), "attn.o",
                      sets={"axes": Mounts(torch.eye(d, dtype=torch.float64)[:, :2], torch.ones(2), torch.zeros(2)),
                            "random": random_directions(d, 4000, seed=0)})
    stream = _Stream(plan, d, seed=0)
    h = torch.zeros(50, d, dtype=torch.float64)
    h[:, 0] = torch.linspace(-3, 3, 50) + 0.01
    stream.score(h)
    r = stream.results()
    torch.testing.assert_close(r["f"]["axes"], torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert r["span"]["axes"] == pytest.approx(1.0)
    assert float(r["f"]["random"].mean()) == pytest.approx(1 / d, rel=0.1)


def test_best_direction_residuals_on_a_hand_made_case():
    U = torch.eye(4, dtype=torch.float64)[:, :3]  # e0, e1, e2
    h = torch.tensor([[1.0, 2.0, 0.0, 3.0], [0.0, 0.0, 5.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(best_direction_residuals(h, U, best=1), torch.tensor([1.0 + 9.0, 0.0], dtype=torch.float64))
    torch.testing.assert_close(best_direction_residuals(h, U, best=8), torch.tensor([9.0, 0.0], dtype=torch.float64))


@pytest.mark.parametrize("n", [5, 8, 40])
def test_best_direction_residuals_equal_a_dense_least_squares_fit_per_token(n):
    """The normal-equation residuals against a per-token pseudo-inverse fit in the full space, with
    strongly correlated directions (as tile mounts of one matrix are) and an exactly repeated one."""
    generator = torch.Generator().manual_seed(3)
    U = torch.randn(64, n, generator=generator, dtype=torch.float64)
    U[:, 1:] += 2.0 * U[:, :1]  # every direction leans on the first
    U[:, -1] = U[:, 0]  # and one repeats it
    U = U / U.norm(dim=0)
    h = torch.randn(30, 64, generator=generator, dtype=torch.float64) + 3.0 * U[:, 0]
    got = best_direction_residuals(h, U)
    for row, residual in zip(h, got):
        cos = (U.T @ row).abs()
        D = U[:, cos.argsort(descending=True)[:8] if n > 8 else torch.arange(n)]
        want = float(((row - D @ (torch.linalg.pinv(D) @ row)) ** 2).sum())
        assert float(residual) == pytest.approx(want, rel=1e-9, abs=1e-9 * float(row @ row))
    torch.testing.assert_close(best_direction_residuals(h, U, gram=U.T @ U), got, rtol=1e-12, atol=1e-12)


def _systems(cos: float, m: int = 20, k: int = 8, seed: int = 5):
    """m Gram systems DᵀD of k unit directions in 64 dimensions, the last two at cosine ``cos`` (1: the
    last repeats the one before, bit for bit), with right-hand sides Dᵀh of random h."""
    generator = torch.Generator().manual_seed(seed)
    D = torch.randn(m, 64, k, generator=generator, dtype=torch.float64)
    D = D / D.norm(dim=1, keepdim=True)
    u, w = D[..., -2], D[..., -1]
    w = w - (w * u).sum(-1, keepdim=True) * u  # orthogonal to u, then unit
    D[..., -1] = u if cos == 1 else cos * u + (1 - cos ** 2) ** 0.5 * w / w.norm(dim=-1, keepdim=True)
    h = torch.randn(m, 64, generator=generator, dtype=torch.float64)
    return D.transpose(-1, -2) @ D, (D.transpose(-1, -2) @ h[..., None])[..., 0], D, h


@pytest.mark.parametrize("cos,rel", [(0.9, 1e-10), (1 - 1e-7, 1e-6), (1 - 1e-10, 1e-4), (1.0, 1e-9)])
def test_normal_solve_fits_as_a_dense_pseudo_inverse_does(cos, rel):
    """bᵀc (what the coverage residual reads) against hᵀ D D⁺ h, the pseudo-inverse fit of h on D, from
    well-conditioned systems (Cholesky) through nearly parallel directions (the SVD fallback, as precise
    as a normal-equation solve at that conditioning can be) to an exactly repeated one."""
    G, b, D, h = _systems(cos)
    c = normal_solve(G, b)
    for t in range(len(G)):
        fitted = D[t] @ (torch.linalg.pinv(D[t]) @ h[t])
        assert float(b[t] @ c[t]) == pytest.approx(float(fitted @ fitted), rel=rel)


def test_normal_solve_takes_cholesky_only_where_it_is_well_conditioned(monkeypatch):
    """Well-conditioned systems are solved by Cholesky alone (gelsd is never called); a batch with
    nearly dependent directions sends exactly those systems to gelsd."""
    calls = []
    original = torch.linalg.lstsq

    def counting(A, B, *args, **kwargs):
        calls.append(len(A))
        return original(A, B, *args, **kwargs)
    monkeypatch.setattr(torch.linalg, "lstsq", counting)
    G, b, _, _ = _systems(0.9)
    normal_solve(G, b)
    assert calls == []
    for cos in (1 - 1e-10, 1.0):
        calls.clear()
        G2, b2, _, _ = _systems(cos, m=3, seed=6)
        normal_solve(torch.cat([G, G2]), torch.cat([b, b2]))
        assert calls == [3]
