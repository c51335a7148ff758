import torch

from helpers.core.logits import lens
from helpers.singular.readout import top_tokens
from tests.conftest import cached_model


def test_direction_through_unembedding_promotes_the_token_it_was_built_from():
    model = cached_model("tiny-gpt2", "fold_norm")
    token = model.tokenizer(" Mary")["input_ids"][0]
    basis = lens(model, torch.eye(model.d_model))  # [d, vocab]: the lens of each basis vector (centred: GPT-2)
    direction = torch.linalg.pinv(basis)[token]  # the direction whose lens is closest to one-hot on the token
    logits = lens(model, direction)
    assert int(logits.argmax()) == token
    assert top_tokens(model, direction, k=1)["promotes"] == [" Mary"]
    assert top_tokens(model, -direction, k=1)["suppresses"] == [" Mary"]
