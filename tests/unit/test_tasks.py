"""Task generators: seeded, aligned corruptions, single-token answers, honest filtering, correct metrics."""
from types import SimpleNamespace

import pytest
import torch

from helpers.core.models import gpt2_tokenizer
from helpers.singular.tasks import (GREATER_THAN_TEMPLATE, answer_logits, gender_task, greater_than_task, ioi_positions, ioi_task,
                           logit_diff,
                           make_task, probability_difference, single_token_words, with_first_digit)

TOKENIZER = SimpleNamespace(tokenizer=gpt2_tokenizer())


@pytest.mark.parametrize("make", [ioi_task, gender_task, greater_than_task])
def test_generators_are_seeded_and_corruptions_align(make):
    a, b, c = make(TOKENIZER, 20, seed=0), make(TOKENIZER, 20, seed=0), make(TOKENIZER, 20, seed=1)
    assert a.prompts == b.prompts and a.prompts != c.prompts
    assert a.clean.shape == a.corrupted.shape
    rows = torch.arange(len(a))
    bos = TOKENIZER.tokenizer.bos_token_id
    assert bool((a.clean[:, 0] == bos).all())
    # the answer position is each prompt's last real token, and the corrupted prompt ends there too
    for i, prompt in enumerate(a.prompts):
        ids = TOKENIZER.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        assert a.clean[i, 1: len(ids) + 1].tolist() == ids and int(a.answer_pos[i]) == len(ids)
        corrupted = a.corrupted[i, 1: len(ids) + 1].tolist()
        assert a.corrupted[i, 0] == bos and corrupted != ids
        pad = TOKENIZER.tokenizer.pad_token_id if TOKENIZER.tokenizer.pad_token_id is not None else bos
        assert bool((a.clean[i, len(ids) + 1:] == pad).all()) and bool((a.corrupted[i, len(ids) + 1:] == pad).all())
    assert rows.tolist() == list(range(20))


def test_ioi_prompts_name_io_once_and_s_twice_and_corruption_uses_fresh_names():
    task = ioi_task(TOKENIZER, 40, seed=2)
    decode = TOKENIZER.tokenizer.decode
    for i, prompt in enumerate(task.prompts):
        io, s = decode([int(task.correct[i])]).strip(), decode([int(task.wrong[i])]).strip()
        words = prompt.replace(",", " ").replace(".", " ").split()
        assert words.count(io) == 1 and words.count(s) == 2, prompt
        corrupted = decode(task.corrupted[i, 1: int(task.answer_pos[i]) + 1].tolist())
        assert io not in corrupted.split() and s not in corrupted.split()
    abba = sum(p.index(decode([int(c)]).strip()) < p.index(decode([int(w)]).strip())
               for p, c, w in zip(task.prompts, task.correct, task.wrong))
    assert abba == 20  # half ABBA, half BABA


def test_gender_answers_match_the_names_gender_and_corruption_flips_it():
    from helpers.singular.tasks import GENDER_NAMES_FEMALE as NAMES_FEMALE, GENDER_NAMES_MALE as NAMES_MALE

    task = gender_task(TOKENIZER, 10, seed=0)
    he, she = (TOKENIZER.tokenizer(t)["input_ids"][0] for t in (" he", " she"))
    decode = TOKENIZER.tokenizer.decode
    for i, prompt in enumerate(task.prompts):
        words = set(prompt.replace(",", " ").replace("'", " ").split())
        clean_name = (words & set(NAMES_MALE)) or (words & set(NAMES_FEMALE))
        male = bool(words & set(NAMES_MALE))
        assert len(clean_name) == 1 and male == (i % 2 == 0), prompt
        assert int(task.correct[i]) == (he if male else she) and int(task.wrong[i]) == (she if male else he), prompt
        corrupted = set(decode(task.corrupted[i, 1: int(task.answer_pos[i]) + 1].tolist())
                        .replace(",", " ").replace("'", " ").split())
        assert bool(corrupted & set(NAMES_FEMALE if male else NAMES_MALE)), (prompt, corrupted)
        assert not corrupted & set(NAMES_MALE if male else NAMES_FEMALE), (prompt, corrupted)
    assert sorted(task.correct.tolist()) == sorted([he] * 5 + [she] * 5)


