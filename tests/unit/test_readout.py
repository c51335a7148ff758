import torch

from helpers.core.logits import lens
from helpers.singular.directions.readout import top_tokens
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


def test_one_lens_product_reads_each_direction_as_it_reads_alone():
    from helpers.singular.directions.augmented import augmented_svds
    from helpers.singular.directions.readout import readout_table, top_tokens_of

    model = cached_model("tiny-llama", "fold_norm")
    directions = torch.randn(5, model.d_model, generator=torch.Generator().manual_seed(0))
    assert top_tokens_of(model, directions, k=4) == [top_tokens(model, d, k=4) for d in directions]
    svds = augmented_svds(model, layers=[0])
    table = readout_table(model, svds, [0], n_directions=2, k=3)
    assert len(table) == (model.n_heads + 1) * 2
    first_mlp = table[(table.matrix == "MLP out") & (table["index"] == 1)].iloc[0]
    alone = top_tokens(model, svds[0]["mlp_out"].V[:, 1], k=3)
    assert first_mlp.promotes == " | ".join(repr(t)[1:-1] for t in alone["promotes"])
    head = table[(table.matrix == "OV") & (table["head"] == 1) & (table["index"] == 0)].iloc[0]
    assert head.suppresses == " | ".join(repr(t)[1:-1] for t in top_tokens(model, svds[0]["ov"].V[1, :, 0], k=3)["suppresses"])
