"""A model folder checked as a whole before any run uses it: its config against the registry's published one
(architecture and every shape), its tokenizer against the registry's declaration, its weights complete.

Each check refuses with a ``ModelFolderError`` that names what is wrong and what to do. A folder that is
there but wrong is never "unavailable": notebooks that skip a model whose weights are missing
(``ModelUnavailableError``) still stop on it.

A test may use a copy truncated to its first layers, but only where the caller declares it
(``load_model(..., truncated_layers=N)`` or ``$SVDIRS_LAYERS_<NAME>=N``); the run's record then says so.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

MIN_TOKENIZER_ENTRIES = 1000
"""Fewer entries than this and a tokenizer is degenerate (a folder without tokenizer files can load as a
5-entry tokenizer that maps any text to one id). Every registry tokenizer has at least 49,152."""

TOKENIZER_FILES = (("tokenizer.json",), ("tokenizer.model",), ("vocab.json", "merges.txt"))
"""Any one of these sets of files is a tokenizer a Hugging Face folder can load."""

SHAPE_FIELDS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "d_mlp", "vocab_size")


class ModelFolderError(RuntimeError):
    """A model folder that is there but cannot give the registry's model: wrong architecture, shapes, tokenizer,
    or damaged weights."""


@dataclass(frozen=True)
class TokenizerSpec:
    """What a registry model's tokenizer must be, recorded from the tokenizer files the project pins or converts.

    ``entries``: ``len(tokenizer)``, every id it can produce, added tokens included. ``words``: texts and the ids
    they tokenise to without special tokens. ``unchecked``: what this entry cannot check offline, said in the
    record of every run on it."""

    entries: int
    bos: int
    eos: int
    pad: int | None
    words: tuple[tuple[str, tuple[int, ...]], ...] = ()
    unchecked: str = ""


def shapes(config) -> dict:
    """The shapes a Hugging Face config gives a model, in the project's names (GPT-2's n_embd is d_model, …)."""
    d_model = config.hidden_size
    n_heads = config.num_attention_heads
    return dict(n_layers=config.num_hidden_layers, d_model=d_model, n_heads=n_heads,
                n_kv_heads=getattr(config, "num_key_value_heads", None) or n_heads,
                d_head=getattr(config, "head_dim", None) or d_model // n_heads,
                d_mlp=getattr(config, "intermediate_size", None) or getattr(config, "n_inner", None) or 4 * d_model,
                vocab_size=config.vocab_size)


def published_shapes(published_config: dict) -> dict:
    """``shapes`` of a registry entry's published configuration (a config.json's fields, model_type included)."""
    from transformers import AutoConfig

    options = dict(published_config)
    return shapes(AutoConfig.for_model(options.pop("model_type"), **options))


def check_config(name: str, architecture: str | None, published_config: dict | None, folder: Path, given: str,
                 truncated_layers: int | None, fix: str) -> dict:
    """The folder's config.json, refused unless it declares ``architecture`` and has the published shapes, its
    layers cut only to a declared ``truncated_layers``. ``given`` says how the folder was named; ``fix`` what
    to point at instead. Returns the folder's shapes."""
    from transformers import AutoConfig

    config_file = folder / "config.json"
    if not config_file.exists():
        raise ModelFolderError(f"{given} holds no config.json; point it at a Hugging Face model folder "
                               f"(config.json + *.safetensors), e.g. one saved by save_pretrained.")
    try:
        model_type = json.loads(config_file.read_text()).get("model_type")
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelFolderError(f"{given}: {config_file} is not valid JSON ({err}); replace the folder with an "
                               f"intact copy of the model.") from err
    if architecture and model_type != architecture:
        raise ModelFolderError(f"{given}: its config.json declares model_type {model_type!r}, but {name!r} is a "
                               f"{architecture!r} model; {fix}.")
    found = shapes(AutoConfig.from_pretrained(folder))
    if published_config is None:
        return found
    expected = published_shapes(published_config)
    check_truncation(name, given, found["n_layers"], expected["n_layers"], truncated_layers)
    wrong = [f"{key} {found[key]} (not {expected[key]})" for key in SHAPE_FIELDS
             if key != "n_layers" and found[key] != expected[key]]
    if wrong:
        raise ModelFolderError(f"{given}: its config.json gives {', '.join(wrong)}: not {name!r}'s shapes "
                               f"({', '.join(f'{k} {v}' for k, v in expected.items())}); {fix}.")
    return found


