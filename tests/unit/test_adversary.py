"""Circuits under attack (helpers.singular.validation.adversary) and the nonsense tasks (helpers.singular.validation.nonsense)."""
import pytest
import torch

from helpers.singular.validation.adversary import (Attack, adversarial_kl, excluded, held_out_kl, partial_masks, project,
                                        stochastic_kl, survives)
from helpers.singular.masking.circuits import CircuitEvaluator
from helpers.singular.masking.masks import AblationRule, FixedMasks, MaskedModel
from helpers.singular.validation.nonsense import nonsense_task
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
    curve = adversarial_kl(evaluator, circuit, Attack(checkpoints=(5, 10), step_size=0.2, batch=None, starts=("random",), seed=0, climb_share=None))
    assert list(curve["step"]) == [0, 5, 10]
    assert curve["kl"].iloc[-1] > curve["kl"].iloc[0] and curve["best"].iloc[-1] == curve["kl"].max()
    rule = adversarial_kl(evaluator, circuit, Attack(checkpoints=(5,), step_size=0.2, batch=4, starts=("rule",), seed=0, climb_share=None))
    assert rule["kl"].iloc[0] == pytest.approx(evaluator.evaluate(circuit)["kl"], rel=1e-6)  # m = 0: the rule
    assert not survives(curve, bound=curve["kl"].iloc[0]) and survives(curve, bound=curve["best"].max())


def test_the_full_model_has_nothing_to_attack():
    model, evaluator = setup()
    full = FixedMasks.ones(model)
    curve = adversarial_kl(evaluator, full, Attack(checkpoints=(3,), step_size=0.05, batch=None, starts=("rule", "random"), seed=0, climb_share=None))
    assert curve["kl"].abs().max() < 1e-6
    assert stochastic_kl(evaluator, full, draws=2, seed=0)["max"] < 1e-6


def test_stochastic_draws_are_seeded_and_lie_between_the_full_model_and_beyond():
    model, evaluator = setup()
    circuit = circuit_keeping(model, 0.5)
    first, again = stochastic_kl(evaluator, circuit, draws=3, seed=1), stochastic_kl(evaluator, circuit, draws=3, seed=1)
    assert first == again and first["max"] >= first["mean"] > 0
    assert stochastic_kl(evaluator, circuit, draws=3, seed=2)["draws"] != first["draws"]


def test_bad_attack_settings_are_refused():
    good = dict(checkpoints=(20, 40), step_size=0.05, batch=16, starts=("rule",), seed=0, climb_share=0.5)
    Attack(**good)
    Attack(**{**good, "climb_share": None})
    for bad in (dict(checkpoints=(40, 20)), dict(checkpoints=()), dict(step_size=0), dict(batch=0),
                dict(starts=("zero",)), dict(starts=()), dict(climb_share=0), dict(climb_share=1),
                dict(climb_share=True), dict(climb_share="half")):
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
    from helpers.singular.validation.adversary import ATTACK_RULES, load_attack_rules

    rules = load_attack_rules()
    assert rules["attack"] == Attack(checkpoints=(20, 40, 80, 160), step_size=0.05, batch=16, starts=("rule", "random"),
                                     seed=0, climb_share=0.5)  # the values the file declares, its only source
    assert rules["nested"]["shares"] == [0.9, 0.95, 0.99, 0.999] and rules["nested"]["control_seed"] == 0
    assert rules["stochastic_draws"] == 8 and rules["weight_controls"]["min_ratio"] == 1.5
    assert rules["faithful"]["bound"] == 0.21 and rules["task_specific"]["ratio"] == 0.5
    bad = tmp_path / "rules.toml"
    bad.write_text(ATTACK_RULES.read_text().replace("bound = 0.21", "bund = 0.21"))
    with pytest.raises(ValueError, match=r"\[faithful\].*missing \['bound'\], unknown \['bund'\]"):
        load_attack_rules(bad)


def test_task_specificity_at_its_boundary():
    from helpers.singular.validation.adversary import task_specific

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


