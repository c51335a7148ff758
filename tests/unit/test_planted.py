"""Planted mechanisms (helpers.singular.validation.planted, helpers.singular.validation.planted_recovery): the task, the weight surgery
and its ground truth on the tiny Llama, and every score and rule of notebook 08 against hand-computed cases and
brute-force oracles, at each rule's boundary."""
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.singular.validation import planted as P
from helpers.singular.validation import planted_recovery as R
from helpers.singular.validation import verdicts as V
from tests.conftest import cached_model

RULES = R.load_plant_rules()
EPS = 1e-9


@pytest.fixture(scope="module")
def tiny():
    return cached_model("tiny-llama", "fold_norm")


@pytest.fixture(scope="module")
def pairs(tiny):
    return P.draw_pairs(tiny.tokenizer, 4, seed=0)


# --- the task -----------------------------------------------------------------------------------------------

def test_planted_prompts_hold_their_trigger_once_and_the_corruption_changes_only_it(tiny, pairs):
    task = P.planted_task(tiny, pairs, 40, seed=3)
    t = task.task
    assert len(set(t.prompts)) == 40
    rows = torch.arange(40)
    trigger_ids = torch.tensor(pairs.trigger_ids)
    assert torch.equal(t.clean[rows, task.trigger_pos], trigger_ids[task.pair])
    assert torch.equal(t.corrupted[rows, task.trigger_pos], trigger_ids[task.other])
    differs = t.clean != t.corrupted
    assert torch.equal(differs.sum(1), torch.ones(40, dtype=torch.long))  # the trigger's slot, nothing else
    assert bool((task.pair != task.other).all())
    answers = torch.tensor(pairs.answer_ids)
    assert torch.equal(t.correct.cpu(), answers[task.pair]) and torch.equal(t.wrong.cpu(), answers[task.other])


def test_planted_sets_share_no_prompt_and_keep_their_labels(tiny, pairs):
    sets = P.planted_sets(tiny, pairs, dict(a=10, b=7, c=5), seed=1)
    prompts = [set(s.task.prompts) for s in sets.values()]
    assert [len(p) for p in prompts] == [10, 7, 5]
    assert all(not (x & y) for x, y in itertools.combinations(prompts, 2))
    whole = P.planted_task(tiny, pairs, 22, seed=1)
    assert sets["b"].task.prompts == whole.task.prompts[10:17]
    assert torch.equal(sets["b"].pair, whole.pair[10:17]) and torch.equal(sets["c"].trigger_pos, whole.trigger_pos[17:])
    with pytest.raises(ValueError, match="'b' set"):
        P.planted_sets(tiny, pairs, dict(a=4, b=0))


def test_draw_pairs_refuses_more_pairs_than_words(tiny):
    with pytest.raises(ValueError, match="lower n_pairs"):
        P.draw_pairs(tiny.tokenizer, 40)


@pytest.mark.parametrize("kwargs, match", [(dict(ov_strength=-0.1), "must be ≥ 0"), (dict(ov_strength=1, qk_boost=-1), "must be ≥ 0"),
                                           (dict(ov_strength=1, n_pairs=1), "n_pairs=1"),
                                           (dict(ov_strength=1, n_pairs=17), "n_pairs=17")])
def test_plant_spec_refuses_impossible_plants(kwargs, match):
    with pytest.raises(ValueError, match=match):
        P.PlantSpec(1, 0, **kwargs)


def test_answer_accuracy_by_hand():
    """Three prompts, two pairs: the answer's logit beats the other answer's on prompts 0 and 2 only."""
    answer_ids = [5, 7]
    planted = P.PlantedTask(None, P.Pairs([], [], [], answer_ids, []), pair=torch.tensor([0, 1, 1]), other=torch.tensor([1, 0, 0]),
                            trigger_pos=torch.zeros(3, dtype=torch.long))
    logits = torch.zeros(3, 10)
    logits[0, 5], logits[1, 5], logits[2, 7] = 1.0, 1.0, 1.0
    assert P.answer_accuracy(logits, planted).tolist() == [True, False, True]


# --- the plant --------------------------------------------------------------------------------------------------

def test_ridge_probe_is_the_ridge_least_squares_solution():
    """Oracle: the ridge solution is the least-squares solution of [X; √λ I] w = [Y; 0]."""
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(50, 6, generator=g, dtype=torch.float64), torch.randn(50, 3, generator=g, dtype=torch.float64)
    ridge = 0.3
    lam = ridge * float((X * X).sum(1).mean())
    stacked = torch.cat([X, math.sqrt(lam) * torch.eye(6, dtype=torch.float64)])
    oracle = torch.linalg.lstsq(stacked, torch.cat([Y, torch.zeros(6, 3, dtype=torch.float64)])).solution
    assert torch.allclose(P.ridge_probe(X, Y, ridge), oracle, atol=1e-10)


