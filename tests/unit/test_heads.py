"""Reading one head: per-source terms add up to the hook values; head choice, σ-matched controls, verdicts."""
import pandas as pd
import pytest
import torch

from helpers.singular.masking.circuits import CircuitEvaluator
from helpers.singular.heads.case_study import (HeadReading, _matched_controls, ablation_effects, attention_spectra, by_role,
                                candidate_ranking, choose_control_head, end_attention, end_attention_by_prompt,
                                margin_table, meets_name_mover, name_mover_table, specificity, subfunction_evidence)
from helpers.singular.masking.masks import AblationRule, FixedMasks, MaskedModel
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
    # candidates: IO > S1 + S2 and DLA > 0, ranked by DLA; (0,2) (0.1 > 0.04) and (1,0) (0.6 > 0.4) are ones
    # though not name movers
    assert [(r.layer, r.head) for r in candidate_ranking(table).itertuples()] == [(0, 2), (0, 0), (1, 1), (1, 0), (1, 2)]
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
    from helpers.singular.heads.case_study import end_attention
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


def test_the_name_mover_rule_at_each_of_its_boundaries():
    """NAME_MOVER: IO ≥ 0.2, IO ≥ 2 (S1 + S2), DLA > 0; each bound just inside and just outside."""
    assert meets_name_mover(0.2, 0.1, 0.5)  # both attention bounds met with equality
    assert not meets_name_mover(0.2 - 1e-9, 0.05, 0.5)  # IO just under 0.2, though 4x S
    assert not meets_name_mover(0.5, 0.25 + 1e-9, 0.5)  # IO just under 2x S
    assert meets_name_mover(0.5, 0.25, 1e-9) and not meets_name_mover(0.5, 0.25, 0.0)  # DLA strictly positive


def mover_rows(rows):
    """A name_mover_table from (layer, head, attention_io, attention_s, attribution, mask_mass) rows."""
    attention = {role: torch.zeros(3, 3, dtype=torch.float64) for role in ("IO", "S1", "S2")}
    attribution, mass = torch.full((3, 3), -1.0, dtype=torch.float64), torch.zeros(3, 3)
    for layer, head, io, s, dla, m in rows:
        attention["IO"][layer, head], attention["S1"][layer, head] = io, s
        attribution[layer, head], mass[layer, head] = dla, m
    return name_mover_table(attention, attribution, mass)


def test_candidates_attend_io_strictly_over_s_with_a_positive_attribution_and_equal_dlas_go_to_the_lower_head():
    table = mover_rows([(0, 0, 0.30, 0.30, 2.0, 9),  # IO = S: not a candidate, whatever its DLA
                        (0, 1, 0.30 + 1e-9, 0.30, 0.5, 9),  # IO just over S
                        (1, 0, 0.50, 0.10, 0.0, 9),  # DLA 0: not a candidate
                        (2, 2, 0.50, 0.10, 0.5, 9),  # the same DLA as (0, 1): (0, 1) first
                        (1, 1, 0.40, 0.10, 0.7, 9)])
    assert [(r.layer, r.head) for r in candidate_ranking(table).itertuples()] == [(1, 1), (0, 1), (2, 2)]
    for reordered in (table.iloc[::-1], table.sample(frac=1.0, random_state=3)):  # not the table's order
        assert candidate_ranking(reordered)[["layer", "head"]].values.tolist() == [[1, 1], [0, 1], [2, 2]]


def test_the_control_head_among_equally_close_masses_is_the_smallest_attribution_then_the_lower_head():
    table = mover_rows([(2, 2, 0.5, 0.1, 1.0, 129.0),  # the studied head
                        (1, 2, 0.0, 0.1, -0.30, 129.0), (0, 1, 0.0, 0.1, -0.05, 129.0), (2, 0, 0.0, 0.1, -0.05, 129.0),
                        (0, 0, 0.0, 0.1, -0.01, 100.0)])
    # three heads at distance 0; |DLA| 0.05 twice: the lower layer. Equal masses are common (clamped masks).
    assert choose_control_head(table, 2, 2) == (0, 1)
    assert choose_control_head(table.iloc[::-1], 2, 2) == (0, 1)  # not the table's order
    assert choose_control_head(table[~((table["layer"] == 0) & (table["head"] == 1))], 2, 2) == (2, 0)


