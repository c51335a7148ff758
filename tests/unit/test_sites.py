"""Sites: the weight matrix of each site reproduces its hook output; steering hooks; negative controls."""
import pytest
import torch

from helpers.core.models import load_model
from helpers.tiled.sites import (PAPER_WIDTHS, SITES, Site, all_sites, permute_site_columns, randomise_weights, site_matrix,
                           steer_hook)
from tests.conftest import cached_model


def site_io(model, tokens):
    sites = all_sites(model)
    names = [s.output_hook for s in sites] + [s.input_hook for s in sites]
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(tokens, names_filter=names)
    flat = lambda t: t.reshape(*t.shape[:2], -1).double()  # noqa: E731
    return {s: (flat(cache[s.input_hook]), flat(cache[s.output_hook])) for s in sites}


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama", "tiny-gemma3", "tiny-gemma2"])
def test_site_matrix_reproduces_each_sites_output(name):
    model = cached_model(name, "raw")
    tokens = torch.randint(0, 1000, (2, 7), generator=torch.Generator().manual_seed(0))
    io = site_io(model, tokens)
    assert {s.name for s in io} == set(SITES) - ({"mlp.gate"} if name == "tiny-gpt2" else set())
    for site, (x, y) in io.items():
        W = site_matrix(model, site).double()
        bias = y - x @ W.T  # constant over tokens (zero without biases)
        torch.testing.assert_close(bias, bias[:1, :1].expand_as(bias), rtol=0, atol=1e-5)


def test_steering_happens_after_the_post_norm_where_there_is_one():
    gemma, llama = cached_model("tiny-gemma3", "raw"), cached_model("tiny-llama", "raw")
    assert steer_hook(gemma, Site(1, "attn.o")) == "blocks.1.ln1_post.hook_out"
    assert steer_hook(gemma, Site(0, "mlp.down")) == "blocks.0.ln2_post.hook_out"
    assert steer_hook(llama, Site(1, "mlp.down")) == "blocks.1.mlp.out.hook_out"
    with pytest.raises(ValueError, match="not a residual site"):
        steer_hook(gemma, Site(0, "attn.q"))
    with pytest.raises(ValueError, match="not one of"):
        all_sites(gemma, names=["attn.x"])
    assert set(PAPER_WIDTHS) == set(SITES)


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-gemma3"])
def test_permuted_columns_are_a_permutation_of_the_real_ones(name):
    before = cached_model(name, "raw")
    model = load_model(name, processing="raw")
    permute_site_columns(model, seed=0)
    for site in all_sites(model):
        W0, W1 = site_matrix(before, site), site_matrix(model, site)
        assert not torch.equal(W0, W1)
        torch.testing.assert_close(W1.sort(dim=1).values, W0.sort(dim=1).values)
    tokens = torch.randint(0, 1000, (1, 6), generator=torch.Generator().manual_seed(1))
    for site, (x, y) in site_io(model, tokens).items():  # the model runs with the permuted weights
        W = site_matrix(model, site).double()
        bias = y - x @ W.T
        torch.testing.assert_close(bias, bias[:1, :1].expand_as(bias), rtol=0, atol=1e-5)


def test_random_init_is_seeded_and_replaces_every_site():
    real = cached_model("tiny-gemma3", "raw")
    a, b = load_model("tiny-gemma3", processing="raw"), load_model("tiny-gemma3", processing="raw")
    randomise_weights(a, seed=3)
    randomise_weights(b, seed=3)
    for site in all_sites(real):
        assert torch.equal(site_matrix(a, site), site_matrix(b, site))
        assert not torch.allclose(site_matrix(a, site), site_matrix(real, site))
