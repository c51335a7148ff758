import functools

import pytest
import torch

from helpers.models import load_model

TINY_MODELS = ["tiny-gpt2", "tiny-llama", "tiny-gemma3", "tiny-gemma2"]
EMBEDDED_MODELS = ["gemma-3-270m", "smollm2-135m"]
PROMPTS = ["When Mary and John went to the store, John gave a drink to",
           "The war lasted from the year 1732 to the year 17 and after"]


@functools.lru_cache(maxsize=None)
def cached_model(name: str, processing: str):
    return load_model(name, processing=processing)


@functools.lru_cache(maxsize=None)
def cached_run(name: str, processing: str):
    """Logits and full activation cache of the shared prompts (first one only for real models)."""
    model = cached_model(name, processing)
    tokens = model.to_tokens(PROMPTS[:1])
    with torch.no_grad():
        logits, cache = model.bridge.run_with_cache(tokens)
    return model, tokens, logits, cache


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(name in item.name for name in EMBEDDED_MODELS):
            item.add_marker(pytest.mark.slow)
