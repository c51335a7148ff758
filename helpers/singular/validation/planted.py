"""Planted mechanisms: positive controls for the masking method (docs/methods.md §1.9).

A known mechanism is written into one attention head of the real embedded model by weight surgery, so the
background is a real network and the answer is known by construction:

- **the task**: prompts "key: w w w w w; value:" where one of the five words is a *trigger* t_i; the answer at
  the last position is the trigger's paired *answer* y_i (``N_PAIRS`` pairs, drawn by seed, so chance is
  1/N_PAIRS). The corrupted prompt swaps in another pair's trigger, whose answer is the wrong token.
- **the QK part** makes the answer position attend to the trigger: the head's query and its group's key
  along e, the head dimension RoPE rotates least (its angle over a prompt is below 1e-3 rad, so the planted
  score does not depend on distance), are *replaced* by a·q̂ and w_k. q̂ and w_k are ridge probes; w_k is a ridge probe of "this position holds a trigger". Replaced, not added: the keys'
  own component along e varies by several units between positions and, times a large planted query,
  would outweigh the trigger. ``qk_boost`` sets a: the planted score, in nats, at the answer position for
  a trigger. q̂ is a ridge probe of "this is the answer position".
- **the OV part** maps each trigger to its answer: along F the shared W_V becomes P (W_V ← W_V (1 − F Fᵀ) + P Fᵀ)
  and the head's W_O becomes s · Y (W_O ← (1 − F Fᵀ) W_O + s F Y), so nothing else the values carry along F
  is written as an answer, where P [d, n] is a ridge probe of which trigger a position holds (n·P ≈ one-hot), F [d_head, n]
  the head dimensions the group's value map and its other heads' output maps use least
  (``quiet_value_dims``), and Y [n, d] the write directions of the answers (``answer_directions``). s is set by ``ov_strength``: the planted block's largest
  singular value as a multiple of the head's own largest OV singular value, in the basis the masks use.

With grouped key/value heads the shared side (W_K, W_V) reaches the other query heads of the group too;
``plant_effects`` measures what the plant does on unrelated text.

The ground truth is the planted model's singular directions of that head whose read and write vectors put at
least ``share`` of their energy in the planted subspaces (``planted_directions``); ``recovery`` scores masks
against it (recall at the masks' own cut, rank, AUROC of mask logits).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

import torch

from helpers.core.models import load_model
from helpers.core.weights import layer_weights, raw_layer_weights, unembedding
from helpers.singular.directions.augmented import layer_svds
from helpers.singular.tasks import Task, _check_aligned, _tokenise, check_prompt_count, single_token_words

TRIGGERS = ["river", "castle", "violin", "tiger", "engine", "candle", "forest", "mirror", "ladder", "rocket",
            "saddle", "harbor", "pillow", "tunnel", "basket", "falcon"]
ANSWERS = ["seven", "purple", "north", "Monday", "copper", "thunder", "pencil", "lemon", "winter", "silk",
           "eleven", "orange", "south", "Friday", "marble", "velvet"]
FILLERS = ["table", "window", "paper", "chair", "door", "glass", "stone", "bread", "shirt", "plate", "coat", "cup",
           "box", "road", "wall", "rope", "shoe", "bell", "coin", "lamp", "leaf", "nail", "ring", "sock"]
TEMPLATE = "key:{WORDS}; value:"
N_WORDS = 5
N_PAIRS = 8
TASK_NAME = "planted"


@dataclass(frozen=True)
class PlantSpec:
    """Where and how strongly a mechanism is planted (declared before the run)."""

    layer: int
    head: int
    ov_strength: float  # the plant's largest OV singular value / the head's own largest
    qk_boost: float = 16.0  # nats added to the answer position's score for a trigger
    n_pairs: int = N_PAIRS
    ridge: float = 1e-2  # probes' ridge, relative to the mean squared norm of their inputs
    seed: int = 0

    def __post_init__(self):
        if self.ov_strength < 0 or self.qk_boost < 0:
            raise ValueError(f"ov_strength={self.ov_strength} and qk_boost={self.qk_boost} must be ≥ 0 (0: no plant)")
        if not 2 <= self.n_pairs <= min(len(TRIGGERS), len(ANSWERS)):
            raise ValueError(f"n_pairs={self.n_pairs}: expected 2 to {min(len(TRIGGERS), len(ANSWERS))} (the word lists' size)")

    @property
    def label(self) -> str:
        return f"L{self.layer}.H{self.head} ×{self.ov_strength:g}"


@dataclass
class Pairs:
    """The trigger → answer pairs of a plant (words and token ids) and the filler words."""

    triggers: list[str]
    answers: list[str]
    trigger_ids: list[int]
    answer_ids: list[int]
    fillers: list[str]
    dropped: dict = field(default_factory=dict)


def draw_pairs(tokenizer, n_pairs: int = N_PAIRS, seed: int = 0) -> Pairs:
    """``n_pairs`` triggers paired with answers at random (``seed``), all single tokens after a space."""
    triggers, dropped_t = single_token_words(tokenizer, TRIGGERS)
    answers, dropped_a = single_token_words(tokenizer, ANSWERS)
    fillers, dropped_f = single_token_words(tokenizer, FILLERS)
    if min(len(triggers), len(answers)) < n_pairs or len(fillers) < N_WORDS:
        raise ValueError(f"this tokenizer keeps {len(triggers)} triggers, {len(answers)} answers and {len(fillers)} "
                         f"fillers as single tokens; a plant of {n_pairs} pairs needs {n_pairs}, {n_pairs} and "
                         f"{N_WORDS}: lower n_pairs")
    rng = random.Random(seed)
    t, a = rng.sample(triggers, n_pairs), rng.sample(answers, n_pairs)
    ids = lambda words: [tokenizer(" " + w, add_special_tokens=False)["input_ids"][0] for w in words]  # noqa: E731
    return Pairs(t, a, ids(t), ids(a), fillers, dict(triggers=dropped_t, answers=dropped_a, fillers=dropped_f))


@dataclass
class PlantedTask:
    """The planted task's prompts, with the pair and slot of the trigger in each."""

    task: Task
    pairs: Pairs
    pair: torch.Tensor  # [n] which pair's trigger the clean prompt holds
    other: torch.Tensor  # [n] which pair's trigger the corrupted prompt holds
    trigger_pos: torch.Tensor  # [n] token position of the trigger

    def __len__(self) -> int:
        return len(self.task)

    def subset(self, index) -> "PlantedTask":
        index = torch.as_tensor(index, device="cpu")
        return PlantedTask(self.task.subset(index.to(self.task.clean.device)), self.pairs, self.pair[index],
                           self.other[index], self.trigger_pos[index])