def test_answer_directions_raise_one_centred_logit_each(tiny, pairs):
    """Writing Y_i moves the centred answer logits by the i-th column of I − 11ᵀ/n (the pseudo-inverse of the
    centred unembedding columns)."""
    from helpers.core.weights import unembedding

    Y = P.answer_directions(tiny, pairs.answer_ids)
    cols = unembedding(tiny, device="cpu").W_U.double()[:, pairs.answer_ids]
    centred = cols - cols.mean(1, keepdim=True)
    n = len(pairs.answer_ids)
    assert torch.allclose(Y @ centred, torch.eye(n, dtype=torch.float64) - 1.0 / n, atol=1e-8)
    # the least-norm such map: its rows lie in the span of the centred columns, nothing along the answers' mean
    span = P.orthonormal(centred)
    assert torch.allclose(Y @ span @ span.T, Y, atol=1e-8)


@pytest.fixture(scope="module")
def plant(tiny, pairs):
    probe = P.planted_task(tiny, pairs, 48, seed=5)
    negatives = P.unrelated_tokens(tiny, n=4, length=16)
    return P.design_plant(tiny, P.PlantSpec(1, 1, 2.0, n_pairs=4), probe, negatives)


def test_apply_plant_changes_only_the_heads_rows_and_columns(plant):
    from helpers.core.models import load_model

    model = load_model("tiny-llama", processing="fold_norm")
    tensors = {t.data_ptr(): t for t in model.hf_model.state_dict().values()}  # the bridge aliases each tensor
    before = {ptr: t.clone() for ptr, t in tensors.items()}
    P.apply_plant(model, plant)
    changed = {ptr for ptr, t in tensors.items() if not torch.equal(before[ptr], t)}
    attn = model.block(1).self_attn
    maps = {m: getattr(attn, m).weight for m in ("q_proj", "k_proj", "v_proj", "o_proj")}
    assert changed == {w.data_ptr() for w in maps.values()}
    before = {m: before[w.data_ptr()] for m, w in maps.items()}
    after = {m: w.detach() for m, w in maps.items()}
    dh, h, g = model.d_head, 1, 1 // (model.n_heads // model.n_kv_heads)
    rows = lambda m: {int(i) for i in torch.nonzero((before[m] != after[m]).any(1))}  # noqa: E731
    assert rows("q_proj") == {h * dh + plant.dim}
    assert rows("k_proj") == {g * dh + plant.dim}
    assert rows("v_proj") and rows("v_proj") <= set(range(g * dh, (g + 1) * dh))
    columns = {int(i) for i in torch.nonzero((before["o_proj"] != after["o_proj"]).any(0))}
    assert columns and columns <= set(range(h * dh, (h + 1) * dh))


def test_the_plants_ov_strength_is_its_sigma_over_the_heads(plant):
    assert plant.sigma_ov / plant.head_sigma_ov == pytest.approx(2.0, rel=1e-6)


def test_planted_directions_find_a_strong_plant_and_nothing_without_one(tiny, pairs, plant):
    from dataclasses import replace

    model = P.planted_model("tiny-llama", plant)
    truth = R.planted_directions(model, plant, share=0.9)
    assert truth["qk"] == [0] and len(truth["ov"]) >= 1
    assert "planted-L1H1-ov2" in model.name  # masks trained on it are never cached as the unplanted model's
    probe = P.planted_task(tiny, pairs, 48, seed=5)
    silent = P.design_plant(tiny, replace(plant.spec, ov_strength=0.0), probe, P.unrelated_tokens(tiny, n=4, length=16))
    assert R.planted_directions(P.planted_model("tiny-llama", silent), silent, share=0.9)["ov"] == []
    with pytest.raises(ValueError, match="share=0"):
        R.planted_directions(model, plant, share=0.0)


def test_check_plantable_refuses_gpt2_layout():
    with pytest.raises(ValueError, match="smollm2-135m"):
        P.check_plantable(cached_model("tiny-gpt2", "fold_norm"))


# --- ground truth and scores ------------------------------------------------------------------------------

def test_energy_share_by_hand():
    basis = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
    vectors = torch.tensor([[1.0, 0.0, 1.0], [0.0, 2.0, 1.0]], dtype=torch.float64)
    assert R.energy_share(vectors, basis).tolist() == pytest.approx([1.0, 0.0, 0.5])
    augmented = torch.tensor([[3.0], [1.0], [1.0]], dtype=torch.float64)  # bias row first: outside the basis
    assert R.energy_share(augmented, basis).item() == pytest.approx(1.0 / 11.0)


def test_mid_ranks_by_hand():
    assert R.mid_ranks(np.array([3.0, 1.0, 3.0, 2.0])).tolist() == [1.5, 4.0, 1.5, 3.0]
    assert R.mid_ranks(np.array([5.0, 5.0, 5.0])).tolist() == [2.0, 2.0, 2.0]


def brute_auroc(scores, positive):
    pos, neg = scores[positive], scores[~positive]
    return np.mean([1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg])


