"""Augmented matrices: the paper's identities on real activations, and the factored SVD vs the dense one."""
import pytest
import torch

from helpers.augmented import (SVD, direction_counts, homogeneous, layer_svds, mlp_in_matrices, mlp_out_matrix,
                               ov_factors, ov_matrix, qk_factors, qk_matrix, svd_dense, svd_of_product)
from helpers.weights import input_hook, layer_weights
from tests.conftest import EMBEDDED_MODELS, TINY_MODELS, cached_run
from tests.test_weights import centred_if, close

MODELS = [(m, p) for m in TINY_MODELS for p in ("raw", "fold_norm", "transformer_lens")] + \
         [(m, "fold_norm") for m in EMBEDDED_MODELS]


@pytest.mark.parametrize("name,processing", MODELS)
def test_qk_bilinear_form_equals_query_key_dot_products(name, processing):
    model, _, _, cache = cached_run(name, processing)
    layer = model.n_layers - 1
    w = layer_weights(model, layer)
    x = homogeneous(cache[input_hook(model, layer, "attn")][0].double())
    scores = torch.einsum("id,hde,je->hij", x, qk_matrix(w), x)
    q = cache[f"blocks.{layer}.attn.hook_q"][0].double()
    k = cache[f"blocks.{layer}.attn.hook_k"][0][:, w.kv_head].double()
    close(scores, torch.einsum("ihe,jhe->hij", q, k))
    svd = svd_of_product(*qk_factors(w))  # and through the singular directions
    via_svd = torch.einsum("id,hdr,hr,je,her->hij", x, svd.U, svd.S, x, svd.V)
    close(via_svd, scores)


@pytest.mark.parametrize("name,processing", MODELS)
def test_ov_matrix_maps_attention_weighted_input_to_head_output(name, processing):
    model, _, _, cache = cached_run(name, processing)
    layer = model.n_layers - 1
    w = layer_weights(model, layer)
    x = cache[input_hook(model, layer, "attn")][0].double()
    pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0].double()
    c = homogeneous(torch.einsum("hqk,kd->hqd", pattern, x))  # c̃ = [1, Σ_j A_ij x_j] per head
    heads = torch.einsum("hqd,hdm->hqm", c, ov_matrix(w))
    close(heads.sum(0), centred_if(model, cache[f"blocks.{layer}.attn.o.hook_out"][0].double()))
    if processing != "transformer_lens":  # per head: the hook's z through W_O, plus b_O / H
        z = cache[f"blocks.{layer}.attn.hook_z"][0].double()
        expected = torch.einsum("qhe,hem->hqm", z, w.W_O.double()) + w.b_O.double() / w.n_heads
        close(heads, expected)


@pytest.mark.parametrize("name,processing", MODELS)
def test_mlp_augmented_matrices_reproduce_pre_activations_and_output(name, processing):
    model, _, _, cache = cached_run(name, processing)
    layer = model.n_layers - 1
    w = layer_weights(model, layer)
    x = homogeneous(cache[input_hook(model, layer, "mlp")][0].double())
    hooks = {"up": "mlp.in.hook_out", "gate": "mlp.gate.hook_out"}
    for kind, matrix in mlp_in_matrices(w).items():
        close(x @ matrix.double(), cache[f"blocks.{layer}.{hooks[kind]}"][0].double())
    post = homogeneous(cache[f"blocks.{layer}.mlp.hook_post"][0].double())
    close(post @ mlp_out_matrix(w).double(), centred_if(model, cache[f"blocks.{layer}.mlp.out.hook_out"][0].double()))


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


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-gemma3", "gemma-3-270m", "smollm2-135m"])
def test_factored_svd_equals_dense_svd(name):
    model, _, _, _ = cached_run(name, "fold_norm")
    w = layer_weights(model, model.n_layers // 2)
    assert_same_svd(svd_of_product(*qk_factors(w)), svd_dense(qk_matrix(w)), model.d_head)
    assert_same_svd(svd_of_product(*ov_factors(w)), svd_dense(ov_matrix(w)), model.d_head + 1)


def test_factored_svd_on_random_low_rank_product():
    g = torch.Generator().manual_seed(0)
    A, B = torch.randn(3, 40, 6, generator=g), torch.randn(3, 30, 6, generator=g)
    assert_same_svd(svd_of_product(A, B), svd_dense(A.double() @ B.double().transpose(1, 2)), 6)


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
