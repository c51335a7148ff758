"""Circuit files (save, load, refuse), the faithfulness scores and the evaluator command, on tiny models."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from helpers import evaluate
from helpers.singular.masking import circuit_evaluation
from helpers.core.models import load_model
from helpers.singular.masking.circuit_files import (CircuitFileError, circuit_prompts, load_circuit, make_circuit,
                                            save_circuit)
from helpers.singular.masking.circuits import CircuitEvaluator, evaluate_circuit
from helpers.singular.masking.masks import FixedMasks, MaskedModel
from helpers.singular.masking.scoring import (PERCENTS, FaithfulnessScorer, area, cpr_cmd, faithfulness, metric_ends,
                                      n_at_percent, random_scores, top_percent)
from helpers.singular.masking.training import MaskingRun
from tests.conftest import cached_model

RUN = MaskingRun(n_prompts=24, steps=2, batch=4)


def trained_circuit(name: str = "tiny-llama"):
    """A circuit made as notebook 02 makes one: masks of a (short) masking run, random logits so the ranking
    is not trivial, kept = logit > 0."""
    model = cached_model(name, "fold_norm")
    masked = MaskedModel(model)
    train, held_out, masks, _ = RUN.run(masked, "ioi", progress=False)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in masks.logits.values():
            p.copy_(torch.randn(p.shape, generator=g))
    circuit = make_circuit(model, masks, FixedMasks.binarised(masks), "logit > 0", RUN.rule(), RUN, "ioi", train,
                           held_out, "test")
    return model, masked, masks, circuit, train, held_out


def test_a_saved_and_reloaded_circuit_gives_the_same_numbers(tmp_path):
    model, masked, masks, circuit, train, held_out = trained_circuit()
    path = save_circuit(circuit, tmp_path / "c.safetensors")
    loaded = load_circuit(path, model)
    assert loaded.metadata == json.loads(json.dumps(circuit.metadata))
    evaluator = CircuitEvaluator(masked, held_out, loaded.rule())
    in_memory = evaluate_circuit(evaluator, FixedMasks.binarised(masks), control_seeds=2)
    assert evaluate_circuit(evaluator, loaded.fixed(), control_seeds=2) == in_memory
    again = loaded.masks(model)
    for name, values in masks.eval_values().items():
        assert torch.equal(again.eval_values()[name], values)
    scorer = FaithfulnessScorer(evaluator, control_seeds=1)
    a = scorer.score(FixedMasks.binarised(masks), {n: p.detach() for n, p in masks.logits.items()})
    b = scorer.score(loaded.fixed(), loaded.scores)
    pd.testing.assert_frame_equal(a["curve"], b["curve"])
    pd.testing.assert_frame_equal(a["areas"], b["areas"])
    assert circuit_prompts(loaded, model)[1].prompts == held_out.prompts
    second = save_circuit(loaded, tmp_path / "d.safetensors")
    assert second.read_bytes() == path.read_bytes()  # equal circuits, equal bytes


def test_metadata_names_what_the_issue_asks_for():
    model, _, _, circuit, _, _ = trained_circuit()
    meta = circuit.metadata
    assert meta["model"]["model"] == "tiny-llama" and meta["model"]["weights_sha256"] == model.weights_sha256
    assert meta["model"]["tokenizer_sha256"] == model.tokenizer_sha256
    assert meta["model"]["processing"] == "fold_norm" and "descending singular value" in meta["svd_convention"]
    assert meta["ablation_rule"]["name"] == "corrupted@all" and meta["task"]["name"] == "ioi"
    assert meta["task"]["seed"] == RUN.seed and meta["training"]["steps"] == RUN.steps
    assert meta["n_directions"] == circuit.count() and meta["n_kept"] == circuit.n_kept()
    assert sum(meta["kept_by_kind"].values()) == circuit.n_kept() and "evaluator_version" in meta


def test_loading_refuses_another_model_other_weights_or_processing(tmp_path):
    _, _, _, circuit, _, _ = trained_circuit()
    path = save_circuit(circuit, tmp_path / "c.safetensors")
    with pytest.raises(CircuitFileError, match="model='tiny-llama'"):
        load_circuit(path, cached_model("tiny-gpt2", "fold_norm"))
    with pytest.raises(CircuitFileError, match="processing='fold_norm'"):
        load_circuit(path, cached_model("tiny-llama", "raw"))
    with pytest.raises(CircuitFileError, match="other weights"):
        load_circuit(path, load_model("tiny-llama", processing="fold_norm", seed=1))
    meta = dict(circuit.metadata, svd_convention="another SVD")
    other = save_circuit(type(circuit)(circuit.kept, circuit.scores, meta), tmp_path / "e.safetensors")
    with pytest.raises(CircuitFileError, match="another SVD convention"):
        load_circuit(other, cached_model("tiny-llama", "fold_norm"))
    record = dict(circuit.metadata["model"], tokenizer_sha256="0" * 64)
    retokenised = save_circuit(type(circuit)(circuit.kept, circuit.scores, dict(circuit.metadata, model=record)),
                               tmp_path / "f.safetensors")
    with pytest.raises(CircuitFileError, match="tokenizer of sha256 0000.*other tokens"):
        load_circuit(retokenised, cached_model("tiny-llama", "fold_norm"))
    unrecorded = {k: v for k, v in circuit.metadata["model"].items() if k != "tokenizer_sha256"}
    older = save_circuit(type(circuit)(circuit.kept, circuit.scores, dict(circuit.metadata, model=unrecorded)),
                         tmp_path / "g.safetensors")
    load_circuit(older, cached_model("tiny-llama", "fold_norm"))  # made before fingerprints were recorded


def test_loading_refuses_files_that_are_not_circuits(tmp_path):
    from safetensors.torch import save_file

    with pytest.raises(FileNotFoundError, match="no circuit file"):
        load_circuit(tmp_path / "missing.safetensors")
    save_file({"x": torch.zeros(2)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(CircuitFileError, match="not a circuit file"):
        load_circuit(tmp_path / "plain.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a file")
    with pytest.raises(CircuitFileError, match="not a readable"):
        load_circuit(tmp_path / "junk.safetensors")


def test_weights_hash_changes_with_the_weights():
    a = load_model("tiny-llama", seed=0).weights_sha256
    assert a == load_model("tiny-llama", seed=0).weights_sha256
    assert a != load_model("tiny-llama", seed=1).weights_sha256


def test_top_percent_keeps_the_largest_scores_signed_or_absolute():
    scores = {"0_qk": torch.tensor([[3.0, -5.0], [0.5, 1.0]]), "0_mlp_out": torch.tensor([-4.0, 2.0, 0.0, -1.0])}
    assert n_at_percent(8, 25) == 2 and n_at_percent(8, 100) == 8 and n_at_percent(1000, 0.1) == 1
    signed = top_percent(scores, 25, "signed")  # 3 and 2
    assert signed.blocks["0_qk"].tolist() == [[1, 0], [0, 0]] and signed.blocks["0_mlp_out"].tolist() == [0, 1, 0, 0]
    absolute = top_percent(scores, 25, "absolute")  # −5 and −4
    assert absolute.blocks["0_qk"].tolist() == [[0, 1], [0, 0]] and absolute.blocks["0_mlp_out"].tolist() == [1, 0, 0, 0]
    with pytest.raises(ValueError, match="ranking"):
        top_percent(scores, 25, "by_magnitude")


def test_cpr_and_cmd_of_a_hand_computed_curve():
    curve = pd.DataFrame({"percent": [10.0, 50.0, 100.0], "faithfulness": [0.5, 0.8, 1.0]})
    # linear: points (0, 0), (0.1, 0.5), (0.5, 0.8), (1, 1): 0.1·0.25 + 0.4·0.65 + 0.5·0.9 = 0.735
    # |1 − f|: (0, 1), (0.1, 0.5), (0.5, 0.2), (1, 0): 0.1·0.75 + 0.4·0.35 + 0.5·0.1 = 0.265
    # log: x = 1, log10 50, 2 over a width of 1
    x = np.log10([10, 50, 100])
    log_cpr = ((x[1] - x[0]) * 0.65 + (x[2] - x[1]) * 0.9) / 1.0
    log_cmd = ((x[1] - x[0]) * 0.35 + (x[2] - x[1]) * 0.1) / 1.0
    got = cpr_cmd(curve)
    assert got["cpr_linear"] == pytest.approx(0.735) and got["cmd_linear"] == pytest.approx(0.265)
    assert got["cpr_log"] == pytest.approx(log_cpr) and got["cmd_log"] == pytest.approx(log_cmd)
    perfect = pd.DataFrame({"percent": list(PERCENTS), "faithfulness": [1.0] * len(PERCENTS)})
    assert cpr_cmd(perfect)["cpr_log"] == pytest.approx(1.0) and cpr_cmd(perfect)["cmd_log"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="axis"):
        area([1, 2], [0, 1], "sqrt")


def test_faithfulness_is_zero_for_no_direction_and_one_for_all():
    model, masked, masks, circuit, _, held_out = trained_circuit()
    evaluator = CircuitEvaluator(masked, held_out, circuit.rule())
    ends = metric_ends(evaluator, circuit.scores)
    assert ends[0] == pytest.approx(evaluator.evaluate(FixedMasks.ones(model))["metric"])
    curve = faithfulness(evaluator, circuit.scores, ends, percents=(0, 10, 100))
    assert curve["faithfulness"].iloc[0] == 0.0 and curve["faithfulness"].iloc[-1] == 1.0
    middle = evaluator.evaluate(top_percent(circuit.scores, 10))["metric"]
    assert curve["faithfulness"].iloc[1] == pytest.approx((middle - ends[1]) / (ends[0] - ends[1]))


def test_random_scores_are_a_seeded_ranking_of_the_same_shapes():
    scores = {"a": torch.zeros(2, 3), "b": torch.zeros(4)}
    r = random_scores(scores, 0)
    assert {n: v.shape for n, v in r.items()} == {n: v.shape for n, v in scores.items()}
    assert sorted(torch.cat([v.reshape(-1) for v in r.values()]).tolist()) == list(range(10))
    assert all(torch.equal(r[n], random_scores(scores, 0)[n]) for n in r)


def test_evaluator_command_scores_a_file_on_fresh_prompts(tmp_path, capsys):
    model, _, _, circuit, train, held_out = trained_circuit()
    path = save_circuit(circuit, tmp_path / "c.safetensors")
    result = circuit_evaluation.evaluate_file(path, n_prompts=16, control_seeds=1, percents=(1, 10, 100), model=model)
    assert result["seed"] == RUN.seed + 1 and result["n_prompts"] + result["removed_as_seen"] == 16
    assert result["curve"]["faithfulness"].iloc[-1] == 1.0
    assert list(result["areas"]["ranking"]) == ["circuit (signed)", "random (mean of 1)"]
    with pytest.raises(ValueError, match="not fresh"):
        circuit_evaluation.evaluate_file(path, n_prompts=16, seed=RUN.seed, model=model)
    assert evaluate.main([str(path), "--prompts", "12", "--control-seeds", "1", "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "cpr_linear" in out and "cmd_log" in out and "not comparable with MIB" in out
    assert json.loads((tmp_path / "r.json").read_text())["task"] == "ioi"
    assert evaluate.main([str(tmp_path / "missing.safetensors")]) == 2


def test_fresh_prompts_leave_out_every_prompt_of_the_circuits_run(monkeypatch):
    model, _, _, circuit, train, held_out = trained_circuit()
    prompts, removed = circuit_evaluation.fresh_prompts(circuit, model, 100, seed=5)
    assert not set(prompts.prompts) & (set(train.prompts) | set(held_out.prompts))
    assert len(prompts) + removed == 100
    real = circuit_evaluation.make_task  # a generator that draws exactly the run's own prompts: all must go
    monkeypatch.setattr(circuit_evaluation, "make_task", lambda name, model, n, seed: real(name, model, n, seed=RUN.seed))
    with pytest.raises(ValueError, match="occur in the circuit's own run"):
        circuit_evaluation.fresh_prompts(circuit, model, RUN.n_prompts, seed=5)


def test_receptors_are_marked_in_or_out_of_the_circuit_against_its_base_rate():
    from helpers.singular.masking.circuit_files import Circuit, kept_fraction, mark_in_circuit

    kept = {"0_ov": torch.tensor([[True, False], [False, False]]), "1_ov": torch.tensor([[False, False], [False, True]]),
            "0_mlp_out": torch.tensor([True, True, True])}
    scores = {n: torch.arange(v.numel(), dtype=torch.float32).reshape(v.shape) for n, v in kept.items()}
    circuit = Circuit(kept, scores, {})
    table = pd.DataFrame({"layer": [0, 1, 1], "head": [0, 1, 0], "direction": [0, 1, 1]})
    marked = mark_in_circuit(table, circuit)
    assert marked["in_circuit"].tolist() == [True, True, False] and marked["circuit_score"].tolist() == [0.0, 3.0, 1.0]
    assert kept_fraction(circuit, "ov") == 2 / 8 and kept_fraction(circuit, "mlp_out") == 1.0
    with pytest.raises(ValueError, match="no 'qk' blocks"):
        kept_fraction(circuit, "qk")


def test_the_evaluator_attacks_a_circuit_file_when_asked_and_records_the_attacks_settings(tmp_path):
    from helpers.singular.validation.adversary import ATTACK_RULES

    model, _, _, circuit, _, _ = trained_circuit()
    path = save_circuit(circuit, tmp_path / "c.safetensors")
    rules = tmp_path / "attack.toml"
    rules.write_text(ATTACK_RULES.read_text().replace("checkpoints = [20, 40, 80, 160]", "checkpoints = [2, 4]")
                     .replace("stochastic_draws = 8", "stochastic_draws = 2"))
    result = circuit_evaluation.evaluate_file(path, n_prompts=16, control_seeds=1, percents=(1, 100), model=model,
                                    adversarial=True, attack_rules=rules)
    attack = result["attack"]
    assert attack["settings"]["checkpoints"] == (2, 4) and attack["bound"] == 0.21
    assert attack["under_rule_kl"] == result["circuit"]["kl"]  # the rule's setting, on the same prompts
    assert list(attack["curve"]["step"]) == [0, 2, 4, 0, 2, 4] and len(attack["stochastic"]["draws"]) == 2
    # m = 0 start: the two halves (8 prompts each) average to the rule's KL on all of them
    first = attack["curve"].iloc[0]
    assert (first["kl"] + first["kl_in_sample"]) / 2 == pytest.approx(result["circuit"]["kl"], rel=1e-5)
    assert attack["settings"]["climb_share"] == 0.5 and attack["best_kl"] == attack["curve"]["best"].max()
    assert attack["survives"] == (attack["best_kl"] <= 0.21)
    assert "survive the adversary" in circuit_evaluation.report(result) or "survives the adversary" in circuit_evaluation.report(result)
    assert "attack" not in circuit_evaluation.evaluate_file(path, n_prompts=16, control_seeds=1, percents=(1, 100), model=model)


def test_the_evaluators_printed_numbers_never_read_minus_zero():
    assert circuit_evaluation._four(-0.00004) == "0.0000" and circuit_evaluation._four(-0.0) == "0.0000"  # a KL of -4e-5 from rounding
    assert circuit_evaluation._four(-0.0001) == "-0.0001" and circuit_evaluation._four(0.12346) == "0.1235"