@pytest.mark.parametrize("seed", range(5))
def test_auroc_matches_all_pairs_with_ties(seed):
    rng = np.random.default_rng(seed)
    scores = rng.integers(0, 4, 30).astype(float)  # many ties
    positive = rng.random(30) < 0.3
    positive[:2] = [True, False]
    assert R.auroc(scores, positive) == pytest.approx(brute_auroc(scores, positive), abs=1e-12)


def test_auroc_at_its_ends_and_refusal():
    positive = np.array([True, True, False, False])
    assert R.auroc(np.array([2.0, 3.0, 1.0, 0.0]), positive) == 1.0
    assert R.auroc(np.array([0.0, 1.0, 2.0, 3.0]), positive) == 0.0
    assert R.auroc(np.ones(4), positive) == 0.5
    with pytest.raises(ValueError, match="positives and negatives"):
        R.auroc(np.ones(3), np.zeros(3, dtype=bool))


def test_flat_indices_follow_the_blocks_layout():
    blocks = {"0_qk": torch.zeros(2, 3), "0_ov": torch.zeros(2, 4), "0_mlp_up": torch.zeros(5), "1_qk": torch.zeros(2, 3),
              "1_ov": torch.zeros(2, 4)}
    blocks["1_ov"][1, 2] = 7.0
    blocks["1_qk"][1, 0] = 9.0
    flat = torch.cat([b.reshape(-1) for b in blocks.values()])
    index = R.flat_indices(blocks, 1, 1, {"ov": [2], "qk": [0]})
    assert sorted(flat[index].tolist()) == [7.0, 9.0]
    assert index == [19 + 3, 19 + 6 + 4 + 2]


def test_recovery_by_hand_and_the_cut_is_strict():
    """Logits 3, 0, −1, 2, 1 with directions 0 and 1 planted: recall 1/2 (a logit of exactly 0 is not kept),
    ranks 1 and 4, AUROC (1 + 1 + 1 + 0 + 0 + 1) / 6 = 2/3."""
    logits = {"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([-1.0, 2.0, 1.0])}
    scores = R.recovery(logits, [0, 1])
    assert scores["recall"] == 0.5 and scores["kept"] == 3 and scores["total"] == 5
    assert scores["worst_rank"] == 4.0 and scores["median_rank"] == 2.5
    assert scores["auroc"] == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="no planted direction"):
        R.recovery(logits, [])


def test_kept_by_kind_counts_each_kinds_ground_truth_at_the_cut():
    logits = {"2_qk": torch.zeros(3, 4), "2_ov": torch.zeros(3, 5)}
    logits["2_ov"][1] = torch.tensor([2.0, 0.0, -1.0, 3.0, 5.0])
    logits["2_qk"][1, 0] = -0.5
    kept = R.kept_by_kind(logits, 2, 1, {"ov": [0, 1, 2, 3], "qk": [0]})
    assert kept["ov"]["kept"] == 2 and kept["ov"]["of"] == 4  # logit 0 is not kept
    assert kept["qk"] == dict(kept=0, of=1, logits=[-0.5])
    assert R.kept_by_kind(logits, 2, 1, {"ov": [], "qk": [0]})["ov"] == dict(kept=0, of=0, logits=[])


def test_random_directions_match_counts_and_avoid_the_truth():
    blocks = {"3_qk": torch.zeros(4, 10), "3_ov": torch.zeros(4, 10)}
    truth = {"ov": [0, 1, 2], "qk": [0]}
    drawn = R.random_directions(blocks, 3, 2, truth, seed=1)
    assert {k: len(v) for k, v in drawn.items()} == {"ov": 3, "qk": 1}
    assert not set(drawn["ov"]) & set(truth["ov"]) and not set(drawn["qk"]) & set(truth["qk"])
    assert drawn == R.random_directions(blocks, 3, 2, truth, seed=1)
    with pytest.raises(ValueError, match="only 4 others"):
        R.random_directions(blocks, 3, 2, {"ov": list(range(6))})
    masks = R.ablation_masks(blocks, 3, 2, truth)
    assert torch.nonzero(masks["3_ov"] == 0).tolist() == [[2, 0], [2, 1], [2, 2]]
    assert int((masks["3_qk"] == 0).sum()) == 1 and float(masks["3_qk"].sum()) == 39.0


def test_remaining_share_by_hand():
    unplanted, planted = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([4.0, 5.0, 6.0])
    assert R.remaining_share(unplanted, planted, unplanted)["share"] == pytest.approx(0.0)
    assert R.remaining_share(planted, planted, unplanted)["share"] == pytest.approx(1.0)
    half = R.remaining_share(torch.tensor([2.0, 3.0, 4.0]), planted, unplanted, seed=0)
    assert half["share"] == pytest.approx(0.5) and half["low"] == pytest.approx(0.5) and half["high"] == pytest.approx(0.5)
    noisy = R.remaining_share(torch.tensor([1.0, 4.0, 4.5]), planted, unplanted, n_boot=500, seed=3)
    assert noisy["low"] <= noisy["share"] <= noisy["high"] and noisy["low"] < noisy["high"]
    assert R.remaining_share(planted, unplanted, unplanted)["share"] is None  # the plant adds nothing
    with pytest.raises(ValueError, match="same prompts"):
        R.remaining_share(planted[:2], planted, unplanted)


