"""Direction masks: all-ones identity, and each ablation rule against plain activation patching."""
import pytest
import torch

from helpers.singular.directions.augmented import direction_shapes
from helpers.singular.masking.masks import COEFFICIENT_HOOKS, AblationRule, DirectionMasks, FixedMasks, MaskedModel
from helpers.core.models import load_model
from helpers.singular.tasks import ioi_task
from tests.conftest import TINY_MODELS, cached_model

def test_the_papers_rule_is_qk_zero_at_all_positions_and_ov_mlp_corrupted_at_the_answer():
    from helpers.singular.masking.masks import KINDS

    rule = AblationRule.paper()
    assert "qk" in KINDS and {"ov", "mlp_out"} <= set(KINDS)
    for kind in KINDS:
        expected = ("zero", "all") if kind == "qk" else ("corrupted", "answer")
        assert (rule.reference[kind], rule.positions[kind]) == expected, kind
    uniform = AblationRule.uniform("mean", "answer")
    assert set(uniform.reference.values()) == {"mean"} and set(uniform.positions.values()) == {"answer"}


RULES = [AblationRule.uniform(r, p) for r in ("zero", "mean", "corrupted") for p in ("all", "answer")] + [
    AblationRule.paper()]


def setup(name, n=6):
    model = cached_model(name, "fold_norm")
    masked = MaskedModel(model)
    task = ioi_task(model, n, seed=1)
    valid = torch.arange(task.clean.shape[1])[None] <= task.answer_pos[:, None]
    return model, masked, task, valid


def masks_with(model, layer, kind, value=0.0):
    """All ones except every direction of one kind in one layer."""
    masks = FixedMasks.ones(model)
    masks.blocks[f"{layer}_{kind}"] = torch.full(direction_shapes(model)[kind], value)
    return masks


@pytest.mark.parametrize("name", TINY_MODELS)
def test_all_ones_masks_reproduce_the_models_logits(name):
    model, masked, task, valid = setup(name)
    with torch.no_grad():
        full = model.bridge(task.clean)[torch.arange(len(task)), task.answer_pos]
    for rule in RULES:
        refs = masked.references(rule, task.clean, task.corrupted, valid)
        out = masked.masked_final_logits(FixedMasks.ones(model), rule, task.clean, task.answer_pos, refs)
        torch.testing.assert_close(out, full, rtol=1e-4, atol=1e-4 * float(full.abs().max()))


def patched_logits(model, masked, task, hook_name, replacement, where=None):
    """Oracle: overwrite a hook's value (at all positions, or where [n, T] is 1)."""
    def hook(value, hook):
        new = replacement.expand_as(value)
        if where is None:
            return new
        w = where.reshape(*where.shape, *([1] * (value.ndim - 2))).to(value.dtype)
        return value * (1 - w) + new * w
    return masked.final_logits(task.clean, task.answer_pos, [(hook_name, hook)])


def hook_values(model, tokens, name):
    with torch.no_grad():
        _, cache = model.bridge.run_with_cache(tokens, names_filter=[name])
    return cache[name]


@pytest.mark.parametrize("name", TINY_MODELS)
@pytest.mark.parametrize("reference", ["zero", "mean", "corrupted"])
@pytest.mark.parametrize("positions", ["all", "answer"])
@pytest.mark.parametrize("kind,hook", [("mlp_out", "mlp.out.hook_out"), ("ov", "attn.o.hook_out"),
                                       ("mlp_up", "mlp.in.hook_out")])
def test_zero_masks_of_a_kind_equal_patching_its_output(name, reference, positions, kind, hook):
    """m = 0 on every direction of one matrix replaces its whole output by the reference output
    (for OV with the zero reference that includes b_O, which the heads' outputs carry as b_O/H each)."""
    model, masked, task, valid = setup(name)
    layer = model.n_layers - 1
    hook_name = f"blocks.{layer}.{hook}"
    rule = AblationRule.uniform(reference, positions)
    if reference == "zero":
        replacement = torch.zeros(())
    elif reference == "mean":
        clean = hook_values(model, task.clean, hook_name)
        replacement = (clean * valid[..., None]).sum((0, 1)) / valid.sum()
    else:
        replacement = hook_values(model, task.corrupted, hook_name)
    where = None
    if positions == "answer":
        where = torch.zeros(valid.shape)
        where[torch.arange(len(task)), task.answer_pos] = 1
    expected = patched_logits(model, masked, task, hook_name, replacement, where)
    refs = masked.references(rule, task.clean, task.corrupted, valid)
    out = masked.masked_final_logits(masks_with(model, layer, kind), rule, task.clean, task.answer_pos, refs)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))