def test_words_that_are_not_one_token_are_dropped_and_counted():
    kept, dropped = single_token_words(TOKENIZER.tokenizer, ["John", "Xylophonius", "Mary"])
    assert kept == ["John", "Mary"] and dropped == ["Xylophonius"]


def test_probability_difference_on_a_hand_made_distribution():
    task = SimpleNamespace(correct=torch.tensor([50]))
    probs = torch.zeros(1, 100, dtype=torch.float64)
    probs[0, 60], probs[0, 50], probs[0, 10] = 0.5, 0.3, 0.2  # 0.5 above 50, 0.5 at or below
    assert float(probability_difference(probs, task)) == pytest.approx(0.0)
    probs[0, 50], probs[0, 99] = 0.0, 0.3
    assert float(probability_difference(probs, task)) == pytest.approx(0.6)




def test_with_first_digit_appends_the_digit_to_clean_and_corrupted_prompts_at_the_answer():
    task = greater_than_task(TOKENIZER, 6, seed=0)
    digits = torch.tensor([TOKENIZER.tokenizer(str(d), add_special_tokens=False)["input_ids"][0] for d in range(10)])
    task.digit_tokens = digits  # as for a digit tokenizer
    extended = with_first_digit(task, 7)
    rows = torch.arange(len(task))
    assert bool((extended.answer_pos == task.answer_pos + 1).all())
    for tokens, original in ((extended.clean, task.clean), (extended.corrupted, task.corrupted)):
        assert bool((tokens[rows, extended.answer_pos] == digits[7]).all())
        for i in range(len(task)):
            end = int(task.answer_pos[i]) + 1
            assert tokens[i, :end].tolist() == original[i, :end].tolist()




def test_greater_than_uses_the_papers_template():
    task = greater_than_task(TOKENIZER, 5, seed=0)
    assert all(p.startswith("The ") and " lasted from the year " in p for p in task.prompts)
    assert GREATER_THAN_TEMPLATE.endswith("to the year {XX}")


def test_unknown_task_is_refused():
    with pytest.raises(ValueError, match="ioi"):
        make_task("sentiment", TOKENIZER, 4)


def test_metrics_read_the_answer_position():
    task = ioi_task(TOKENIZER, 4, seed=0)
    logits = torch.zeros(4, task.clean.shape[1], 50257)
    rows = torch.arange(4)
    logits[rows, task.answer_pos, task.correct] = 3.0
    logits[rows, task.answer_pos, task.wrong] = 1.0
    assert logit_diff(answer_logits(logits, task), task).tolist() == [2.0] * 4


def test_ioi_positions_point_at_each_role():
    task = ioi_task(TOKENIZER, 30, seed=3)
    roles = ioi_positions(task)
    rows = torch.arange(len(task))
    assert torch.equal(task.clean[rows, roles["IO"]], task.correct)
    assert torch.equal(task.clean[rows, roles["S1"]], task.wrong) and torch.equal(task.clean[rows, roles["S2"]], task.wrong)
    assert bool((roles["S1"] < roles["S2"]).all()) and bool((roles["S2"] < roles["end"]).all())
    assert torch.equal(roles["end"], task.answer_pos) and bool((roles["BOS"] == 0).all())


def test_ioi_positions_refuse_other_tasks():
    with pytest.raises(ValueError, match="needs the IOI task"):
        ioi_positions(gender_task(TOKENIZER, 4))