def planted_task(model, pairs: Pairs, n: int, seed: int = 0) -> PlantedTask:
    """``n`` distinct prompts "key: w w w w w; value:" with one trigger among four fillers; the answer is the
    trigger's pair, the corrupted prompt holds another pair's trigger in the same slot."""
    check_prompt_count(n)
    rng = random.Random(seed)
    n_pairs = len(pairs.triggers)
    seen, rows = set(), []
    while len(rows) < n:
        pair, slot = rng.randrange(n_pairs), rng.randrange(N_WORDS)
        words = rng.sample(pairs.fillers, N_WORDS - 1)
        key = (pair, slot, tuple(words))
        if key in seen:
            continue
        seen.add(key)
        other = rng.choice([j for j in range(n_pairs) if j != pair])
        rows.append((pair, other, slot, words))
    text = lambda words, slot, trig: TEMPLATE.format(  # noqa: E731
        WORDS="".join(" " + w for w in words[:slot] + [trig] + words[slot:]))
    clean = [text(w, s, pairs.triggers[p]) for p, _, s, w in rows]
    corrupt = [text(w, s, pairs.triggers[o]) for _, o, s, w in rows]
    clean_t, pos = _tokenise(model, clean)
    corrupt_t, pos_c = _tokenise(model, corrupt)
    _check_aligned(pos, pos_c, TASK_NAME)
    trigger_ids = torch.tensor(pairs.trigger_ids, device="cpu")
    pair = torch.tensor([r[0] for r in rows], device="cpu")
    other = torch.tensor([r[1] for r in rows], device="cpu")
    found = clean_t == trigger_ids[pair][:, None]
    if not torch.equal(found.sum(1), torch.ones(n, dtype=torch.long, device="cpu")):
        raise AssertionError("a planted prompt does not hold its trigger exactly once as a token")
    answers = torch.tensor(pairs.answer_ids, device="cpu")
    task = Task(TASK_NAME, clean, clean_t, corrupt_t, pos, answers[pair], answers[other],
                "logit diff answer − other pair's answer", dropped=pairs.dropped)
    return PlantedTask(task, pairs, pair, other, found.float().argmax(1))