@pytest.mark.parametrize("name", TINY_MODELS)
def test_zero_qk_masks_zero_the_queries(name):
    """Every QK direction of a layer masked (zero reference): the queries are zero, whatever comes after."""
    model, masked, task, valid = setup(name)
    expected = patched_logits(model, masked, task, "blocks.0.attn.hook_q", torch.zeros(()))
    rule = AblationRule.uniform("zero")
    out = masked.masked_final_logits(masks_with(model, 0, "qk"), rule, task.clean, task.answer_pos,
                                     masked.references(rule, task.clean, None, valid))
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-4 * float(expected.abs().max()))


def test_one_masked_qk_direction_removes_its_term_from_the_bilinear_form():
    """Hand case: masking direction k of head h changes the pre-rotation score by −σ_k (x̃_i·u_k)(x̃_j·v_k)."""
    from helpers.singular.directions.augmented import homogeneous, layer_svds
    from helpers.core.weights import input_hook, layer_weights

    model, masked, task, _ = setup("tiny-gpt2", n=2)  # GPT-2: no rotation, scores are the bilinear form
    layer, head, k = 1, 2, 0
    masks = FixedMasks.ones(model)
    masks.blocks[f"{layer}_qk"][head, k] = 0.0
    rule = AblationRule.uniform("zero")
    svd = layer_svds(layer_weights(model, layer))["qk"][head]
    hooks = masked.masked_hooks(masks, rule, masked.references(rule, task.clean, None, None), task.answer_pos)
    with torch.no_grad(), model.bridge.hooks(fwd_hooks=hooks):
        _, cache = model.bridge.run_with_cache(task.clean)
    _, clean_cache = model.bridge.run_with_cache(task.clean)
    x = homogeneous(clean_cache[input_hook(model, layer, "attn")][0].double())  # layer 1 input: unchanged by layer-1 masks
    term = svd.S[k] * torch.outer(x @ svd.U[:, k], x @ svd.V[:, k]) / model.d_head ** 0.5
    scores = lambda c: c[f"blocks.{layer}.attn.hook_attn_scores"][0, head].double()  # noqa: E731
    T = task.answer_pos[0] + 1
    diff = (scores(clean_cache) - scores(cache))[:T, :T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    torch.testing.assert_close(diff[causal], term[:T, :T][causal], rtol=1e-4, atol=1e-5)


def test_learnable_masks_start_at_init_and_count_every_direction():
    model = cached_model("tiny-llama", "fold_norm")
    masks = DirectionMasks(model, init=0.99)
    shapes = direction_shapes(model)
    per_layer = sum(int(torch.tensor(s).prod()) for s in shapes.values())
    assert masks.count() == model.n_layers * per_layer
    assert abs(float(masks.total()) - 0.99 * masks.count()) < 1e-3 * masks.count()


def test_transformer_lens_processing_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="fold_norm"):
        MaskedModel(load_model("tiny-gpt2", processing="transformer_lens"))


def test_trained_masks_are_saved_and_a_rerun_with_the_same_configuration_loads_them(tmp_path, monkeypatch):
    from helpers.singular.masking.training import TrainConfig, train_masks

    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    model, masked, task, _ = setup("tiny-llama", n=8)
    rule = AblationRule.uniform("corrupted")
    config = TrainConfig(steps=3, batch=4, log_every=1)
    first, history = train_masks(masked, task, rule, config, progress=False)
    assert len(list((tmp_path / "masks").glob("*.pt"))) == 1 and len(history) == 3
    again, history_again = train_masks(masked, task, rule, config, progress=False)
    for name in first.logits:
        assert torch.equal(first.logits[name], again.logits[name])
    assert history_again.equals(history)
    train_masks(masked, task, rule, TrainConfig(steps=3, batch=4, log_every=1, seed=1), progress=False)
    assert len(list((tmp_path / "masks").glob("*.pt"))) == 2  # another configuration, another file
    hooked = MaskedModel(model, factored_mlp=False)
    train_masks(hooked, task, rule, config, progress=False)
    assert len(list((tmp_path / "masks").glob("*.pt"))) == 3  # maps computed another way, another file