def test_random_tokens_can_leave_ids_out_and_the_holding_share_counts_prompts_that_hold_them():
    """``exclude`` removes ids from what random tokens draw (a planted trigger can then not appear), and only random
    tokens take it; ``holding_share`` is checked against a hand count."""
    from helpers.singular.tasks import make_task
    from helpers.singular.validation.nonsense import holding_share

    model = cached_model("tiny-llama", "fold_norm")
    task = make_task("ioi", model, 8, seed=0)
    drawn = nonsense_task(task, "random_tokens", seed=4)
    body = lambda t, i: t.clean[i, 1: int(t.answer_pos[i]) + 1].tolist()  # noqa: E731
    common = max(set(x for i in range(len(task)) for x in body(drawn, i)),
                 key=lambda x: (sum(body(drawn, i).count(x) for i in range(len(task))), x))
    without = nonsense_task(task, "random_tokens", seed=4, exclude=(common,))
    for i in range(len(task)):
        end = int(task.answer_pos[i]) + 1
        assert common not in without.clean[i, :end].tolist() and common not in without.corrupted[i, :end].tolist()
    assert without.name.endswith("random_tokens-without-1-ids") and drawn.name.endswith("-random_tokens")
    assert holding_share(without, (common,)) == 0.0
    hand = sum(common in body(drawn, i) for i in range(len(task))) / len(task)
    assert holding_share(drawn, (common,)) == hand > 0
    assert holding_share(nonsense_task(task, "shuffled", seed=4), (int(task.clean[0, 1]),)) >= 1 / len(task)
    with pytest.raises(ValueError, match="only random tokens"):
        nonsense_task(task, "shuffled", exclude=(common,))
    ids = sorted(set(x for i in range(len(task)) for x in body(task, i)))
    with pytest.raises(ValueError, match="outside exclude"):
        nonsense_task(task, "random_tokens", exclude=tuple(ids[1:]))  # one id left: nothing to corrupt with
    with pytest.raises(ValueError, match="name at least one"):
        holding_share(task, ())


def test_the_prompts_split_into_a_climb_half_and_a_report_half_that_share_nothing():
    from helpers.singular.validation.adversary import split_rows

    climb, report = split_rows(10, 0.5, seed=3)
    assert len(climb) == 5 and len(report) == 5 and not set(climb.tolist()) & set(report.tolist())
    assert sorted(climb.tolist() + report.tolist()) == list(range(10)) and climb.tolist() == sorted(climb.tolist())
    assert torch.equal(split_rows(10, 0.5, seed=3)[0], climb) and not torch.equal(split_rows(10, 0.5, seed=4)[0], climb)
    assert len(split_rows(7, 0.5, seed=0)[0]) == 4 and split_rows(7, None, seed=0) == (None, None)
    for n, share in ((1, 0.5), (3, 0.1), (3, 0.9)):  # one half would be empty
        with pytest.raises(ValueError, match="leaves a half empty"):
            split_rows(n, share, seed=0)


def test_the_attack_climbs_on_one_half_and_reports_the_other_in_sample_beside_it():
    """Oracle: the reported KL is the held-out KL over the report rows, the in-sample KL over the climb rows, each
    computed directly at the rule's setting (m = 0: the circuit itself)."""
    from helpers.singular.validation.adversary import split_rows

    model, evaluator = setup(n=8)
    circuit = circuit_keeping(model, 0.5)
    attack = Attack(checkpoints=(2,), step_size=0.2, batch=2, starts=("rule",), seed=5, climb_share=0.5)
    curve = adversarial_kl(evaluator, circuit, attack)
    climb, report = split_rows(8, 0.5, seed=5)
    with torch.no_grad():
        assert curve["kl"].iloc[0] == float(held_out_kl(evaluator, circuit, report))
        assert curve["kl_in_sample"].iloc[0] == float(held_out_kl(evaluator, circuit, climb))
    assert curve["kl"].iloc[0] != curve["kl_in_sample"].iloc[0]
    assert (curve["best"] == curve["kl"].cummax()).all() and not curve["stopped"].any()
    alone = adversarial_kl(evaluator, circuit, Attack(**{**attack.record(), "climb_share": None}))
    assert (alone["kl"] == alone["kl_in_sample"]).all()  # without a split, both are the KL on every prompt


def test_the_attack_stops_just_above_its_bound_and_not_at_it():
    model, evaluator = setup()
    circuit = circuit_keeping(model, 0.5)
    attack = Attack(checkpoints=(1, 2), step_size=0.2, batch=None, starts=("rule", "random"), seed=0, climb_share=0.5)
    first = adversarial_kl(evaluator, circuit, attack)["kl"].iloc[0]
    at = adversarial_kl(evaluator, circuit, attack, stop_above=first)  # not exceeded at step 0: goes on
    assert len(at) > 1 and not at["stopped"].iloc[0]
    below = adversarial_kl(evaluator, circuit, attack, stop_above=first * (1 - 1e-6))
    assert len(below) == 1 and below["stopped"].iloc[0] and below["step"].iloc[0] == 0  # every later start skipped