@pytest.mark.parametrize("make", [ioi_task, gender_task, greater_than_task])
def test_train_and_held_out_halves_share_no_prompt_and_together_hold_every_prompt(make):
    task = make(TOKENIZER, 64, seed=4)
    assert len(set(task.prompts)) == len(task)  # the generators draw distinct prompts
    train, held_out = task.split(0.5, seed=4)
    assert not set(train.prompts) & set(held_out.prompts)
    assert sorted(train.prompts + held_out.prompts) == sorted(task.prompts) and len(train) == len(held_out) == 32


def test_a_task_with_repeated_prompts_is_split_on_its_distinct_prompts():
    task = gender_task(TOKENIZER, 10, seed=0)
    repeated = task.subset([0, 1, 2, 0, 3, 1, 4, 5, 6, 7])  # prompts 0 and 1 twice
    train, held_out = repeated.split(0.5, seed=0)
    assert len(train) + len(held_out) == 8 and not set(train.prompts) & set(held_out.prompts)
    assert sorted(train.prompts + held_out.prompts) == sorted(task.prompts[:8])


def test_gender_offers_every_template_and_name_pair_once_and_refuses_one_prompt_more():
    from helpers.singular.tasks import GENDER_NAMES_FEMALE, GENDER_NAMES_MALE, GENDER_TEMPLATES

    assert len(GENDER_TEMPLATES) >= 10
    male = len(single_token_words(TOKENIZER.tokenizer, GENDER_NAMES_MALE)[0]) * len(GENDER_TEMPLATES)
    female = len(single_token_words(TOKENIZER.tokenizer, GENDER_NAMES_FEMALE)[0]) * len(GENDER_TEMPLATES)
    most = 2 * male if male <= female else 2 * female + 1  # alternately a man and a woman
    assert most >= 4 * 192
    task = gender_task(TOKENIZER, most, seed=0)
    assert len(set(task.prompts)) == most
    with pytest.raises(ValueError, match=f"{most + 1} prompts asked for, but only {most} distinct prompts exist"):
        gender_task(TOKENIZER, most + 1, seed=0)


def test_greater_than_refuses_more_prompts_than_its_nouns_centuries_and_years_make():
    from helpers.singular.tasks import NOUNS_DURATION

    most = len(single_token_words(TOKENIZER.tokenizer, NOUNS_DURATION)[0]) * 7 * 97
    with pytest.raises(ValueError, match=f"only {most} distinct prompts exist"):
        greater_than_task(TOKENIZER, most + 1, seed=0)


def test_the_ioi_replication_set_shares_no_template_and_no_name_with_the_main_prompts():
    from helpers.singular.tasks import IOI_REPLICATION_TEMPLATES, IOI_TEMPLATES, MORE_NAMES_FEMALE, MORE_NAMES_MALE, NAMES_FEMALE, NAMES_MALE, ioi_replication_task

    assert not set(IOI_REPLICATION_TEMPLATES) & set(IOI_TEMPLATES)
    assert not set(MORE_NAMES_MALE + MORE_NAMES_FEMALE) & set(NAMES_MALE + NAMES_FEMALE)
    task = ioi_replication_task(TOKENIZER, 24, seed=0)
    decode = TOKENIZER.tokenizer.decode
    for i, prompt in enumerate(task.prompts):
        assert decode([int(task.correct[i])]).strip() in MORE_NAMES_MALE + MORE_NAMES_FEMALE
        assert not set(prompt.replace(",", " ").replace(".", " ").split()) & set(NAMES_MALE + NAMES_FEMALE)
    assert ioi_positions(task)["S2"].gt(ioi_positions(task)["S1"]).all()  # IO once, S twice, as in the main set


def test_greater_than_draws_again_when_a_prompt_repeats():
    """2,000 of its 6,790 prompts: without the redraw about 250 would repeat an earlier one."""
    task = greater_than_task(TOKENIZER, 2000, seed=0)
    assert len(set(task.prompts)) == 2000 and task.dropped["repeated_draws"] > 100
