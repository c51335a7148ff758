import torch

from helpers.singular.readout import direction_logits, top_tokens
from helpers.core.weights import unembedding
from tests.conftest import cached_model


def test_direction_through_unembedding_promotes_the_token_it_was_built_from():
    model = cached_model("tiny-gpt2", "fold_norm")
    u = unembedding(model)
    token = model.tokenizer(" Mary")["input_ids"][0]
    direction = torch.linalg.pinv(u.W_U.double())[token]  # the direction whose logits are one-hot on the token
    logits = direction_logits(model, direction)
    assert int(logits.argmax()) == token
    assert top_tokens(model, direction, k=1)["promotes"] == [" Mary"]
    assert top_tokens(model, -direction, k=1)["suppresses"] == [" Mary"]