def planted_sets(model, pairs: Pairs, sizes: dict[str, int], seed: int = 0) -> dict[str, PlantedTask]:
    """Named sets of planted prompts ({name: count}, in that order) cut from one draw of distinct prompts, so
    that no two sets share a prompt: the probes' prompts, those the plant's effects are measured on, those the
    masks are trained and judged on."""
    for name, n in sizes.items():
        check_prompt_count(n, why=f" (the {name!r} set)")
    pool = planted_task(model, pairs, sum(sizes.values()), seed)
    out, start = {}, 0
    for name, n in sizes.items():
        out[name] = pool.subset(torch.arange(start, start + n, device="cpu"))
        start += n
    return out


# --- reading the layer's inputs ----------------------------------------------------------------------------

def attention_inputs(model, tokens: torch.Tensor, layer: int) -> torch.Tensor:
    """[n, T, d] what the layer's Q/K/V projections read (the attention norm's output), float64 on the CPU."""
    store = []
    attn = model.block(layer).self_attn
    handle = attn.q_proj.register_forward_pre_hook(lambda module, args: store.append(args[0].detach()))
    try:
        with torch.no_grad():
            model.hf_model(tokens.to(model.device))
    finally:
        handle.remove()
    return store[0].double().cpu()


def ridge_probe(inputs: torch.Tensor, targets: torch.Tensor, ridge: float) -> torch.Tensor:
    """[d, k] least-squares map inputs [m, d] → targets [m, k] with a ridge of ``ridge`` × mean ‖input‖²."""
    X, Y = inputs.double(), targets.double()
    lam = ridge * float((X * X).sum(1).mean())
    return torch.linalg.solve(X.T @ X + lam * torch.eye(X.shape[1], dtype=X.dtype, device=X.device), X.T @ Y)


def least_rotated_dim(model) -> int:
    """The head dimension whose RoPE frequency is lowest (HF's rotate-half layout: dims i and i + d_head/2
    share frequency θ^(−2i/d_head), lowest at i = d_head/2 − 1)."""
    return model.d_head // 2 - 1


def check_plantable(model) -> None:
    if model.arch.layout == "gpt2" or getattr(model.arch, "qk_norm", False):
        raise ValueError(f"planting is written for Llama-layout models without q/k norms (SmolLM2); "
                         f"{model.name} ({model.architecture}) is not one: plant into smollm2-135m")


# --- the plant -------------------------------------------------------------------------------------------

