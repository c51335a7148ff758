"""Devices: resolving ``auto``, refusing what is not there, pinning full-precision numerics, recording them,
and keeping results of one device apart from another's (helpers.core.device)."""
import hashlib
import json
from dataclasses import asdict

import pytest
import torch

from helpers.core import device as devices
from helpers.core.device import DeviceUnavailableError, check_full_precision, configure, numerics, resolve_device
from tests.conftest import cached_model

CUDA_RECORD = dict(device="cuda", accelerator="NVIDIA H200", capability="9.0", torch="2.13.0+cu130", cuda="13.0",
                   matmul_precision="highest", cuda_matmul_tf32=False, cudnn_tf32=False, deterministic=True,
                   threads=16, dtype="float32", linalg_device="cpu", attention="eager")


def no_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def one_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)


def test_auto_is_the_gpu_where_there_is_one_and_the_cpu_elsewhere(monkeypatch):
    no_gpu(monkeypatch)
    assert resolve_device("auto") == "cpu"
    one_gpu(monkeypatch)
    assert resolve_device("auto") == "cuda" and resolve_device("cuda:0") == "cuda:0"
    assert resolve_device("cpu") == "cpu"  # asked for the CPU: the CPU, GPU or not


def test_cuda_without_a_gpu_is_an_error_naming_the_fix_never_a_fallback(monkeypatch):
    no_gpu(monkeypatch)
    with pytest.raises(DeviceUnavailableError, match=r"device='cuda'.*no CUDA GPU.*device='auto'.*device='cpu'"):
        resolve_device("cuda")
    one_gpu(monkeypatch)
    with pytest.raises(DeviceUnavailableError, match=r"'cuda:1'.*1 CUDA device"):
        resolve_device("cuda:1")


def test_mps_is_refused_with_its_reason_and_a_typo_with_the_choices():
    with pytest.raises(DeviceUnavailableError, match=r"MPS.*inverted IOI.*device='cpu'"):
        resolve_device("mps")
    with pytest.raises(ValueError, match=r"device='gpu' is not one of \('auto', 'cpu', 'cuda'\)"):
        resolve_device("gpu")


def test_reduced_precision_products_are_refused_until_configure_turns_them_off():
    configure("cpu")
    check_full_precision()
    try:
        torch.set_float32_matmul_precision("high")
        with pytest.raises(RuntimeError, match=r"'high'.*full float32"):
            check_full_precision()
        configure("cpu")  # pins them off again
        assert torch.get_float32_matmul_precision() == "highest"
    finally:
        torch.set_float32_matmul_precision("highest")


def test_configure_leaves_the_cpus_deterministic_setting_as_it_was():
    """On the CPU nothing but the precision is pinned, so CPU numbers cannot move."""
    before = torch.are_deterministic_algorithms_enabled()
    configure("cpu")
    assert torch.are_deterministic_algorithms_enabled() == before


def test_the_numerics_record_of_the_cpu():
    record = numerics("cpu")
    assert record["device"] == "cpu" and record["accelerator"] is None and record["torch"] == torch.__version__
    assert record["threads"] == torch.get_num_threads() and record["matmul_precision"] == "highest"
    assert record["linalg_device"] == "cpu" and record["dtype"] == "float32"


def test_cache_keys_gain_the_numerics_off_the_cpu_only(monkeypatch):
    assert devices.off_cpu_key("cpu") == {}
    monkeypatch.setattr(devices, "numerics", lambda device: CUDA_RECORD)
    key = devices.off_cpu_key("cuda")["numerics"]
    assert key["device"] == "cuda" and key["accelerator"] == "NVIDIA H200" and key["cuda"] == "13.0"
    assert "threads" not in key  # the thread count enters the key through its own field


def test_a_cpu_mask_key_is_the_one_masks_always_had_and_a_gpu_key_differs(monkeypatch):
    """The key of a CPU training is the digest of the record it always was (so the masks cached before
    devices were recorded stay valid); a training on a GPU gets another key."""
    from helpers.singular.masking import training
    from helpers.singular.masking.masks import AblationRule
    from helpers.singular.tasks import ioi_task

    model = cached_model("tiny-llama", "fold_norm")
    task, rule, config = ioi_task(model, 4, seed=0), AblationRule.uniform(), training.TrainConfig(steps=2)
    settings = asdict(config)
    del settings["parametrisation"]
    record = dict(format=training.MASK_FORMAT, model=model.record(), task=task.name, prompts=task.prompts,
                  rule=rule.record(), config=settings, torch_threads=torch.get_num_threads(), maps="factored")
    expected = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]
    assert training.training_key(model, task, rule, config, "factored") == expected
    monkeypatch.setattr(training, "off_cpu_key", lambda device: {"numerics": {"device": "cuda"}})
    assert training.training_key(model, task, rule, config, "factored") != expected


