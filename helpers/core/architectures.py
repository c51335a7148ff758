"""What each supported architecture does, in one table: every ``if architecture ==`` of the package reads it.

Keys are Hugging Face ``model_type`` values; ``LoadedModel.arch`` returns the row of a loaded model.
Soft-cap values are per checkpoint, not per architecture: ``LoadedModel.final_logit_softcap`` reads the config.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    model_type: str
    norm: str  # "layernorm" (centres, then scales; has a bias) or "rms" (scales only)
    gain_one_plus: bool  # the checkpoint stores w and the norm multiplies by (1 + w) (Gemma)
    gated_mlp: bool  # down(act(gate(x)) ⊙ up(x)); else out(act(in(x)))
    activation: str
    rope: bool  # rotary position embeddings act on q and k after the projections
    qk_norm: bool  # q and k normalised per head before RoPE (Gemma-3)
    softcaps: bool  # attention and final logits may be soft-capped (values in the config)
    layout: str  # Hugging Face module names: "gpt2" (transformer.h, fused c_attn, Conv1D) or "llama"

    @property
    def centred(self) -> bool:
        """The norm removes the mean of what it reads (LayerNorm): writes and the lens are compared centred."""
        return self.norm == "layernorm"


ARCHITECTURES = {a.model_type: a for a in [
    Architecture("gpt2", "layernorm", False, False, "gelu_new", rope=False, qk_norm=False, softcaps=False, layout="gpt2"),
    Architecture("llama", "rms", False, True, "silu", rope=True, qk_norm=False, softcaps=False, layout="llama"),
    Architecture("gemma2", "rms", True, True, "gelu_tanh", rope=True, qk_norm=False, softcaps=True, layout="llama"),
    Architecture("gemma3_text", "rms", True, True, "gelu_tanh", rope=True, qk_norm=True, softcaps=True,
                 layout="llama"),
]}


def architecture(model_type: str) -> Architecture:
    try:
        return ARCHITECTURES[model_type]
    except KeyError:
        raise NotImplementedError(f"architecture {model_type!r} is not supported; supported: {sorted(ARCHITECTURES)} "
                                  f"(add a row to helpers.core.architectures.ARCHITECTURES)") from None