def flat(circuit: FixedMasks) -> torch.Tensor:
    return torch.cat([v.reshape(-1) for v in circuit.blocks.values()])


def test_nested_circuits_keep_the_top_share_and_their_random_controls_are_nested_with_the_same_block_counts():
    import math

    from helpers.singular.validation.adversary import nested_circuits
    from helpers.singular.masking.circuits import binarise_top
    from helpers.singular.masking.masks import DirectionMasks

    model, _ = setup()
    masks = DirectionMasks(model, init=0.5)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for value in masks.logits.values():
            value.copy_(torch.randn(value.shape, generator=generator))
    total = masks.count()
    circuits = nested_circuits(masks, [0.5, 0.9, 0.99], control_seed=2)
    assert [c["share"] for c in circuits] == [0.99, 0.9, 0.5]  # largest first
    for c in circuits:
        assert c["kept"] == math.ceil(c["share"] * total) == int(flat(c["learned"]).sum()) == int(flat(c["random"]).sum())
        assert torch.equal(flat(c["learned"]), flat(binarise_top(masks, c["kept"])))
        assert all(int(c["random"].blocks[n].sum()) == int(v.sum()) for n, v in c["learned"].blocks.items())
    for larger, smaller in zip(circuits, circuits[1:]):
        for ranking in ("learned", "random"):
            assert bool((flat(smaller[ranking]) <= flat(larger[ranking])).all())  # nested
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        nested_circuits(masks, [0.9, 1.0], control_seed=0)


def test_a_nested_circuit_keeps_at_least_its_share_and_an_exact_product_exactly():
    from helpers.singular.validation.adversary import nested_count

    assert nested_count(0.999, 86730) == 86644  # 86,643.27 → at least the share
    assert nested_count(0.5, 7) == 4 and nested_count(0.3, 10) == 3
    assert nested_count(0.07, 100) == 7  # 7.000000000000001 in floating point


def test_a_nested_failure_fails_every_smaller_circuit_of_its_ranking_without_an_attack():
    from helpers.singular.validation.adversary import load_attack_rules, nested_attack, smallest_surviving_share
    from helpers.singular.masking.masks import DirectionMasks

    model, evaluator = setup()
    masks = DirectionMasks(model, init=0.5)
    with torch.no_grad():
        for value in masks.logits.values():
            value.copy_(torch.randn(value.shape, generator=torch.Generator().manual_seed(1)))
    rules = load_attack_rules()
    rules = dict(rules, attack=Attack(checkpoints=(1,), step_size=0.2, batch=None, starts=("rule",), seed=0,
                                      climb_share=0.5))
    breaks = nested_attack(evaluator, masks, dict(rules, faithful={"bound": -1.0}), [0.5, 0.9], log=lambda _: None)
    assert list(breaks["share"]) == [0.9, 0.5, 0.9, 0.5] and not breaks["survives"].any()
    assert breaks["inferred"].isna().tolist() == [True, False, True, False]  # only the largest of each attacked
    assert breaks["stopped_at"].iloc[0] == 0 and smallest_surviving_share(breaks, "learned") is None
    holds = nested_attack(evaluator, masks, dict(rules, faithful={"bound": 1e9}), [0.5, 0.9], log=lambda _: None)
    assert holds["survives"].all() and holds["inferred"].isna().all() and holds["stopped_at"].isna().all()
    assert smallest_surviving_share(holds, "random") == 0.5


def test_the_smallest_surviving_share_needs_every_larger_share_to_hold():
    from helpers.singular.validation.adversary import smallest_surviving_share

    def table(pattern):
        return [dict(ranking="learned", share=s, survives=ok) for s, ok in zip([0.999, 0.99, 0.95, 0.9], pattern)]

    assert smallest_surviving_share(table([True, True, True, True]), "learned") == 0.9
    assert smallest_surviving_share(table([True, True, False, True]), "learned") == 0.99  # 0.9 after a failure
    assert smallest_surviving_share(table([False, True, True, True]), "learned") is None
    assert smallest_surviving_share(table([True] * 4), "random") is None  # no rows of that ranking
