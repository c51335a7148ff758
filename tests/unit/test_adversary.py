"""Circuits under attack (helpers.singular.adversary) and the nonsense tasks (helpers.singular.nonsense)."""
import pytest
import torch

from helpers.singular.adversary import (Attack, adversarial_kl, excluded, held_out_kl, partial_masks, project,
                                        stochastic_kl, survives)
from helpers.singular.circuits import CircuitEvaluator
from helpers.singular.masks import AblationRule, FixedMasks, MaskedModel
from helpers.singular.nonsense import nonsense_task
from helpers.singular.tasks import ioi_task
from tests.conftest import cached_model


def setup(n=8):
    model = cached_model("tiny-llama", "fold_norm")
    evaluator = CircuitEvaluator(MaskedModel(model), ioi_task(model, n, seed=3), AblationRule.uniform())
    return model, evaluator


def circuit_keeping(model, fraction: float, seed: int = 0) -> FixedMasks:
    generator = torch.Generator().manual_seed(seed)
    ones = FixedMasks.ones(model)
    return FixedMasks({n: (torch.rand(v.shape, generator=generator) < fraction).float() for n, v in ones.blocks.items()})


def test_m_at_zero_is_the_rules_ablation_exactly_and_m_at_one_the_full_model():
    model, evaluator = setup()
    circuit = circuit_keeping(model, 0.5)
    zeros = {n: torch.zeros_like(v) for n, v in circuit.blocks.items()}
    ones = {n: torch.ones_like(v) for n, v in circuit.blocks.items()}
    with torch.no_grad():
        assert float(held_out_kl(evaluator, partial_masks(circuit, zeros))) == evaluator.evaluate(circuit)["kl"]
        assert float(held_out_kl(evaluator, partial_masks(circuit, ones))) == pytest.approx(0.0, abs=1e-6)


def test_kept_directions_stay_at_one_whatever_m_is():
    model, _ = setup()
    circuit = circuit_keeping(model, 0.3)
    m = {n: torch.full(v.shape, 0.25) for n, v in circuit.blocks.items()}
    for name, values in partial_masks(circuit, m).blocks.items():
        kept = circuit.blocks[name] > 0.5
        assert torch.equal(values[kept], torch.ones_like(values[kept]))
        assert torch.equal(values[~kept], torch.full_like(values[~kept], 0.25))
    assert all(torch.equal(e, 1 - circuit.blocks[n]) for n, e in excluded(circuit).items())


def test_the_projection_keeps_m_in_the_unit_interval():
    m = {"a": torch.tensor([-0.5, 0.0, 0.3, 1.0, 1.7])}
    project(m)
    assert m["a"].tolist() == [0.0, 0.0, pytest.approx(0.3), 1.0, 1.0]


def test_the_attack_raises_the_kl_where_a_left_out_direction_matters_and_never_moves_kept_ones():
    """Planted: the circuit keeps everything but one layer's OV directions; the ablation rule's reference
    (the corrupted prompt) is one setting of them, and the adversary finds a worse one."""
    model, evaluator = setup()
    ones = FixedMasks.ones(model)
    circuit = FixedMasks({n: (torch.zeros_like(v) if n == "1_ov" else v) for n, v in ones.blocks.items()})
    curve = adversarial_kl(evaluator, circuit, Attack(checkpoints=(5, 10), step_size=0.2, batch=None, starts=("random",), seed=0))
    assert list(curve["step"]) == [0, 5, 10]
    assert curve["kl"].iloc[-1] > curve["kl"].iloc[0] and curve["best"].iloc[-1] == curve["kl"].max()
    rule = adversarial_kl(evaluator, circuit, Attack(checkpoints=(5,), step_size=0.2, batch=4, starts=("rule",), seed=0))
    assert rule["kl"].iloc[0] == pytest.approx(evaluator.evaluate(circuit)["kl"], rel=1e-6)  # m = 0: the rule
    assert not survives(curve, bound=curve["kl"].iloc[0]) and survives(curve, bound=curve["best"].max())


def test_the_full_model_has_nothing_to_attack():
    model, evaluator = setup()
    full = FixedMasks.ones(model)
    curve = adversarial_kl(evaluator, full, Attack(checkpoints=(3,), step_size=0.05, batch=None, starts=("rule", "random"), seed=0))
    assert curve["kl"].abs().max() < 1e-6
    assert stochastic_kl(evaluator, full, draws=2, seed=0)["max"] < 1e-6


