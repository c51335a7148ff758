"""Registry and loading: offline tokenizer, local weight folders, fast and clear failures, cache safety."""
import dataclasses
import time

import pytest
import torch

from helpers.core.cache import atomic_dir
from helpers.core.folder_checks import ModelFolderError
from helpers.core.models import MODELS, ModelUnavailableError, available_models, gguf_path, gpt2_tokenizer, load_model


def test_gpt2_tokenizer_works_offline_with_gpt2_ids():
    tokenizer = gpt2_tokenizer()
    assert tokenizer("Hello world")["input_ids"] == [15496, 995]
    assert tokenizer(" Mary and John")["input_ids"] == [5335, 290, 1757]
    assert len(tokenizer) == 50257


def test_hub_model_without_weights_fails_fast_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))  # an empty hub cache
    monkeypatch.delenv("SVDIRS_WEIGHTS_GPT2_SMALL", raising=False)
    start = time.time()
    with pytest.raises(ModelUnavailableError) as err:
        load_model("gpt2-small")
    assert time.time() - start < 10
    message = str(err.value)
    assert "weights_dir" in message and "SVDIRS_WEIGHTS_GPT2_SMALL" in message
    assert "smollm2-135m" in message and "gemma-3-270m" in message  # what is available instead
    assert "gpt2-small" not in available_models()


def test_unknown_model_lists_the_registry():
    with pytest.raises(ModelUnavailableError, match="tiny-gpt2.*gemma-2-2b|gemma-2-2b.*tiny-gpt2"):
        load_model("gpt-5")


def test_bad_processing_is_refused():
    with pytest.raises(ValueError, match="processing='folded'.*raw"):
        load_model("tiny-gpt2", processing="folded")


def test_weights_dir_without_config_is_refused(tmp_path):
    with pytest.raises(ModelFolderError, match="weights_dir=.*holds no config.json"):
        load_model("gemma-2-2b", weights_dir=tmp_path)


def test_a_weights_folder_that_does_not_exist_is_named_as_such(tmp_path):
    with pytest.raises(ModelUnavailableError, match=f"weights_dir='{tmp_path}/nowhere'.*does not exist"):
        load_model("gemma-2-2b", weights_dir=tmp_path / "nowhere")


def test_the_environment_variable_route_is_named_in_its_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("SVDIRS_WEIGHTS_GPT2_SMALL", str(tmp_path / "nowhere"))
    with pytest.raises(ModelUnavailableError, match=r"\$SVDIRS_WEIGHTS_GPT2_SMALL=.*does not exist") as err:
        load_model("gpt2-small")
    assert "weights_dir=" not in str(err.value)


def test_gguf_with_wrong_hash_is_refused_before_loading():
    spec = dataclasses.replace(MODELS["smollm2-135m"], gguf_sha256="0" * 64)
    with pytest.raises(ModelUnavailableError, match="sha256.*expected 0000"):
        gguf_path(spec)


def test_interrupted_cache_write_leaves_the_old_entry(tmp_path):
    target = tmp_path / "entry"
    with atomic_dir(target) as tmp:
        (tmp / "model.safetensors").write_text("good")
    with pytest.raises(RuntimeError):
        with atomic_dir(target) as tmp:
            (tmp / "model.safetensors").write_text("half-writ")
            raise RuntimeError("interrupted")
    assert (target / "model.safetensors").read_text() == "good"
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_tiny_models_are_seeded():
    a, b, c = load_model("tiny-llama", seed=1), load_model("tiny-llama", seed=1), load_model("tiny-llama", seed=2)
    wa, wb, wc = (m.hf_model.model.layers[0].self_attn.q_proj.weight for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_tests_run_with_every_connection_refused():
    import socket

    for address in (("huggingface.co", 443), ("127.0.0.1", 9)):
        with pytest.raises(ConnectionRefusedError, match="tests run offline"):
            socket.create_connection(address, timeout=1)




def test_a_model_of_any_published_shape_is_built_with_random_weights():
    from helpers.core.models import model_from_config
    from helpers.tiled.sites import Site, site_matrix

    config = dict(model_type="gemma2", vocab_size=50257, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=8)
    model = model_from_config("shapes", config, seed=1)
    assert (model.n_layers, model.d_model, model.n_heads, model.n_kv_heads, model.d_mlp) == (2, 24, 4, 2, 40)
    assert site_matrix(model, Site(1, "attn.k")).shape == (16, 24)
    again = model_from_config("shapes", config, seed=1)
    assert torch.equal(site_matrix(model, Site(0, "mlp.gate")), site_matrix(again, Site(0, "mlp.gate")))
    assert model.bridge(torch.tensor([[50256, 10, 20]])).shape == (1, 3, 50257)