# --- the declared rules, at their boundaries -----------------------------------------------------------------

def test_drives_task_at_its_boundary():
    m = RULES["drives_task"]["min_accuracy"]
    assert R.drives_task(m, RULES) and not R.drives_task(m - EPS, RULES)


def test_recovered_at_its_boundaries():
    r, a = RULES["recovered"]["min_recall"], RULES["recovered"]["min_auroc"]
    assert R.recovered(dict(recall=r, auroc=a), RULES)
    assert not R.recovered(dict(recall=r - EPS, auroc=1.0), RULES)
    assert not R.recovered(dict(recall=1.0, auroc=a - EPS), RULES)
    assert R.recovered(None, RULES) is None


def test_necessary_at_its_boundaries():
    top, floor = RULES["necessary"]["max_remaining"], RULES["necessary"]["min_remaining_random"]
    share = lambda low, high: dict(share=(low + high) / 2, low=low, high=high)  # noqa: E731
    assert R.necessary(share(-0.1, top), share(floor, 1.1), RULES)
    assert not R.necessary(share(-0.1, top + EPS), share(floor, 1.1), RULES)
    assert not R.necessary(share(-0.1, top), share(floor - EPS, 1.1), RULES)
    assert R.necessary(None, share(floor, 1.1), RULES) is None
    assert R.necessary(dict(share=None, low=None, high=None), share(floor, 1.1), RULES) is None


def test_beats_random_at_its_boundary():
    ratio = RULES["unplanted"]["circuit_ratio"]
    assert R.beats_random(0.1, 0.1 * ratio, RULES) and not R.beats_random(0.1, 0.1 * ratio - EPS, RULES)
    assert not R.beats_random(0.0, 0.0, RULES)  # nothing to beat: an exact circuit and an exact control


# --- the declared file -------------------------------------------------------------------------------------

def test_chosen_sites_take_declared_subsets_only():
    late = R.chosen_sites(RULES, {"late": [2.0]})
    assert late == [{**next(s for s in RULES["sites"] if s["name"] == "late"), "strengths": [2.0]}]
    assert R.chosen_sites(RULES) == RULES["sites"]
    with pytest.raises(ValueError, match="not among the declared"):
        R.chosen_sites(RULES, {"late": [3.0]})
    with pytest.raises(ValueError, match="no such declared site"):
        R.chosen_sites(RULES, {"early": [1.0]})


def test_load_plant_rules_refuses_a_mistyped_key(tmp_path: Path):
    text = R.PLANT_RULES.read_text(encoding="utf-8").replace("min_auroc = ", "min_aucroc = ")
    (tmp_path / "rules.toml").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match="min_aucroc"):
        R.load_plant_rules(tmp_path / "rules.toml")
    text = R.PLANT_RULES.read_text(encoding="utf-8")
    no_sites = text[: text.index("[[sites]]")] + text[text.index("[drives_task]"):]  # every [[sites]] table cut
    (tmp_path / "rules.toml").write_text(no_sites, encoding="utf-8")
    with pytest.raises(ValueError, match="no \\[\\[sites\\]\\]"):
        R.load_plant_rules(tmp_path / "rules.toml")


def test_declared_strengths_span_the_task(tmp_path: Path):
    """Each site declares a weak and a strong plant, so recall against strength can come out either way."""
    for site in RULES["sites"]:
        assert min(site["strengths"]) <= 1.0 < max(site["strengths"])


# --- end to end on the tiny model ---------------------------------------------------------------------------