def check_truncation(name: str, given: str, found: int, expected: int, declared: int | None) -> None:
    """A folder may hold fewer layers than the model only where the caller declared exactly that many."""
    if declared is None:
        if found != expected:
            raise ModelFolderError(
                f"{given}: its config.json has {found} layers where {name!r} has {expected}. If this is a copy cut "
                f"to its first {found} layers on purpose (a test), declare it: load_model({name!r}, "
                f"truncated_layers={found}) or ${layers_env(name)}={found}; otherwise point at the whole model.")
        return
    if not 0 < declared < expected:
        raise ModelFolderError(f"truncated_layers={declared} for {name!r}: a truncation keeps 1 to {expected - 1} of "
                               f"its {expected} layers; leave it unset for the whole model.")
    if found != declared:
        raise ModelFolderError(f"{given}: truncated_layers={declared} was declared, but its config.json has {found} "
                               f"layers; declare {found}" + (" or leave it unset: this is the whole model."
                                                              if found == expected else "."))


def model_env(what: str, name: str) -> str:
    """The environment variable that sets ``what`` for registry model ``name``: SVDIRS_<WHAT>_<NAME>, the name
    upper-cased with hyphens as underscores (``gpt2-small`` → ``SVDIRS_WEIGHTS_GPT2_SMALL``)."""
    return f"SVDIRS_{what}_{name.upper().replace('-', '_')}"


def weights_env(name: str) -> str:
    """The environment variable naming a local folder of registry model ``name``'s weights."""
    return model_env("WEIGHTS", name)


def layers_env(name: str) -> str:
    """The environment variable that declares a truncated copy of registry model ``name``."""
    return model_env("LAYERS", name)


def check_tokenizer_files(folder: Path, given: str, hf_id: str | None) -> None:
    """Refuse a folder without tokenizer files: loading one anyway can give a degenerate tokenizer, silently."""
    if not any(all((folder / f).exists() for f in files) for files in TOKENIZER_FILES):
        source = f"the hub's {hf_id} (tokenizer.json, tokenizer_config.json)" if hf_id else "the model's source"
        raise ModelFolderError(
            f"{given} holds no tokenizer files ({' or '.join(' + '.join(f) for f in TOKENIZER_FILES)}): copy them "
            f"from {source} into the folder. Never copy another model's: its ids are other tokens.")


def check_tokenizer(name: str, tokenizer, declared: TokenizerSpec | None, embedding_rows: int, where: str) -> None:
    """Refuse a tokenizer that is degenerate, that produces ids the embedding lacks, or that differs from the
    registry's declaration (size, special ids, the declared words' ids)."""
    fix = (f"replace the tokenizer files in {where} with {name!r}'s own" if where else
           f"reinstall the package that ships {name!r}")
    entries = len(tokenizer)
    if entries < MIN_TOKENIZER_ENTRIES:
        raise ModelFolderError(f"the tokenizer of {name!r} from {where or 'its package'} is degenerate: {entries} "
                               f"entries (fewer than {MIN_TOKENIZER_ENTRIES}), so texts collapse to a few ids; {fix}.")
    if entries > embedding_rows:
        raise ModelFolderError(f"the tokenizer of {name!r} from {where or 'its package'} has {entries} entries, but "
                               f"the model embeds only {embedding_rows} ids: it is another model's tokenizer; {fix}.")
    if declared is None:
        return
    found = dict(entries=entries, bos=tokenizer.bos_token_id, eos=tokenizer.eos_token_id, pad=tokenizer.pad_token_id)
    expected = dict(entries=declared.entries, bos=declared.bos, eos=declared.eos, pad=declared.pad)
    wrong = [f"{key} {found[key]} (not {expected[key]})" for key in expected if found[key] != expected[key]]
    for text, ids in declared.words:
        got = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
        if got != ids:
            wrong.append(f"{text!r} → {list(got)} (not {list(ids)})")
    if wrong:
        raise ModelFolderError(f"the tokenizer of {name!r} from {where or 'its package'} does not match the registry's: "
                               f"{'; '.join(wrong)}. It is another model's tokenizer or another version; {fix}.")


def check_weights_complete(name: str, loading_info: dict, folder: Path) -> None:
    """Refuse weights that leave a parameter out: Hugging Face fills it with random numbers and only warns."""
    missing = sorted(loading_info.get("missing_keys") or ())
    if missing:
        shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise ModelFolderError(f"the weights in {folder} lack {len(missing)} of {name!r}'s tensors ({shown}), which "
                               f"would be filled at random: a shard or file is missing; replace the folder with a "
                               f"complete copy.")


def tokenizer_sha256(tokenizer) -> str:
    """sha256 of a tokenizer's vocabulary (every token and its id, added tokens included) and special ids: two
    runs whose texts map to other ids are runs on other models."""
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0]))
    special = dict(bos=tokenizer.bos_token_id, eos=tokenizer.eos_token_id, pad=tokenizer.pad_token_id,
                   unk=tokenizer.unk_token_id)
    text = json.dumps(dict(vocabulary=vocabulary, special=special), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()
