"""Reading one head: per-source terms add up to the hook values; head choice, σ-matched controls, verdicts."""
import pandas as pd
import pytest
import torch

from helpers.singular.circuits import CircuitEvaluator
from helpers.singular.heads import (HeadReading, _matched_controls, ablation_effects, attention_spectra, by_role,
                                choose_control_head, choose_name_mover, name_mover_table, specificity,
                                subfunction_evidence)
from helpers.singular.masks import AblationRule, FixedMasks, MaskedModel
from helpers.singular.tasks import ioi_task
from tests.conftest import cached_model


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama", "tiny-gemma3"])
def test_ov_source_terms_add_up_to_the_heads_coefficient_from_the_hooks(name):
    model = cached_model(name, "fold_norm")
    task = ioi_task(model, 6, seed=1)
    masked = MaskedModel(model)
    rows = torch.arange(len(task))
    expected = masked.coefficients(task.clean, kinds=("ov",))  # oracle: hook_z through W_O V
    for layer, head in [(0, 0), (model.n_layers - 1, model.n_heads - 1)]:
        reading = HeadReading(model, task.clean, task.answer_pos, layer, head)
        oracle = expected[layer]["ov"][rows, task.answer_pos, head].double()
        torch.testing.assert_close(reading.ov_coefficients, oracle, rtol=1e-4, atol=1e-4 * float(oracle.abs().max()))
        contrast = torch.randn(len(task), model.d_model, dtype=torch.float64)
        written = reading.written_contrast(contrast).sum(-1)  # all directions together: the head's whole write
        head_out = oracle @ reading.ov_V.T
        expected_written = (head_out * contrast).sum(-1)
        torch.testing.assert_close(written, expected_written, rtol=1e-4, atol=1e-4 * float(expected_written.abs().max()))
        # padding after the answer position gets no attention
        assert float(reading.ov_sources[~reading.valid].abs().max()) < 1e-6


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama"])
def test_qk_key_terms_add_up_to_the_raw_query_key_products(name):
    model = cached_model(name, "fold_norm")
    task = ioi_task(model, 4, seed=1)
    layer, head = model.n_layers - 1, 1
    reading = HeadReading(model, task.clean, task.answer_pos, layer, head)
    names = [f"blocks.{layer}.attn.hook_q", f"blocks.{layer}.attn.hook_k"]
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(task.clean, names_filter=names)
    rows = torch.arange(len(task))
    q = cache[names[0]][rows, task.answer_pos, head].double()  # [n, dh] pre-rotation
    kv = head // (model.n_heads // model.n_kv_heads)
    k = cache[names[1]][:, :, kv].double()  # [n, T, dh]
    oracle = torch.einsum("ne,nte->nt", q, k)
    torch.testing.assert_close(reading.qk_keys.sum(-1), oracle, rtol=1e-4, atol=1e-4 * float(oracle.abs().max()))


def test_by_role_reads_each_role_and_sums_or_averages_the_rest():
    values = torch.arange(2 * 5 * 1, dtype=torch.float64).reshape(2, 5, 1)  # prompt 0: 0..4, prompt 1: 5..9
    positions = {"BOS": torch.tensor([0, 0]), "end": torch.tensor([3, 4])}
    valid = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    summed = by_role(values, positions, valid)
    assert summed.loc[0, "BOS"] == 2.5 and summed.loc[0, "end"] == 6.0
    assert summed.loc[0, "other"] == ((1 + 2) + (6 + 7 + 8)) / 2
    assert by_role(values, positions, valid, other="mean").loc[0, "other"] == (1.5 + 7.0) / 2


def test_a_name_mover_attends_end_to_io_well_above_s_and_writes_io_minus_s():
    """Hand-built attention and attribution of six heads, against the declared NAME_MOVER criterion."""
    attention = {"IO": torch.tensor([[0.60, 0.60, 0.10], [0.60, 0.45, 0.30]], dtype=torch.float64),
                 "S1": torch.tensor([[0.05, 0.05, 0.02], [0.20, 0.10, 0.05]], dtype=torch.float64),
                 "S2": torch.tensor([[0.05, 0.05, 0.02], [0.20, 0.10, 0.05]], dtype=torch.float64)}
    attribution = torch.tensor([[2.0, -0.5, 3.0], [1.0, 1.5, 0.2]])
    mass = torch.tensor([[40.0, 90.0, 99.0], [10.0, 30.0, 41.0]])
    table = name_mover_table(attention, attribution, mass)
    movers = {(r.layer, r.head) for r in table.itertuples() if r.name_mover}
    # (0,0): IO 0.6 ≥ 2 × 0.1, DLA 2 > 0; (1,1): 0.45 ≥ 2 × 0.2 (= 0.4); (1,2): 0.3 ≥ 2 × 0.1;
    # not (0,1): DLA < 0; not (0,2): IO 0.1 < 0.2; not (1,0): 0.6 < 2 × 0.4
    assert movers == {(0, 0), (1, 1), (1, 2)}
    assert choose_name_mover(table) == (1, 2)  # the most mask mass among the name movers (41)
    assert choose_name_mover(table.assign(name_mover=False)) is None
    # control: not a name mover, attribution ≤ 0, mask mass closest to the head's: (0,1) is the only one
    assert choose_control_head(table, 1, 2) == (0, 1)
    with pytest.raises(ValueError, match="no control head"):
        choose_control_head(table.assign(attribution=1.0), 1, 2)


