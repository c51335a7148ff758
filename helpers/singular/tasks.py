"""Paper 1's tasks as seeded generators (docs/methods.md §1.4): IOI, gender pronoun, greater-than.

A ``Task`` holds clean and corrupted prompts as right-padded token tensors (causal models never look
ahead, so padding after the answer position changes nothing), the answer position of each prompt, the
answer token ids, and a metric. Words that are not a single token for the model's tokenizer are
filtered out, and how many were dropped is recorded in ``Task.dropped``; nothing is silently mis-scored.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import torch

from helpers.core.tokens import right_padded

NAMES_MALE = ["John", "David", "Michael", "James", "Robert", "William", "Richard", "Thomas", "Mark", "Paul",
              "Daniel", "Peter", "George", "Edward", "Steven", "Kevin", "Brian", "Jason", "Matthew", "Gary",
              "Eric", "Frank", "Scott", "Sam", "Jack", "Tom", "Ben", "Adam", "Henry", "Ryan"]
NAMES_FEMALE = ["Mary", "Sarah", "Lisa", "Anna", "Emma", "Laura", "Karen", "Susan", "Linda", "Helen",
                "Amy", "Rachel", "Julia", "Kate", "Alice", "Jessica", "Emily", "Nancy", "Maria", "Rose",
                "Jane", "Grace", "Claire", "Lucy", "Sophie", "Ruth", "Diana", "Ann", "Betty", "Amanda"]
PLACES = ["store", "park", "school", "garden", "station", "hospital", "restaurant", "office", "house", "beach",
          "library", "market", "church", "museum", "airport"]
OBJECTS = ["drink", "book", "ring", "ball", "bag", "letter", "key", "gift", "flower", "card", "phone", "cake",
           "bottle", "hat", "pen"]
IOI_TEMPLATES = [  # names always follow a space, so " Name" is the token; the answer (IO) follows the prompt
    "When {A} and {B} went to the {PLACE}, {S} gave a {OBJECT} to",
    "Then, {A} and {B} went to the {PLACE}. {S} gave a {OBJECT} to",
    "After {A} and {B} arrived at the {PLACE}, {S} handed a {OBJECT} to",
    "While {A} and {B} were working at the {PLACE}, {S} gave a {OBJECT} to",
    "Friends {A} and {B} found a {OBJECT} at the {PLACE}. {S} gave it to",
    "Today {A} and {B} had a long day at the {PLACE}, so {S} passed a {OBJECT} to",
]
GENDER_TEMPLATES = [  # the name always follows a space; the next token is the pronoun
    "So {NAME} is a really great friend, isn't",
    "I think {NAME} is a very kind person, isn't",
    "Everyone says {NAME} is a talented cook, isn't",
    "I heard that {NAME} got the new job, didn't",
    "We all know {NAME} works very hard, doesn't",
    "Yesterday {NAME} finished the report early, didn't",
    "Surely {NAME} will come to the wedding, won't",
    "Our neighbour {NAME} has a lovely garden, hasn't",
    "My friend {NAME} called me last night because",
    "When {NAME} arrived at the party,",
    "After dinner, {NAME} washed the dishes because",
    "The teacher asked {NAME} a question, and",
]
MORE_NAMES_MALE = [  # never in IOI's main prompts: gender's larger pool and IOI's replication set
    "Chris", "Andrew", "Joseph", "Charles", "Anthony", "Tony", "Nick", "Steve", "Jim", "Bob", "Joe", "Luke", "Harry",
    "Oliver", "Jacob", "Simon", "Patrick", "Greg", "Carl", "Fred", "Larry", "Ray", "Roger", "Bill", "Arthur",
    "Walter", "Victor", "Albert", "Leo", "Max"]
MORE_NAMES_FEMALE = [
    "Elizabeth", "Jennifer", "Patricia", "Barbara", "Margaret", "Sandra", "Carol", "Michelle", "Olivia", "Sophia",
    "Hannah", "Kelly", "Victoria", "Catherine", "Julie", "Lily", "Ella", "Eva", "Sara", "Joan", "Judy", "Heather",
    "Monica", "Nina", "Eve", "Sally", "Ellen", "Martha", "Janet", "Anne"]
GENDER_NAMES_MALE = NAMES_MALE + MORE_NAMES_MALE
GENDER_NAMES_FEMALE = NAMES_FEMALE + MORE_NAMES_FEMALE
IOI_REPLICATION_TEMPLATES = [  # other sentences than IOI_TEMPLATES, for a replication set with other names
    "Later that day, {A} and {B} walked to the {PLACE}, and {S} lent a {OBJECT} to",
    "At the {PLACE}, {A} and {B} were talking, and then {S} showed a {OBJECT} to",
    "Once {A} and {B} reached the {PLACE}, {S} threw a {OBJECT} to",
    "On Sunday {A} and {B} met at the {PLACE}. {S} sent a {OBJECT} to",
    "Since {A} and {B} were both at the {PLACE}, {S} brought a {OBJECT} to",
    "Because {A} and {B} visited the {PLACE} together, {S} offered a {OBJECT} to",
]
NOUNS_DURATION = ["war", "reign", "dynasty", "expedition", "siege", "conflict", "drought", "project", "strike",
                  "journey"]
GREATER_THAN_TEMPLATE = "The {NOUN} lasted from the year {XX}{YY} to the year {XX}"


@dataclass
class Task:
    """Clean and corrupted prompts of one task, tokenised for one model."""

    name: str
    prompts: list[str]
    clean: torch.Tensor  # [n, T] right-padded token ids
    corrupted: torch.Tensor  # [n, T], same answer positions
    answer_pos: torch.Tensor  # [n] index of the last prompt token (logits there predict the answer)
    correct: torch.Tensor  # [n] token id (IOI, gender) or the threshold YY (greater-than)
    wrong: torch.Tensor  # [n] token id (IOI: S, gender: the other pronoun); -1 for greater-than
    metric_name: str
    dropped: dict = field(default_factory=dict)
    digit_tokens: torch.Tensor | None = None  # greater-than: token ids of "00".."99" or of "0".."9"

    def __len__(self) -> int:
        return len(self.prompts)

    def to(self, device) -> "Task":
        """The same task with its tensors on ``device`` (tasks are built on the CPU; ``make_task`` moves them to
        the model's device)."""
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Task(self.name, self.prompts, move(self.clean), move(self.corrupted), move(self.answer_pos),
                    move(self.correct), move(self.wrong), self.metric_name, self.dropped, move(self.digit_tokens))

    def subset(self, index) -> "Task":
        index = torch.as_tensor(index, device=self.clean.device)
        return Task(self.name, [self.prompts[i] for i in index.tolist()], self.clean[index], self.corrupted[index],
                    self.answer_pos[index], self.correct[index], self.wrong[index], self.metric_name, self.dropped,
                    self.digit_tokens)

    def split(self, fraction: float, seed: int = 0) -> tuple["Task", "Task"]:
        """(train, held-out) random split of the distinct prompts: a prompt that occurs twice is kept once,
        so no held-out prompt is ever a training prompt (the generators already draw distinct prompts)."""
        first = {}
        for i, prompt in enumerate(self.prompts):
            first.setdefault(prompt, i)
        unique = torch.tensor(sorted(first.values()), device="cpu")
        order = unique[torch.randperm(len(unique), generator=torch.Generator().manual_seed(seed), device="cpu")]
        cut = int(round(fraction * len(unique)))
        if not 0 < cut < len(unique):
            raise ValueError(f"splitting {len(unique)} distinct {self.name} prompts at {fraction} leaves one part "
                             f"empty; use n_prompts ≥ 2 (each part needs prompts)")
        train, held_out = self.subset(order[:cut]), self.subset(order[cut:])
        shared = set(train.prompts) & set(held_out.prompts)
        if shared:
            raise AssertionError(f"{len(shared)} prompts are in both halves of the {self.name} split, e.g. {min(shared)!r}")
        return train, held_out


def single_token_words(tokenizer, words: list[str], prefix: str = " ") -> tuple[list[str], list[str]]:
    """(kept, dropped): words whose ``prefix + word`` is one token."""
    kept, dropped = [], []
    for word in words:
        (kept if len(tokenizer(prefix + word, add_special_tokens=False)["input_ids"]) == 1 else dropped).append(word)
    return kept, dropped


def token_id(tokenizer, text: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"{text!r} is {len(ids)} tokens for this tokenizer; expected one")
    return ids[0]


def _tokenise(model, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids (BOS first) and the index of each text's last token."""
    rows = [[model.tokenizer.bos_token_id] + model.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    pad = model.tokenizer.pad_token_id if model.tokenizer.pad_token_id is not None else model.tokenizer.bos_token_id
    return right_padded(rows, pad), torch.tensor([len(r) - 1 for r in rows], device="cpu")


def _check_aligned(clean_pos: torch.Tensor, corrupt_pos: torch.Tensor, task: str) -> None:
    if not torch.equal(clean_pos, corrupt_pos):
        raise ValueError(f"{task}: corrupted prompts tokenise to other lengths than the clean ones")


def ioi_task(model, n: int, seed: int = 0) -> Task:
    """IOI (Wang et al. 2023): half ABBA, half BABA; metric logit diff IO − S; ABC corruption."""
    return _ioi(model, n, seed, IOI_TEMPLATES, NAMES_MALE + NAMES_FEMALE)


def ioi_replication_task(model, n: int, seed: int = 0) -> Task:
    """IOI from other templates (``IOI_REPLICATION_TEMPLATES``) and other names (``MORE_NAMES_*``) than
    ``ioi_task``'s: the same task on prompts that share no sentence and no name with it."""
    return _ioi(model, n, seed, IOI_REPLICATION_TEMPLATES, MORE_NAMES_MALE + MORE_NAMES_FEMALE)


def _ioi(model, n: int, seed: int, templates: list[str], all_names: list[str]) -> Task:
    check_prompt_count(n)
    rng = random.Random(seed)
    tok = model.tokenizer
    names, dropped_names = single_token_words(tok, all_names)
    places, dropped_places = single_token_words(tok, PLACES)
    objects, dropped_objects = single_token_words(tok, OBJECTS)
    if len(names) < 5 or not places or not objects:
        raise ValueError(f"too few single-token words for IOI with this tokenizer: names {len(names)}, "
                         f"places {len(places)}, objects {len(objects)}")
    distinct = len(templates) * len(names) * (len(names) - 1) * len(places) * len(objects)  # per order
    check_enough_prompts("ioi", n, 2 * distinct, f"{len(templates)} templates, {len(names)} names, "
                         f"{len(places)} places, {len(objects)} objects, ABBA and BABA")
    clean, corrupt, io_ids, s_ids, repeats = [], [], [], [], 0
    while len(clean) < n:
        i = len(clean)
        template = rng.choice(templates)
        io, s, c1, c2, c3 = rng.sample(names, 5)
        place, obj = rng.choice(places), rng.choice(objects)
        a, b = (io, s) if i % 2 == 0 else (s, io)  # ABBA when IO comes first, BABA otherwise
        prompt = template.format(A=a, B=b, S=s, PLACE=place, OBJECT=obj)
        if prompt in clean:  # a repeated draw: every prompt is distinct, so a split never shares one
            repeats = _repeated("ioi", repeats, n, len(clean))
            continue
        clean.append(prompt)
        corrupt.append(template.format(A=c1, B=c2, S=c3, PLACE=place, OBJECT=obj))
        io_ids.append(token_id(tok, " " + io))
        s_ids.append(token_id(tok, " " + s))
    clean_t, pos = _tokenise(model, clean)
    corrupt_t, pos_c = _tokenise(model, corrupt)
    _check_aligned(pos, pos_c, "ioi")
    return Task("ioi", clean, clean_t, corrupt_t, pos, torch.tensor(io_ids, device="cpu"),
                torch.tensor(s_ids, device="cpu"), "logit diff IO − S",
                dropped=dict(names=dropped_names, places=dropped_places, objects=dropped_objects,
                             repeated_draws=repeats))


def gender_task(model, n: int, seed: int = 0) -> Task:
    """Gender pronoun: "So {name} is a really great friend, isn't" → " he" / " she" (``GENDER_TEMPLATES``);
    corruption: a name of the other gender. Metric: logit diff correct − wrong pronoun. Half the prompts
    (even indices) name a man, half a woman; each half is drawn without replacement from every
    (template, single-token name) pair, so all prompts are distinct."""
    check_prompt_count(n)
    rng = random.Random(seed)
    tok = model.tokenizer
    male, dropped_m = single_token_words(tok, GENDER_NAMES_MALE)
    female, dropped_f = single_token_words(tok, GENDER_NAMES_FEMALE)
    he, she = token_id(tok, " he"), token_id(tok, " she")
    pools = [[(t, name) for t in GENDER_TEMPLATES for name in names] for names in (male, female)]
    n_male, n_female = (len(pool) for pool in pools)  # prompts i = 0, 2, 4, … name a man: ⌈n/2⌉ men, ⌊n/2⌋ women
    check_enough_prompts("gender", n, 2 * n_male if n_male <= n_female else 2 * n_female + 1,
                         f"{len(GENDER_TEMPLATES)} templates × {len(male)} male and {len(female)} female single-token "
                         f"names, alternately a man and a woman")
    drawn = [rng.sample(pool, count) for pool, count in zip(pools, ((n + 1) // 2, n // 2))]
    clean, corrupt, correct, wrong = [], [], [], []
    for i in range(n):
        is_male = i % 2 == 0
        template, name = drawn[0 if is_male else 1][i // 2]
        other = rng.choice(female if is_male else male)
        clean.append(template.format(NAME=name))
        corrupt.append(template.format(NAME=other))
        correct.append(he if is_male else she)
        wrong.append(she if is_male else he)
    clean_t, pos = _tokenise(model, clean)
    corrupt_t, pos_c = _tokenise(model, corrupt)
    _check_aligned(pos, pos_c, "gender")
    return Task("gender", clean, clean_t, corrupt_t, pos, torch.tensor(correct, device="cpu"),
                torch.tensor(wrong, device="cpu"),
                "logit diff correct − wrong pronoun", dropped=dict(names=dropped_m + dropped_f))


def greater_than_task(model, n: int, seed: int = 0) -> Task:
    """Greater-than (Hanna et al. 2023): "The {noun} lasted from the year {XX}{YY} to the year {XX}";
    metric Σ_{y>YY} p(y) − Σ_{y≤YY} p(y) over two-digit continuations; corruption YY → "01".

    Tokenizers that split numbers into digits (Gemma, SmolLM2) predict the continuation in two steps;
    ``digit_tokens`` then holds the ids of "0".."9" (else of "00".."99")."""
    check_prompt_count(n)
    rng = random.Random(seed)
    tok = model.tokenizer
    nouns, dropped_nouns = single_token_words(tok, NOUNS_DURATION)
    two_digit = all(len(tok(f"{y:02d}", add_special_tokens=False)["input_ids"]) == 1 for y in range(100))
    digits = [token_id(tok, f"{y:02d}") for y in range(100)] if two_digit else [token_id(tok, str(d)) for d in range(10)]
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    centuries, years = range(11, 18), range(2, 99)
    check_enough_prompts("greater_than", n, len(nouns) * len(centuries) * len(years),
                         f"{len(nouns)} nouns × {len(centuries)} centuries × {len(years)} years, before the years "
                         f"that do not tokenise like their '01' corruption")
    clean, corrupt, thresholds, rejected, repeats = [], [], [], 0, 0
    while len(clean) < n:
        noun, century, year = rng.choice(nouns), rng.choice(centuries), rng.choice(years)
        text = GREATER_THAN_TEMPLATE.format(NOUN=noun, XX=century, YY=f"{year:02d}")
        if text in clean:  # a repeated draw: every prompt is distinct, so a split never shares one
            repeats = _repeated("greater_than", repeats, n, len(clean))
            continue
        other = GREATER_THAN_TEMPLATE.format(NOUN=noun, XX=century, YY="01")
        a, b = ids(text), ids(other)
        if len(a) != len(b) or sum(x != y for x, y in zip(a, b)) > (1 if two_digit else 2):  # YY alone differs
            rejected += 1
            if rejected > 50 * n:
                raise ValueError("greater-than: almost no year tokenises like its '01' corruption")
            continue
        clean.append(text)
        corrupt.append(other)
        thresholds.append(year)
    clean_t, pos = _tokenise(model, clean)
    corrupt_t, pos_c = _tokenise(model, corrupt)
    _check_aligned(pos, pos_c, "greater-than")
    return Task("greater_than", clean, clean_t, corrupt_t, pos, torch.tensor(thresholds, device="cpu"),
                torch.full((n,), -1, device="cpu"), "P(YY' > YY) − P(YY' ≤ YY)",
                dropped=dict(nouns=dropped_nouns, years_rejected=rejected, repeated_draws=repeats),
                digit_tokens=torch.tensor(digits, device="cpu"))


TASKS = {"ioi": ioi_task, "gender": gender_task, "greater_than": greater_than_task}


def make_task(name: str, model, n: int, seed: int = 0) -> Task:
    """``n`` prompts of the task ``name`` from ``seed`` (on the CPU; ``Task.to`` moves them)."""
    if name not in TASKS:
        raise ValueError(f"task {name!r} is not one of {sorted(TASKS)}")
    return TASKS[name](model, n, seed)


def check_enough_prompts(task: str, asked: int, distinct: int, made_of: str) -> None:
    """Refuse ``asked`` prompts when the generator has fewer than that many distinct prompts."""
    if asked > distinct:
        raise ValueError(f"{task}: {asked} prompts asked for, but only {distinct} distinct prompts exist for this "
                         f"tokenizer ({made_of}); ask for at most {distinct} prompts (a held-out set must not repeat "
                         f"a training prompt)")


def _repeated(task: str, repeats: int, asked: int, found: int) -> int:
    """Count one repeated draw; refuse when repeats outnumber the prompts asked for 50 to 1."""
    if repeats + 1 > 50 * asked:
        raise ValueError(f"{task}: {asked} distinct prompts asked for, only {found} found in {repeats + found} draws; "
                         f"ask for fewer prompts")
    return repeats + 1


def check_prompt_count(n, minimum: int = 1, why: str = "") -> None:
    """Refuse a prompt count that is not an integer ≥ ``minimum``, before any prompt is built."""
    if isinstance(n, bool) or not isinstance(n, int) or n < minimum:
        raise ValueError(f"n_prompts={n!r}: expected an integer ≥ {minimum}{why}")


# --- metrics ----------------------------------------------------------------------------------------------

def answer_logits(logits: torch.Tensor, task: Task) -> torch.Tensor:
    """[n, vocab] logits at each prompt's answer position, from [n, T, vocab]."""
    return logits[torch.arange(logits.shape[0], device=logits.device), task.answer_pos.to(logits.device)]


def logit_diff(final_logits: torch.Tensor, task: Task) -> torch.Tensor:
    """[n] logit(correct) − logit(wrong) at the answer position (IOI, gender)."""
    rows, device = torch.arange(final_logits.shape[0], device=final_logits.device), final_logits.device
    return final_logits[rows, task.correct.to(device)] - final_logits[rows, task.wrong.to(device)]


def with_first_digit(task: Task, digit: int) -> Task:
    """Greater-than for digit tokenizers: every prompt (clean and corrupted) with the first digit ``digit``
    ("0".."9") appended, and the answer position moved onto it, so its logits predict the second digit."""
    rows = torch.arange(len(task), device=task.clean.device)
    token = task.digit_tokens[digit]

    def extend(tokens):
        out = torch.cat([tokens, torch.zeros_like(tokens[:, :1])], dim=1)
        out[rows, task.answer_pos + 1] = token
        return out

    return Task(task.name, task.prompts, extend(task.clean), extend(task.corrupted), task.answer_pos + 1, task.correct,
                task.wrong, task.metric_name, task.dropped, task.digit_tokens)


def year_probabilities(final_logits_of, task: Task) -> torch.Tensor:
    """[n, 100] probability of each two-digit continuation "00".."99" of the greater-than prompts.

    ``final_logits_of(digit) -> [n, vocab]``: logits at the answer position of the prompts themselves
    (``digit`` None) or, for digit tokenizers, of ``with_first_digit(task, digit)`` — from a plain or a
    masked model. Two-digit tokenizers: one step. Digit tokenizers: p(d1) at the answer position times
    p(d2 | d1) with each first digit appended."""
    digits = task.digit_tokens
    first = torch.softmax(final_logits_of(None).double(), -1)[:, digits]
    if len(digits) == 100:
        return first
    second = torch.stack([torch.softmax(final_logits_of(d1).double(), -1)[:, digits] for d1 in range(10)],
                         dim=1)  # [n, d1, d2]
    return (first[:, :, None] * second).reshape(len(task), 100)


def probability_difference(year_probs: torch.Tensor, task: Task) -> torch.Tensor:
    """[n] Σ_{y>YY} p(y) − Σ_{y≤YY} p(y)."""
    years = torch.arange(100, device=year_probs.device)
    above = years[None, :] > task.correct.to(year_probs.device)[:, None]
    return (year_probs * above).sum(-1) - (year_probs * ~above).sum(-1)


IOI_ROLES = ("BOS", "IO", "S1", "S2", "end")


def ioi_positions(task: Task) -> dict[str, torch.Tensor]:
    """[n] token position of each IOI role: BOS (0), IO (its one mention), S1 and S2 (the subject's two
    mentions), end (the answer position). Names are single tokens, so each is found by its id."""
    if task.name != "ioi":
        raise ValueError(f"ioi_positions needs the IOI task, not {task.name!r}")
    out = {role: torch.zeros(len(task), dtype=torch.long, device="cpu") for role in IOI_ROLES}  # indices: CPU
    clean, correct, wrong, answer_pos = (t.cpu() for t in (task.clean, task.correct, task.wrong, task.answer_pos))
    for n in range(len(task)):
        row = clean[n, : int(answer_pos[n]) + 1]
        io = (row == correct[n]).nonzero().flatten()
        s = (row == wrong[n]).nonzero().flatten()
        if len(io) != 1 or len(s) != 2:
            raise ValueError(f"IOI prompt {n} ({task.prompts[n]!r}) names IO {len(io)}× and S {len(s)}×; expected 1 and 2")
        out["IO"][n], out["S1"][n], out["S2"][n] = io[0], s[0], s[1]
        out["end"][n] = answer_pos[n]
    return out
