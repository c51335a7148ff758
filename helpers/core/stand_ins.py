"""Stand-in folders for the hub models: what the hub's folder of ``gpt2-small`` or ``gemma-2-2b`` looks like
(config.json, model.safetensors, tokenizer files), at the real shapes, with random weights.

They let the real loading path, and every notebook, run offline at the papers' shapes. Nothing computed on them
is a result: their weights are random, and their record's ``weights_sha256`` names those random weights.

Tokenizers: GPT-2's is the project's pinned one, so a stand-in ``gpt2-small`` tokenises exactly as the real model
does. Gemma-2's does not ship offline. The stand-in uses Gemma-3's tokenizer (from the embedded Gemma-3-270M),
cut to Gemma-2's 256,000 ids. That matches what the registry can check of Gemma-2's (its size and special
ids), but not its word ids.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from helpers.core.models import MODELS, STAND_IN_MARKER, converted_gguf_folder, gpt2_tokenizer, random_hf_model

STAND_INS = ("gpt2-small", "gemma-2-2b")


def write_stand_in(name: str, folder: str | Path, n_layers: int | None = None, seed: int = 0,
                   dtype: torch.dtype = torch.bfloat16) -> Path:
    """Write a stand-in folder for hub model ``name`` into ``folder``: its published config (cut to its first
    ``n_layers`` layers if given: load it with ``truncated_layers=n_layers``), random weights whose every bias
    and norm gain is non-zero (seeded; stored as ``dtype``, read back as float32), and its tokenizer files."""
    if name not in STAND_INS:
        raise ValueError(f"{name!r} has no stand-in; the hub models are {STAND_INS}")
    spec = MODELS[name]
    config = dict(spec.published_config)
    layers_key = "n_layer" if config["model_type"] == "gpt2" else "num_hidden_layers"
    if n_layers is not None:
        if not 0 < n_layers < config[layers_key]:
            raise ValueError(f"n_layers={n_layers}: a truncated {name} keeps 1 to {config[layers_key] - 1} layers")
        config[layers_key] = n_layers
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    d_model = config.get("hidden_size") or config["n_embd"]
    model = random_hf_model(config, seed, embedding_std=d_model ** -0.5)  # logits of order one, as a trained model's
    model.to(dtype).save_pretrained(folder, safe_serialization=True)
    del model
    if name == "gpt2-small":
        gpt2_tokenizer().save_pretrained(folder)
    else:
        write_gemma2_tokenizer(folder)
    # load_model sees this file and names the weights a stand-in in the record of every run on them
    (folder / STAND_IN_MARKER).write_text(f"a stand-in for {name}: random weights (seed {seed}) at its real shapes, "
                                          f"written by helpers.core.stand_ins; nothing computed on it is a result\n")
    return folder


def write_gemma2_tokenizer(folder: Path) -> None:
    """Gemma-3's tokenizer cut to Gemma-2's 256,000 ids (pad 0, eos 1, bos 2, unk 3 in both): every token,
    merge and added token above the cut dropped."""
    source = converted_gguf_folder(MODELS["gemma-3-270m"])
    entries = MODELS["gemma-2-2b"].tokenizer.entries
    data = json.loads((source / "tokenizer.json").read_text())
    vocab = {token: i for token, i in data["model"]["vocab"].items() if i < entries}
    data["model"]["vocab"] = vocab
    data["model"]["merges"] = [m for m in data["model"]["merges"]
                               if all(part in vocab for part in (*m, "".join(m)))]
    data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] < entries]
    (folder / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    settings = json.loads((source / "tokenizer_config.json").read_text())
    settings.pop("is_local", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))
