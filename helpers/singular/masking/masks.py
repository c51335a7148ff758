"""Masks over singular directions, applied as maps on existing hook points (docs/methods.md §1.2).

Every mask acts on the *coefficients* of an activation along the write directions of its augmented
matrix: a_k ← m_k a_k + (1 − m_k) a_k^ref, one rule for every matrix type, with

- ``reference``: ``"zero"``, ``"mean"`` (dataset mean of a_k over the prompts' real positions) or
  ``"corrupted"`` (a_k on the corrupted prompt, same position; resample ablation);
- ``positions``: ``"all"`` or ``"answer"`` (only the answer position of each prompt).

Where each mask acts:

- OV (per head): the head's output r_h = z_h W_O,h + b_O/H has coefficients a = r_h V_h; the change
  (m − 1)(a − a_ref) V_hᵀ is added to the attention output (hooks ``attn.hook_z`` and ``attn.o.hook_out``).
- MLP in (up, and gate for gated MLPs) and MLP out: the pre-activations / the MLP output p have
  coefficients a = p V; p ← p + (m − 1)(a − a_ref) Vᵀ (hooks ``mlp.in/gate/out.hook_out``). Where such a
  mask acts at every position, the map itself is replaced by its factored form: since p = x̃ W̃ lies in the
  span of V, p = a Vᵀ with a = x (W V) + b V, so the masked map is (a + (m − 1)(a − a_ref)) Vᵀ, computed
  from the map's input without p (``factored_mlp=True``, the default: about half the multiply-adds of the
  map plus its hooks; the same maths, to float rounding, as the hooks, which ``factored_mlp=False`` keeps).
- QK (per head): with W̃_Q = U A, the query's coefficients are c = q A⁻¹ (= x̃ U) and the score is
  Σ_k σ_k c_k (x̃'·v_k); the mask rewrites q ← (m ⊙ c + (1 − m) ⊙ c_ref) A on the query side (hook
  ``attn.hook_q``), which works with grouped key/value heads. With RoPE (and Gemma's q/k norms) the
  rotation and norm act after the mask: masks act on the pre-rotation bilinear form.

All masks at 1 leave the model's logits unchanged (tested). Under ``processing="transformer_lens"``
per-head OV outputs are not the model's, so masks need ``raw`` or ``fold_norm`` processing.

The paper's mixed rule (QK: zero at all positions; OV/MLP: corrupted prompt at the answer position
only) is available as ``AblationRule.paper()`` for comparison; it never ablates OV/MLP work at earlier
positions and so inflates sparsity.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from helpers.singular.directions.augmented import MATRIX_KINDS, direction_shapes, layer_svds, qk_factors
from helpers.core.forwards import forwards_replaced
from helpers.core.logits import logits_at
from helpers.core.weights import layer_weights

KINDS = MATRIX_KINDS
REFERENCES = ("zero", "mean", "corrupted")
POSITIONS = ("all", "answer")
COEFFICIENT_HOOKS = {"qk": "attn.hook_q", "ov": "attn.hook_z", "mlp_up": "mlp.in.hook_out",
                     "mlp_gate": "mlp.gate.hook_out", "mlp_out": "mlp.out.hook_out"}


@dataclass(frozen=True)
class AblationRule:
    """Reference and positions for each matrix kind (one rule for all kinds unless ``paper()``)."""

    reference: dict
    positions: dict
    name: str

    @classmethod
    def uniform(cls, reference: str = "corrupted", positions: str = "all") -> "AblationRule":
        if reference not in REFERENCES:
            raise ValueError(f"reference={reference!r} is not one of {REFERENCES}")
        if positions not in POSITIONS:
            raise ValueError(f"positions={positions!r} is not one of {POSITIONS}")
        return cls({k: reference for k in KINDS}, {k: positions for k in KINDS}, f"{reference}@{positions}")

    @classmethod
    def paper(cls) -> "AblationRule":
        """Paper 1's mixed rule, for labelled comparison only."""
        ref = {k: ("zero" if k == "qk" else "corrupted") for k in KINDS}
        pos = {k: ("all" if k == "qk" else "answer") for k in KINDS}
        return cls(ref, pos, "paper (QK zero@all, OV/MLP corrupted@answer)")

    def record(self) -> dict:
        return dict(name=self.name, reference=self.reference, positions=self.positions)