def test_hard_concrete_masks_at_init_are_exactly_one_in_eval_mode_and_keep_the_logits():
    model, masked, task, valid = setup("tiny-llama")
    masks = DirectionMasks(model, init=0.99, parametrisation="hard_concrete")
    assert not masks.training  # masks start in eval mode: deterministic values
    assert all(bool((masks.values(l, k) == 1.0).all()) for l in range(model.n_layers) for k in masks.shapes)
    rule = AblationRule.uniform("corrupted")
    refs = masked.references(rule, task.clean, task.corrupted, valid)
    with torch.no_grad():
        full = model.bridge(task.clean)[torch.arange(len(task)), task.answer_pos]
        out = masked.masked_final_logits(masks, rule, task.clean, task.answer_pos, refs)
    torch.testing.assert_close(out, full, rtol=1e-4, atol=1e-4 * float(full.abs().max()))


def test_hard_concrete_eval_values_and_sample_probabilities_by_hand():
    import math

    model = cached_model("tiny-llama", "fold_norm")
    masks = DirectionMasks(model, parametrisation="hard_concrete")
    block = "0_mlp_up"
    logits = torch.tensor([-3.0, -0.2, 0.0, 0.4, 3.0]).repeat(masks.logits[block].numel() // 5 + 1)[: masks.logits[block].numel()]
    with torch.no_grad():
        masks.logits[block].copy_(logits)
    by_hand = [min(max(1.2 / (1 + math.exp(-x)) - 0.1, 0.0), 1.0) for x in logits[:5].tolist()]
    torch.testing.assert_close(masks.values(0, "mlp_up")[:5], torch.tensor(by_hand))
    assert FixedMasks.binarised(masks).blocks[block][:5].tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]
    # training mode: stretched binary-concrete samples; P(m = 0) = sigmoid(-β log 11 - log α), P(m = 1) = sigmoid(log α - β log 11)
    masks.train()
    with torch.no_grad():
        masks.logits[block].fill_(0.4)
        samples = torch.stack([masks.values(0, "mlp_up") for _ in range(2000)])
    beta = 2 / 3
    assert 0.0 <= float(samples.min()) and float(samples.max()) <= 1.0
    p_zero, p_one = 1 / (1 + math.exp(beta * math.log(11) + 0.4)), 1 / (1 + math.exp(beta * math.log(11) - 0.4))
    assert abs(float((samples == 0).double().mean()) - p_zero) < 0.01
    assert abs(float((samples == 1).double().mean()) - p_one) < 0.01
    nonzero_block = float((samples != 0).double().mean()) * masks.logits[block].numel()
    others = sum(float(torch.sigmoid(p.detach() + beta * math.log(11)).sum()) for n, p in masks.logits.items() if n != block)
    assert abs(float(masks.total()) - others - nonzero_block) < 0.01 * masks.logits[block].numel()


def test_parametrisation_and_init_are_checked():
    model = cached_model("tiny-llama", "fold_norm")
    with pytest.raises(ValueError, match="hard_concrete"):
        DirectionMasks(model, parametrisation="l0")
    with pytest.raises(ValueError, match="0.99"):
        DirectionMasks(model, init=1.0)


def test_hard_concrete_training_is_seeded_cached_apart_and_ends_in_eval_mode(tmp_path, monkeypatch):
    from helpers.singular.masking.training import TrainConfig, train_masks

    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    model, masked, task, _ = setup("tiny-llama", n=8)
    rule = AblationRule.uniform("corrupted")
    config = TrainConfig(steps=3, batch=4, log_every=1, parametrisation="hard_concrete")
    first, _ = train_masks(masked, task, rule, config, progress=False, use_cache=False)
    again, _ = train_masks(masked, task, rule, config, progress=False, use_cache=False)
    assert not first.training
    for name in first.logits:
        assert torch.equal(first.logits[name], again.logits[name])  # noise and batches come from the seed
    train_masks(masked, task, rule, config, progress=False)
    train_masks(masked, task, rule, TrainConfig(steps=3, batch=4, log_every=1), progress=False)
    assert len(list((tmp_path / "masks").glob("*.pt"))) == 2  # the parametrisation is part of the key


def soft_masks(model, seed: int, layers=None) -> FixedMasks:
    """Masks drawn uniformly in (0, 1) on ``layers`` (all by default), ones elsewhere."""
    generator = torch.Generator().manual_seed(seed)
    masks = FixedMasks.ones(model)
    for name, block in masks.blocks.items():
        if layers is None or int(name.split("_", 1)[0]) in layers:
            masks.blocks[name] = torch.rand(block.shape, generator=generator)
    return masks


