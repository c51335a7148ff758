"""The weight accessor against the model's own hook values, for every architecture and processing."""
import pytest
import torch

from helpers.singular.directions.identities import centred_if_processed
from helpers.core.models import PROCESSINGS
from helpers.core.weights import input_hook, layer_weights, unembedding
from tests.conftest import TINY_MODELS, cached_run

CASES = [(m, p) for m in TINY_MODELS for p in PROCESSINGS]  # embedded models: tests/embedded


def close(actual, expected, rtol=1e-4):
    scale = expected.abs().max().clamp_min(1e-6)
    assert (actual - expected).abs().max() <= rtol * scale, float((actual - expected).abs().max() / scale)


@pytest.mark.parametrize("name,processing", CASES)
def test_attention_weights_reproduce_hooks(name, processing):
    model, _, _, cache = cached_run(name, processing)
    for layer in range(min(model.n_layers, 2)):
        w = layer_weights(model, layer)
        x = cache[input_hook(model, layer, "attn")][0].double()
        q = torch.einsum("pd,hde->phe", x, w.W_Q.double()) + w.b_Q.double()
        k = torch.einsum("pd,hde->phe", x, w.W_K.double()) + w.b_K.double()
        close(q, cache[f"blocks.{layer}.attn.hook_q"][0].double())
        close(k, cache[f"blocks.{layer}.attn.hook_k"][0][:, w.kv_head].double())
        # Per-head output: pattern-weighted values through W_O, plus b_O/H; summed = attention output.
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"][0].double()  # [head, query, key]
        v = torch.einsum("pd,hde->phe", x, w.W_V.double()) + w.b_V.double()
        z = torch.einsum("hqk,khe->qhe", pattern, v)
        heads = torch.einsum("qhe,hed->qhd", z, w.W_O.double()) + w.b_O.double() / w.n_heads
        close(heads.sum(1), centred_if_processed(model, cache[f"blocks.{layer}.attn.o.hook_out"][0].double()))
        if processing != "transformer_lens":
            close(z, cache[f"blocks.{layer}.attn.hook_z"][0].double())


@pytest.mark.parametrize("name,processing", CASES)
def test_mlp_weights_reproduce_hooks(name, processing):
    model, _, _, cache = cached_run(name, processing)
    for layer in range(min(model.n_layers, 2)):
        w = layer_weights(model, layer)
        x = cache[input_hook(model, layer, "mlp")][0].double()
        close(x @ w.W_in.double() + w.b_in.double(), cache[f"blocks.{layer}.mlp.in.hook_out"][0].double())
        if w.W_gate is not None:
            close(x @ w.W_gate.double() + w.b_gate.double(), cache[f"blocks.{layer}.mlp.gate.hook_out"][0].double())
        post = cache[f"blocks.{layer}.mlp.hook_post"][0].double()
        close(post @ w.W_out.double() + w.b_out.double(),
              centred_if_processed(model, cache[f"blocks.{layer}.mlp.out.hook_out"][0].double()))


@pytest.mark.parametrize("name,processing", CASES)
def test_unembedding_reproduces_logits(name, processing):
    model, _, logits, cache = cached_run(name, processing)
    u = unembedding(model)
    hook = "ln_final.hook_out" if processing == "raw" else "ln_final.hook_normalized"
    predicted = cache[hook][0].double() @ u.W_U.double() + u.b_U.double()
    cap = getattr(model.config, "final_logit_softcapping", None)
    if cap:
        predicted = cap * torch.tanh(predicted / cap)
    expected = logits[0].double()
    if processing == "transformer_lens" and model.architecture == "gpt2":
        expected = expected - expected.mean(-1, keepdim=True)
    close(predicted, expected)


def test_gqa_key_value_heads_map_to_query_heads():
    model, _, _, _ = cached_run("tiny-llama", "raw")
    w = layer_weights(model, 0)
    assert model.n_heads == 4 and model.n_kv_heads == 2
    assert w.kv_head.tolist() == [0, 0, 1, 1]
    assert torch.equal(w.W_K[0], w.W_K[1]) and not torch.equal(w.W_K[1], w.W_K[2])


def test_processing_changes_matrices_but_is_recorded():
    raw, _, _, _ = cached_run("tiny-gpt2", "raw")
    folded, _, _, _ = cached_run("tiny-gpt2", "fold_norm")
    assert not torch.allclose(layer_weights(raw, 0).W_Q, layer_weights(folded, 0).W_Q)
    assert raw.record()["processing"] == "raw" and folded.record()["processing"] == "fold_norm"