@dataclass
class LayerBases:
    """Per layer, the maps from hook values to coefficients (float32, no gradient)."""

    qk_A: torch.Tensor  # [H, dh, dh]   q = c A
    qk_A_inv: torch.Tensor  # [H, dh, dh]   c = q A⁻¹
    ov_V: torch.Tensor  # [H, d, r]     write directions of W̃_OV
    ov_from_z: torch.Tensor  # [H, dh, r]    a = z (W_O V) + (b_O/H) V
    ov_bias: torch.Tensor  # [H, r]
    mlp: dict  # kind -> V [n, r]


def layer_bases(model, layer: int) -> LayerBases:
    """The bases of one layer, computed on the CPU in float64 (docs/methods.md §0), then moved to the model's
    device in float32."""
    w = layer_weights(model, layer, device="cpu")
    svds = layer_svds(w)
    Q, _ = qk_factors(w)
    A = svds["qk"].U.transpose(1, 2) @ Q.double()  # Q̃ = U A (Q̃ lies in span U)
    V = svds["ov"].V
    from_z = w.W_O.double() @ V
    bias = torch.einsum("d,hdr->hr", w.b_O.double() / w.n_heads, V)
    on = lambda t: t.float().to(model.device)  # noqa: E731
    return LayerBases(on(A), on(torch.linalg.inv(A)), on(V), on(from_z), on(bias),
                      {k: on(svds[k].V) for k in ("mlp_gate", "mlp_up", "mlp_out") if k in svds})


PARAMETRISATIONS = ("sigmoid", "hard_concrete")
HARD_CONCRETE = dict(beta=2 / 3, gamma=-0.1, zeta=1.1)
"""Louizos, Welling & Kingma (2018)'s stretched, clamped binary concrete: temperature β, stretch (γ, ζ)."""


class DirectionMasks(torch.nn.Module):
    """A learnable mask for every singular direction of every layer, one parameter (a logit) each.

    - ``"sigmoid"`` (paper 1): m = sigmoid(logit); the L1 term is Σ m.
    - ``"hard_concrete"`` (L0; Louizos et al. 2018): while training, m is a stretched binary-concrete
      sample, exactly 0 or 1 with positive probability, and the penalty is the expected number of
      non-zero masks; in eval mode m = clamp(sigmoid(logit)(ζ − γ) + γ, 0, 1), which is 0 or 1 for all
      but the few masks near the boundary, so the trained masks and their binarisation agree.

    Either way a direction counts as kept when logit > 0 (m > 0.5 in eval mode). Masks start in eval
    mode; ``train_masks`` switches to training mode (and seeds ``noise``) for its loop only.
    """

    def __init__(self, model, init: float = 0.99, parametrisation: str = "sigmoid"):
        super().__init__()
        if parametrisation not in PARAMETRISATIONS:
            raise ValueError(f"parametrisation={parametrisation!r} is not one of {PARAMETRISATIONS}")
        if not 0.0 < init < 1.0:
            raise ValueError(f"init={init} must lie strictly between 0 and 1 (paper 1 uses 0.99)")
        self.parametrisation = parametrisation
        logit = float(torch.logit(torch.tensor(init, device="cpu")))  # float32's logit, as masks always started
        self.shapes = direction_shapes(model)
        self.n_layers = model.n_layers
        self.logits = torch.nn.ParameterDict({
            f"{layer}_{kind}": torch.nn.Parameter(torch.full(shape, logit, device=model.device))
            for layer in range(model.n_layers) for kind, shape in self.shapes.items()})
        self.noise = torch.Generator().manual_seed(0)
        self.eval()

    def values(self, layer: int, kind: str) -> torch.Tensor:
        """Mask values of one block: a fresh hard-concrete sample per call while training."""
        return self._transform(self.logits[f"{layer}_{kind}"])

    def _transform(self, logit: torch.Tensor) -> torch.Tensor:
        if self.parametrisation == "sigmoid":
            return torch.sigmoid(logit)
        beta, gamma, zeta = HARD_CONCRETE["beta"], HARD_CONCRETE["gamma"], HARD_CONCRETE["zeta"]
        if self.training:
            # drawn on the CPU (the generator's), then moved: the same noise on every device
            u = torch.rand(logit.shape, generator=self.noise, device="cpu").to(logit.device).clamp(1e-6, 1 - 1e-6)
            s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + logit) / beta)
        else:
            s = torch.sigmoid(logit)
        return (s * (zeta - gamma) + gamma).clamp(0.0, 1.0)

    def total(self) -> torch.Tensor:
        """The sparsity term: Σ m (sigmoid) or the expected number of non-zero masks (hard concrete)."""
        if self.parametrisation == "sigmoid":
            return sum(torch.sigmoid(p).sum() for p in self.logits.values())
        shift = HARD_CONCRETE["beta"] * torch.log(torch.tensor(-HARD_CONCRETE["gamma"] / HARD_CONCRETE["zeta"], device="cpu"))
        return sum(torch.sigmoid(p - shift).sum() for p in self.logits.values())

    def eval_values(self) -> dict[str, torch.Tensor]:
        """Deterministic (eval-mode) mask values of every block, detached."""
        with torch.no_grad():
            training = self.training
            self.eval()
            out = {name: self._transform(p).detach() for name, p in self.logits.items()}
            self.train(training)
        return out

    def n_kept(self) -> int:
        """Directions kept by the trained masks themselves (logit > 0)."""
        return sum(int((p > 0).sum()) for p in self.logits.values())

    def count(self) -> int:
        return sum(p.numel() for p in self.logits.values())