@dataclass
class Plant:
    """A plant's weight changes (raw checkpoint layout) and the subspaces it lives in (folded basis: what the
    augmented matrices read and write under ``fold_norm``)."""

    spec: PlantSpec
    pairs: Pairs
    query_row: torch.Tensor  # [d] the head's query map along head dimension ``dim``, replaced
    key_row: torch.Tensor  # [d] the group's key map along ``dim``, replaced
    dim: int
    dW_V: torch.Tensor  # [d, d_head] added to the group's value map (which replaces it along F)
    dW_O: torch.Tensor  # [d_head, d] added to the head's output map (which replaces it along F)
    ov_read: torch.Tensor  # [d, n_pairs] orthonormal: the planted OV block's read subspace
    ov_write: torch.Tensor  # [d, n_pairs] orthonormal: its write subspace
    qk_query: torch.Tensor  # [d, 1] the planted QK block's query side (unit)
    qk_key: torch.Tensor  # [d, 1] its key side (unit)
    sigma_ov: float  # the planted OV block's largest singular value
    head_sigma_ov: float  # the unplanted head's largest OV singular value
    sigma_qk: float
    head_sigma_qk: float

    def record(self) -> dict:
        return dict(layer=self.spec.layer, head=self.spec.head, ov_strength=self.spec.ov_strength,
                    qk_boost=self.spec.qk_boost, n_pairs=self.spec.n_pairs, seed=self.spec.seed,
                    pairs=dict(zip(self.pairs.triggers, self.pairs.answers)), sigma_ov=self.sigma_ov,
                    head_sigma_ov=self.head_sigma_ov, sigma_qk=self.sigma_qk, head_sigma_qk=self.head_sigma_qk)


def orthonormal(M: torch.Tensor) -> torch.Tensor:
    """An orthonormal basis [d, r] of the columns of M (float64)."""
    U, S, _ = torch.linalg.svd(M.double(), full_matrices=False)
    return U[:, S > S.max() * 1e-10]


def answer_directions(model, answer_ids: list[int]) -> torch.Tensor:
    """[n, d] write directions, one per answer: Y = C⁺ for C [d, n] the answers' unembedding columns (final
    norm folded) centred on their mean, so that writing Y_i raises answer i's centred logit by one and
    leaves the others' (on the direct path, before the final norm's scale)."""
    cols = unembedding(model, device="cpu").W_U.double()[:, answer_ids]
    return torch.linalg.pinv(cols - cols.mean(1, keepdim=True))


def quiet_value_dims(raw, head: int, n: int, group: list[int]) -> torch.Tensor:
    """[d_head, n] orthonormal head dimensions for the planted values: those the group's value map uses least
    and the group's other heads' output maps read least (each term scaled by its trace), so that the plant
    writes little through the other heads and the head's own values add little to the plant."""
    others = [k for k in group if k != head]
    A = sum(raw.W_O[k].double() @ raw.W_O[k].double().T for k in others) if others else 0.0
    B = raw.W_V[head].double().T @ raw.W_V[head].double()
    M = B / torch.trace(B) + (A / torch.trace(A) if others else 0.0)
    return torch.linalg.eigh(M)[1][:, :n]