def test_plant_and_recover_runs_and_ablating_the_plant_removes_it(tiny):
    """The whole of one plant at the fast sizes: the row carries every score, a same-count random set beside
    the ground truth, and mean-ablating the ground truth brings the metric back nearer the unplanted model's than
    the random set does."""
    from helpers.singular.masking.masks import AblationRule, MaskedModel
    from helpers.singular.masking.training import MaskingRun

    run = MaskingRun.declared(fast=True)
    rules = {**RULES, "plant": {**RULES["plant"], "n_pairs": 4}}  # the tiny head (d_head 8) holds 4 pairs and their controls
    sets = R.prompt_sets(tiny, rules, run.n_prompts, fast=True)
    unplanted = R.metric_per_prompt(MaskedModel(tiny), sets["held_out"], AblationRule.uniform("mean", "all"))
    site = dict(name="tiny", layer=1, head=1, strengths=[2.0])
    paper_rule_run = MaskingRun.declared({"ablation": "paper"}, fast=True)
    row, logits = R.plant_and_recover(tiny, site, 2.0, sets, run, rules, unplanted, control_seeds=1, progress=False,
                                      paper_rule_run=paper_rule_run, specificity=True)
    assert row["n_truth"] == sum(len(v) for v in row["truth"].values()) > 0
    ruled = row["paper_rule"]  # the same plant's ground truth, scored on masks trained under the paper's rule
    assert ruled["run"].ablation == "paper" and ruled["recovery"]["n_planted"] == row["recovery"]["n_planted"]
    assert ruled["recovered"] == R.recovered(ruled["recovery"], rules)
    assert {k: len(v) for k, v in row["random_set"].items()} == {k: len(v) for k, v in row["truth"].items()}
    assert row["recovery"]["total"] == sum(v.numel() for v in logits.values())
    assert row["remaining"]["planted"]["share"] < row["remaining"]["random"]["share"]
    assert row["drives_task"] == (row["accuracy"] >= RULES["drives_task"]["min_accuracy"])
    specific = row["specificity"]  # notebook 07's rule on this circuit: seeds 0 and 1, each declared kind of nonsense
    if row["circuit"]["kept"] < row["recovery"]["total"]:
        assert [(m["pair"], m["a"], m["b"]) for m in specific["matched"]] == [
            ("seeds", "seed 0", "seed 1"), *(("nonsense", "seed 0", kind) for kind in RULES["specificity"]["kinds"]),
            ("nonsense", "seed 0", R.WITHOUT_TRIGGERS)]
        assert {m["k"] for m in specific["matched"]} == {row["circuit"]["kept"]}
        assert specific["specific"] == V.specific_at_matched_size(specific["matched"][:-1], specific["ratio"])
    else:
        assert specific == dict(matched=[], ratio=specific["ratio"], threshold=None, specific=None, reach=None,
                                trigger_share=specific["trigger_share"], without_triggers=None, transfer=None)
    assert specific["trigger_share"]["shuffled"] == 1.0 and specific["trigger_share"][R.WITHOUT_TRIGGERS] == 0.0
    text = R.findings(dict(plants=[row], unplanted=R.unplanted_control(tiny, sets, run, rules, 1, False), rules=rules))
    assert "| tiny L1.H1 | 2× |" in text and "Negative control" in text


def test_paper_2s_planted_row_reads_in_words_and_reaches_the_results_table():
    from helpers.results.documents import PLANTED_RUN, paper2_known_yes

    checks = dict(A1=True, A2=True, A4=False, B1=True, C1=None, lift_tile=0.01, coverage_peak=0.2)
    row = dict(plant=dict(site="mlp.down", layer=9, tile=0, token=" banana", strength=1.0, model="gemma-3-270m"),
               unplanted=dict(checks, B1=False, lift_tile=0.005, coverage_peak=0.1), planted=checks)
    assert R.checks_words(checks) == "A1 yes, A2 yes, A4 no, B1 yes, C1 not judged"
    line, = R.paper2_lines({"paper2_planted": row})
    assert "planted A1 yes, A2 yes, A4 no, B1 yes, C1 not judged; the same site-layer unplanted A1 yes, A2 yes, " \
           "A4 no, B1 no" in line and "coverage peak 0.100 → 0.200" in line
    assert R.paper2_lines({"paper2_planted": None}) == [] and R.paper2_lines({}) == []
    assert paper2_known_yes({PLANTED_RUN: {"paper2_planted": row}}).startswith(
        "a rank-1 mount planted in mlp.down L9 of gemma-3-270m (08): A1 yes")
    assert paper2_known_yes({}).startswith("none yet")