def test_saved_tensors_come_back_on_the_cpu_whatever_they_were_saved_from(tmp_path):
    from helpers.core.cache import load_verified, on_cpu, save_verified

    value = torch.arange(4.0, device="cpu")
    same = on_cpu({"a": [value, (value,)], "b": 3})
    assert same["a"][0] is value and same["a"][1][0] is value and same["b"] == 3  # CPU tensors: the same objects
    save_verified({"state": {"x": value}}, tmp_path / "m.pt")
    loaded = load_verified(tmp_path / "m.pt")
    assert loaded["state"]["x"].device.type == "cpu" and torch.equal(loaded["state"]["x"], value)


# --- the device contract of the public entry points: what the model is on, they compute on ---------------

def test_a_loaded_model_its_tokens_and_its_tasks_are_on_its_device(device):
    from helpers.singular.tasks import make_task

    model = cached_model("tiny-llama", "fold_norm", device)
    assert model.device.type == device and model.numerics()["device"] == device
    assert model.to_tokens(["a b c"]).device.type == device
    task = make_task("ioi", model, 4).to(model.device)
    assert {t.device.type for t in (task.clean, task.corrupted, task.answer_pos, task.correct)} == {device}
    assert task.subset([0, 2]).clean.device.type == device


def test_masks_training_and_evaluation_follow_the_models_device(device, tmp_path, monkeypatch):
    from helpers.core.cache import CACHE_ENV
    from helpers.singular.masking.circuits import CircuitEvaluator, evaluate_circuit
    from helpers.singular.masking.masks import AblationRule, FixedMasks, MaskedModel
    from helpers.singular.tasks import ioi_task
    from helpers.singular.masking.training import TrainConfig, train_masks

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    model = cached_model("tiny-llama", "fold_norm", device)
    masked, rule = MaskedModel(model), AblationRule.uniform()
    train, held_out = ioi_task(model, 8, seed=0).split(0.5, seed=0)  # built on the CPU: the helpers move them
    masks, history = train_masks(masked, train, rule, TrainConfig(steps=2, batch=2), progress=False)
    assert {p.device.type for p in masks.parameters()} == {device} and len(history) == 2
    row = evaluate_circuit(CircuitEvaluator(masked, held_out, rule), FixedMasks.binarised(masks), control_seeds=1)
    assert row["kl"] >= 0 and row["random_kl"] >= 0
    cpu_masks = FixedMasks({k: v.cpu() for k, v in FixedMasks.ones(model).blocks.items()})  # e.g. from a file
    assert CircuitEvaluator(masked, held_out, rule).evaluate(cpu_masks)["kl"] == pytest.approx(0.0, abs=1e-5)


def test_the_corpus_pass_and_the_steer_follow_the_models_device(device):
    from helpers.tiled.corpus import TokenSample
    from helpers.tiled.plans import build_plans
    from helpers.tiled.sites import all_sites
    from helpers.tiled.statistics import SiteStatistics
    from helpers.tiled.steer import Steering, steer_texts
    from helpers.tiled.thresholds import load_thresholds

    model = cached_model("tiny-gemma3", "raw", device)
    generator = torch.Generator().manual_seed(0)
    sequences = [torch.randint(0, 50000, (12,), generator=generator, device="cpu") for _ in range(6)]
    positions = torch.tensor([[s, p] for s in range(6) for p in (3, 7, 11)], device="cpu")
    sample = TokenSample("synthetic", "none", sequences, positions, 0)
    thresholds = load_thresholds()
    plans = build_plans(model, all_sites(model, [1]), thresholds, widths={n: 16 for n in
                                                                          ("attn.q", "attn.k", "attn.v", "attn.o",
                                                                           "mlp.gate", "mlp.up", "mlp.down")})
    stats = SiteStatistics(model, plans)
    stats.run(sample, batch=4, progress=False)
    results = stats.results()
    assert all(v.device.type == "cpu" for r in results.values() for v in r["f"].values())
    texts = steer_texts(sample, n_texts=3)
    steering = Steering(model, texts)
    plan = next(p for p in plans if p.site.name == "attn.o" and p.effective is None)
    change = steering.changes(plan.site, plan.sets["random"].U[:, :2].T)
    assert change.device.type == device and change.shape[:2] == (2, 3)
