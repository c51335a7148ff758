"""The adversary's positive control (helpers.singular.validation.attack_calibration): the inert directions are exactly the
numerically zero singular values, and a circuit leaving out only them holds under attack (KL zero), so the
attack can say yes."""
import pytest
import torch

from helpers.singular.validation.adversary import load_attack_rules
from helpers.singular.validation.attack_calibration import attack_verdict, calibrate_attack, inert_circuit, left_out
from helpers.singular.masking.masks import AblationRule, MaskedModel
from helpers.singular.validation.verdicts import with_attack_overrides
from tests.conftest import cached_model


def test_inert_directions_are_the_bias_rows_of_a_bias_free_model():
    """The tiny Llama has no bias: each head's augmented OV matrix and each gated MLP input map has one extra,
    all-zero row, so exactly one of its d_head + 1 directions has a zero singular value (oracle: a dense SVD of
    the head's folded W_V W_O with a zero bias row appended) and nothing else is."""
    from helpers.core.weights import layer_weights

    model = cached_model("tiny-llama", "fold_norm")
    circuit = inert_circuit(model, 1e-6)
    for layer in range(model.n_layers):
        assert int((circuit.blocks[f"{layer}_ov"] == 0).sum()) == model.n_heads
        assert int((circuit.blocks[f"{layer}_ov"] == 0).sum(1).max()) == 1
        assert int((circuit.blocks[f"{layer}_qk"] == 0).sum()) == 0
        w = layer_weights(model, layer, device="cpu")
        ov = torch.cat([torch.zeros(1, model.d_model, dtype=torch.float64),
                        w.W_V[0].double() @ w.W_O[0].double()])  # head 0, bias row first
        S = torch.linalg.svdvals(ov)[: model.d_head + 1]  # the masks' d_head + 1 directions per head
        assert int((S <= 1e-6 * S.max()).sum()) == int((circuit.blocks[f"{layer}_ov"][0] == 0).sum()) == 1
    assert left_out(circuit) == model.n_layers * (model.n_heads + 2)  # + mlp_up and mlp_gate per layer
    with pytest.raises(ValueError, match="relative=0"):
        inert_circuit(model, 0.0)


def test_the_attack_cannot_move_a_circuit_that_leaves_out_only_inert_directions():
    from helpers.singular.validation.planted import draw_pairs, planted_task

    model = cached_model("tiny-llama", "fold_norm")
    held_out = planted_task(model, draw_pairs(model.tokenizer, 4), 12, seed=2).task
    rules = with_attack_overrides(load_attack_rules(), {"checkpoints": [2, 4], "batch": 4, "stochastic_draws": 2})
    rows = calibrate_attack(MaskedModel(model), held_out, AblationRule.uniform("corrupted", "all"), rules, 1e-6,
                            log=lambda *_: None)
    inert, random = rows
    assert inert["circuit"] == "inert" and inert["left_out"] == random["left_out"] == 12
    assert abs(inert["under_rule_kl"]) < 1e-5 and inert["adversarial_kl"] < 1e-5 and inert["survives"]
    assert random["under_rule_kl"] > 1e-4  # live directions left out do move the output
    assert attack_verdict(rows) == dict(says_yes=True, tells_apart=not random["survives"])


def test_attack_verdict_by_hand():
    row = lambda which, ok: dict(circuit=which, survives=ok)  # noqa: E731
    assert attack_verdict([row("inert", True), row("random", False)]) == dict(says_yes=True, tells_apart=True)
    assert attack_verdict([row("inert", True), row("random", True)]) == dict(says_yes=True, tells_apart=False)
    assert attack_verdict([row("inert", False), row("random", False)]) == dict(says_yes=False, tells_apart=False)