def test_planted_specificity_cuts_every_circuit_to_k_and_judges_by_07s_rule(tiny):
    """The rule's main branch at a cut below the whole model (on the tiny model at the fast sizes the circuit keeps
    every direction, which the end-to-end test above meets): a second seed on its own prompts, each declared kind
    of nonsense, every overlap at k, the verdict and threshold by notebook 07's functions."""
    from helpers.core.feasibility import matched_specificity_reach
    from helpers.singular.masking.masks import MaskedModel
    from helpers.singular.masking.training import MaskingRun, train_masks

    run = MaskingRun.declared(fast=True)
    rules = {**RULES, "plant": {**RULES["plant"], "n_pairs": 4}}
    sets = R.prompt_sets(tiny, rules, run.n_prompts, fast=True)
    masked = MaskedModel(tiny)
    masks, _ = train_masks(masked, sets["train"], run.rule(), run.train_config(), progress=False)
    k = masks.count() // 2
    found = R.planted_specificity(masked, masks, sets, run, rules, k, progress=False)
    assert [(m["pair"], m["b"]) for m in found["matched"]] == [
        ("seeds", "seed 1"), *(("nonsense", kind) for kind in RULES["specificity"]["kinds"]),
        ("nonsense", R.WITHOUT_TRIGGERS)]
    assert {(m["k"], m["n"]) for m in found["matched"]} == {(k, masks.count())}
    assert found["ratio"] == V.matched_rule()["ratio"]
    assert found["threshold"] == pytest.approx(found["ratio"] * found["matched"][0]["corrected"])
    declared, free = found["matched"][:-1], [found["matched"][0], found["matched"][-1]]
    assert found["specific"] == V.specific_at_matched_size(declared, found["ratio"])  # the declared kinds only
    assert found["without_triggers"] == dict(kind=R.WITHOUT_TRIGGERS, corrected=free[1]["corrected"],
                                             specific=V.specific_at_matched_size(free, found["ratio"]))
    # every planted prompt holds its trigger, so shuffling keeps it; random tokens without the triggers hold none
    assert found["trigger_share"]["shuffled"] == 1.0 and found["trigger_share"][R.WITHOUT_TRIGGERS] == 0.0
    assert 0 < found["trigger_share"]["random_tokens"] < 1
    assert found["reach"] == V.reach_record(matched_specificity_reach(k, masks.count(), found["threshold"]))
    assert found["matched"][0]["jaccard"] < 1  # the second seed drew its own prompts and batches: another circuit
    # task-specificity by transfer on the same circuits: the declared kinds and the nonsense without triggers apart
    from helpers.singular.validation.transfer import specific_by_transfer

    transfer = found["transfer"]
    assert [r["kind"] for r in transfer["rows"]] == [*RULES["specificity"]["kinds"], R.WITHOUT_TRIGGERS]
    assert (transfer["k"], transfer["n"], transfer["bound"]) == (k, masks.count(), 0.21)
    assert transfer["prompts"] + transfer["dropped_prompts"] == len(sets["held_out"])
    assert transfer["specific"] == specific_by_transfer(transfer["rows"][:-1], 0.21)
    assert transfer["specific_without_triggers"] == specific_by_transfer(transfer["rows"][-1:], 0.21)


def test_planted_specificity_judges_the_declared_kinds_and_the_nonsense_without_triggers_apart(tiny, monkeypatch):
    """Hand overlaps: the declared kinds overlap the planted circuit by 0.5 beyond chance (above half the seeds'
    0.6: not specific) and the nonsense without the triggers by 0.3 (exactly at the threshold: specific). Neither
    verdict may read the other's rows."""
    from helpers.singular.masking.training import MaskingRun

    rows = [dict(pair="seeds", a="seed 0", b="seed 1", k=5, n=10, corrected=0.6),
            *(dict(pair="nonsense", a="seed 0", b=kind, k=5, n=10, corrected=0.5) for kind in RULES["specificity"]["kinds"]),
            dict(pair="nonsense", a="seed 0", b=R.WITHOUT_TRIGGERS, k=5, n=10, corrected=0.3)]
    seen = {}
    monkeypatch.setattr("helpers.singular.masking.training.train_masks", lambda masked, task, *a, **k: (task.name, None))
    monkeypatch.setattr(V, "matched_overlaps", lambda seeds, nonsense, k: seen.update(nonsense) or rows)
    # task-specificity by transfer, by hand: the declared kinds do the task (KL 0.05), the nonsense without the
    # triggers fails it (KL 2, beyond the second seed's by a CI above zero)
    scored = [dict(kind=kind, kl=0.05, excess_low=0.0) for kind in RULES["specificity"]["kinds"]]
    scored.append(dict(kind=R.WITHOUT_TRIGGERS, kl=2.0, excess_low=1.5))
    monkeypatch.setattr("helpers.singular.masking.circuits.CircuitEvaluator", lambda masked, task, rule: task)
    monkeypatch.setattr("helpers.singular.validation.transfer.transfer_scores",
                        lambda evaluator, reference, nonsense, k, bound, rule: dict(rows=[dict(r) for r in scored],
                                                                                     prompts=len(evaluator)))
    from helpers.singular.validation import transfer as T

    unseen, real_unseen = [], T.unseen_prompts
    monkeypatch.setattr(T, "unseen_prompts", lambda task, *seen: unseen.append((task, seen)) or real_unseen(task, *seen))

    run = MaskingRun.declared(fast=True)
    rules = {**RULES, "plant": {**RULES["plant"], "n_pairs": 4}}
    sets = R.prompt_sets(tiny, rules, run.n_prompts, fast=True)
    masked = type("Masked", (), {"model": tiny})()  # planted_specificity reads only its model (training is stubbed)
    found = R.planted_specificity(masked, "masks", sets, run, rules, 5, progress=False)
    assert list(seen) == [*RULES["specificity"]["kinds"], R.WITHOUT_TRIGGERS]
    assert seen[R.WITHOUT_TRIGGERS].endswith("random_tokens-without-4-ids")  # trained on the nonsense without the 4 triggers
    assert found["specific"] is False and found["threshold"] == pytest.approx(0.3)
    assert found["without_triggers"] == dict(kind=R.WITHOUT_TRIGGERS, specific=True, corrected=0.3)
    assert (found["transfer"]["specific"], found["transfer"]["specific_without_triggers"]) == (False, True)
    assert found["transfer"]["dropped_prompts"] + found["transfer"]["prompts"] == len(sets["held_out"])
    # scored on the held-out prompts that neither the first seed nor the second (its own draw) trained on
    from helpers.singular.validation.planted import planted_task

    other_train, _ = planted_task(tiny, sets["pairs"], run.n_prompts, run.seed + 1).task.split(0.5, seed=run.seed + 1)
    (task, trained_on), = unseen
    assert task is sets["held_out"] and [t.prompts for t in trained_on] == [sets["train"].prompts, other_train.prompts]
    scored[0].update(kl=0.2101, excess_low=0.001)  # the declared kinds just beyond the bound: still one within
    assert R.planted_specificity(masked, "masks", sets, run, rules, 5, progress=False)["transfer"]["specific"] is False
    scored[1].update(kl=0.2101, excess_low=0.001)
    assert R.planted_specificity(masked, "masks", sets, run, rules, 5, progress=False)["transfer"]["specific"] is True
    scored[-1].update(kl=0.05, excess_low=0.0)  # the nonsense without triggers now does the task: only its verdict turns
    transfer = R.planted_specificity(masked, "masks", sets, run, rules, 5, progress=False)["transfer"]
    assert (transfer["specific"], transfer["specific_without_triggers"]) == (True, False)
    rows[-1]["corrected"] = 0.3001  # just beyond
    assert R.planted_specificity(masked, "masks", sets, run, rules, 5, progress=False)["without_triggers"]["specific"] is False
    for row in rows[1:-1]:
        row["corrected"] = 0.2  # the declared kinds within, the nonsense without triggers beyond
    assert R.planted_specificity(masked, "masks", sets, run, rules, 5, progress=False)["specific"] is True