def test_stochastic_draws_are_seeded_and_lie_between_the_full_model_and_beyond():
    model, evaluator = setup()
    circuit = circuit_keeping(model, 0.5)
    first, again = stochastic_kl(evaluator, circuit, draws=3, seed=1), stochastic_kl(evaluator, circuit, draws=3, seed=1)
    assert first == again and first["max"] >= first["mean"] > 0
    assert stochastic_kl(evaluator, circuit, draws=3, seed=2)["draws"] != first["draws"]


def test_bad_attack_settings_are_refused():
    good = dict(checkpoints=(20, 40), step_size=0.05, batch=16, starts=("rule",), seed=0)
    Attack(**good)
    for bad in (dict(checkpoints=(40, 20)), dict(checkpoints=()), dict(step_size=0), dict(batch=0),
                dict(starts=("zero",)), dict(starts=())):
        with pytest.raises(ValueError):
            Attack(**{**good, **bad})


@pytest.mark.parametrize("kind", ["shuffled", "random_tokens"])
def test_nonsense_prompts_keep_the_lengths_and_bos_and_shuffling_keeps_each_prompts_tokens(kind):
    model = cached_model("tiny-llama", "fold_norm")
    task = ioi_task(model, 6, seed=0)
    nonsense = nonsense_task(task, kind, seed=4)
    assert torch.equal(nonsense.answer_pos, task.answer_pos) and nonsense.clean.shape == task.clean.shape
    assert torch.equal(nonsense.clean[:, 0], task.clean[:, 0])
    for i in range(len(task)):
        end = int(task.answer_pos[i]) + 1
        same = sorted(nonsense.clean[i, :end].tolist()) == sorted(task.clean[i, :end].tolist())
        assert same if kind == "shuffled" else True
        assert torch.equal(nonsense.clean[i, end:], task.clean[i, end:])  # padding untouched
    assert not torch.equal(nonsense.clean, task.clean) and len(set(nonsense.prompts)) == len(task)
    assert nonsense_task(task, kind, seed=4).prompts == nonsense.prompts
    with pytest.raises(ValueError, match="not one of"):
        nonsense_task(task, "scrambled")


def test_the_declared_rules_load_and_a_mistyped_key_is_refused(tmp_path):
    from helpers.singular.adversary import ATTACK_RULES, load_attack_rules

    rules = load_attack_rules()
    assert rules["attack"] == Attack(checkpoints=(20, 40, 80, 160), step_size=0.05, batch=16, starts=("rule", "random"),
                                     seed=0)  # the values the file declares, its only source
    assert rules["stochastic_draws"] == 8 and rules["weight_controls"]["min_ratio"] == 1.5
    assert rules["faithful"]["bound"] == 0.21 and rules["task_specific"]["ratio"] == 0.5
    bad = tmp_path / "rules.toml"
    bad.write_text(ATTACK_RULES.read_text().replace("bound = 0.21", "bund = 0.21"))
    with pytest.raises(ValueError, match=r"\[faithful\].*missing \['bound'\], unknown \['bund'\]"):
        load_attack_rules(bad)


def test_task_specificity_at_its_boundary():
    from helpers.singular.adversary import task_specific

    seeds = [0.35, 0.5, 0.64]
    assert task_specific(0.175, seeds, 0.5) and not task_specific(0.1751, seeds, 0.5)  # at, and just beyond, 0.5 × 0.35
    with pytest.raises(ValueError, match="at least one pair"):
        task_specific(0.1, [], 0.5)


def test_survival_at_its_boundary():
    import pandas as pd

    curve = pd.DataFrame(dict(start=["rule", "rule"], step=[0, 20], kl=[0.1, 0.21], best=[0.1, 0.21]))
    assert survives(curve, 0.21) and not survives(curve, 0.2099)


def test_random_token_nonsense_corrupts_exactly_the_positions_the_task_corrupts():
    """The corrupted random-token prompt differs from its clean one where, and only where, the task's own
    corrupted prompt differs from its clean one: a corruption as large as the task's, not a new draw everywhere."""
    model = cached_model("tiny-llama", "fold_norm")
    for name in ("ioi", "gender"):
        from helpers.singular.tasks import make_task

        task = make_task(name, model, 8, seed=0)
        nonsense = nonsense_task(task, "random_tokens", seed=4)
        for i in range(len(task)):
            end = int(task.answer_pos[i]) + 1
            task_changed = (task.clean[i, :end] != task.corrupted[i, :end]).nonzero().squeeze(1).tolist()
            changed = (nonsense.clean[i, :end] != nonsense.corrupted[i, :end]).nonzero().squeeze(1).tolist()
            assert changed == task_changed and changed, (name, i)
            assert torch.equal(nonsense.corrupted[i, end:], task.corrupted[i, end:])
