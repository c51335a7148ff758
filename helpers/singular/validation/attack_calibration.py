"""The adversary's positive control: a circuit known to be complete (docs/methods.md §1.9).

Notebook 07's adversary (``helpers.singular.validation.adversary``) has broken every circuit that leaves a direction out.
That cannot be told apart from an attack that breaks anything until a circuit known to hold has been attacked.
The circuit here leaves out only *inert* directions, those whose singular value is numerically zero (SmolLM2: one
OV direction per head, from the augmented bias row of a model without biases, and one per gated MLP map): they
write nothing, so no setting of them can move the output, and the attack must find a KL of zero. Beside it, as
many directions left out at random in every block (``random_like``): live directions, which the attack may break.
"""
from __future__ import annotations

import time

from helpers.core.weights import layer_weights
from helpers.singular.validation.adversary import adversarial_kl, stochastic_kl, survives
from helpers.singular.directions.augmented import layer_svds
from helpers.singular.masking.circuits import CircuitEvaluator, random_like
from helpers.singular.masking.masks import FixedMasks


def inert_circuit(model, relative: float) -> FixedMasks:
    """Every direction kept (1) except those whose singular value is at most ``relative`` × the largest of its
    head (QK, OV: per head) or map (MLP kinds), which are left out (0). Blocks in the masks' order."""
    if not 0.0 < relative < 1.0:
        raise ValueError(f"relative={relative}: expected a small positive fraction (1e-6: float32's rounding)")
    blocks = {}
    for layer in range(model.n_layers):
        for kind, svd in layer_svds(layer_weights(model, layer, device="cpu")).items():
            S = svd.S.double()
            blocks[f"{layer}_{kind}"] = (S > relative * S.max(-1, keepdim=True).values).float().to(model.device)
    return FixedMasks(blocks)


def left_out(circuit: FixedMasks) -> int:
    return int(sum(float((v <= 0.5).sum()) for v in circuit.blocks.values()))


def calibrate_attack(masked, held_out, rule, rules: dict, relative: float, control_seed: int = 0, log=print) -> list[dict]:
    """The declared attack (``rules``: ``load_attack_rules``) on the inert circuit and on its same-count random
    control, on ``held_out`` under ``rule``: one row each, with the KL under the rule, under stochastic partial
    ablation, the largest the adversary found, whether it held the bound, and the ascent's curve."""
    evaluator = CircuitEvaluator(masked, held_out, rule)
    inert = inert_circuit(masked.model, relative)
    if left_out(inert) == 0:
        raise ValueError(f"{masked.model.name} has no direction with σ ≤ {relative} × its block's largest: the "
                         "attack's positive control needs inert directions to leave out")
    attack, bound = rules["attack"], rules["faithful"]["bound"]
    rows = []
    for which, circuit in (("inert", inert), ("random", random_like(inert, control_seed))):
        started = time.perf_counter()
        curve = adversarial_kl(evaluator, circuit, attack)
        stochastic = stochastic_kl(evaluator, circuit, rules["stochastic_draws"], attack.seed)
        rows.append(dict(circuit=which, left_out=left_out(circuit), total=circuit.count(),
                         under_rule_kl=evaluator.evaluate(circuit)["kl"], stochastic_max_kl=stochastic["max"],
                         adversarial_kl=float(curve["best"].max()), bound=bound, survives=survives(curve, bound),
                         curve=curve.to_dict("records")))
        log(f"attack on the {which} circuit ({rows[-1]['left_out']} directions left out): largest KL "
            f"{rows[-1]['adversarial_kl']:.3g} ({time.perf_counter() - started:.0f} s)")
    return rows


def attack_verdict(rows: list[dict]) -> dict:
    """Whether the attack can say yes (the inert circuit holds the bound) and tells a circuit known to hold from
    its random control (the inert one holds it and the random one does not)."""
    by = {row["circuit"]: row for row in rows}
    says_yes = bool(by["inert"]["survives"])
    return dict(says_yes=says_yes, tells_apart=says_yes and not by["random"]["survives"])