def _specific_row(specific, corrected_nonsense=0.1, decided_by=None, site="middle", strength=8.0, free=None):
    matched = [dict(pair="seeds", b="seed 1", k=900, n=1000, corrected=0.6),
               dict(pair="nonsense", b="shuffled", k=900, n=1000, corrected=corrected_nonsense),
               dict(pair="nonsense", b="random_tokens", k=900, n=1000, corrected=0.05)]
    found = dict(matched=matched, ratio=0.5, threshold=0.3, specific=specific,
                 reach=dict(yes=True, no=True, decided_by=decided_by))
    if free is not None:  # the run also judged nonsense without the plant's triggers
        found["matched"] = [*matched, dict(pair="nonsense", b=R.WITHOUT_TRIGGERS, k=900, n=1000, corrected=free)]
        found.update(trigger_share={"shuffled": 1.0, "random_tokens": 0.875, R.WITHOUT_TRIGGERS: 0.0},
                     without_triggers=dict(kind=R.WITHOUT_TRIGGERS, specific=free <= 0.3, corrected=free))
    return dict(site=site, strength=strength, drives_task=True, specificity=found)


def test_the_specificity_words_say_each_outcome_and_when_sizes_decided_it():
    assert R.specificity_words(_specific_row(True)) == (
        "middle ×8: specific (top 900 of 1,000; beyond chance, nonsense 0.10 against seeds 0.60, threshold 0.30)")
    assert R.specificity_words(_specific_row(False, 0.4)).startswith("middle ×8: not specific (")
    assert R.specificity_words(_specific_row(True, decided_by="set sizes")).endswith(
        "threshold 0.30; uninformative: decided by set sizes)")
    # the nonsense that cannot fire the plant is reported beside, and does not enter the declared verdict's numbers
    assert R.specificity_words(_specific_row(False, 0.4, free=0.3)) == (
        "middle ×8: not specific (top 900 of 1,000; beyond chance, nonsense 0.40 against seeds 0.60, threshold 0.30; "
        "prompts holding a trigger: shuffled 100 %, random tokens 88 %); against random tokens without the triggers: "
        "specific (0.30)")
    assert R.specificity_words(_specific_row(False, 0.4, free=0.3001)).endswith("triggers: not specific (0.30)")
    assert "nonsense 0.40 against" in R.specificity_words(_specific_row(False, 0.4, free=0.5))  # the declared kinds' own
    empty = dict(site="late", strength=2.0, specificity=dict(matched=[], ratio=0.5, threshold=None, specific=None, reach=None))
    assert R.specificity_words(empty) == "late ×2: not judged (the circuit keeps every direction or none)"
    assert R.specificity_words(dict(site="late", strength=1.0, specificity=None)) is None
    assert R.specificity_words(dict(site="late", strength=1.0)) is None  # a summary from before the rule ran in 08
    line, = R.specificity_lines([_specific_row(True), empty, dict(site="late", strength=1.0, specificity=None)])
    assert "middle ×8: specific" in line and "late ×2: not judged" in line and "×1" not in line
    assert R.specificity_lines([dict(site="late", strength=1.0, specificity=None)]) == []


