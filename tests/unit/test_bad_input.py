"""Bad input gets a clear error naming the value and the fix, before any heavy work."""
from types import SimpleNamespace

import pytest

from helpers.tiled.corpus import sample_tokens
from helpers.singular.masking.training import TrainConfig, masking_run
from helpers.singular.masking.masks import AblationRule, MaskedModel
from helpers.core.models import gpt2_tokenizer
from helpers.tiled.sites import all_sites, check_layers
from helpers.singular.tasks import make_task
from tests.conftest import cached_model

TOKENIZER = SimpleNamespace(tokenizer=gpt2_tokenizer())


@pytest.mark.parametrize("n", [0, -3, 2.5, "8", True])
@pytest.mark.parametrize("task", ["ioi", "gender", "greater_than"])
def test_a_prompt_count_that_is_not_a_positive_integer_is_refused(task, n):
    with pytest.raises(ValueError, match=f"n_prompts={n!r}: expected an integer ≥ 1"):
        make_task(task, TOKENIZER, n)


def test_masking_needs_prompts_on_both_sides_of_its_split(tmp_path, monkeypatch):
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    masked = MaskedModel(cached_model("tiny-llama", "fold_norm"))
    for n in (0, 1):
        with pytest.raises(ValueError, match=f"n_prompts={n}: expected an integer ≥ 2 .*held out"):
            masking_run(masked, "ioi", n, AblationRule.uniform(), TrainConfig(steps=1), progress=False)
    with pytest.raises(ValueError, match="splitting 1 distinct gender prompts.*one part empty"):
        make_task("gender", TOKENIZER, 1).split(0.5)


@pytest.mark.parametrize("argument,value,message", [
    ("n_tokens", 0, "n_tokens=0: expected an integer ≥ 1"),
    ("n_tokens", -5, "n_tokens=-5: expected an integer ≥ 1"),
    ("max_tokens", 1, r"max_tokens=1: expected an integer ≥ 2 \(BOS plus"),
    ("max_tokens", 0, "max_tokens=0: expected an integer ≥ 2"),
    ("n_tokens", 10.0, "n_tokens=10.0: expected an integer"),
])
def test_token_counts_are_refused_before_the_corpus_is_read(argument, value, message, tmp_path, monkeypatch):
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match=message):
        sample_tokens(gpt2_tokenizer(), **{argument: value})
    assert not (tmp_path / "corpus").exists() or not list((tmp_path / "corpus").iterdir())


@pytest.mark.parametrize("layers,message", [
    ([0, 2], r"layers=\[0, 2\]: \[2\] not a layer of tiny-gemma3 \(integers 0 to 1\)"),
    ([-1], r"\[-1\] not a layer"),
    ([0.5], r"\[0.5\] not a layer"),
    ([1, 1], "a layer is repeated"),
    (5, r"layers=5: expected a list of layer indices \(0 to 1\)"),
])
def test_layers_outside_the_model_are_refused(layers, message):
    model = cached_model("tiny-gemma3", "raw")
    with pytest.raises(ValueError, match=message):
        check_layers(model, layers)
    with pytest.raises(ValueError, match=message):
        all_sites(model, layers)
    assert check_layers(model, [1, 0]) == [1, 0]