def design_plant(model, spec: PlantSpec, probe: PlantedTask, unrelated: torch.Tensor) -> Plant:
    """The weight changes of ``spec`` for the unplanted ``model``. Its probes are fitted on ``probe`` (the plant's
    own prompts, never those the masks are trained or judged on) and on ``unrelated`` text [n, T] as
    negatives (text that ``plant_effects`` does not measure on), so that they stay near zero off the task."""
    check_plantable(model)
    if len(probe.pairs.triggers) != spec.n_pairs:
        raise ValueError(f"the probe prompts use {len(probe.pairs.triggers)} pairs; the spec declares {spec.n_pairs}")
    task, layer, head = probe.task, spec.layer, spec.head
    X = attention_inputs(model, task.clean, layer)  # [n, T, d]: x̂ ⊙ g, what q/k/v_proj read
    n, T, d = X.shape
    valid = torch.arange(T, device="cpu")[None, :] <= task.answer_pos[:, None]
    rows = torch.arange(n, device="cpu")
    targets = torch.zeros(n, T, spec.n_pairs + 1, dtype=torch.float64, device="cpu")  # which trigger; last: the answer position
    targets[rows, probe.trigger_pos, probe.pair] = 1.0
    targets[rows, task.answer_pos, -1] = 1.0
    negatives = attention_inputs(model, unrelated, layer).reshape(-1, d)
    inputs = torch.cat([X[valid], negatives])
    targets = torch.cat([targets[valid], negatives.new_zeros(len(negatives), spec.n_pairs + 1)])
    P = ridge_probe(inputs, targets[:, :-1], spec.ridge)  # [d, n_pairs]: n·P ≈ which trigger, 0 elsewhere
    w_k = ridge_probe(inputs, targets[:, :-1].sum(-1, keepdim=True), spec.ridge)[:, 0]  # n·w_k ≈ 1 on a trigger
    w_q = ridge_probe(inputs, targets[:, -1:], spec.ridge)[:, 0]  # n·w_q ≈ 1 at the answer position
    raw = raw_layer_weights(model, layer, device="cpu")
    gain = raw.ln_attn.gain.double()  # the processed maps read x̂ with W_folded = diag(g) W_raw
    svds = layer_svds(layer_weights(model, layer, device="cpu"))
    head_sigma_ov, head_sigma_qk = float(svds["ov"].S[head, 0]), float(svds["qk"].S[head, 0])
    size = model.n_heads // model.n_kv_heads
    F = quiet_value_dims(raw, head, spec.n_pairs, list(range(head // size * size, (head // size + 1) * size)))
    Y = answer_directions(model, probe.pairs.answer_ids)
    read = gain[:, None] * P
    s = spec.ov_strength * head_sigma_ov / float(torch.linalg.matrix_norm(read @ Y, ord=2))
    on_trigger = float((X[rows, probe.trigger_pos] @ w_k).mean())
    on_query = float((X[rows, task.answer_pos] @ w_q).mean())
    a = spec.qk_boost * math.sqrt(model.d_head) / (on_query * on_trigger)
    W_V, W_O = raw.W_V[head].double(), raw.W_O[head].double()
    q_side, k_side = gain * w_q * a, gain * w_k
    return Plant(spec, probe.pairs, query_row=(a * w_q).float(), key_row=w_k.float(), dim=least_rotated_dim(model),
                 dW_V=((P - W_V @ F) @ F.T).float(), dW_O=(F @ (s * Y - F.T @ W_O)).float(),
                 ov_read=orthonormal(read), ov_write=orthonormal(Y.T),
                 qk_query=(q_side / q_side.norm())[:, None], qk_key=(k_side / k_side.norm())[:, None],
                 sigma_ov=float(torch.linalg.matrix_norm(s * read @ Y, ord=2)), head_sigma_ov=head_sigma_ov,
                 sigma_qk=float(q_side.norm() * k_side.norm()), head_sigma_qk=head_sigma_qk)


def apply_plant(model, plant: Plant) -> None:
    """Write the plant into ``model``'s weights in place: the head's query and output maps, its group's key and
    value maps."""
    check_plantable(model)
    attn = model.block(plant.spec.layer).self_attn
    dh, h = model.d_head, plant.spec.head
    g = h // (model.n_heads // model.n_kv_heads)
    with torch.no_grad():
        attn.q_proj.weight[h * dh + plant.dim] = plant.query_row.to(attn.q_proj.weight)
        attn.k_proj.weight[g * dh + plant.dim] = plant.key_row.to(attn.k_proj.weight)
        attn.v_proj.weight[g * dh:(g + 1) * dh] += plant.dW_V.T.to(attn.v_proj.weight)
        attn.o_proj.weight[:, h * dh:(h + 1) * dh] += plant.dW_O.T.to(attn.o_proj.weight)
    model.__dict__.pop("weights_sha256", None)  # a digest taken before the plant would name the unplanted weights


def planted_model(name: str, plant: Plant, processing: str = "fold_norm", device: str = "cpu"):
    """A fresh copy of the registry model ``name`` with ``plant`` added, named after the plant so that nothing
    trained on it (masks are cached by the model's record) is ever taken for the unplanted model's."""
    model = load_model(name, processing=processing, device=device)
    apply_plant(model, plant)
    s = plant.spec
    label = f"{name}-planted-L{s.layer}H{s.head}-ov{s.ov_strength:g}-qk{s.qk_boost:g}-seed{s.seed}"
    return replace(model, name=label, weights_source=f"{model.weights_source}; plant {plant.record()}")


# --- what the plant does -----------------------------------------------------------------------------------

def answer_accuracy(final_logits: torch.Tensor, planted: PlantedTask) -> torch.Tensor:
    """[n] bool: the prompt's answer has the largest logit among the plant's answers (chance 1/n_pairs)."""
    answers = torch.tensor(planted.pairs.answer_ids, device=final_logits.device)
    best = final_logits[:, answers].argmax(-1).cpu()
    return best == planted.pair


def attention_to_trigger(model, planted: PlantedTask, layer: int, head: int) -> torch.Tensor:
    """[n] the head's attention weight from the answer position to the trigger."""
    store = {}
    name = f"blocks.{layer}.attn.hook_pattern"
    task = planted.task
    with torch.no_grad():
        model.bridge.run_with_hooks(task.clean.to(model.device),
                                    fwd_hooks=[(name, lambda value, hook: store.setdefault("p", value.detach()))])
    rows = torch.arange(len(task), device=store["p"].device)
    return store["p"][rows, head, task.answer_pos.to(store["p"].device), planted.trigger_pos.to(store["p"].device)].cpu()


def next_token_kl(reference, model, tokens: torch.Tensor) -> float:
    """Mean KL(reference ‖ model) of the next-token distributions over every position of ``tokens`` [n, T]."""
    with torch.no_grad():
        p = torch.log_softmax(reference.hf_model(tokens.to(reference.device)).logits.double(), -1)
        q = torch.log_softmax(model.hf_model(tokens.to(model.device)).logits.double(), -1)
    return float((p.exp() * (p - q)).sum(-1).mean())


def unrelated_tokens(model, n: int = 16, length: int = 32, skip: int = 0) -> torch.Tensor:
    """[n, length] token ids of ``n`` paragraphs of the offline corpus (Python's documentation) that are at
    least ``length`` tokens long, after the first ``skip`` such, BOS first: text that has nothing to do with the
    plant (``skip`` keeps the probes' negatives apart from the text the plant's effects are measured on)."""
    from helpers.tiled.corpus import corpus_paragraphs

    rows = []
    for paragraph in corpus_paragraphs("python-docs"):
        ids = model.tokenizer(paragraph, add_special_tokens=False)["input_ids"]
        if len(ids) >= length - 1:
            rows.append([model.tokenizer.bos_token_id] + ids[: length - 1])
        if len(rows) == skip + n:
            break
    return torch.tensor(rows[skip:], dtype=torch.long, device="cpu")


def plant_effects(model, unplanted, planted: PlantedTask, spec: PlantSpec, unrelated: torch.Tensor) -> dict:
    """What the plant does, measured before any mask is trained: answer accuracy and logit difference on
    ``planted`` (held-out prompts), the head's attention to the trigger, and KL(unplanted ‖ planted) on
    ``unrelated`` text (every position)."""
    from helpers.core.logits import logits_at
    from helpers.singular.tasks import logit_diff

    task = planted.task.to(model.device)
    with torch.no_grad():
        final = logits_at(model, task.clean, task.answer_pos)
    correct = answer_accuracy(final, planted).double()
    diff = logit_diff(final, task).double().cpu()
    attention = attention_to_trigger(model, planted, spec.layer, spec.head).double()
    return dict(ov_strength=spec.ov_strength, qk_boost=spec.qk_boost, accuracy=float(correct.mean()),
                accuracy_se=float(correct.std() / math.sqrt(len(correct))), logit_diff=float(diff.mean()),
                logit_diff_se=float(diff.std() / math.sqrt(len(diff))), attention=float(attention.mean()),
                unrelated_kl=next_token_kl(unplanted, model, unrelated) if model is not unplanted else 0.0,
                chance=1.0 / spec.n_pairs)