@pytest.mark.parametrize("name", TINY_MODELS)
@pytest.mark.parametrize("reference", ["zero", "mean", "corrupted"])
def test_answer_position_masks_in_the_last_layer_equal_masks_at_every_position(name, reference):
    """In the last layer, what OV and MLP write at other positions never reaches the answer position's logits:
    soft masks there give the same logits whether they act at the answer position or at all positions."""
    model, masked, task, valid = setup(name)
    masks = soft_masks(model, seed=3, layers={model.n_layers - 1})
    for kind in ("qk",):  # QK of the last layer reads every position's query: keep it out of this comparison
        masks.blocks[f"{model.n_layers - 1}_{kind}"] = torch.ones(masks.blocks[f"{model.n_layers - 1}_{kind}"].shape)
    logits = {}
    for positions in ("answer", "all"):
        rule = AblationRule.uniform(reference, positions)
        refs = masked.references(rule, task.clean, task.corrupted, valid)
        with torch.no_grad():
            logits[positions] = masked.masked_final_logits(masks, rule, task.clean, task.answer_pos, refs)
    assert not torch.allclose(logits["all"], masked.final_logits(task.clean, task.answer_pos), atol=1e-3)  # masks act
    torch.testing.assert_close(logits["answer"], logits["all"], rtol=1e-5, atol=1e-5 * float(logits["all"].abs().max()))


def dense_answer_hooks(masked, masks, rule, references, answer_pos, n_pos):
    """Oracle: every coefficient at every position, the change (m − 1)(a − a_ref) multiplied by 1 at each
    prompt's answer position and 0 elsewhere (for the rule's ``answer`` kinds)."""
    at_answer = torch.zeros(len(answer_pos), n_pos)
    at_answer[torch.arange(len(answer_pos)), answer_pos] = 1.0
    hooks = []
    for layer, b in enumerate(masked.bases):
        for kind in masked._kinds(layer):
            where = at_answer if rule.positions[kind] == "answer" else torch.ones(at_answer.shape)
            mask, ref = masks.values(layer, kind), references[layer][kind]

            def delta(a, mask=mask, ref=ref, where=where):
                d = (mask - 1) * (a if ref is None else a - ref)
                return d * where.reshape(*where.shape, *([1] * (d.ndim - 2)))
            if kind == "ov":
                state = {}

                def on_z(z, hook, layer=layer, b=b, delta=delta, state=state):
                    a = torch.einsum("nphe,her->nphr", z, b.ov_from_z) + b.ov_bias
                    state["change"] = torch.einsum("nphr,hdr->npd", delta(a), b.ov_V)
                    return z
                hooks += [(f"blocks.{layer}.attn.hook_z", on_z),
                          (f"blocks.{layer}.attn.o.hook_out", lambda out, hook, state=state: out + state.pop("change"))]
            elif kind == "qk":
                hooks.append((f"blocks.{layer}.attn.hook_q", lambda q, hook, b=b, delta=delta: q + torch.einsum(
                    "nphf,hfe->nphe", delta(torch.einsum("nphe,hef->nphf", q, b.qk_A_inv)), b.qk_A)))
            else:
                V = b.mlp[kind]
                hooks.append((f"blocks.{layer}.{COEFFICIENT_HOOKS[kind]}",
                              lambda p, hook, V=V, delta=delta: p + delta(p @ V) @ V.T))
    return hooks


def assert_masks_match_the_hook_oracle(name, rule):
    """Soft masks at every layer: logits and the gradient of a loss into the masks from ``masked_final_logits``
    match ``dense_answer_hooks``, which computes every coefficient at every position through hooks (the model
    computes each map itself) and zeroes the change away from the answer for the rule's ``answer`` kinds."""
    model, masked, task, valid = setup(name)
    refs = masked.references(rule, task.clean, task.corrupted, valid)
    results = {}
    for path in ("helpers", "oracle"):
        logits_of = {n: torch.nn.Parameter(torch.logit(v.clamp(0.02, 0.98)))
                     for n, v in soft_masks(model, seed=5).blocks.items()}
        masks = FixedMasks({n: torch.sigmoid(p) for n, p in logits_of.items()})
        if path == "helpers":
            logits = masked.masked_final_logits(masks, rule, task.clean, task.answer_pos, refs)
        else:
            hooks = dense_answer_hooks(masked, masks, rule, refs, task.answer_pos, task.clean.shape[1])
            logits = masked.final_logits(task.clean, task.answer_pos, hooks)
        logits.logsumexp(-1).sum().backward()
        results[path] = (logits.detach(), {n: p.grad for n, p in logits_of.items()})
    (logits, grads), (expected, expected_grads) = results["helpers"], results["oracle"]
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5 * float(expected.abs().max()))
    for n in grads:
        torch.testing.assert_close(grads[n], expected_grads[n], rtol=1e-4, atol=1e-6, msg=n)
    assert any(float(g.abs().max()) > 0 for g in grads.values())


