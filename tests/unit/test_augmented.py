"""Augmented matrices: the paper's identities on real activations, and the factored SVD vs the dense one."""
import pytest
import torch

from helpers.singular.directions.augmented import (SVD, direction_counts, layer_svds, ov_factors, ov_matrix, qk_factors, qk_matrix,
                               svd_dense, svd_of_product)
from helpers.singular.directions.identities import identity_errors
from helpers.core.weights import layer_weights
from tests.conftest import TINY_MODELS, cached_run

MODELS = [(m, p) for m in TINY_MODELS for p in ("raw", "fold_norm", "transformer_lens")]  # embedded: tests/embedded


IDENTITY_TOLERANCE = 1e-4


@pytest.mark.parametrize("name,processing", MODELS)
def test_augmented_identities_hold_on_real_activations(name, processing):
    model, _, _, cache = cached_run(name, processing)
    for layer in sorted({0, model.n_layers - 1}):
        errors = identity_errors(model, cache, layer)
        expected = {"qk", "qk_svd", "ov", "mlp_up", "mlp_out"} | ({"ov_per_head"} if processing != "transformer_lens" else set())
        assert expected <= set(errors)
        assert max(errors.values()) < IDENTITY_TOLERANCE, errors


def test_identity_check_detects_a_wrong_weight():
    model, _, _, cache = cached_run("tiny-llama", "fold_norm")
    block = model.hf_model.model.layers[0]
    original = block.self_attn.k_proj.weight.detach().clone()
    try:
        with torch.no_grad():
            block.self_attn.k_proj.weight.mul_(1.01)
        errors = identity_errors(model, cache, 0)
    finally:
        with torch.no_grad():
            block.self_attn.k_proj.weight.copy_(original)
    assert errors["qk"] > 1e-3 and errors["ov"] < IDENTITY_TOLERANCE


def assert_same_svd(factored: SVD, dense: SVD, rank: int):
    """Equal singular values; equal vectors (after canonical signs) wherever σ_k is not degenerate."""
    S_f, S_d = factored.S[..., :rank], dense.S[..., :rank]
    torch.testing.assert_close(S_f, S_d, rtol=1e-9, atol=1e-9 * float(S_d.max()))
    keep = ~(factored.degenerate[..., :rank] | dense.degenerate[..., :rank])
    for a, b in ((factored.U, dense.U), (factored.V, dense.V)):
        diff = (a[..., :rank] - b[..., :rank]).abs().amax(dim=-2)
        assert float(diff[keep].max()) < 1e-6
    torch.testing.assert_close(factored.dense(), _truncate(dense, rank).dense(),
                               rtol=0, atol=1e-9 * float(S_d.max()))


def _truncate(svd: SVD, rank: int) -> SVD:
    return SVD(svd.U[..., :rank], svd.S[..., :rank], svd.V[..., :rank], svd.degenerate[..., :rank])


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-gemma3"])
def test_factored_svd_equals_dense_svd(name):
    model, _, _, _ = cached_run(name, "fold_norm")
    w = layer_weights(model, model.n_layers // 2)
    assert_same_svd(svd_of_product(*qk_factors(w)), svd_dense(qk_matrix(w)), model.d_head)
    assert_same_svd(svd_of_product(*ov_factors(w)), svd_dense(ov_matrix(w)), model.d_head + 1)


def test_factored_svd_on_random_low_rank_product():
    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(3, 40, 6, generator=g), torch.randn(3, 30, 6, generator=g)
    assert_same_svd(svd_of_product(A, B), svd_dense(A.double() @ B.double().transpose(1, 2)), 6)


@pytest.mark.parametrize("m,n,r", [(12, 9, 20), (9, 12, 20), (12, 20, 15), (20, 12, 15)])
def test_factored_svd_with_factors_wider_than_the_matrix(m, n, r):
    """r > min(m, n): the QR cores are rectangular (the noise floor's [A2, A] factors on tiny Gemmas)."""
    g = torch.Generator().manual_seed(2)
    A, B = torch.randn(2, m, r, generator=g), torch.randn(2, n, r, generator=g)
    factored = svd_of_product(A, B)
    rank = min(m, n, r)
    assert factored.S.shape == (2, rank) and factored.U.shape == (2, m, rank) and factored.V.shape == (2, n, rank)
    assert_same_svd(factored, svd_dense(A.double() @ B.double().transpose(1, 2)), rank)


def test_canonical_signs_make_largest_write_entry_positive():
    g = torch.Generator().manual_seed(1)
    svd = svd_dense(torch.randn(20, 12, generator=g))
    idx = svd.V.abs().argmax(0)
    assert bool((svd.V[idx, torch.arange(12)] > 0).all())
    torch.testing.assert_close(svd.dense(), torch.randn(20, 12, generator=torch.Generator().manual_seed(1)).double())


def test_near_equal_singular_values_are_flagged_as_a_block():
    Q, _ = torch.linalg.qr(torch.randn(6, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    W = Q @ torch.diag(torch.tensor([5.0, 3.0, 3.0 * (1 - 1e-7), 2.0, 1.0, 0.5], dtype=torch.float64)) @ Q.T
    assert svd_dense(W).degenerate.tolist() == [False, True, True, False, False, False]


def test_gpt2_small_has_the_papers_37020_directions():
    from transformers import GPT2Config

    c = GPT2Config()  # GPT-2 small's shapes, no weights needed
    counts = direction_counts(c.n_layer, c.n_head, c.n_embd, c.n_embd // c.n_head, 4 * c.n_embd, gated=False)
    assert counts["qk"] == 144 * 64 and counts["ov"] == 144 * 65 and counts["total"] == 37_020


@pytest.mark.parametrize("name", TINY_MODELS)
def test_layer_svds_have_the_counted_ranks(name):
    model, _, _, _ = cached_run(name, "fold_norm")
    svds = layer_svds(layer_weights(model, 0))
    gated = "mlp_gate" in svds
    counts = direction_counts(1, model.n_heads, model.d_model, model.d_head, model.d_mlp, gated)
    assert svds["qk"].S.numel() == counts["qk"] and svds["ov"].S.numel() == counts["ov"]
    assert sum(svds[k].S.numel() for k in ("mlp_up", "mlp_gate") if k in svds) == counts["mlp_in"]
    assert svds["mlp_out"].S.numel() == counts["mlp_out"]


def test_layers_without_kept_vectors_keep_the_same_spectra_and_no_directions():
    from helpers.singular.directions.augmented import augmented_svds, spectra_frame

    model, _, _, _ = cached_run(TINY_MODELS[0], "fold_norm")
    full = augmented_svds(model)
    lean = augmented_svds(model, vectors=[model.n_layers - 1])
    assert spectra_frame(lean).equals(spectra_frame(full))  # every σ and flag as computed with the vectors
    for kind, svd in lean[-1].items():  # the kept layer: its directions, bit for bit
        assert torch.equal(svd.U, full[-1][kind].U) and torch.equal(svd.V, full[-1][kind].V)
    for kind, svd in lean[0].items():
        assert svd.U.shape[-2] == 0 and svd.V.shape[-2] == 0 and svd.U.shape[-1] == svd.S.shape[-1]
        assert svd.U.untyped_storage().nbytes() == 0  # a new empty tensor, not a view of the vectors' storage
        with pytest.raises(ValueError, match="spectrum only"):
            svd.dense()