def test_the_margin_is_a_ratio_of_means_with_a_bootstrap_interval_over_prompts():
    """Three prompts by hand: head (0, 0) has IO 0.75, 0.25, 0.5 and S1 + S2 0.125, 0.25, 0.375: margin 0.5/0.25 = 2."""
    io = torch.tensor([0.75, 0.25, 0.5], dtype=torch.float64)
    s1 = torch.tensor([0.0625, 0.125, 0.1875], dtype=torch.float64)
    attention = {"IO": torch.stack([io, torch.full((3,), 0.5, dtype=torch.float64)], -1)[:, None],  # [n, 1, 2]
                 "S1": torch.stack([s1, torch.full((3,), 0.125, dtype=torch.float64)], -1)[:, None]}
    attention["S2"] = attention["S1"].clone()
    attribution = torch.tensor([[0.5, 0.5]])
    table = margin_table(attention, attribution, resamples=500, seed=1)
    first, second = table.iloc[0], table.iloc[1]
    assert first.margin == pytest.approx(2.0) and first.name_mover  # 0.5 ≥ 0.2 and ≥ 2 × 0.25, at the bound
    assert first.margin_low < 2.0 < first.margin_high
    # oracle: the same draws by hand
    draws = torch.randint(3, (500, 3), generator=torch.Generator().manual_seed(1))
    ratios = sorted(float(io[d].mean() / (2 * s1[d]).mean()) for d in draws)
    assert first.margin_low == pytest.approx(float(torch.quantile(torch.tensor(ratios), 0.025)))
    assert first.margin_high == pytest.approx(float(torch.quantile(torch.tensor(ratios), 0.975)))
    # every prompt alike: no spread, the interval is the point
    assert second.margin == pytest.approx(2.0) and second.margin_low == pytest.approx(2.0) == second.margin_high
    assert margin_table(attention, attribution, resamples=500, seed=1).equals(table)  # seeded


@pytest.mark.parametrize("name", ["tiny-llama"])
def test_end_attention_by_prompt_reads_the_pattern_hook_at_each_role(name):
    model = cached_model(name, "fold_norm")
    task = ioi_task(model, 4, seed=3)
    by_prompt = end_attention_by_prompt(model, task)
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(task.clean, names_filter=["blocks.1.attn.hook_pattern"])
    pattern = cache["blocks.1.attn.hook_pattern"]
    for n in range(len(task)):
        end = int(task.answer_pos[n])
        io = int((task.clean[n, : end + 1] == task.correct[n]).nonzero()[0])
        assert by_prompt["IO"][n, 1, 0] == pytest.approx(float(pattern[n, 0, end, io]))
    torch.testing.assert_close(end_attention(model, task)["S2"], by_prompt["S2"].mean(0))


def test_the_margins_interval_is_the_bootstrap_of_the_ratio_of_means():
    """Eight prompts of varied attention: the interval's ends equal a loop over the same draws that takes
    the ratio of the resampled means (not the mean of per-prompt ratios, which differs here)."""
    io = torch.tensor([0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.6, 0.4], dtype=torch.float64)
    s = torch.tensor([0.05, 0.4, 0.1, 0.3, 0.2, 0.1, 0.05, 0.2], dtype=torch.float64)
    attention = {"IO": io[:, None, None], "S1": s[:, None, None] / 2, "S2": s[:, None, None] / 2}
    row = margin_table(attention, torch.ones(1, 1), resamples=400, seed=2).iloc[0]
    draws = torch.randint(8, (400, 8), generator=torch.Generator().manual_seed(2))
    of_means = torch.tensor([float(io[d].mean() / s[d].mean()) for d in draws], dtype=torch.float64)
    of_ratios = torch.tensor([float((io[d] / s[d]).mean()) for d in draws], dtype=torch.float64)
    assert row.margin_low == pytest.approx(float(torch.quantile(of_means, 0.025)), rel=1e-12)
    assert row.margin_high == pytest.approx(float(torch.quantile(of_means, 0.975)), rel=1e-12)
    assert abs(row.margin_high - float(torch.quantile(of_ratios, 0.975))) > 0.1


def test_matched_controls_of_equal_distance_are_taken_in_index_order():
    S = torch.tensor([[[2.0, 1.0], [1.0, 1.0]], [[1.0, 1.0], [1.0, 5.0]]])  # five other directions at σ = 1
    picked = _matched_controls(S, 0, 0, 1, n=3, pool=3, generator=torch.Generator().manual_seed(0))
    assert sorted(picked) == [(0, 1, 0), (0, 1, 1), (1, 0, 0)]  # the first three of the five in (layer, head, k) order


# --- effect sizes (EFFECT_RULE) ------------------------------------------------------------------------------