class FixedMasks:
    """Masks given as tensors (binarised, random, all ones): same interface as ``DirectionMasks``.
    ``blocks`` maps "<layer>_<kind>" to that block's mask values."""

    def __init__(self, values: dict[str, torch.Tensor]):
        self.blocks = values

    def values(self, layer: int, kind: str) -> torch.Tensor:
        return self.blocks[f"{layer}_{kind}"]

    def count(self) -> int:
        return sum(v.numel() for v in self.blocks.values())

    def to(self, device) -> "FixedMasks":
        """The same masks on ``device``."""
        return FixedMasks({name: v.to(device) for name, v in self.blocks.items()})

    @classmethod
    def ones(cls, model) -> "FixedMasks":
        return cls({f"{layer}_{kind}": torch.ones(shape, device=model.device) for layer in range(model.n_layers)
                    for kind, shape in direction_shapes(model).items()})

    @classmethod
    def binarised(cls, masks: DirectionMasks, threshold: float = 0.5) -> "FixedMasks":
        """Kept = eval-mode mask value > ``threshold``; at 0.5 this is the trained masks' own circuit."""
        return cls({name: (v > threshold).float() for name, v in masks.eval_values().items()})

    @classmethod
    def at_least(cls, masks: DirectionMasks, threshold: float) -> "FixedMasks":
        """Kept = eval-mode mask value ≥ ``threshold`` (paper 1's "active" rule, at 1e-3)."""
        return cls({name: (v >= threshold).float() for name, v in masks.eval_values().items()})

    @classmethod
    def soft(cls, masks: DirectionMasks) -> "FixedMasks":
        """The trained masks' own eval-mode values, not binarised (paper 1 evaluates these)."""
        return cls(masks.eval_values())


