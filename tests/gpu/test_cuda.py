"""The CUDA tier: parity with the CPU on tiny models, determinism of a rerun, and records that keep the
devices apart. Deselected unless pytest runs with ``--run-gpu`` on a machine with CUDA (``make test-gpu``);
CPU-only CI reports them as deselected. Bounds: float32 forwards within 1e-5 relative of the CPU's, float64
statistics within 1e-10; everything drawn from a seed is the same number on both devices."""
import json

import pytest
import torch

from tests.conftest import cached_model

pytestmark = pytest.mark.gpu


def both(name, processing="fold_norm"):
    return cached_model(name, processing, "cpu"), cached_model(name, processing, "cuda")


def assert_close(cuda_value, cpu_value, rtol=1e-5, atol=1e-6):
    torch.testing.assert_close(cuda_value.cpu(), cpu_value, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", ["tiny-gpt2", "tiny-llama", "tiny-gemma3", "tiny-gemma2"])
def test_masked_logits_and_mask_gradients_match_the_cpu(name):
    from helpers.singular.masking.masks import AblationRule, DirectionMasks, MaskedModel
    from helpers.singular.masking.references import prepare
    from helpers.singular.tasks import ioi_task

    results = []
    for model in both(name):
        masked, rule = MaskedModel(model), AblationRule.uniform()
        task = ioi_task(model, 4, seed=0).to(model.device)
        prepared = prepare(masked, task, rule)
        masks = DirectionMasks(model, init=0.7)
        logits = masked.masked_final_logits(masks, rule, task.clean, task.answer_pos, prepared.references)
        logits.float().logsumexp(-1).sum().backward()
        results.append((logits.detach(), {k: p.grad for k, p in masks.logits.items()}))
    (cpu_logits, cpu_grads), (cuda_logits, cuda_grads) = results
    assert_close(cuda_logits, cpu_logits)
    for key in cpu_grads:
        assert_close(cuda_grads[key], cpu_grads[key], rtol=1e-4, atol=1e-6)


def test_factored_mlp_maps_equal_the_hooked_maps_on_cuda():
    from helpers.singular.masking.masks import AblationRule, DirectionMasks, MaskedModel
    from helpers.singular.masking.references import prepare
    from helpers.singular.tasks import ioi_task

    model = cached_model("tiny-llama", "fold_norm", "cuda")
    rule = AblationRule.uniform()
    task = ioi_task(model, 4, seed=0).to(model.device)
    masks = DirectionMasks(model, init=0.6)
    out = []
    for factored in (True, False):
        masked = MaskedModel(model, factored_mlp=factored)
        refs = prepare(masked, task, rule).references
        with torch.no_grad():
            out.append(masked.masked_final_logits(masks, rule, task.clean, task.answer_pos, refs))
    torch.testing.assert_close(out[0], out[1], rtol=1e-4, atol=1e-5)


def test_hard_concrete_noise_and_random_controls_are_the_same_numbers_on_both_devices():
    from helpers.singular.masking.circuits import random_like
    from helpers.singular.masking.masks import DirectionMasks, FixedMasks

    draws = []
    for model in both("tiny-llama"):
        masks = DirectionMasks(model, parametrisation="hard_concrete").train()
        masks.noise.manual_seed(3)
        draws.append((masks.values(0, "ov").detach(), random_like(FixedMasks.ones(model), seed=2).blocks["1_qk"]))
    assert_close(draws[1][0], draws[0][0], rtol=0, atol=1e-6)  # the same uniform draws, through the same transform
    assert torch.equal(draws[1][1].cpu(), draws[0][1])


def test_the_random_init_control_is_the_same_model_on_both_devices():
    from helpers.tiled.sites import control_model

    cpu, cuda = (control_model("tiny-gemma3", "random-init", seed=1, device=d) for d in ("cpu", "cuda"))
    for (name, a), (_, b) in zip(cpu.hf_model.state_dict().items(), cuda.hf_model.state_dict().items()):
        assert torch.equal(b.cpu(), a), name


def test_rank_order_on_cuda_is_the_stable_sort_the_cpu_radix_path_gives():
    from helpers.tiled.steer import rank_order

    generator = torch.Generator().manual_seed(4)
    x = torch.randn(3, 4000, dtype=torch.float64, generator=generator) * torch.logspace(-40, 30, 4000, dtype=torch.float64)
    x[..., 0:400:2], x[..., 1:400:2] = 0.0, -0.0
    x[..., 400:410], x[..., 410:420] = float("inf"), -float("inf")
    x[..., 420:430] = 1e-42
    x[..., 500:900] = x[..., 1000:1400]
    assert torch.equal(rank_order(x.cuda()).cpu(), rank_order(x))


def test_normal_solve_sends_the_nearly_singular_systems_to_the_cpu_solver():
    from helpers.tiled.statistics import normal_solve

    generator = torch.Generator().manual_seed(5)
    D = torch.randn(6, 64, 8, generator=generator, dtype=torch.float64)
    D[:3, :, -1] = D[:3, :, -2]  # repeated directions: the gelsd fallback
    b = torch.randn(6, 8, generator=generator, dtype=torch.float64)
    G = D.transpose(-1, -2) @ D
    cpu, cuda = normal_solve(G, b), normal_solve(G.cuda(), b.cuda())
    assert cuda.device.type == "cuda"
    torch.testing.assert_close((b * cuda.cpu()).sum(-1), (b * cpu).sum(-1), rtol=1e-10, atol=1e-10)


def test_the_lens_and_the_steered_change_match_the_cpu():
    from helpers.core.logits import lens
    from helpers.tiled.corpus import TokenSample
    from helpers.tiled.sites import Site
    from helpers.tiled.steer import Steering, steer_texts

    generator = torch.Generator().manual_seed(0)
    sequences = [torch.randint(0, 50000, (10,), generator=generator) for _ in range(4)]
    sample = TokenSample("synthetic", "none", sequences, torch.tensor([[s, 9] for s in range(4)]), 0)
    u = torch.randn(2, 32, generator=generator, dtype=torch.float64)
    out = []
    for model in both("tiny-gemma3", "raw"):
        texts = steer_texts(sample, n_texts=2)
        out.append((lens(model, u), Steering(model, texts).changes(Site(1, "attn.o"), u)))
    assert_close(out[1][0], out[0][0], rtol=1e-10, atol=1e-10)
    assert_close(out[1][1], out[0][1], rtol=1e-4, atol=1e-5)


def test_twenty_training_steps_twice_are_bit_identical_on_cuda(tmp_path, monkeypatch):
    from helpers.core.cache import CACHE_ENV
    from helpers.singular.masking.masks import AblationRule, MaskedModel
    from helpers.singular.tasks import ioi_task
    from helpers.singular.masking.training import TrainConfig, train_masks

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    model = cached_model("tiny-llama", "fold_norm", "cuda")
    masked, train = MaskedModel(model), ioi_task(model, 8, seed=0)
    config = TrainConfig(steps=20, batch=4, lr=0.1)
    runs = [train_masks(masked, train, AblationRule.uniform(), config, progress=False, use_cache=False)[0]
            for _ in range(2)]
    for key, p in runs[0].logits.items():
        assert torch.equal(p, runs[1].logits[key]), key


def test_masks_trained_on_cuda_get_their_own_key_and_load_on_the_cpu(tmp_path, monkeypatch):
    from helpers.core.cache import CACHE_ENV, load_verified
    from helpers.singular.masking.masks import AblationRule, MaskedModel
    from helpers.singular.tasks import ioi_task
    from helpers.singular.masking.training import TrainConfig, train_masks, training_key

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    cpu, cuda = both("tiny-llama")
    rule, config = AblationRule.uniform(), TrainConfig(steps=2, batch=2)
    train = ioi_task(cpu, 4, seed=0)
    assert training_key(cpu, train, rule, config, "factored") != training_key(cuda, train, rule, config, "factored")
    train_masks(MaskedModel(cuda), train, rule, config, progress=False)
    (saved_file,) = (tmp_path / "masks").glob("*.pt")
    saved = load_verified(saved_file)
    assert saved["record"]["numerics"]["device"] == "cuda"
    assert {v.device.type for v in saved["state"].values()} == {"cpu"}


def test_the_pipeline_fingerprint_differs_between_the_cpu_and_cuda():
    from helpers.pipeline.fingerprints import environment_record

    cpu, cuda = environment_record(2, "cpu"), environment_record(2, "cuda")
    assert json.dumps(cpu, sort_keys=True) != json.dumps(cuda, sort_keys=True)
    assert cuda["numerics"]["accelerator"] == torch.cuda.get_device_name(0)