def test_a_directions_effect_interval_and_the_heads_own_effect_match_the_evaluators_means():
    from helpers.singular.heads.case_study import head_ablation_effect, per_prompt_metric

    model = cached_model("tiny-llama", "fold_norm")
    task = ioi_task(model, 8, seed=1)
    evaluator = CircuitEvaluator(MaskedModel(model), task, AblationRule.uniform("zero", "all"))
    ones = FixedMasks.ones(model)
    assert float(per_prompt_metric(evaluator, ones).mean()) == pytest.approx(evaluator.evaluate(ones)["metric"], abs=1e-6)
    blocks = {name: value.clone() for name, value in ones.blocks.items()}
    blocks["1_qk"][0], blocks["1_ov"][0] = 0.0, 0.0  # every direction of L1.H0
    oracle = evaluator.evaluate(FixedMasks(blocks))["metric"] - evaluator.evaluate(ones)["metric"]
    effect = head_ablation_effect(evaluator, model, 1, 0)
    assert effect["mean"] == pytest.approx(oracle, abs=1e-6) and effect["low"] <= effect["mean"] <= effect["high"]
    effects = ablation_effects(evaluator, model, attention_spectra(model), 1, 0, {"ov": [0]}, n_controls=1, progress=False)
    row = effects.iloc[0]
    assert row.effect_low <= row.metric_change <= row.effect_high


def test_the_bootstrap_interval_of_a_mean_by_hand_and_by_the_normal_approximation():
    from helpers.singular.heads.case_study import mean_interval

    assert mean_interval(torch.full((10,), 0.25)) == (0.25, 0.25, 0.25)
    values = torch.tensor([-1.0, 1.0] * 200, dtype=torch.float64)  # mean 0, sd 1: 95 % of the mean ≈ ±1.96 / √400
    mean, low, high = mean_interval(values, resamples=4000)
    assert mean == 0 and low == pytest.approx(-0.098, abs=0.01) and high == pytest.approx(0.098, abs=0.01)


def effect_rows(*intervals, beyond=True):
    return pd.DataFrame([dict(kind="ov", direction=i, metric_change=(lo + hi) / 2, effect_low=lo, effect_high=hi,
                              beyond_controls=beyond) for i, (lo, hi) in enumerate(intervals)])


def test_a_direction_matters_only_when_its_whole_interval_lies_beyond_the_floor():
    from helpers.singular.heads.case_study import EFFECT_RULE, effect_floor, with_effect_sizes

    assert EFFECT_RULE == dict(share_of_head=0.1, level=0.95)
    assert effect_floor(-0.3, 0.01) == pytest.approx(0.03) and effect_floor(0.3, 0.05) == 0.05
    floor = 0.03
    judged = with_effect_sizes(effect_rows((0.03, 0.05), (0.0301, 0.05), (-0.05, -0.0301), (-0.05, -0.03), (-0.01, 0.2)),
                               floor)
    assert list(judged["large_enough"]) == [False, True, True, False, False]  # at the floor is not beyond it
    assert not with_effect_sizes(effect_rows((0.04, 0.05), beyond=False), floor)["matters"].iloc[0]


def test_both_heads_are_judged_against_their_own_floors_and_the_studied_one_against_the_controls_effects():
    from helpers.singular.heads.case_study import judged_subfunctions

    roles = ["BOS", "IO", "S1", "S2", "end", "other"]
    ov = pd.DataFrame([[0.1, 3.0, 0.2, 0.1, 0.0, 0.1]], columns=roles).assign(bias=0.0)
    qk = pd.DataFrame([[0.0, 2.0, 1.0, 0.5, 0.0, 0.0]], columns=roles)

    def evidence(interval, head_mean):
        rows = effect_rows(interval)
        rows = pd.concat([rows, effect_rows(interval).assign(kind="qk")], ignore_index=True)
        return dict(ov_roles=ov, qk_roles=qk, effects=rows, head_effect=dict(mean=head_mean))

    # studied: effects in [0.05, 0.07]; its head moves 0.3 (floor 0.03), but the control's own largest effect is 0.06
    study, control, verdicts = judged_subfunctions(evidence((0.05, 0.07), 0.3), evidence((0.055, 0.065), 1.0))
    assert study["effect_floor"] == pytest.approx(0.06) and control["effect_floor"] == pytest.approx(0.1)
    assert not study["effects"]["matters"].any() and list(verdicts["verdict"]) == ["not supported"] * 3
    study, _, verdicts = judged_subfunctions(evidence((0.05, 0.07), 0.3), evidence((0.0, 0.01), 1.0))
    assert study["effects"]["matters"].all()
    assert list(verdicts["verdict"][:2]) == ["supported", "supported"]  # entity separation (OV 0), salience (QK 0)
