"""Paper 2's sites: the seven linear maps of every layer (docs/methods.md §2.1), for every architecture.

A site is one map y = W x (+ b) with W [d_out, d_in] (the ``nn.Linear`` convention; paper 2 tiles the
columns, i.e. the input dimensions). Its output ΔH is read at the bridge's hook after the map: for the
residual sites (``attn.o``, ``mlp.down``) that is before any post-sublayer norm. Steering (check C) adds
after that norm, where the residual stream receives the write: ``ln1_post`` / ``ln2_post`` for Gemma, the
map's own output where there is no post norm.

Negative controls change the weights in place: ``randomise_weights`` (every parameter re-drawn from the
architecture's initialiser, seeded) and ``permute_site_columns`` (each site's input columns shuffled);
``control_model`` loads a registry model fresh with one of them applied (paper 2's controls; paper 1's
circuits are checked against the same ones in notebook 07).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


SITES = ("attn.q", "attn.k", "attn.v", "attn.o", "mlp.gate", "mlp.up", "mlp.down")
RESIDUAL_SITES = ("attn.o", "mlp.down")
SEARCH_WIDTHS = {"mlp.down": (512,), "attn.o": (512,), "mlp.gate": (512,), "mlp.up": (512, 256, 128, 64),
                 "attn.q": (128, 64), "attn.k": (256,), "attn.v": (256, 128, 64)}
"""Paper 2's tile widths (Gemma-2-2B's) and the fallback widths its runner tried in order, per site."""
PAPER_WIDTHS = {name: widths[0] for name, widths in SEARCH_WIDTHS.items()}
HOOKS = {"attn.q": "attn.q", "attn.k": "attn.k", "attn.v": "attn.v", "attn.o": "attn.o", "mlp.gate": "mlp.gate",
         "mlp.up": "mlp.in", "mlp.down": "mlp.out"}
POST_NORMS = {"attn.o": "ln1_post", "mlp.down": "ln2_post"}


@dataclass(frozen=True)
class Site:
    layer: int
    name: str

    @property
    def output_hook(self) -> str:
        return f"blocks.{self.layer}.{HOOKS[self.name]}.hook_out"

    @property
    def input_hook(self) -> str:
        return f"blocks.{self.layer}.{HOOKS[self.name]}.hook_in"

    @property
    def residual(self) -> bool:
        return self.name in RESIDUAL_SITES

    def __str__(self) -> str:
        return f"L{self.layer} {self.name}"


def check_layers(model, layers) -> list[int]:
    """The layers asked for, refused unless each is an integer in [0, n_layers) and none repeats."""
    if not isinstance(layers, (list, tuple, range)):
        raise ValueError(f"layers={layers!r}: expected a list of layer indices (0 to {model.n_layers - 1}), "
                         f"or None for every layer")
    layers = list(layers)
    bad = [layer for layer in layers if isinstance(layer, bool) or not isinstance(layer, int)
           or not 0 <= layer < model.n_layers]
    if bad:
        raise ValueError(f"layers={layers!r}: {bad} not a layer of {model.name} (integers 0 to "
                         f"{model.n_layers - 1}); pass None for every layer")
    if len(set(layers)) != len(layers):
        raise ValueError(f"layers={layers!r}: a layer is repeated")
    return layers


def all_sites(model, layers=None, names=SITES) -> list[Site]:
    layers = range(model.n_layers) if layers is None else check_layers(model, layers)
    for name in names:
        if name not in SITES:
            raise ValueError(f"site {name!r} is not one of {SITES}")
    return [Site(layer, name) for layer in layers for name in names if name != "mlp.gate" or model.arch.gated_mlp]


def site_matrix(model, site: Site, device="cpu") -> torch.Tensor:
    """W [d_out, d_in] of the site, as the checkpoint has it (float32 copy of the module's own weight), on
    ``device``: the CPU by default, where the weight-side sets are built (docs/methods.md §0). For GQA models
    ``attn.k`` and ``attn.v`` have one block of rows per key/value head."""
    module = site_module(model, site)
    weight = module.weight.detach()
    return (weight.T if transposed(module) else weight).to(device, torch.float32, copy=True).contiguous()


def site_module(model, site: Site) -> torch.nn.Module:
    """The checkpoint's own linear module of the site (unwrapped from the bridge): its weight is the model's."""
    module = _linear(model, site)
    return getattr(module, "original_component", module)


def transposed(module: torch.nn.Module) -> bool:
    """Whether the module stores W as [d_in, d_out] (GPT-2's Conv1D) rather than [d_out, d_in]."""
    return type(module).__name__ == "Conv1D"


def steer_hook(model, site: Site) -> str:
    """Where check C adds α·u: after the post-sublayer norm (Gemma), else the site's output."""
    if not site.residual:
        raise ValueError(f"{site} is not a residual site {RESIDUAL_SITES}: check C steers residual writes only")
    post = f"blocks.{site.layer}.{POST_NORMS[site.name]}.hook_out"
    return post if post in model.bridge.hook_dict else site.output_hook


def _linear(model, site: Site) -> torch.nn.Module:
    block = model.bridge.blocks[site.layer]
    part, name = HOOKS[site.name].split(".")
    return getattr(getattr(block, part), name)


def randomise_weights(model, seed: int) -> None:
    """Negative control: every parameter of the model re-drawn by its architecture's initialiser (seeded),
    on the CPU: the global generator of another device draws other numbers, so the model is moved to the
    CPU for the draw and back after it, and the control is the same model on every device."""
    device = model.device
    model.hf_model.to("cpu")
    torch.manual_seed(seed)
    with torch.no_grad():
        model.hf_model.apply(model.hf_model._init_weights)
        for module in model.hf_model.modules():  # norms: the initialiser leaves them at their defaults
            if "norm" in type(module).__name__.lower() and getattr(module, "weight", None) is not None:
                module.weight.normal_(0.0, 0.02).add_(0.0 if model.arch.gain_one_plus else 1.0)
    model.hf_model.to(device)


def permute_site_columns(model, seed: int, sites: list[Site] | None = None) -> None:
    """Negative control: each site's input columns shuffled (a fresh permutation per site, seeded)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for site in sites or all_sites(model):
            module = site_module(model, site)
            weight, stored_transposed = module.weight, transposed(module)
            n_in = weight.shape[0] if stored_transposed else weight.shape[1]
            order = torch.randperm(n_in, generator=generator, device="cpu").to(weight.device)
            weight.copy_(weight[order] if stored_transposed else weight[:, order])


CONTROLS = ("random-init", "permuted")


def control_model(name: str, control: str, processing: str = "raw", seed: int = 0, device: str = "cpu"):
    """Registry model ``name`` loaded fresh (the real model is untouched) with every weight re-drawn
    (``random-init``) or each site's input columns permuted (``permuted``), seeded. Its ``weights_source``
    names the control, so its record, and every cache key that holds the record, differ from the real
    model's; its weights digest is taken of the changed weights."""
    from helpers.core.models import load_model

    if control not in CONTROLS:
        raise ValueError(f"control={control!r} is not one of {CONTROLS}")
    model = load_model(name, processing=processing, device=device)
    (randomise_weights if control == "random-init" else permute_site_columns)(model, seed)
    model.weights_source = f"{model.weights_source}, then {control} (seed {seed})"
    model.__dict__.pop("weights_sha256", None)  # a digest taken before the change would name the real weights
    return model