@pytest.mark.parametrize("name", TINY_MODELS)
@pytest.mark.parametrize("rule", [AblationRule.uniform("corrupted", "answer"), AblationRule.uniform("mean", "answer"),
                                  AblationRule.paper()], ids=["corrupted@answer", "mean@answer", "paper"])
def test_answer_position_masks_equal_the_change_at_every_position_times_an_indicator(name, rule):
    assert_masks_match_the_hook_oracle(name, rule)


ALL_POSITIONS = [AblationRule.uniform(reference, "all") for reference in ("zero", "mean", "corrupted")]


@pytest.mark.parametrize("name", TINY_MODELS)
@pytest.mark.parametrize("rule", ALL_POSITIONS, ids=[rule.name for rule in ALL_POSITIONS])
def test_factored_mlp_maps_equal_the_maps_masked_through_hooks(name, rule):
    """MLP maps masked at every position are computed from their factors (a = x (W V) + b V, then
    (a + (m − 1)(a − a_ref)) Vᵀ); the oracle lets the model compute p = x W + b and adds the change through hooks."""
    _, masked, _, _ = setup(name)
    every_mlp_map = [(layer, kind) for layer, b in enumerate(masked.bases) for kind in b.mlp]
    assert masked.factored_kinds(rule) == every_mlp_map  # the path under test is the one taken
    assert_masks_match_the_hook_oracle(name, rule)


@pytest.mark.parametrize("name", TINY_MODELS)
def test_maps_are_factored_only_where_masked_at_every_position_and_only_when_asked(name):
    model, masked, _, _ = setup(name)
    assert masked.maps == "factored" and masked.factored_kinds(AblationRule.paper()) == []  # MLP at the answer only
    hooked = MaskedModel(model, factored_mlp=False)
    assert hooked.maps == "hooks" and hooked.factored_kinds(AblationRule.uniform("corrupted")) == []


def test_factored_maps_are_put_back_after_a_masked_run_even_one_that_fails():
    """Outside ``masked_final_logits`` the model is its own again: no masked map stays in place. (A model of its
    own: the cached one is shared with the other tests, whose runs must not decide this.)"""
    model = load_model("tiny-gpt2", processing="fold_norm")
    masked = MaskedModel(model)
    task = ioi_task(model, 6, seed=1)
    valid = torch.arange(task.clean.shape[1])[None] <= task.answer_pos[:, None]
    plain = masked.final_logits(task.clean, task.answer_pos)
    rule = AblationRule.uniform("zero")
    refs = masked.references(rule, task.clean, task.corrupted, valid)
    zero_mlp = FixedMasks.ones(model)
    for layer, b in enumerate(masked.bases):
        for kind in b.mlp:
            zero_mlp.blocks[f"{layer}_{kind}"] = torch.zeros(zero_mlp.blocks[f"{layer}_{kind}"].shape)
    masked_out = masked.masked_final_logits(zero_mlp, rule, task.clean, task.answer_pos, refs)
    assert not torch.allclose(masked_out, plain, atol=1e-3)
    torch.testing.assert_close(masked.final_logits(task.clean, task.answer_pos), plain, rtol=0, atol=0)
    assert not any("forward" in vars(module) for module in model.bridge.modules())

    def failing(value, hook):
        raise RuntimeError("a hook failed")
    with pytest.raises(RuntimeError, match="a hook failed"):
        with masked._factored(zero_mlp, refs, masked.factored_kinds(rule)):
            masked.final_logits(task.clean, task.answer_pos, [("blocks.0.hook_resid_pre", failing)])
    torch.testing.assert_close(masked.final_logits(task.clean, task.answer_pos), plain, rtol=0, atol=0)
    assert not any("forward" in vars(module) for module in model.bridge.modules())
