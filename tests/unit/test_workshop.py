"""The workshop criteria (helpers.results.workshop_checks) on hand-made summaries: met, and each one broken in turn."""
import copy
import json

import pytest

from helpers.results.workshop_checks import b1_passes, check
from helpers.workshop import main

CIRCUITS = {"profile": "workshop", "alpha_sweep": [
    {"alpha": 7.8e-4, "kept_fraction": 0.30, "kl": 0.20, "random_kl": 1.5},
    {"alpha": 1.95e-4, "kept_fraction": 0.70, "kl": 0.05, "random_kl": 0.9}]}
RECEPTORS = {"profile": "workshop", "flip_rate": {
    "direct": {"receptors": {"1.0": 20.0, "5.0": 90.0}, "random": {"1.0": 0.0, "5.0": 10.0}},
    "layer": {"receptors": {"1.0": 10.0, "5.0": 80.0}, "random": {"1.0": 0.0, "5.0": 10.0}}}}
B = {"profile": "workshop", "layers": [3, 9, 15], "pass_rates": {
    "attn.o B1": {"model": 2 / 3, "permuted": 0.0, "random-init": 1 / 3, "uninformative": False},
    "mlp.down B1": {"model": 1.0, "permuted": 0.0, "random-init": 0.0, "uninformative": False},
    "attn.o A1": {"model": 1.0, "permuted": 1.0, "random-init": 1.0, "uninformative": True}}}
ATTACK = {"profile": "workshop", "attack_table": [
    {"label": "ioi-a", "circuit": "circuit", "under_rule_kl": 0.1, "adversarial_kl": 0.5},
    {"label": "ioi-a", "circuit": "random", "under_rule_kl": 2.0, "adversarial_kl": 2.5}]}
PLANTED = {"profile": "workshop", "plants": [
    {"site": "late", "strength": 2.0, "drives_task": True, "necessary": True},
    {"site": "late", "strength": 0.25, "drives_task": False, "necessary": False}],  # weak: not judged
    "attack_calibration": [{"circuit": "inert", "adversarial_kl": 0.0, "bound": 0.21, "survives": True},
                           {"circuit": "random", "adversarial_kl": 3.0, "bound": 0.21, "survives": False}]}


def write(folder, summaries):
    for name, summary in summaries.items():
        (folder / name).mkdir(parents=True)
        (folder / name / "summary.json").write_text(json.dumps(summary))
    return folder


def runs(circuits=CIRCUITS, receptors=RECEPTORS, b=B, attack=ATTACK, planted=PLANTED):
    return {"02_masking-ioi-m": circuits, "06_steering-m": receptors, "04_tiled_svd-g": b,
            "07_circuit_validation-ioi-m": attack, "08_planted_mechanisms-m": planted}


def test_b1_passes_are_counted_over_the_layers_run():
    assert b1_passes(B) == {"model": 5, "permuted": 0, "random-init": 1}


def test_every_criterion_met(tmp_path):
    table = check(write(tmp_path, runs()))
    assert table["passed"].all() and len(table) == 2 + 1 + 4 + 1 + 2 + 2
    assert main(["--figures", str(tmp_path)]) == 0


def broken(path, value):
    summaries = copy.deepcopy(runs())
    name, *keys = path
    target = summaries[name]
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return summaries


@pytest.mark.parametrize("path,value,failing", [
    (("02_masking-ioi-m", "alpha_sweep", 0, "random_kl"), 0.55, "random KL / circuit KL at α 0.00078"),
    (("02_masking-ioi-m", "alpha_sweep", 0, "kept_fraction"), 0.6, "kept fraction at the heaviest α"),
    (("06_steering-m", "flip_rate", "layer", "receptors", "5.0"), 45.0, "layer: % flipped"),
    (("06_steering-m", "flip_rate", "direct", "random", "5.0"), 65.0, "direct: receptors − random"),
    (("04_tiled_svd-g", "pass_rates", "mlp.down B1", "random-init"), 1.0, "model − random-init"),
    (("04_tiled_svd-g", "profile"), None, "summary of a workshop run"),
    (("07_circuit_validation-ioi-m", "attack_table", 0, "adversarial_kl"), 0.19, "ioi-a: KL under attack"),
    (("08_planted_mechanisms-m", "plants", 0, "necessary"), False, "late ×2: ablating the plant removes it"),
    (("08_planted_mechanisms-m", "attack_calibration", 0, "survives"), False, "inert directions left out"),
    (("08_planted_mechanisms-m", "plants", 0, "drives_task"), False, "a plant that drives the task"),
])
def test_each_broken_criterion_fails_alone(tmp_path, path, value, failing):
    table = check(write(tmp_path, broken(path, value)))
    assert table.loc[~table["passed"], "criterion"].str.contains(failing, regex=False).tolist() == [True]
    assert main(["--figures", str(tmp_path)]) == 1


def test_a_missing_run_fails(tmp_path):
    summaries = runs()
    del summaries["06_steering-m"]
    table = check(write(tmp_path, summaries))
    assert table.loc[~table["passed"], "criterion"].tolist() == ["a finished 06_steering-* run"]
