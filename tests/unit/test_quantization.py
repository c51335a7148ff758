"""Grid-step recovery on hand-made quantized weights, and the noise floor against random-matrix theory."""
import pytest
import torch

from helpers.singular.directions.quantization import grid_steps, layer_error_std, noise_floor
from tests.conftest import cached_model


def quantize(weight: torch.Tensor, bits: int, group: int = 32, generator=None):
    """Asymmetric block quantization (like GGUF Q4_1): per group, scale * q + min, q in [0, 2^bits)."""
    w = weight.reshape(-1, group)
    low, high = w.min(1, keepdim=True).values, w.max(1, keepdim=True).values
    scale = (high - low) / (2 ** bits - 1)
    q = torch.round((w - low) / scale)
    return (q * scale + low).reshape(weight.shape).float(), scale.repeat_interleave(group // 16, 1).reshape(
        *weight.shape[:-1], weight.shape[-1] // 16)


@pytest.mark.parametrize("bits", [4, 6, 8])
def test_grid_step_recovers_the_quantization_scale(bits):
    g = torch.Generator().manual_seed(bits)
    weight, scale = quantize(torch.randn(64, 128, generator=g), bits)
    steps = grid_steps(weight)
    found = steps > 0
    assert float(found.double().mean()) > 0.95
    torch.testing.assert_close(steps[found].double(), scale[found].double(), rtol=2e-3, atol=0)


def test_unquantized_weights_have_no_grid():
    weight = torch.randn(64, 128, generator=torch.Generator().manual_seed(0))
    assert float((grid_steps(weight) > 0).double().mean()) < 0.01


def test_noise_floor_matches_random_matrix_theory_on_a_quantized_tiny_model():
    model = cached_model("tiny-llama", "raw")
    block = model.hf_model.model.layers[0]
    original = block.mlp.down_proj.weight.detach().clone()
    try:
        with torch.no_grad():
            quantized, _ = quantize(original, 4, group=16)
            block.mlp.down_proj.weight.copy_(quantized)
        std = layer_error_std(model, 0)["mlp.down_proj.weight"]
        floor = float(noise_floor(model, 0)["mlp_out"])
        d_out, d_in = original.shape  # W_out is [d_mlp + 1, d_model] in the augmented convention
        expected = float(std.pow(2).mean().sqrt()) * ((d_in + 1) ** 0.5 + d_out ** 0.5)
        assert 0.6 * expected < floor < 1.2 * expected
        assert float(noise_floor(model, 0)["qk"].max()) < 1e-12  # unquantized weights: no floor
    finally:
        with torch.no_grad():
            block.mlp.down_proj.weight.copy_(original)


