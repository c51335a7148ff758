"""benchmarks/tiled_svd.py's multiply-add floor, against torch's FLOP counter run over the forwards that the
plain pass and the sweep's check C really do."""
import functools
import importlib.util
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from helpers.core.logits import logits_at
from helpers.core.models import gpt2_tokenizer, load_model
from helpers.tiled.corpus import sample_tokens
from helpers.tiled.steer import Steering
from helpers.tiled.sweep import sweep
from helpers.tiled.thresholds import load_thresholds

spec = importlib.util.spec_from_file_location("tiled_svd", Path(__file__).resolve().parents[2] / "benchmarks" / "tiled_svd.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def counted_macs(run) -> float:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops() / 2


def test_forward_macs_is_what_the_flop_counter_counts_for_a_padded_forward_with_logit_rows():
    model = load_model("tiny-gemma3", processing="raw")
    tokens = torch.randint(model.config.vocab_size, (3, 7))
    with torch.no_grad():
        counted = counted_macs(lambda: logits_at(model, tokens, torch.tensor([6, 2, 4])))
    assert bench.forward_macs(model, 3, 7, model.n_layers, 3) == counted


def test_sweep_work_counts_the_multiply_adds_of_the_plain_pass_and_of_every_steered_forward(tmp_path, monkeypatch):
    monkeypatch.setenv("SVDIRS_CACHE", str(tmp_path))
    sample = sample_tokens(gpt2_tokenizer(), n_tokens=200, max_tokens=24, tokenizer_name="gpt2")
    model = load_model("tiny-gemma3", processing="raw")
    thresholds = load_thresholds()
    thresholds["C"]["bootstrap"] = 5
    counted = {"steered": 0.0, "released": 0.0}  # released_c's steers are the ones over its first texts
    init, changes = Steering.__init__, Steering.changes

    def counting(method):
        @functools.wraps(method)
        def run(*args, **kwargs):
            with FlopCounterMode(display=False) as counter:
                result = method(*args, **kwargs)
            counted["steered"] += counter.get_total_flops() / 2
            if kwargs.get("n_texts") is not None:
                counted["released"] += counter.get_total_flops() / 2
            return result
        return run
    monkeypatch.setattr(Steering, "__init__", counting(init))
    monkeypatch.setattr(Steering, "changes", counting(changes))
    with torch.no_grad():
        sweep(model, sample, thresholds, n_texts=4, progress=False)
        plain = counted_macs(lambda: bench.plain_pass_seconds(model, sample, 16))
    work = bench.sweep_work(model, sample, thresholds, None, 16, 4)
    assert work["residual_sites"] == 2 * model.n_layers
    assert work["plain"] == plain and work["steered"] == counted["steered"]
    assert 0 < work["released"] == counted["released"] < work["steered"]