def test_the_results_table_takes_specificitys_known_yes_from_the_planted_run():
    from helpers.results.documents import NO_PLANT, PLANTED_RUN, specificity_known_yes

    said = specificity_known_yes({PLANTED_RUN: {"plants": [_specific_row(True), _specific_row(False, 0.4, site="late",
                                                                                             strength=2.0)]}})
    assert said.startswith("the planted circuits (08): middle ×8: specific (") and "; late ×2: not specific (" in said
    assert specificity_known_yes({}) == NO_PLANT
    assert specificity_known_yes({PLANTED_RUN: {"plants": [dict(site="late", strength=1.0)]}}) == NO_PLANT
    weak = {**_specific_row(False, site="late", strength=1.0), "drives_task": False}  # no case of yes
    assert specificity_known_yes({PLANTED_RUN: {"plants": [weak]}}) == NO_PLANT


def test_the_paper_rule_line_counts_only_the_plants_that_ran_it():
    scores = dict(recall=1.0, auroc=0.95)
    rows = [dict(site="late", strength=2.0, recovery=dict(recall=0.5, auroc=0.7),
                 paper_rule=dict(recovery=scores, recovered=True)),
            dict(site="late", strength=1.0, recovery=dict(recall=0.5, auroc=0.7), paper_rule=None)]
    line, = R.paper_rule_lines(rows, RULES)
    assert "recovers the plant at 1 of 1 by the same rule" in line
    assert "late ×2: recall 1.00, AUROC 0.95 (our rule: 0.50, 0.70)" in line
    assert R.paper_rule_lines(rows[1:], RULES) == []


def test_recover_plants_runs_the_specificity_rule_and_paper_rule_at_each_sites_strongest_plant_only(monkeypatch):
    calls = []

    def plant(base, site, strength, sets, run, rules, unplanted_metric, control_seeds, progress, paper_rule_run,
              specificity=False):
        calls.append((site["name"], strength, paper_rule_run, specificity))
        return dict(accuracy=1.0, recovery=None), {}

    monkeypatch.setattr(R, "plant_and_recover", plant)
    monkeypatch.setattr(R, "metric_per_prompt", lambda *a, **k: None)
    monkeypatch.setattr(R, "unplanted_control", lambda *a, **k: "control")
    monkeypatch.setattr("helpers.singular.masking.masks.MaskedModel", lambda model: model)
    sites = [dict(name="middle", strengths=[8.0, 1.0, 4.0], layer=1, head=0),
             dict(name="late", strengths=[0.5, 2.0], layer=2, head=0)]
    rows, control = R.recover_plants(None, sites, dict(held_out=None), None, RULES, paper_rule_run="paper", progress=False)
    assert calls == [("middle", 1.0, None, False), ("middle", 4.0, None, False), ("middle", 8.0, "paper", True),
                     ("late", 0.5, None, False), ("late", 2.0, "paper", True)]
    assert len(rows) == 5 and control == "control"


def test_specificitys_positive_control_reads_as_failed_only_when_every_driving_plant_says_no():
    from helpers.results.documents import PLANTED_RUN, specificity_calibration

    def plant(free, drives=True, site="middle", strength=8.0):  # free: overlap with nonsense without the triggers
        return {**_specific_row(False, 0.5, site=site, strength=strength, free=free), "drives_task": drives, "n_truth": 8,
                "recovery": dict(median_rank=5103.0 if site == "middle" else 1594.0)}

    failed = specificity_calibration({PLANTED_RUN: {"plants": [plant(0.31), plant(0.5, site="late", strength=2.0)]}})
    assert failed.startswith("**Task-specificity's positive control fails**") and "middle ×8: not specific (" in failed
    assert failed.endswith("(8 of the 900 at middle ×8, 8 of the 900 at late ×2), ranked by the masks at median rank "
                           "5,103 at middle ×8, 1,594 at late ×2 of 1,000, so its \"not specific\" says nothing about a "
                           "task.")
    # the declared kinds say no at every plant (the plant fires on their triggers): only the nonsense without them decides
    passed = specificity_calibration({PLANTED_RUN: {"plants": [plant(0.31), plant(0.3, site="late", strength=2.0)]}})
    assert passed.endswith("So the matched-size rule can say yes.") and "without the triggers: specific (0.30)" in passed
    weak = specificity_calibration({PLANTED_RUN: {"plants": [plant(0.31), plant(0.1, drives=False, site="late")]}})
    assert weak.startswith("**Task-specificity's positive control fails**")  # a plant that does not drive the task is not a case of yes
    before = {PLANTED_RUN: {"plants": [{**_specific_row(False), "drives_task": True, "n_truth": 8}]}}
    assert specificity_calibration(before) is None  # a run without the known yes reads as no control yet
    assert specificity_calibration({PLANTED_RUN: {"plants": [dict(site="late", strength=1.0, drives_task=True)]}}) is None
    assert specificity_calibration({}) is None