class MaskedModel:
    """Runs a loaded model with direction masks applied through hooks (and, with ``factored_mlp``, MLP maps
    masked at every position replaced by their factored form; module docstring)."""

    def __init__(self, model, factored_mlp: bool = True):
        if model.processing == "transformer_lens":
            raise ValueError("masks need processing='fold_norm' or 'raw': under 'transformer_lens' per-head OV outputs "
                             "are not the model's own (value biases moved into b_O)")
        self.model = model
        self.bases = [layer_bases(model, layer) for layer in range(model.n_layers)]
        self.factored_mlp = factored_mlp
        self._from_input = {}  # (layer, kind) -> (module, P, c): a = x P + c, built on first use

    @property
    def maps(self) -> str:
        """How masked MLP maps are computed: "factored" or "hooks" (part of a trained mask's cache key)."""
        return "factored" if self.factored_mlp else "hooks"

    # --- plain runs ---------------------------------------------------------------------------------------

    def final_logits(self, tokens: torch.Tensor, answer_pos: torch.Tensor, fwd_hooks=()) -> torch.Tensor:
        """[n, vocab] logits at the answer positions only (``helpers.core.logits.logits_at``)."""
        return logits_at(self.model, tokens, answer_pos, fwd_hooks)

    def coefficients(self, tokens: torch.Tensor, kinds=KINDS) -> list[dict[str, torch.Tensor]]:
        """Per layer, the coefficients a of each of ``kinds`` at every position ([n, T, (H,) r]), unmasked."""
        store = [dict() for _ in self.bases]
        hooks = []
        for layer in range(len(self.bases)):
            for kind, name in COEFFICIENT_HOOKS.items():
                if kind not in kinds or (kind.startswith("mlp") and kind not in self.bases[layer].mlp):
                    continue
                hooks.append((f"blocks.{layer}.{name}", self._recorder(store, layer, kind)))
        with torch.no_grad(), self.model.bridge.hooks(fwd_hooks=hooks):
            self.model.body(input_ids=tokens.to(self.model.device))
        return store

    def _recorder(self, store, layer, kind):
        def hook(value, hook):
            store[layer][kind] = self._coefficients(layer, kind, value)
            return value
        return hook

    def _coefficients(self, layer: int, kind: str, value: torch.Tensor) -> torch.Tensor:
        b = self.bases[layer]
        if kind == "qk":
            return torch.einsum("nphe,hef->nphf", value, b.qk_A_inv)
        if kind == "ov":
            return torch.einsum("nphe,her->nphr", value, b.ov_from_z) + b.ov_bias
        return value @ b.mlp[kind]

    # --- masked runs --------------------------------------------------------------------------------------

    def references(self, rule: AblationRule, tokens: torch.Tensor, corrupted: torch.Tensor | None,
                   valid: torch.Tensor) -> list[dict[str, torch.Tensor]]:
        """Reference coefficients per layer and kind, broadcastable to [n, T, (H,) r]."""
        needs = set(rule.reference.values())
        clean = self.coefficients(tokens) if "mean" in needs else None
        corrupt = self.coefficients(corrupted) if "corrupted" in needs else None
        if "corrupted" in needs and corrupted is None:
            raise ValueError("the 'corrupted' reference needs corrupted prompts")
        out = []
        for layer in range(len(self.bases)):
            refs = {}
            for kind in self._kinds(layer):
                ref = rule.reference[kind]
                if ref == "corrupted":
                    refs[kind] = corrupt[layer][kind]
                elif ref == "mean":
                    a = clean[layer][kind]
                    weights = valid.reshape(*valid.shape, *([1] * (a.ndim - 2))).to(a.dtype)
                    refs[kind] = (a * weights).sum((0, 1)) / weights.sum()
                else:
                    refs[kind] = None
            out.append(refs)
        return out

    def _kinds(self, layer: int):
        return ["qk", "ov", *self.bases[layer].mlp]

    def masked_hooks(self, masks, rule: AblationRule, references, answer_pos: torch.Tensor, skip=()):
        """Forward hooks that apply ``masks`` under ``rule`` (except to the (layer, kind) pairs in ``skip``).
        A kind masked at the answer position only has its coefficients computed there and nowhere else (its
        change is zero at every other position)."""
        at_answer = (torch.arange(answer_pos.shape[0], device=answer_pos.device), answer_pos)
        hooks = []
        for layer in range(len(self.bases)):
            for kind in self._kinds(layer):
                if (layer, kind) in skip:
                    continue
                where = at_answer if rule.positions[kind] == "answer" else None
                mask = masks.values(layer, kind)
                ref = references[layer][kind]
                if where is not None and ref is not None and ref.ndim >= 3:  # per prompt and position: [n, 1, ...]
                    ref = ref[where][:, None]
                if kind == "ov":
                    hooks += self._ov_hooks(layer, mask, ref, where)
                else:
                    hooks.append((f"blocks.{layer}.{COEFFICIENT_HOOKS[kind]}",
                                  self._coefficient_hook(layer, kind, mask, ref, where)))
        return hooks

    @staticmethod
    def _delta(a, mask, ref):
        """(m − 1)(a − a_ref)."""
        return (mask - 1) * (a if ref is None else a - ref)

    @staticmethod
    def _at(value, where):
        """[n, T, ...] value at every position (``where`` None), or [n, 1, ...] at the (rows, positions) ``where``."""
        return value if where is None else value[where][:, None]

    @staticmethod
    def _add_at(value, change, where):
        """value + change (shaped like ``_at(value, where)``), at every position or at ``where`` only."""
        if where is None:
            return value + change
        return value.index_put(where, value[where] + change[:, 0])

    def _coefficient_hook(self, layer, kind, mask, ref, where):
        b = self.bases[layer]

        def hook(value, hook):
            a = self._coefficients(layer, kind, self._at(value, where))
            delta = self._delta(a, mask, ref)
            if kind == "qk":  # q = c A, so a change of the coefficients changes q by Δc A
                change = torch.einsum("nphf,hfe->nphe", delta, b.qk_A)
            else:
                change = delta @ b.mlp[kind].T
            return self._add_at(value, change, where)
        return hook

    def _ov_hooks(self, layer, mask, ref, where):
        b = self.bases[layer]
        state = {}

        def on_z(z, hook):
            a = self._coefficients(layer, "ov", self._at(z, where))
            state["change"] = torch.einsum("nphr,hdr->npd", self._delta(a, mask, ref), b.ov_V)
            return z

        def on_output(out, hook):
            return self._add_at(out, state.pop("change"), where)
        return [(f"blocks.{layer}.attn.hook_z", on_z), (f"blocks.{layer}.attn.o.hook_out", on_output)]

    # --- factored MLP maps ---------------------------------------------------------------------------------

    def factored_kinds(self, rule: AblationRule) -> list[tuple[int, str]]:
        """(layer, kind) of the MLP maps computed in factored form under ``rule``: those masked at every
        position, when ``factored_mlp`` is on and the map is a linear module of known layout."""
        if not self.factored_mlp:
            return []
        return [(layer, kind) for layer, b in enumerate(self.bases) for kind in b.mlp
                if rule.positions[kind] == "all" and self._linear(layer, kind) is not None]

    def _linear(self, layer: int, kind: str):
        """The module the bridge's MLP component of ``kind`` wraps, and its weight as [in, out], or None."""
        component = self.model.bridge.get_submodule(f"blocks.{layer}.{COEFFICIENT_HOOKS[kind].removesuffix('.hook_out')}")
        module = getattr(component, "original_component", None)
        if isinstance(module, torch.nn.Linear):
            return module, module.weight.T
        if type(module).__name__ == "Conv1D":  # GPT-2's HF layout: y = x W + b with W [in, out]
            return module, module.weight
        return None

    def _input_map(self, layer: int, kind: str) -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
        """(module, P [in, r], c [r]): the map's module, and a = x P + c the coefficients of its output for
        its input x. Built on first use, then kept."""
        if (layer, kind) not in self._from_input:
            module, weight = self._linear(layer, kind)
            V = self.bases[layer].mlp[kind].double()
            bias = module.bias if module.bias is not None else weight.new_zeros(weight.shape[1])
            self._from_input[layer, kind] = (module, (weight.detach().double() @ V).float(),
                                             (bias.detach().double() @ V).float())
        return self._from_input[layer, kind]

    def _factored(self, masks, references, pairs):
        """A context in which each map of ``pairs`` computes (a + (m − 1)(a − a_ref)) Vᵀ from its input."""
        replacements = {}
        for layer, kind in pairs:
            module, P, c = self._input_map(layer, kind)
            V, mask, ref = self.bases[layer].mlp[kind], masks.values(layer, kind), references[layer][kind]

            def forward(x, P=P, c=c, V=V, mask=mask, ref=ref):
                a = x @ P + c
                return (a + self._delta(a, mask, ref)) @ V.T
            replacements[module] = forward
        return forwards_replaced(replacements)

    def masked_final_logits(self, masks, rule: AblationRule, tokens, answer_pos, references) -> torch.Tensor:
        # one draw per block, in the hooks' order, so that hard-concrete samples do not depend on the path;
        # masks made elsewhere (a circuit file, a control) join the model on its device
        device = self.model.device
        masks = FixedMasks({f"{layer}_{kind}": masks.values(layer, kind).to(device)
                            for layer in range(len(self.bases)) for kind in self._kinds(layer)})
        pairs = self.factored_kinds(rule)
        hooks = self.masked_hooks(masks, rule, references, answer_pos, skip=set(pairs))
        with self._factored(masks, references, pairs):
            return self.final_logits(tokens, answer_pos, hooks)