def test_a_verdict_the_control_head_also_passes_is_not_specific():
    def verdicts(*supported):
        names = ("entity separation (IO vs S)", "salience (attends IO over S)", "sequence initialisation (BOS)")
        return [dict(subfunction=n, supported=s, directions=["OV 1"] if s else []) for n, s in zip(names, supported)]
    table = specificity(verdicts(True, True, False), verdicts(True, False, True))
    assert table["verdict"].tolist() == ["not specific (the control head passes too)", "supported", "not supported"]
    with pytest.raises(ValueError, match="out of order"):
        specificity(verdicts(True, True, False), list(reversed(verdicts(True, True, False))))


def test_matched_controls_come_from_other_heads_with_the_closest_singular_values():
    S = torch.tensor([[[10.0, 1.0, 0.0], [9.0, 1.1, 0.5]], [[10.5, 3.0, 1e-12], [0.9, 0.2, 0.1]]])
    picked = _matched_controls(S, 0, 0, 1, n=2, pool=2, generator=torch.Generator().manual_seed(0))
    assert sorted(picked) == [(0, 1, 1), (1, 1, 0)]  # σ 1.1 and 0.9, never head (0, 0) itself
    everything = _matched_controls(S, 0, 0, 0, n=20, pool=20, generator=torch.Generator().manual_seed(0))
    assert (1, 0, 2) not in everything and all((l, h) != (0, 0) for l, h, _ in everything)


def test_ablating_a_direction_moves_the_metric_and_controls_are_sigma_matched():
    model = cached_model("tiny-llama", "fold_norm")
    task = ioi_task(model, 6, seed=1)
    evaluator = CircuitEvaluator(MaskedModel(model), task, AblationRule.uniform("zero", "all"))
    spectra = attention_spectra(model)
    assert spectra["qk"].shape == (model.n_layers, model.n_heads, model.d_head)
    effects = ablation_effects(evaluator, model, spectra, 1, 0, {"ov": [0, 1], "qk": [0]}, n_controls=2, progress=False)
    assert list(effects.kind) == ["ov", "ov", "qk"] and list(effects.direction) == [0, 1, 0]
    # the full model's metric from a plain forward (the oracle), then each row against its own ablation
    with torch.no_grad():
        logits = model.bridge(task.clean)
    from helpers.singular.tasks import answer_logits, logit_diff

    full = float(logit_diff(answer_logits(logits, task), task).mean())
    ones = FixedMasks.ones(model)
    assert evaluator.evaluate(ones)["metric"] == pytest.approx(full, abs=1e-4)
    for row in effects.itertuples():
        blocks = {name: value.clone() for name, value in ones.blocks.items()}
        blocks[f"1_{row.kind}"][0, row.direction] = 0.0
        ablated = evaluator.evaluate(FixedMasks(blocks))
        assert row.metric_change == pytest.approx(ablated["metric"] - full, abs=1e-4)
        assert row.kl == pytest.approx(ablated["kl"]) and row.kl > 0
        assert row.sigma == pytest.approx(float(spectra[row.kind][1, 0, row.direction]))
        assert row.beyond_controls == (abs(row.metric_change) > row.control_max_abs)
        assert row.control_max_abs >= abs(row.control_mean)


def test_subfunction_evidence_follows_its_declared_criteria():
    roles = ["BOS", "IO", "S1", "S2", "end", "other"]
    ov = pd.DataFrame([[0.1, 3.0, 0.2, 0.1, 0.0, 0.1], [5.0, 0.1, 0.1, 0.1, 0.0, 0.1]], columns=roles)
    qk = pd.DataFrame([[0.0, 2.0, 1.0, 0.5, 0.0, 0.0]], columns=roles)
    effects = pd.DataFrame(dict(kind=["ov", "ov", "qk"], direction=[0, 1, 0], beyond_controls=[True, True, False]))
    verdicts = {v["subfunction"].split(" (")[0]: v for v in subfunction_evidence(ov, qk, effects)}
    assert verdicts["entity separation"]["directions"] == ["OV 0"]
    assert verdicts["sequence initialisation"]["directions"] == ["OV 1"]
    assert not verdicts["salience"]["supported"]  # QK 0 favours IO but its ablation is within its controls


def test_end_attention_is_the_answer_rows_attention_at_each_roles_position():
    from helpers.singular.heads import end_attention
    from helpers.singular.tasks import ioi_positions

    model = cached_model("tiny-gpt2", "fold_norm")
    task = ioi_task(model, 5, seed=3)
    attention = end_attention(model, task)
    roles = ioi_positions(task)
    rows = torch.arange(len(task))
    for layer, head in ((0, 1), (model.n_layers - 1, 2)):
        reading = HeadReading(model, task.clean, task.answer_pos, layer, head)  # [n, T] attention of END
        for role in ("IO", "S1", "S2", "BOS"):
            expected = reading.attention[rows, roles[role]].mean()
            assert float(attention[role][layer, head]) == pytest.approx(float(expected), abs=1e-6)
    total = sum(attention[r] for r in ("IO", "S1", "S2", "BOS"))
    assert float(total.max()) <= 1 + 1e-6
